#!/usr/bin/env bash
# The GPU sweeps on an H200, each leaving a table (.txt), a CSV, a PNG and a roofline PNG under $OUT:
#
#     bash benchmarks/gpu_sweep.sh [sum] [lltm] [linear]       # default: all three, in this order
#
# Run it from the repository root (no install needed: python3 cli.py). The device's `run` sets $OUT;
# elsewhere it defaults to benchmarks/results. Copy the files next to the other results afterwards.
# Each point of a sweep is a whole `kplay run` (builds, awkward-size checks, timing) in its own child.
set -u
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=120  # rich draws 80 columns when stdout is not a terminal

sweep() {  # sweep NAME [bench options...]
    local name=$1 file="$OUT/$1-h200-sweep"
    shift
    echo "== kplay bench $name --device cuda $*"
    local start=$SECONDS
    python3 cli.py bench "$name" --device cuda "$@" --csv "$file.csv" --plot "$file.png" --roofline "$file-roofline.png" 2>&1 | tee "$file.txt"
    echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"
}

for which in ${@:-sum lltm linear}; do
    case $which in
        # the reduction ladder from launch-bound to the memory wall; the device's peak_gbps is the ceiling
        sum) sweep sum --variant all --sizes 1e3..1e9 ;;
        # the tutorial's cell (features 32, state 128): where the fused kernel overtakes eager PyTorch
        lltm) sweep lltm --variant all --over batch --sizes 1..4096:x4 ;;
        # square problems, batch = in = out: naive vs tiled vs cuBLAS (F.linear)
        linear) sweep linear --variant all --over batch --tie in,out --sizes 128..4096:x2 ;;
        *) echo "unknown sweep '$which' (sum, lltm, linear)" >&2; exit 2 ;;
    esac
done
