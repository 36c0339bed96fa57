#!/usr/bin/env bash
# The GPU results in one device call: tests, benchmarks, the rebuild loop, the sweeps. Everything lands
# in $OUT/results.tgz (the device returns <= 8 files), re-packed after every step.
#
#     bash benchmarks/gpu_all.sh [STEP ...]     # in the order given; default: all (more than 10 minutes)
#     steps: tests (or tests-par + tests-serial, each under 10 minutes; tests-par-1 to -4, its four parts: all but linear, lltm, wrong and exercise; linear and lltm but linear's sanitizer runs; wrong and exercise; linear's sanitizer runs) pool pool-tests notebook watch ladder sum linear
#            linear-half linear-half-tests (the tensor-core steps: timed against cuBLAS in bfloat16; their cuda tests) ncu-metrics tensor-probe racecheck-probe epilogue-probe tiles-probe mma-ceiling pipeline-probe pipeline-profile pipeline-stalls linear-tiles
#            linear-cli sum-small lltm lltm-cli lltm-small lltm-graph lltm-timeline
#            rebuild build-units sweeps insight sanitize-cost cheats nvbench nvbench-gap timer-probe profile-time quick
#            (K=EXPR narrows the parallel test steps' -k further)
#            tolerance check-cost timing-change (both need .base: the commit before, git archive'd) readonly sandbox
# KPLAY_COMMIT=abc1234 names the commit in the results files (the box's copy of .git can lag the files).
set -u
OUT=${OUT:-/tmp/kplay-gpu}
R=/tmp/kplay-results && rm -rf $R && mkdir -p $R $OUT
export KPLAY_CACHE=/tmp/kplay-cache PYTHONUNBUFFERED=1 COLUMNS=120
export KPLAY_FAILURE_LOG=$R/failures.txt  # the tests' failures as they come (tests/conftest.py): a step cut short keeps them
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $R/NAME.txt, say how it ended
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    timeout "$limit" "$@" > "$R/$name.txt" 2>&1
    echo "$name: exit $? after $((SECONDS - start)) s" | tee -a $R/summary.txt
    tar czf $OUT/results.tgz -C $R .  # after every step: a call cut short still returns what ran
}
# Carried wheels: nvidia-ml-py, cuda-bench (nvbench), pytest-xdist; in .whl/nb, watchfiles and the notebook tests' nbclient
# and ipykernel; in .whl/pool, distributed and cryptography with what they need (pip download, README).
{ python3 -m pip install -q --no-deps .whl/*.whl
  python3 -m pip install -q --no-index --find-links .whl/nb nbclient nbformat ipykernel watchfiles
  python3 -m pip install -q --no-index --find-links .whl/pool distributed cryptography; } > $R/pip.txt 2>&1
# The sandbox's bubblewrap, where the box lacks it: Debian's package, unpacked (.deb: apt-get download bubblewrap).
command -v bwrap > /dev/null || { dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=$PATH:/tmp/bw/usr/bin; }
{ nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda)"; nvcc --version | tail -2; } > $R/machine.txt 2>&1
# The tests that time or profile run alone on the GPU; the rest, 8 at a time (pytest-xdist, carried).
SERIAL="tests/test_timing.py tests/test_profile.py tests/test_resources.py tests/test_neighbours.py"
ALONE="tests/test_wrong.py::test_skip_and_rescale_fails_at_every_seed"  # 1e9 at five seeds: 20 GB of the GPU
PAR=$(ls tests/test_*.py | grep -v -e test_timing -e test_profile -e test_resources -e test_neighbours | tr '\n' ' ')
PAR2="tests/test_linear.py tests/test_lltm.py"  # tests-par-2: 335 of the 615 parallel tests, 449 s on an H100 (over 560 s
SANITIZED="memcheck or racecheck"  # at d92802a), less linear's sanitizer runs: tests-par-4, the long pole, on their own;
PAR3="tests/test_wrong.py tests/test_exercise.py"  # tests-par-3: the sanitizer's runs (the rest and these: over 545 s);
PAR1=$(echo $PAR | tr ' ' '\n' | grep -v -e test_linear.py -e test_lltm.py -e test_wrong.py -e test_exercise.py | tr '\n' ' ')
# tests-par-1: the rest. Each well inside a call's 10 minutes, as halves by file count were not (26 tests and 589).
for s in ${*:-tests ladder sum linear lltm lltm-cli rebuild sweeps}; do
    case $s in
        tests) step pytest-cuda-par ${STEP_S:-560} env -u COLUMNS python3 -m pytest -v -m cuda -p no:cacheprovider -n ${JOBS:-8} $PAR -k "not every_seed${K:+ and ($K)}"
               step pytest-cuda-serial 560 env -u COLUMNS python3 -m pytest -q -m cuda -p no:cacheprovider $SERIAL $ALONE ;;
        tests-par) step pytest-cuda-par ${STEP_S:-560} env -u COLUMNS python3 -m pytest -v -m cuda -p no:cacheprovider -n ${JOBS:-8} $PAR -k "not every_seed${K:+ and ($K)}" ;;
        tests-par-1) step pytest-cuda-par-1 ${STEP_S:-560} env -u COLUMNS python3 -m pytest -v -m cuda -p no:cacheprovider -n ${JOBS:-12} $PAR1 -k "not every_seed${K:+ and ($K)}" ;;
        tests-par-3) step pytest-cuda-par-3 ${STEP_S:-560} env -u COLUMNS python3 -m pytest -v -m cuda -p no:cacheprovider -n ${JOBS:-12} $PAR3 -k "not every_seed${K:+ and ($K)}" ;;
        tests-par-2) step pytest-cuda-par-2 ${STEP_S:-560} env -u COLUMNS python3 -m pytest -v -m cuda -p no:cacheprovider -n ${JOBS:-12} $PAR2 \
                     -k "not every_seed and not ($SANITIZED)${K:+ and ($K)}" ;;
        tests-par-4) step pytest-cuda-par-4 ${STEP_S:-560} env -u COLUMNS python3 -m pytest -v -m cuda -p no:cacheprovider -n ${JOBS:-9} \
                     tests/test_linear.py -k "($SANITIZED)${K:+ and ($K)}" ;;
        tests-serial) step pytest-cuda-serial 560 env -u COLUMNS python3 -m pytest -v -m cuda -p no:cacheprovider $SERIAL $ALONE ;;
        ladder) step sum-ladder 60 python3 cli.py run sum --device cuda --variant all --n 1e8
                step print-array 60 python3 cli.py run print_array --device cuda --values 4,3,2,1 --dtype float64 ;;
        sum) step sum-gpu 120 python3 benchmarks/sum_gpu.py --dtypes float32,float64 --out $R ;;
        linear) step linear-gpu 300 python3 benchmarks/linear_gpu.py --out $R ;;  # the ladder, median of three runs
        linear-tiles) step linear-tiles 500 python3 benchmarks/linear_gpu.py --tiles --runs 1 --out $R ;;  # the float32 top's tiles
        linear-half) step linear-half 400 python3 benchmarks/linear_half_gpu.py --out $R ;;  # the tensor-core ladder, bf16
        linear-half-tests) step pytest-linear-half 400 env -u COLUMNS python3 -m pytest -v -m cuda -p no:cacheprovider \
                           tests/test_linear.py -k "tensor_core or run_all_times or hgmma or 16_bit or tf32 or tensor_pipe" ;;
        tensor-probe) step tensor-steps-probe 300 python3 benchmarks/probes/tensor_steps_probe.py ;;
        racecheck-probe) step racecheck-probe 400 python3 benchmarks/probes/racecheck_probe.py --tools racecheck --limit 90 ;;
        epilogue-probe) step epilogue-probe 300 python3 benchmarks/probes/epilogue_probe.py ;;
        tiles-probe) step tiles-probe ${STEP_S:-540} python3 benchmarks/probes/tiles_probe.py ;;  # the top rungs' tiles
        mma-ceiling) step mma-ceiling 120 python3 benchmarks/probes/mma_ceiling_probe.py --out $R/mma-ceiling.md ;;  # mma.sync alone
        pipeline-profile) step pipeline-profile 240 bash -c "for d in bfloat16 float32; do python3 cli.py profile linear \\
                          --variant cuda-pipeline --batch 4096 --in 4096 --out 4096 --dtype \$d; done" ;;  # its L2 figure
        pipeline-probe) step pipeline-probe 540 python3 benchmarks/probes/pipeline_probe.py --before ${BEFORE:-67c4362} \
                        --rows ${ROWS:-float32,TF32,bfloat16} ;;  # BEFORE=commit, ROWS=float32 (the tables)
        pipeline-stalls) step pipeline-stalls 300 bash benchmarks/probes/ncu_stalls.sh $R/stalls  # why the top rungs' warps wait
                         step stalls-summary 60 python3 benchmarks/probes/ncu_sass_sum.py $R/stalls/*-sass.csv.gz ;;
        ncu-metrics) step ncu-tensor-metrics 60 bash -c "/usr/local/cuda/bin/ncu --query-metrics --chip gh100 | grep -i -e tensor -e gmma" ;;
        linear-cli) step linear-cli 240 python3 cli.py run linear --device cuda --variant all --batch 4096 --in 4096 --out 4096 ;;
        sum-small) step sum-small 300 python3 benchmarks/sum_gpu.py --sizes 1e3,1e4,1e5,1e6,1e7,1e8,1e9 --runs 3 --out $R ;;
        lltm) step lltm-gpu 240 python3 benchmarks/lltm_bench.py --device cuda --out $R ;;
        lltm-cli) step lltm-cli 90 python3 cli.py run lltm --device cuda --variant all --batch 1024 --features 512 --state 1024 ;;
        lltm-small) step lltm-small 90 python3 cli.py run lltm --device cuda --variant all ;;
        lltm-graph) step lltm-graph 420 python3 benchmarks/lltm_graph_probe.py --out $R ;;  # three runs: about 3 minutes
        lltm-timeline) step lltm-timeline 200 python3 benchmarks/probes/lltm_graph_timeline.py ;;
        watch) step watch-cuda 300 python3 benchmarks/watch_loop.py --edits 3 --device cuda --variant fast --file sum_fast.cu ;;
        rebuild) step rebuild-cuda 120 python3 benchmarks/rebuild.py --device cuda --variant fast --out $R/rebuild-cuda.md ;;
        build-units) step build-units 120 python3 benchmarks/build_units.py --out $R/build-units.md ;;
        sweeps) OUT=$R step sweeps 300 bash benchmarks/gpu_sweep.sh ;;
        quick) step pytest-quick 400 env -u COLUMNS python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_timing.py tests/test_profile.py \
                   tests/test_sanitize.py tests/test_resources.py tests/test_layout.py tests/test_wrong.py -k "not every_variant" ;;
        insight) step run-all-1e8 90 python3 cli.py run sum --device cuda --variant all --n 1e8
                 step profile-fast 90 bash -c "time python3 cli.py profile sum --variant fast --n 1e8"
                 step profile-fast-json 90 python3 cli.py profile sum --variant fast --n 1e8 --json
                 step sanitize-fast 90 bash -c "time python3 cli.py run sum --variant fast --sanitize memcheck"
                 step sass-fast 60 python3 cli.py show sum --variant fast --sass --solution
                 step ptx-fast 60 python3 cli.py show sum --variant fast --ptx --solution ;;
        pool) rm -rf /tmp/kplay-pool-work && mkdir -p /tmp/kplay-pool-work
              step pool-gpu ${POOL_S:-500} python3 benchmarks/pool.py --out $R --work /tmp/kplay-pool-work $POOL_ARGS
              tail -n 15 /tmp/kplay-pool-work/pool/logs/* > $R/pool-logs.txt 2>&1; tar czf $OUT/results.tgz -C $R . ;;
        pool-local) step lease-gpu 200 python3 benchmarks/pool.py --local --out $R ;;
        pool-tests) step pytest-pool 300 env -u COLUMNS python3 -m pytest -q -p no:cacheprovider tests/test_pool.py tests/test_lease.py ;;
        sanitize-cost) step check-sanitize 560 python3 benchmarks/check_sanitize.py --repeat 1 --out $R/check-sanitize.md ;;
        cheats) step cheats 400 python3 benchmarks/cheats.py --n 1e8 --out $R/cheats.md ;;
        timer-probe) step timer-probe 200 python3 benchmarks/probes/timer_probe.py --out $R/timer-probe.md ;;
        profile-time) step profile-time 300 python3 benchmarks/profile_time.py --repeat 2 --out $R/profile-time.md ;;
        notebook) step pytest-cuda-notebook 200 env -u COLUMNS python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_notebook.py ;;
        tolerance) step tolerance 400 python3 benchmarks/tolerance.py --device cuda --seeds ${SEEDS:-200} --out $R/tolerance.md \
                   ${FAMILIES:+--families $FAMILIES} ;;
        check-cost) step check-cost 400 python3 benchmarks/check_cost.py --base .base --runs ${RUNS:-5} --out $R/check-cost.md ;;
        timing-change) step timing-change 400 python3 benchmarks/timing_change.py --base .base --runs 3 --out $R/timing-change.md ;;
        sandbox) step sandbox-gpu 300 python3 benchmarks/sandbox_gpu.py --runs ${RUNS:-3} ${CASES:+--cases "$CASES"} --out $R/sandbox-gpu.md ;;
        readonly) step readonly-gpu 120 python3 benchmarks/probes/readonly_gpu.py --out $R/readonly-gpu.md ;;
        nvbench) step nvbench 330 python3 benchmarks/nvbench_sum.py --out $R/nvbench-sum.md ;;
        nvbench-gap) step nvbench-gap 240 python3 benchmarks/probes/nvbench_gap.py --out $R/nvbench-gap.md ;;
        *) echo "unknown step $s" ;;
    esac
done
cat $R/summary.txt
