#!/usr/bin/env bash
# Build and run benchmarks/lt_probe.cu against the cuBLASLt that torch uses (the CUDA toolkit's, or the
# nvidia wheel's that torch depends on).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cuda=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
wheel=$(python3 -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null || true)
inc="" lib=""
for d in "$cuda/include" "$cuda/targets/x86_64-linux/include" $wheel/cu13/include $wheel/cublas/include; do
    [ -f "$d/cublasLt.h" ] && { inc=$d; break; }
done
for d in "$cuda/lib64" "$cuda/lib" "$cuda/targets/x86_64-linux/lib" $wheel/cu13/lib $wheel/cublas/lib; do
    ls "$d"/libcublasLt.so* > /dev/null 2>&1 && { lib=$d; break; }
done
echo "cublasLt.h in $inc, libcublasLt in $lib"
so=$(ls "$lib"/libcublasLt.so* | head -1)
so2=$(ls "$lib"/libcublas.so* | head -1)
nvcc -O2 -std=c++17 -I"$inc" "$here/lt_probe.cu" -o /tmp/lt_probe -L"$lib" -l:"$(basename "$so")" \
    -l:"$(basename "$so2")" -Xlinker -rpath -Xlinker "$lib"
/tmp/lt_probe "$@"
