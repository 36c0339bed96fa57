#!/usr/bin/env bash
# Raw tool output from the GPU box for kplay's parsers (sanitizers, ncu, torch.profiler records), in $OUT/raw.tgz.
set -u
R=/tmp/raw && rm -rf $R && mkdir -p $R
export KPLAY_CACHE=/tmp/kplay-cache PYTHONUNBUFFERED=1 COLUMNS=100 PATH=/usr/local/cuda/bin:$PATH
pip install -q --no-deps .whl/nvidia_ml_py-*.whl > $R/pip.txt 2>&1
pack() { tar czf $OUT/raw.tgz -C $R .; }
{ compute-sanitizer --version; compute-sanitizer --help; } > $R/sanitizer-help.txt 2>&1
{ ncu --version; ncu --help; } > $R/ncu-help.txt 2>&1
rm -rf /tmp/w; python3 - > $R/folders.txt 2>&1 <<'PY'
import sys, tomllib, pathlib
sys.path.insert(0, "tests")
from test_wrong import wrong_folder
for e in tomllib.loads(open("tests/wrong/sum/wrong.toml").read())["wrong"]:
    if e.get("mode") == "sanitize":
        d = pathlib.Path("/tmp/w") / e["name"]; d.mkdir(parents=True, exist_ok=True)
        print(e["name"], wrong_folder(d, "sum", e))
PY
pack
san() { local name=$1 tool=$2; shift 2; local t=$SECONDS
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool $tool --target-processes all --print-limit 20 "$@" > $R/san-$name-$tool.txt 2>&1
  echo "$name $tool exit $? in $((SECONDS - t)) s" >> $R/summary.txt; pack; }
python3 cli.py run sum --device cuda --variant all --no-bench > $R/warm.txt 2>&1
while read name folder; do
  for tool in memcheck racecheck initcheck; do san $name $tool python3 cli.py run $folder --device cuda --no-bench --n 1e5; done
  python3 cli.py run $folder --device cuda --no-bench --n 1e5 > $R/plain-$name.txt 2>&1; echo "$name plain exit $?" >> $R/summary.txt
done < <(grep /tmp/w $R/folders.txt)
[ "${1:-}" = wrong ] && { pack; cat $R/summary.txt; exit; }
for tool in memcheck racecheck initcheck synccheck; do san fast $tool python3 cli.py run sum --variant fast --device cuda --no-bench --n 1e5; done
san tree racecheck python3 cli.py run sum --variant tree --device cuda --no-bench --n 1e5
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --target-processes all --xml --save $R/san-fast-memcheck.xml python3 cli.py run sum --variant fast --device cuda --no-bench --n 1e5 > $R/san-xml-try.txt 2>&1; echo "xml exit $?" >> $R/summary.txt
timeout 120 python3 benchmarks/insight_raw.py $R/prof > $R/profiler.txt 2>&1; echo "profiler exit $?" >> $R/summary.txt; pack
t=$SECONDS; timeout 180 ncu --clock-control none --nvtx --nvtx-include "kplay/" --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis python3 benchmarks/insight_raw.py $R/prof --ncu > $R/ncu-text.txt 2>&1; echo "ncu text exit $? in $((SECONDS - t)) s" >> $R/summary.txt; pack
timeout 180 ncu --clock-control none --nvtx --nvtx-include "kplay/" --section SpeedOfLight --section Occupancy --section LaunchStats --csv --page details python3 benchmarks/insight_raw.py $R/prof --ncu > $R/ncu-csv.txt 2>&1; echo "ncu csv exit $?" >> $R/summary.txt
python3 -c "
import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
print('sm clock', n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM), 'max', n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
print('mem clock', n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM), 'max', n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM))
print('bus width', n.nvmlDeviceGetMemoryBusWidth(h))
print('throttle', n.nvmlDeviceGetCurrentClocksEventReasons(h))
" > $R/nvml.txt 2>&1
cuobjdump --dump-resource-usage $(find $KPLAY_CACHE -name "*.so" | head -3) > $R/cuobjdump-res.txt 2>&1
pack; cat $R/summary.txt
