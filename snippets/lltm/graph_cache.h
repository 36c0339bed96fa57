// cuda-graph's cache of recorded graphs (lltm_graph.cpp says why and when it keeps one): a call's signature,
// a graph recorded on a capture stream of its own, its outputs handed out and replayed into once no one holds
// them, the graph used longest ago evicted to make room. A call's kernels come in as `work`, a callable that
// runs them (directly, or while a graph records them).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "lt_matmul.h"  // lt_aten_matmuls: a call whose matmuls went to ATen is not kept as a graph

using at::Tensor;

constexpr size_t kMaxGraphs = 16;  // per direction: a timing loop's rotating inputs need one each
constexpr size_t kCopies = 2;  // graphs per signature: a loop holding one call's outputs while it makes the next
                               // (out = cell(x): out is rebound only after the call) replays them in turn

using Signature = std::vector<int64_t>;
using Tensors = std::vector<Tensor>;

// What a graph's replay depends on: each tensor's dtype, device, sizes and strides, and its address unless
// it is copied in.
static void describe(Signature& s, const Tensor& t, bool copied_in = false) {
  s.insert(s.end(), {int64_t(t.scalar_type()), t.get_device(), copied_in ? 0 : reinterpret_cast<int64_t>(t.data_ptr()),
                     t.dim()});
  for (int64_t d = 0; d < t.dim(); ++d) s.insert(s.end(), {t.size(d), t.stride(d)});
}

// What every call's signature starts with: the stream it runs on (a graph and its memory serve one stream,
// as the caching allocator's blocks do) and whether inference mode is on (its tensors are of another kind).
static Signature call_signature() {
  return {int64_t(c10::cuda::getCurrentCUDAStream().id()), int64_t(c10::InferenceMode::is_enabled())};
}

struct Recorded {  // (members go in this order: the tensors in the graph's pool are freed before the graph)
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  Tensors outputs;    // what the graph writes (its own memory pool): handed out, replayed into when free again
  Tensors copied_in;  // the buffers (in its pool too) the graph reads the copied inputs from
  std::vector<std::pair<void*, size_t>> memory;  // the outputs' memory when recorded
  c10::DeviceIndex device = 0;
  int64_t last_used = 0;
};

// No one but the graph holds any of its outputs (a view of one counts), and each still has the memory the
// graph writes (a caller may have resized one it held): a replay may overwrite them.
static bool free_to_overwrite(const Recorded& r) {
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    const c10::Storage& s = r.outputs[i].storage();
    if (s.use_count() > 1 || s.data_ptr().get() != r.memory[i].first || s.nbytes() != r.memory[i].second) return false;
  }
  return true;
}

struct Graphs {
  std::mutex lock;
  std::map<Signature, std::vector<Recorded>> recorded;  // at most kCopies per signature
  size_t count = 0;  // graphs kept, all signatures together
  std::set<Signature> seen;   // signatures run once, without a graph
  std::set<Signature> never;  // signatures whose recording failed: always run directly
  int64_t calls = 0, replays = 0, records = 0, direct = 0;  // what graph_counts() reports
};

// A stream of our own per device to record on: capture is never on the default stream, and no other work
// lands on it while it records (with streams=2 the backward's side stream is PyTorch's, joined before the end).
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

// No graph: the tensors in its pool freed first, then the graph (which releases the pool).
static void discard(Recorded& r) {
  r.outputs.clear();
  r.copied_in.clear();
  r.graph.reset();
}

static std::atomic<bool> recording_failed{false};  // after a failed recording, this process records no more

// After a recording that failed part-way, the caching allocator may still route allocations to the graph's
// pool (torch 2.11 stops that only once cudaStreamEndCapture succeeds): stop it and release the pool here.
// Where torch already did both, each call refuses, which is fine.
static void forget_capture(c10::DeviceIndex device, c10::cuda::MempoolId_t pool) {
  try {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
  } catch (const std::exception&) {
  }
  try {
    c10::cuda::CUDACachingAllocator::releasePool(device, pool);
  } catch (const std::exception&) {
  }
}

// `work(copied_in)` recorded into a new graph (captured, not run: its kernels and their pointers become the
// graph's nodes, its allocations, outputs included, come from the graph's own memory pool), reading the copied
// inputs from buffers of its own; no graph when it cannot be recorded, or when it used ATen's cuBLAS, whose
// per-stream workspace would outlive the graph that baked it in.
template <typename Work>
static Recorded record(const Work& work, const Tensors& copied) {
  static std::mutex one_at_a_time;  // one capture stream per device, shared by every thread
  const std::lock_guard<std::mutex> hold(one_at_a_time);
  Recorded made;
  if (recording_failed) return made;
  made.device = c10::cuda::current_device();
  const c10::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();
  bool capturing = false;
  try {
    made.graph = std::make_unique<at::cuda::CUDAGraph>();
    const c10::cuda::CUDAStreamGuard on(capture_stream());
    const int64_t aten_before = lt_aten_matmuls;
    made.graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    capturing = true;
    for (const Tensor& t : copied) made.copied_in.push_back(at::empty_like(t, at::MemoryFormat::Contiguous));
    made.outputs = work(made.copied_in);
    capturing = false;
    made.graph->capture_end();
    for (const Tensor& t : made.outputs) made.memory.emplace_back(t.storage().data_ptr().get(), t.storage().nbytes());
    if (lt_aten_matmuls != aten_before) discard(made);
  } catch (const std::exception& e) {
    TORCH_WARN("cuda-graph: recording a graph failed, so every call from now on runs directly: ", e.what());
    if (capturing) {
      try {
        made.graph->capture_end();  // ends the capture, whatever it holds
      } catch (const std::exception&) {
      }
    }
    made.outputs.clear();
    made.copied_in.clear();
    forget_capture(made.device, pool);
    discard(made);
    recording_failed = true;
  }
  return made;
}

// The tensors of `outputs`, handed out: new tensors on the same memory, with no autograd history of their own
// (the caller's autograd gives them theirs; the graph's own must not keep it, nor what it saves, alive).
static Tensors hand_out(const Tensors& outputs) {
  Tensors out;
  for (const Tensor& t : outputs) {
    out.emplace_back(t.unsafeGetTensorImpl()->shallow_copy_and_detach(c10::VariableVersion(0), true));
  }
  return out;
}

// The graph used longest ago, taken out of `graphs` (under its lock) to make room.
static Recorded evict_oldest(Graphs& graphs) {
  auto oldest = graphs.recorded.begin();
  size_t at = 0;
  for (auto it = graphs.recorded.begin(); it != graphs.recorded.end(); ++it) {
    for (size_t k = 0; k < it->second.size(); ++k) {
      if (it->second[k].last_used < oldest->second[at].last_used) oldest = it, at = k;
    }
  }
  Recorded out = std::move(oldest->second[at]);
  oldest->second.erase(oldest->second.begin() + at);
  if (oldest->second.empty()) graphs.recorded.erase(oldest);
  --graphs.count;
  return out;
}

// The outputs of `work(copied)` (a call's kernels, on the current stream): a replay of the first graph recorded
// for `sig` whose outputs no one holds; otherwise `work` run directly, and recorded too when `sig` came before
// and fewer than kCopies graphs of it are kept.
template <typename Work>
static Tensors replay_or_record(Graphs& graphs, Signature sig, const Tensors& copied, const Work& work) {
  if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) {
    return work(copied);  // inside someone else's graph capture (torch.cuda.graph): recorded as part of theirs
  }
  std::unique_lock<std::mutex> hold(graphs.lock);
  ++graphs.calls;
  const auto found = graphs.recorded.find(sig);
  std::vector<Recorded>* copies = found != graphs.recorded.end() ? &found->second : nullptr;
  for (size_t k = 0; copies && k < copies->size(); ++k) {
    Recorded& r = (*copies)[k];
    if (!free_to_overwrite(r)) continue;
    for (size_t i = 0; i < copied.size(); ++i) r.copied_in[i].copy_(copied[i]);
    r.graph->replay();  // the host's cost of the call: this lookup, the copies and one cudaGraphLaunch
    r.last_used = graphs.calls;
    ++graphs.replays;
    return hand_out(r.outputs);
  }
  for (auto* set : {&graphs.seen, &graphs.never}) {
    if (set->size() >= 4 * kMaxGraphs) set->clear();
  }
  // Recorded when seen before, or when every copy kept is held (while there is room for another).
  const bool again = (found == graphs.recorded.end() ? !graphs.seen.insert(sig).second
                                                     : found->second.size() < kCopies) && !graphs.never.count(sig);
  hold.unlock();
  Tensors out = work(copied);  // this call's results, as cuda-fast computes them
  Recorded made = again ? record(work, copied) : Recorded{};
  hold.lock();
  if (!made.graph) {
    ++graphs.direct;
    if (again) graphs.never.insert(std::move(sig));
    return out;
  }
  graphs.seen.erase(sig);
  const auto kept = graphs.recorded.find(sig);
  if (kept != graphs.recorded.end() && kept->second.size() >= kCopies) {  // another thread was first
    ++graphs.direct;
    return out;
  }
  Recorded evicted = graphs.count >= kMaxGraphs ? evict_oldest(graphs) : Recorded{};
  made.last_used = graphs.calls;
  graphs.recorded[std::move(sig)].push_back(std::move(made));
  ++graphs.count;
  ++graphs.records;
  hold.unlock();
  if (evicted.graph) {  // freed once no replay of it can still run; kept if the device cannot say so now
    evicted.outputs.clear();
    evicted.copied_in.clear();
    const c10::cuda::CUDAGuard on(evicted.device);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      (void)cudaGetLastError();
      evicted.graph.release();
    }
  }
  return out;
}
