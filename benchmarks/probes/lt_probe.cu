// Which cuBLASLt kernel is fastest for the LLTM's three float32 matmuls at (1024, 512, 1024)? A standalone
// program (no torch): the heuristic's top choices, then every algorithm x tile x split-K x reduction
// scheme that cublasLtMatmulAlgoCheck accepts, each timed with events (GPU time per call, back to back).
// The enumeration leaves the stage count undefined, which some algorithms (55, the heuristic's favourite
// here) reject; the heuristic's list is the useful part (results/2026-11-30-31e7a73-h200-lt-probe.txt).
// For each, the host's cost of one call (time until the call returns, the GPU busy behind it): cuBLAS's
// cublasSgemmStridedBatched, which chooses its kernel on every call, against cublasLtMatmul with the
// heuristic's first algorithm kept (as lltm.cpp does), the heuristic itself, and an empty kernel's launch.
//
//     bash benchmarks/lt_probe.sh      # builds with nvcc against cuBLASLt and runs it
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#define CK(x)                                                                   \
  do {                                                                          \
    auto rc_ = (x);                                                             \
    if (int(rc_) != 0) {                                                        \
      std::fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, int(rc_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

struct Problem {
  const char* name;
  int m, n, k;
  cublasOperation_t ta, tb;
  int parts;  // > 1: the forward as k-slices of X and W (k is a slice's length), one batched matmul
};

struct Timed {
  double us;
  std::string what;
  cublasLtMatmulAlgo_t algo;
};

static const size_t kWorkspace = 64 << 20;

__global__ void empty_kernel() {}

// Median host microseconds of `call` over `reps` calls, each timed alone, the GPU kept busy by the calls.
template <class F>
static double host_us(F call, int reps = 41) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    call();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  CK(cudaDeviceSynchronize());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Column-major D (m x n) = op(A) op(B); A stored (m x k) or, transposed, (k x m); likewise B.
int main(int argc, char** argv) {
  const bool forward_only = argc > 1 && std::string(argv[1]) == "forward";
  const int batch = 1024, features = 512, state = 1024, K = state + features, G = 3 * state;
  const Problem problems[] = {
      {"forward gates = X W^T", G, batch, K, CUBLAS_OP_T, CUBLAS_OP_N, 1},
      {"forward in 2 k-slices", G, batch, K / 2, CUBLAS_OP_T, CUBLAS_OP_N, 2},
      {"forward in 3 k-slices", G, batch, K / 3, CUBLAS_OP_T, CUBLAS_OP_N, 3},
      {"forward in 4 k-slices", G, batch, K / 4, CUBLAS_OP_T, CUBLAS_OP_N, 4},
      {"forward in 6 k-slices", G, batch, K / 6, CUBLAS_OP_T, CUBLAS_OP_N, 6},
      {"forward in 8 k-slices", G, batch, K / 8, CUBLAS_OP_T, CUBLAS_OP_N, 8},
      {"forward transposed, gates^T = W X^T", batch, G, K, CUBLAS_OP_T, CUBLAS_OP_N, 1},
      {"forward transposed in 2 k-slices", batch, G, K / 2, CUBLAS_OP_T, CUBLAS_OP_N, 2},
      {"forward transposed in 4 k-slices", batch, G, K / 4, CUBLAS_OP_T, CUBLAS_OP_N, 4},
      {"forward transposed in 8 k-slices", batch, G, K / 8, CUBLAS_OP_T, CUBLAS_OP_N, 8},
      {"backward d_X = dG W", K, batch, G, CUBLAS_OP_N, CUBLAS_OP_N, 1},
      {"backward d_W = dG^T X", K, G, batch, CUBLAS_OP_N, CUBLAS_OP_T, 1},
  };
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cublasHandle_t blas;
  CK(cublasCreate(&blas));
  void* ws;
  CK(cudaMalloc(&ws, kWorkspace));
  cudaEvent_t b, e;
  CK(cudaEventCreate(&b));
  CK(cudaEventCreate(&e));
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> uni(-1, 1);

  for (const Problem& p : problems) {
    if (forward_only && p.m == K) continue;
    const int ar = p.ta == CUBLAS_OP_N ? p.m : p.k, ac = p.ta == CUBLAS_OP_N ? p.k : p.m;
    const int br = p.tb == CUBLAS_OP_N ? p.k : p.n, bc = p.tb == CUBLAS_OP_N ? p.n : p.k;
    const int lda = ar * p.parts, ldb = br * p.parts;  // slices: rows of A and B are k, side by side
    const size_t out = size_t(p.m) * p.n * p.parts;
    std::vector<float> ha(size_t(lda) * ac), hb(size_t(ldb) * bc);
    for (float& x : ha) x = uni(gen);
    for (float& x : hb) x = uni(gen);
    float *A, *B, *D, *R;
    CK(cudaMalloc(&A, ha.size() * 4));
    CK(cudaMalloc(&B, hb.size() * 4));
    CK(cudaMalloc(&D, out * 4));
    CK(cudaMalloc(&R, out * 4));
    CK(cudaMemcpy(A, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
    cublasLtMatmulDesc_t op;
    CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)));
    cublasLtMatrixLayout_t la, lb, ld;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ar, ac, lda));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, br, bc, ldb));
    CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, p.m, p.n, p.m));
    if (p.parts > 1) {
      const long long sab = p.k, sd = (long long)p.m * p.n;
      for (auto [l, stride] : {std::pair{la, sab}, std::pair{lb, sab}, std::pair{ld, sd}}) {
        CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &p.parts, sizeof(p.parts)));
        CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
      }
    }
    const float one = 1, zero = 0;

    auto run = [&](const cublasLtMatmulAlgo_t& algo, float* out) {
      return cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, out, ld, out, ld, &algo, ws, kWorkspace, 0);
    };
    auto time_us = [&](const cublasLtMatmulAlgo_t& algo) -> double {
      for (int i = 0; i < 2; ++i)
        if (run(algo, D) != CUBLAS_STATUS_SUCCESS) return -1;
      CK(cudaEventRecord(b));
      const int reps = 5;
      for (int i = 0; i < reps; ++i) run(algo, D);
      CK(cudaEventRecord(e));
      CK(cudaEventSynchronize(e));
      float ms;
      CK(cudaEventElapsedTime(&ms, b, e));
      return ms * 1e3 / reps;
    };
    auto describe = [&](const cublasLtMatmulAlgo_t& algo) {
      int id = 0, tile = 0, split = 0, red = 0, stages = 0, swizzle = 0;
      size_t n;
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &n);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &n);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split), &n);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red), &n);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &n);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle), &n);
      char s[160];
      std::snprintf(s, sizeof(s), "algo %d tile %d split %d reduction %d stages %d swizzle %d", id, tile, split, red,
                    stages, swizzle);
      return std::string(s);
    };

    const double gflop = 2.0 * p.m * p.n * p.k * p.parts / 1e9;
    std::printf("\n## %s: m %d n %d k %d x %d (%.1f GFLOP)\n", p.name, p.m, p.n, p.k, p.parts, gflop);
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                            sizeof(kWorkspace)));
    cublasLtMatmulHeuristicResult_t heur[16];
    int nh = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, heur, &nh));
    std::vector<Timed> heuristic;
    for (int i = 0; i < nh; ++i) heuristic.push_back({time_us(heur[i].algo), describe(heur[i].algo), heur[i].algo});
    CK(run(heur[0].algo, R));  // the reference result: the heuristic's first choice
    std::printf("heuristic, in its order:\n");
    for (size_t i = 0; i < heuristic.size(); ++i)
      std::printf("  #%zu %8.1f us  %s\n", i, heuristic[i].us, heuristic[i].what.c_str());
    auto classic = [&] {
      CK(cublasSgemmStridedBatched(blas, p.ta, p.tb, p.m, p.n, p.k, &one, A, lda, p.k, B, ldb, p.k, &zero, D, p.m,
                                   (long long)p.m * p.n, p.parts));
    };
    auto kept = [&] { CK(run(heur[0].algo, D)); };
    auto choose = [&] { CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, heur, &nh)); };
    std::printf("host per call: cublasSgemmStridedBatched %.1f us, cublasLtMatmul (#0 kept) %.1f us, "
                "the heuristic %.1f us\n", host_us(classic), host_us(kept), host_us(choose, 11));

    int ids[256], nid = 0;
    CK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                256, ids, &nid));
    std::vector<Timed> all;
    int checked = 0;
    for (int a = 0; a < nid; ++a) {
      cublasLtMatmulAlgo_t algo;
      if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                 ids[a], &algo) != CUBLAS_STATUS_SUCCESS)
        continue;
      int tiles[128];
      size_t nbytes = 0;
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof(tiles), &nbytes);
      int ntiles = int(nbytes / sizeof(int));
      if (ntiles == 0) {
        tiles[0] = CUBLASLT_MATMUL_TILE_UNDEFINED;
        ntiles = 1;
      }
      int stage_ids[64];
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stage_ids, sizeof(stage_ids), &nbytes);
      int nstages = int(nbytes / sizeof(int));
      if (nstages == 0) {
        stage_ids[0] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
        nstages = 1;
      }
      int splitk_ok = 0, red_mask = 0;
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok, sizeof(splitk_ok), &nbytes);
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask, sizeof(red_mask),
                                        &nbytes);
      for (int t = 0; t < ntiles; ++t)
      for (int st = 0; st < nstages; ++st) {
        for (int split : {1, 2, 4, 8}) {
          if (split > 1 && !splitk_ok) continue;
          for (int red : {0, 1, 2, 4}) {
            if ((split == 1) != (red == 0)) continue;
            if (red && !(red_mask & red)) continue;
            cublasLtMatmulAlgo_t cfg = algo;
            cublasLtMatmulAlgoConfigSetAttribute(&cfg, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t], sizeof(int));
            cublasLtMatmulAlgoConfigSetAttribute(&cfg, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(int));
            cublasLtMatmulAlgoConfigSetAttribute(&cfg, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(int));
            cublasLtMatmulAlgoConfigSetAttribute(&cfg, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage_ids[st], sizeof(int));
            cublasLtMatmulHeuristicResult_t res;
            if (cublasLtMatmulAlgoCheck(lt, op, la, lb, ld, ld, &cfg, &res) != CUBLAS_STATUS_SUCCESS) continue;
            if (res.workspaceSize > kWorkspace) continue;
            ++checked;
            const double us = time_us(cfg);
            if (us > 0) all.push_back({us, describe(cfg), cfg});
          }
        }
      }
    }
    std::sort(all.begin(), all.end(), [](const Timed& x, const Timed& y) { return x.us < y.us; });
    std::printf("%zu algorithm ids, %d configurations accepted, %zu ran; fastest:\n", size_t(nid), checked, all.size());
    std::vector<float> hd(out), hr(out);
    CK(cudaMemcpy(hr.data(), R, hr.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < all.size() && i < 12; ++i) {
      CK(run(all[i].algo, D));
      CK(cudaMemcpy(hd.data(), D, hd.size() * 4, cudaMemcpyDeviceToHost));
      double diff = 0;
      for (size_t j = 0; j < hd.size(); ++j) diff = std::max(diff, double(std::fabs(hd[j] - hr[j])));
      std::printf("  %8.1f us  %6.1f TFLOP/s  %s  (max |diff| vs heuristic #0: %.1e)\n", all[i].us,
                  gflop / all[i].us * 1e3, all[i].what.c_str(), diff);
    }
    cudaFree(A);
    cudaFree(B);
    cudaFree(D);
    cudaFree(R);
  }
  std::printf("\nan empty kernel's launch: host %.1f us\n", host_us([] { empty_kernel<<<1, 32>>>(); }));
  return 0;
}
