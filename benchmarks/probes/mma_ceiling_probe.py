"""How fast mma.sync can go on this GPU at all: the ceiling of linear's mma.sync rungs (cuda-mma, cuda-pipeline).

    python benchmarks/probes/mma_ceiling_probe.py [--size 4096] [--out FILE]

A kernel that does nothing but mma.sync on fragments held in registers (no memory, CHAINS independent sums a
warp, WARPS warps an SM), bfloat16 m16n8k16 and TF32 m16n8k8, timed with CUDA events, the best of 5; beside
F.linear at size^3 in the same arithmetic (cuBLAS, which reaches Hopper's tensor cores through wgmma) and
the tensor cores' dense peak (playground.run.peaks). The operands are values near 1, not zeros (zeros can run
faster). A rung that feeds mma.sync from memory cannot beat the mma.sync lines: its % of cuBLAS is capped there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

from common import emit  # noqa: E402  it puts the repository on sys.path
from linear_gpu import cublas  # noqa: E402

import torch  # noqa: E402
from torch.utils.cpp_extension import load_inline  # noqa: E402

from playground.run.peaks import peaks  # noqa: E402

CHAINS, ITERS = 8, 4096  # independent accumulators a warp, and mma.sync rounds of them

SOURCE = r"""
#include <torch/extension.h>
#include <cstdint>
template <bool TF32>
__global__ void spin(float* out) {
  uint32_t a[4], b[2];  // values near 1 the compiler cannot know: a float (TF32) or two bfloat16s a register
  for (int i = 0; i < 6; ++i) {
    const uint32_t near1 = TF32 ? __float_as_uint(1.0f + 1e-3f * (threadIdx.x + i))
                                : 0x3f803f80u + (threadIdx.x + i) % 64;
    (i < 4 ? a[i] : b[i - 4]) = near1;
  }
  float d[CHAINS][4] = {};
  for (int it = 0; it < ITERS; ++it) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) {
      if constexpr (TF32) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};" : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
      } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};" : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
      }
    }
  }
  float s = 0;
  for (int c = 0; c < CHAINS; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // kept: the sums are used
}
void run(torch::Tensor out, int64_t blocks, int64_t threads, bool tf32) {
  if (tf32) spin<true><<<blocks, threads>>>(out.data_ptr<float>());
  else spin<false><<<blocks, threads>>>(out.data_ptr<float>());
}
"""


def best_seconds(call, times: int) -> float:
    """The fastest of `times` runs of call(), each timed with CUDA events."""
    best = float("inf")
    for _ in range(times):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def ceiling(ext, tf32: bool, warps: int) -> float:
    """TFLOP/s of the register-only kernel, WARPS warps an SM in blocks of 4, the best of 5 timings."""
    blocks = torch.cuda.get_device_properties(0).multi_processor_count * warps // 4
    out = torch.empty(blocks * 128, device="cuda")
    flops = blocks * 4 * ITERS * CHAINS * 2 * 16 * 8 * (8 if tf32 else 16)
    ext.run(out, blocks, 128, tf32)  # warm-up
    return flops / best_seconds(lambda: ext.run(out, blocks, 128, tf32), 5) / 1e12


def cublas_tflops(size: int, dtype, tf32: bool) -> float:
    """F.linear at size^3 in TFLOP/s, the best of 10 timings after 3 warm-ups."""
    x, w, b = (torch.randn(*s, device="cuda", dtype=dtype) for s in ((size, size), (size, size), (size,)))
    for _ in range(3):
        cublas(x, w, b, tf32)
    return 2 * size ** 3 / best_seconds(lambda: cublas(x, w, b, tf32), 10) / 1e12


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0):
        print("mma_ceiling_probe: needs a GPU of compute capability 8.0 or later", file=sys.stderr)
        return 2
    ext = load_inline("kplay_mma_ceiling", cpp_sources="void run(torch::Tensor, int64_t, int64_t, bool);",
                      cuda_sources=SOURCE, functions=["run"], extra_cuda_cflags=[
                          "-O3", "-std=c++20", f"-DCHAINS={CHAINS}", f"-DITERS={ITERS}"],
                      extra_cflags=["-O3", "-std=c++20"])
    p = peaks("cuda")
    name = torch.cuda.get_device_name()
    lines = [f"# mma.sync's ceiling on {name}: register-only mma.sync against cuBLAS", "",
             f"made by: python benchmarks/probes/mma_ceiling_probe.py --size {args.size}; CUDA events, best of 5; "
             f"{CHAINS} independent sums a warp, {ITERS} rounds; cuBLAS: F.linear at {args.size}^3, best of 10.", "",
             "| arithmetic | instruction | warps an SM | TFLOP/s | % of cuBLAS | % of dense peak |",
             "|---|---|---:|---:|---:|---:|"]
    for label, dtype, tf32, instr, rate in [("bfloat16", torch.bfloat16, False, "m16n8k16", "bfloat16"),
                                             ("TF32", torch.float32, True, "m16n8k8", "tf32")]:
        ref = cublas_tflops(args.size, dtype, tf32)
        peak = p.flops(rate) / 1e3 if p and p.flops(rate) else None
        lines.append(f"| {label} | cuBLAS (F.linear) | | {ref:.1f} | 100.0% | {100 * ref / peak:.1f}% |" if peak
                     else f"| {label} | cuBLAS (F.linear) | | {ref:.1f} | 100.0% | |")
        for warps in (4, 8, 16):
            t = ceiling(ext, tf32, warps)
            pct = f"{100 * t / peak:.1f}%" if peak else ""
            lines.append(f"| {label} | mma.sync {instr} | {warps} | {t:.1f} | {100 * t / ref:.1f}% | {pct} |")
    if p:
        lines += ["", "dense peak: " + "; ".join(f"{k}: {p.source[k]}" for k in ("bfloat16", "tf32") if k in p.source)]
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
