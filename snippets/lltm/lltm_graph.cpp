// The rung after cuda-fast: CUDA graphs, against launch overhead. cuda-fast's forward is three kernels
// (X, the matmul, the gates) and its backward five, and the host spends microseconds on each launch, on
// cuBLASLt's setup and on the dispatcher: a cost paid per call, however small the cell. A CUDA graph records
// a call's kernels once and launches them all again with one call (cudaGraphLaunch), back to back on the
// GPU, with the host out of the way.
//
// A graph replays exactly what it recorded, pointers included. So a graph is kept per call signature: the
// inputs' addresses, sizes and strides (for the backward's incoming gradients and the forward's saved tensors,
// sizes and strides only: they are new tensors each step, so they are copied into the graph's own buffers).
// The graph writes its outputs into tensors of its own memory pool, and the call hands out those very tensors:
// a training loop drops them before its next step, and the next call replays into them. While anyone still
// holds one (an earlier step's outputs saved for a backward, say), the graph must not overwrite it: the call
// replays a second graph of the same signature (kCopies), recorded the first time every copy was held, and
// where none is free it runs directly, as cuda-fast does, into new outputs. A call not seen before also runs
// directly; seen a second time, it also records its graph (recording costs several calls' worth of host time:
// not worth paying for a signature that never comes back). Each graph keeps its memory: at most kMaxGraphs
// graphs per direction; then the one used longest ago makes room. A call whose matmuls went to ATen (float64)
// is never kept as a graph: ATen's cuBLAS keeps a workspace per stream, which the graph would bake in and
// outlive.
#include <cstdint>

// cuda-fast's parameters (fwd_split, bwd_split, streams): this rung replays cuda-fast's work.
constexpr int64_t kForwardParts = {{fwd_split}}, kBackwardParts = {{bwd_split}};
constexpr int kStreams = {{streams}};

#include "lltm_fast_ops.h"

#include "graph_cache.h"  // the graphs kept per call signature: Signature, describe, Graphs, replay_or_record

static Graphs forward_graphs, backward_graphs;

static Forward lltm_forward_cuda(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                                 const Tensor& old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  const c10::cuda::CUDAGuard device(input.device());
  Signature sig = call_signature();
  for (const Tensor* t : {&input, &weights, &bias, &old_h, &old_cell}) describe(sig, *t);
  const Tensors out = replay_or_record(forward_graphs, std::move(sig), {}, [&](const Tensors&) {
    const auto [new_h, new_cell, gates, X] = lltm_forward_work(input, weights, bias, old_h, old_cell);
    return Tensors{new_h, new_cell, gates, X};  // (while it records, in the graph's own memory pool)
  });
  return {out[0], out[1], out[2], out[3]};
}

static Backward lltm_backward_cuda(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                                   const Tensor& gates, const Tensor& X, const Tensor& weights) {
  check_backward_inputs(grad_h, grad_cell, new_cell, gates);
  const c10::cuda::CUDAGuard device(gates.device());
  // Copied in: the incoming gradients (new tensors each step) and what the forward saved (wherever that
  // forward's outputs went: a forward that ran directly put them at new addresses).
  const Tensors copied{grad_h, grad_cell, new_cell, gates, X};
  Signature sig = call_signature();
  for (const Tensor& t : copied) describe(sig, t, /*copied_in=*/true);
  describe(sig, weights);
  const Tensors out = replay_or_record(backward_graphs, std::move(sig), copied, [&](const Tensors& g) {
    const auto [d_input, d_weights, d_bias, d_X, d_old_cell] =
        lltm_backward_work(g[0], g[1], g[2], g[3], g[4], weights);
    return Tensors{d_input, d_weights, d_bias, d_X, d_old_cell};
  });
  return {out[0], out[1], out[2], out[3].narrow(1, 0, new_cell.size(1)), out[4]};
}

#include "lltm_op.h"  // the op `lltm`, its autograd (cuda-fast's), and the registrations of the two above

// How calls ran, per direction: [forward replays, records, direct runs, backward replays, records, direct
// runs]. A loop whose tensors keep their addresses replays; one whose addresses keep changing runs directly.
static std::vector<int64_t> graph_counts() {
  std::vector<int64_t> counts;
  for (Graphs* g : {&forward_graphs, &backward_graphs}) {
    const std::lock_guard<std::mutex> hold(g->lock);
    counts.insert(counts.end(), {g->replays, g->records, g->direct});
  }
  return counts;
}

TORCH_LIBRARY_FRAGMENT(KPLAY_NS, m) { m.def("graph_counts() -> int[]", &graph_counts); }
