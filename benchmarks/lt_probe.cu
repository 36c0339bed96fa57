// Which cuBLASLt kernel is fastest for the LLTM's three float32 matmuls at (1024, 512, 1024)? A standalone
// program (no torch): the heuristic's top choices, then every algorithm x tile x split-K x reduction
// scheme that cublasLtMatmulAlgoCheck accepts, each timed with events (GPU time per call, back to back).
// The enumeration leaves the stage count undefined, which some algorithms (55, the heuristic's favourite
// here) reject; the heuristic's list is the useful part (results/lt-probe-h200.txt).
//
//     bash benchmarks/lt_probe.sh      # builds with nvcc against cuBLASLt and runs it
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
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
};

struct Timed {
  double us;
  std::string what;
  cublasLtMatmulAlgo_t algo;
};

static const size_t kWorkspace = 64 << 20;

// Column-major D (m x n) = op(A) op(B); A stored (m x k) or, transposed, (k x m); likewise B.
int main() {
  const int batch = 1024, features = 512, state = 1024, K = state + features, G = 3 * state;
  const Problem problems[] = {
      {"forward gates = X W^T", G, batch, K, CUBLAS_OP_T, CUBLAS_OP_N},
      {"backward d_X = dG W", K, batch, G, CUBLAS_OP_N, CUBLAS_OP_N},
      {"backward d_W = dG^T X", K, G, batch, CUBLAS_OP_N, CUBLAS_OP_T},
  };
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  void* ws;
  CK(cudaMalloc(&ws, kWorkspace));
  cudaEvent_t b, e;
  CK(cudaEventCreate(&b));
  CK(cudaEventCreate(&e));
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> uni(-1, 1);

  for (const Problem& p : problems) {
    const int ar = p.ta == CUBLAS_OP_N ? p.m : p.k, ac = p.ta == CUBLAS_OP_N ? p.k : p.m;
    const int br = p.tb == CUBLAS_OP_N ? p.k : p.n, bc = p.tb == CUBLAS_OP_N ? p.n : p.k;
    std::vector<float> ha(size_t(ar) * ac), hb(size_t(br) * bc);
    for (float& x : ha) x = uni(gen);
    for (float& x : hb) x = uni(gen);
    float *A, *B, *D, *R;
    CK(cudaMalloc(&A, ha.size() * 4));
    CK(cudaMalloc(&B, hb.size() * 4));
    CK(cudaMalloc(&D, size_t(p.m) * p.n * 4));
    CK(cudaMalloc(&R, size_t(p.m) * p.n * 4));
    CK(cudaMemcpy(A, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
    cublasLtMatmulDesc_t op;
    CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)));
    cublasLtMatrixLayout_t la, lb, ld;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ar, ac, ar));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, br, bc, br));
    CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, p.m, p.n, p.m));
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

    std::printf("\n## %s: m %d n %d k %d (%.1f GFLOP)\n", p.name, p.m, p.n, p.k, 2.0 * p.m * p.n * p.k / 1e9);
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
      int splitk_ok = 0, red_mask = 0;
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok, sizeof(splitk_ok), &nbytes);
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask, sizeof(red_mask),
                                        &nbytes);
      for (int t = 0; t < ntiles; ++t) {
        for (int split : {1, 2, 3, 4, 6, 8}) {
          if (split > 1 && !splitk_ok) continue;
          for (int red : {0, 1, 2, 4}) {
            if ((split == 1) != (red == 0)) continue;
            if (red && !(red_mask & red)) continue;
            cublasLtMatmulAlgo_t cfg = algo;
            cublasLtMatmulAlgoConfigSetAttribute(&cfg, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t], sizeof(int));
            cublasLtMatmulAlgoConfigSetAttribute(&cfg, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(int));
            cublasLtMatmulAlgoConfigSetAttribute(&cfg, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(int));
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
    std::vector<float> hd(size_t(p.m) * p.n), hr(hd.size());
    CK(cudaMemcpy(hr.data(), R, hr.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < all.size() && i < 12; ++i) {
      CK(run(all[i].algo, D));
      CK(cudaMemcpy(hd.data(), D, hd.size() * 4, cudaMemcpyDeviceToHost));
      double diff = 0;
      for (size_t j = 0; j < hd.size(); ++j) diff = std::max(diff, double(std::fabs(hd[j] - hr[j])));
      std::printf("  %8.1f us  %6.1f TFLOP/s  %s  (max |diff| vs heuristic #0: %.1e)\n", all[i].us,
                  2.0 * p.m * p.n * p.k / all[i].us / 1e6, all[i].what.c_str(), diff);
    }
    cudaFree(A);
    cudaFree(B);
    cudaFree(D);
    cudaFree(R);
  }
  return 0;
}
