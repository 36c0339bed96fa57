#!/usr/bin/env bash
# One device call for every GPU result: the CUDA tests, each family's benchmark, the rebuild loop,
# the ladder table and the sweeps. Everything lands in $OUT/results.tgz (the device returns <= 8 files).
#
#     bash benchmarks/gpu_all.sh [tests] [bench] [sweeps]     # default: all (over 10 minutes: split it)
set -u
OUT=${OUT:-/tmp/kplay-gpu}
R=/tmp/kplay-results && rm -rf $R && mkdir -p $R $OUT
export KPLAY_CACHE=/tmp/kplay-cache PYTHONUNBUFFERED=1 COLUMNS=120
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $R/NAME.txt, say how it ended
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    timeout "$limit" "$@" > "$R/$name.txt" 2>&1
    echo "$name: exit $? after $((SECONDS - start)) s" | tee -a $R/summary.txt
    tar czf $OUT/results.tgz -C $R .  # after every step: a call cut short still returns what ran
}
{ nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda)"; nvcc --version | tail -2; } > $R/machine.txt 2>&1
groups=${*:-tests bench sweeps}
if [[ $groups == *tests* ]]; then
    step pytest-cuda 240 python3 -m pytest -q -m cuda -p no:cacheprovider tests
    step sum-ladder 60 python3 cli.py run sum --device cuda --variant all --n 1e8
    step print-array 60 python3 cli.py run print_array --device cuda --values 4,3,2,1 --dtype float64
fi
if [[ $groups == *bench* ]]; then
    step sum-gpu 120 python3 benchmarks/sum_gpu.py --dtypes float32,float64 --out $R
    step linear-gpu 120 python3 benchmarks/linear_gpu.py --out $R
    step lltm-gpu 150 python3 benchmarks/lltm_bench.py --device cuda --out $R
fi
if [[ $groups == *sweeps* ]]; then
    step rebuild-cuda 120 python3 benchmarks/rebuild.py --device cuda --variant fast --out $R/rebuild-cuda.md
    OUT=$R step sweeps 300 bash benchmarks/gpu_sweep.sh
fi
cat $R/summary.txt
