// The rung after cuda-fast: CUDA graphs, against launch overhead. cuda-fast's forward is three kernels
// (X, the matmul, the gates) and its backward five, and the host spends microseconds on each launch, on
// cuBLASLt's setup and on the dispatcher: a cost paid per call, however small the cell. A CUDA graph records
// a call's kernels once and launches them all again with one call (cudaGraphLaunch), back to back on the
// GPU, with the host out of the way.
//
// A graph replays exactly what it recorded, pointers included. So a graph is kept per call signature:
// every tensor's address, sizes and strides, in and out. The outputs are allocated for each call, as any
// op's are (a training loop gets the same addresses back from the caching allocator call after call, so
// it hits its graphs); the intermediates (split-K's partial products, d_gates, cuBLASLt's workspace) live
// in the graph's own memory pool. A call not seen before runs as cuda-fast's does; seen a second time,
// it also records its graph for the next time (recording costs several calls' worth of host time, not
// worth paying for a signature that never comes back). Each graph keeps its intermediates' memory: at
// most kMaxGraphs graphs per direction; then the one used longest ago makes room. A call whose matmuls went
// to ATen (float64) is never kept as a graph: ATen's cuBLAS keeps a workspace per stream, which the graph
// would bake in and outlive.
#include <cstdint>

// cuda-fast's parameters (fwd_split, bwd_split, streams): this rung replays cuda-fast's work.
constexpr int64_t kForwardParts = {{fwd_split}}, kBackwardParts = {{bwd_split}};
constexpr int kStreams = {{streams}};

#include "lltm_fast_ops.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>

#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

constexpr size_t kMaxGraphs = 16;  // per direction: a timing loop's rotating inputs need one each

using Signature = std::vector<int64_t>;

// What a graph's replay depends on: each tensor's dtype, device, address, sizes and strides.
static Signature signature(std::initializer_list<const Tensor*> tensors) {
  Signature s;
  for (const Tensor* t : tensors) {
    s.insert(s.end(), {int64_t(t->scalar_type()), t->get_device(), reinterpret_cast<int64_t>(t->data_ptr()), t->dim()});
    for (int64_t d = 0; d < t->dim(); ++d) s.insert(s.end(), {t->size(d), t->stride(d)});
  }
  return s;
}

struct Recorded {
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  int64_t last_used;
};

struct Graphs {
  std::mutex lock;
  std::map<Signature, Recorded> recorded;
  std::set<Signature> seen;   // signatures run once, without a graph
  std::set<Signature> never;  // signatures whose recording failed: always run directly
  int64_t calls = 0, replays = 0, records = 0, direct = 0;  // what graph_counts() reports
};

// A stream of our own per device to record on: capture is never on the default stream, and no other
// work lands on a stream while it records.
static c10::cuda::CUDAStream capture_stream() {
  static std::mutex lock;
  static std::map<c10::DeviceIndex, cudaStream_t> streams;
  const c10::DeviceIndex device = c10::cuda::current_device();
  const std::lock_guard<std::mutex> hold(lock);
  if (!streams.count(device)) {
    cudaStream_t made;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
    streams[device] = made;
  }
  return c10::cuda::getStreamFromExternal(streams[device], device);
}

// `work` recorded into a new graph (captured, not run: its kernels and their pointers become the graph's
// nodes, its allocations come from the graph's own memory pool); nullptr when it cannot be recorded, or when
// it used ATen's cuBLAS, whose per-stream workspace would outlive the graph that baked it in.
template <typename Work>
static std::unique_ptr<at::cuda::CUDAGraph> record(const Work& work) {
  static std::mutex one_at_a_time;  // one capture stream per device, shared by every thread
  const std::lock_guard<std::mutex> hold(one_at_a_time);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  const c10::cuda::CUDAStreamGuard on(capture_stream());
  const int64_t aten_before = lt_aten_matmuls;
  try {
    graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    work();
  } catch (const std::exception&) {
    try {
      graph->capture_end();  // ends the capture, whatever it holds
    } catch (const std::exception&) {
    }
    return nullptr;
  }
  try {
    graph->capture_end();
  } catch (const std::exception&) {
    return nullptr;
  }
  return lt_aten_matmuls == aten_before ? std::move(graph) : nullptr;
}

// Runs `work` (a call's kernels, on the current stream) as the graph recorded for `sig`; with none, runs it
// directly, and records it when `sig` came before.
template <typename Work>
static void replay_or_record(Graphs& graphs, Signature sig, const Work& work) {
  if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) {
    return work();  // inside someone else's graph capture (torch.cuda.graph): recorded as part of theirs
  }
  std::unique_lock<std::mutex> hold(graphs.lock);
  ++graphs.calls;
  if (auto found = graphs.recorded.find(sig); found != graphs.recorded.end()) {
    found->second.graph->replay();  // the host's whole cost of the call: this lookup and one cudaGraphLaunch
    found->second.last_used = graphs.calls;
    ++graphs.replays;
    return;
  }
  for (auto* set : {&graphs.seen, &graphs.never}) {
    if (set->size() >= 4 * kMaxGraphs) set->clear();
  }
  const bool again = !graphs.seen.insert(sig).second && !graphs.never.count(sig);
  hold.unlock();
  work();  // this call's results, as cuda-fast computes them
  auto graph = again ? record(work) : nullptr;
  hold.lock();
  if (!graph) {
    ++graphs.direct;
    if (again) graphs.never.insert(std::move(sig));
    return;
  }
  graphs.seen.erase(sig);
  if (graphs.recorded.count(sig)) return;  // another thread recorded it meanwhile
  std::unique_ptr<at::cuda::CUDAGraph> evicted;
  c10::DeviceIndex its_device = 0;
  if (graphs.recorded.size() >= kMaxGraphs) {  // the graph used longest ago makes room
    auto oldest = graphs.recorded.begin();
    for (auto it = graphs.recorded.begin(); it != graphs.recorded.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    its_device = c10::DeviceIndex(oldest->first[1]);  // its first tensor's device
    evicted = std::move(oldest->second.graph);
    graphs.recorded.erase(oldest);
  }
  graphs.recorded.emplace(std::move(sig), Recorded{std::move(graph), graphs.calls});
  ++graphs.records;
  hold.unlock();
  if (evicted) {  // freed once no replay of it can still run; kept if the device cannot say so now
    const c10::cuda::CUDAGuard on(its_device);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      (void)cudaGetLastError();
      evicted.release();
    }
  }
}

static Graphs forward_graphs, backward_graphs;

static Forward lltm_forward_cuda(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                                 const Tensor& old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  const c10::cuda::CUDAGuard device(input.device());
  Forward out = forward_outputs(input, old_h);  // first: their addresses are part of the signature
  const auto& [new_h, new_cell, gates, X] = out;
  replay_or_record(forward_graphs,
                   signature({&input, &weights, &bias, &old_h, &old_cell, &new_h, &new_cell, &gates, &X}),
                   [&] { lltm_forward_into(out, input, weights, bias, old_h, old_cell); });
  return out;
}

static Backward lltm_backward_cuda(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                                   const Tensor& gates, const Tensor& X, const Tensor& weights) {
  check_backward_inputs(grad_h, grad_cell, new_cell, gates);
  const c10::cuda::CUDAGuard device(gates.device());
  BackwardOut out = backward_outputs(new_cell, X, weights);
  const auto& [d_input, d_weights, d_bias, d_X, d_old_cell] = out;
  replay_or_record(backward_graphs,
                   signature({&grad_h, &grad_cell, &new_cell, &gates, &X, &weights, &d_input, &d_weights, &d_bias,
                              &d_X, &d_old_cell}),
                   [&] { lltm_backward_into(out, grad_h, grad_cell, new_cell, gates, X, weights); });
  return {d_input, d_weights, d_bias, d_X.narrow(1, 0, new_cell.size(1)), d_old_cell};
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
