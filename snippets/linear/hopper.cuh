// What the Hopper steps add to tensor.cuh (cuda-wgmma and up, built for sm_90a): wgmma, the warpgroup's
// matrix multiply that reads its operands from shared memory through descriptors; mbarriers and TMA, the copy
// engine that moves a whole tile and says so on an mbarrier (cuda-tma); setmaxnreg (cuda-warp-specialized);
// clusters, TMA multicast and arrivals on another block's barriers (cuda-cluster); TMA stores and named
// barriers (cuda-tma-store).
#pragma once
#include "tensor.cuh"

#include <cuda.h>          // CUtensorMap and its enums: the driver's types (the function comes through the runtime)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

namespace KPLAY_NS {

// ---- cuda-wgmma: a warpgroup's multiply, its operands in shared memory -----------------------------------

// The first 1,024-byte boundary of dynamic shared memory, where the tiles start: the swizzle's pattern repeats
// every 1,024 bytes, and wgmma and TMA assume a tile starts on one (counted in the shared window's addresses).
template <typename T>
__device__ __forceinline__ T* tiles_start(unsigned char* smem) {
  return reinterpret_cast<T*>(smem + (1024 - smem_address(smem) % 1024) % 1024);
}

// A K-major tile of 128-byte rows in the 128-byte swizzle (tensor.cuh's `swizzled`), 1,024-byte aligned, as
// wgmma reads it: the start address, the stride from one 8-row group to the next (1,024 bytes), the swizzle
// mode (1: 128 bytes). The leading offset is unused in this layout (1 by convention). Advancing along k
// within the 64-wide row is adding its bytes to the start (k * 2): the hardware swizzles the address it forms.
__device__ __forceinline__ uint64_t smem_descriptor(const void* tile) {
  const uint64_t start = (smem_address(tile) & 0x3FFFF) >> 4;
  return start | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Shared memory written by this thread's ordinary stores or cp.async, made visible to the async proxy (wgmma,
// TMA) that reads it next; before the barrier that lets the reader go.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING>  // wait until at most PENDING of the warpgroup's committed groups are in flight
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
// The accumulators are written by wgmma behind the compiler's back: keep it from moving their uses across.
template <int R>
__device__ __forceinline__ void fence_registers(float (&d)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) asm volatile("" : "+f"(d[r])::"memory");
}

#define KPLAY_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
    "+f"(d[i + 6]), "+f"(d[i + 7])
#define KPLAY_D64 KPLAY_D8(0), KPLAY_D8(8), KPLAY_D8(16), KPLAY_D8(24), KPLAY_D8(32), KPLAY_D8(40), KPLAY_D8(48), \
    KPLAY_D8(56)
#define KPLAY_D128 KPLAY_D64, KPLAY_D8(64), KPLAY_D8(72), KPLAY_D8(80), KPLAY_D8(88), KPLAY_D8(96), KPLAY_D8(104), \
    KPLAY_D8(112), KPLAY_D8(120)
#define KPLAY_WGMMA(SHAPE, TYPE, REGS, DESC, TRANS, ...)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" DESC ", 0;\n"                                    \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " " REGS " p, 1, 1" TRANS ";\n}\n" \
               : __VA_ARGS__                                                                          \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define KPLAY_REGS64 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, " \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, " \
  "%62, %63}, " \
  "%64, %65,"
#define KPLAY_REGS128 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, " \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, " \
  "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
  "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, " \
  "%119, %120, %121, %122, %123, %124, %125, %126, %127}, " \
  "%128, %129,"

// d (+)= a b^T for a 64 x K_STEP tile of A and an N x K_STEP tile of B, 32 bytes of each row (16 16-bit values,
// or 8 floats that the tensor cores read as TF32, dropping their low 13 bits), both K-major in shared memory
// (their descriptors), over the warpgroup: thread t of warp w holds rows 16 w + t / 4 and + 8 of C, columns
// 2 (t % 4) and + 1 of every 8 (tensor.cuh's store_fragment, per 8 columns). scale_d 0: d = a b^T, the first k.
// TF32 takes no transpose flags: its operands are K-major, as here.
template <typename T>
constexpr int K_STEP = 32 / sizeof(T);
template <int N, typename T>
__device__ __forceinline__ void wgmma_step(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 128 || N == 256, "wgmma: N is 128 or 256 here");
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>, f16 = std::is_same_v<T, __half>;
  if constexpr (N == 128 && bf16) KPLAY_WGMMA("m64n128k16", "bf16", KPLAY_REGS64, "66", ", 0, 0", KPLAY_D64);
  if constexpr (N == 128 && f16) KPLAY_WGMMA("m64n128k16", "f16", KPLAY_REGS64, "66", ", 0, 0", KPLAY_D64);
  if constexpr (N == 256 && bf16) KPLAY_WGMMA("m64n256k16", "bf16", KPLAY_REGS128, "130", ", 0, 0", KPLAY_D128);
  if constexpr (N == 256 && f16) KPLAY_WGMMA("m64n256k16", "f16", KPLAY_REGS128, "130", ", 0, 0", KPLAY_D128);
  if constexpr (N == 256 && !bf16 && !f16) KPLAY_WGMMA("m64n256k8", "tf32", KPLAY_REGS128, "130", "", KPLAY_D128);
  static_assert(bf16 || f16 || (std::is_same_v<T, float> && N == 256), "wgmma here: 16-bit, or float at N 256");
}
#undef KPLAY_D8
#undef KPLAY_D64
#undef KPLAY_D128
#undef KPLAY_WGMMA
#undef KPLAY_REGS64
#undef KPLAY_REGS128

// ---- cuda-tma: the copy engine, and the mbarrier it completes on -----------------------------------------

// An mbarrier: a phase completes when `count` threads have arrived and every byte a thread said to expect has
// landed; then the next phase begins. A waiter names the phase it waits for by its parity (0, 1, 0, ...).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
// Seen by the copy engine (the async proxy) before it completes a transaction on them.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// Arrive, and expect `bytes` more of this phase's copies before it completes.
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, int parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_address(bar)), "r"(parity)
                 : "memory");
  }
}

// The box of the tensor map at (k, row), global -> shared, completing `bar`'s transaction with its bytes. The
// box's rows past the matrix arrive as zeros, as do its columns past K.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int k, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_address(dst)),
      "l"(map), "r"(k), "r"(row), "r"(smem_address(bar))
      : "memory");
}

// A tensor map for the rows x cols matrix P (row stride ld): boxes of box_rows rows and 128 bytes of columns
// (64 16-bit values, 32 floats), laid out in shared memory in the 128-byte swizzle. The driver's encoder,
// fetched through the runtime (no -lcuda). nullptr, else what went wrong.
template <typename T>
const char* tensor_map(CUtensorMap* map, const T* P, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (encode == nullptr &&
      (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                        cudaEnableDefault, &found) != cudaSuccess ||
       found != cudaDriverEntryPointSuccess)) {
    encode = nullptr;
    return "linear: this CUDA driver has no cuTensorMapEncodeTiled";
  }
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)}, strides[1] = {cuuint64_t(ld) * sizeof(T)};
  const cuuint32_t box[2] = {128 / sizeof(T), cuuint32_t(box_rows)}, step[2] = {1, 1};
  const auto type = std::is_same_v<T, float>            ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                    : std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode(map, type, 2, const_cast<T*>(P), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // zeros past the matrix
  return r == CUDA_SUCCESS ? nullptr : "linear: the driver refused a tensor map (cuTensorMapEncodeTiled)";
}

// ---- cuda-cluster: two blocks of a thread-block cluster, one copy of B for both -----------------------------

// This block's rank in its cluster (0 or 1 for a cluster of two).
__device__ __forceinline__ int cluster_rank() {
  int rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// Every thread of every block in the cluster: what each wrote before is seen by all after (the barriers' init).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// tma_load to the same place in the shared memory of each block of `blocks` (a bit per rank in the cluster),
// completing each one's barrier at bar's place with the box's bytes.
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, int k, int row, uint64_t* bar,
                                                   uint16_t blocks) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_address(dst)),
      "l"(map), "r"(k), "r"(row), "r"(smem_address(bar)), "h"(blocks)
      : "memory");
}
// Arrive on the barrier at bar's place in block `rank` of the cluster, this block's or another's: mapa turns
// this block's shared address into that block's. (A .release.cluster arrive would fence the whole GPU first;
// what the arrival releases, wgmma's reads of a stage, is done once wgmma_wait returns.)
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, int rank) {
  uint32_t there;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(there) : "r"(smem_address(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(there) : "memory");
}

// ---- cuda-tma-store: C written by the copy engine from shared memory -------------------------------------

// The box of the tensor map at (col, row), shared -> global, in this thread's current bulk group; the box's
// rows and columns past the matrix are not written.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, int col, int row, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map), "r"(col),
               "r"(row), "r"(smem_address(src))
               : "memory");
}
// Close this thread's current bulk group (the stores since the last commit).
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's bulk groups are still reading their shared memory (it may be reused).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// A barrier for the 128 threads of warpgroup `group` of the consumers alone (named barrier 1 + group; 0 is
// __syncthreads's).
__device__ __forceinline__ void warpgroup_sync(int group) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + group) : "memory");
}

// ---- cuda-warp-specialized: registers moved between warpgroups ------------------------------------------

// The warpgroup gives back registers down to N per thread (a producer, which only starts copies) or takes
// them up to N (a consumer, holding accumulators). Needs __launch_bounds__(threads, 1).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

}  // namespace KPLAY_NS
