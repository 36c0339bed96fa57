#!/usr/bin/env bash
# One device call for the engine redesign: the cuda-marked tests, then the figures that must not regress,
# each measured against its reference in the same run (kplay run's own table and --json).
set -u
OUT=${OUT:-/tmp/kplay-gpu}
R=$OUT/results && mkdir -p $R
export KPLAY_CACHE=/tmp/kplay-cache PYTHONUNBUFFERED=1 COLUMNS=80
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    timeout "$limit" "$@" > "$R/$name.txt" 2>&1
    echo "$name: exit $? after $((SECONDS - start)) s" | tee -a $R/summary.txt
}
{ nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.version.cuda)"; git log -1 --oneline; } > $R/machine.txt 2>&1
step pytest-cuda 330 python3 -m pytest -q -x -m cuda -p no:cacheprovider tests
for n in 1e7 1e8 1e9; do
    step sum-$n 60 python3 cli.py run sum --device cuda --variant all --n $n --json
done
step lltm-small 90 python3 cli.py run lltm --device cuda --json
step lltm-large 90 python3 cli.py run lltm --device cuda --batch 1024 --features 512 --state 1024 --json
step linear-4096 90 python3 cli.py run linear --device cuda --variant cuda-tiled --batch 4096 --in 4096 --out 4096 --json
step lltm-table 60 python3 cli.py run lltm --device cuda
step sum-table 60 python3 cli.py run sum --device cuda --variant all --n 1e8
cat $R/summary.txt
