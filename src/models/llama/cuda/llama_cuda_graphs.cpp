// CUDA graphs of the engine core's decode steps (llama_cuda_graphs.h).
#include "models/llama/cuda/llama_cuda_graphs.h"

#include <algorithm>
#include <cstring>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pinned.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "models/llama/cuda/llama_cuda_model_internal.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::llama {

bool CapturedArena::matches(const kv::KvArena& arena) const {
  const int64_t n_layer = arena.spec().n_layer;
  if (arena_ != &arena || buffers_.size() != static_cast<size_t>(2 * n_layer)) return false;
  for (int64_t l = 0; l < n_layer; ++l) {
    if (buffers_[static_cast<size_t>(2 * l)] != arena.k(l) ||
        buffers_[static_cast<size_t>(2 * l + 1)] != arena.v(l)) {
      return false;
    }
  }
  return true;
}

void CapturedArena::take(const kv::KvArena& arena) {
  clear();
  arena_ = &arena;
  for (int64_t l = 0; l < arena.spec().n_layer; ++l) {
    buffers_.push_back(arena.k(l));
    buffers_.push_back(arena.v(l));
  }
}

void CapturedArena::clear() {
  arena_ = nullptr;
  buffers_.clear();
}

BatchGraphs::~BatchGraphs() { drop_graphs(); }

void BatchGraphs::drop_graphs() {
  for (auto& [key, g] : graphs_) {
    if (g != nullptr) cudaGraphExecDestroy(g);
  }
  graphs_.clear();
  captured_.clear();
}

int32_t BatchGraphs::bucket(int32_t n, int64_t cap) {
  if (n < 2 || n > cap) return 0;
  const int64_t b = n <= 2 ? 2 : n <= 4 ? 4 : (static_cast<int64_t>(n) + 7) / 8 * 8;
  return static_cast<int32_t>(std::min(b, cap));
}

Result<int32_t*> BatchGraphs::inputs(size_t words, cudaStream_t st) {
  if (dev_.data() == nullptr || words > words_) {
    drop_graphs();
    RINFER_CUDA_RETURN(cudaStreamSynchronize(st));  // the old inputs may still be read
    const size_t cap = std::max<size_t>({words, 2 * words_, 1 << 16});
    RINFER_ASSIGN_OR_RETURN(dev_, cuda::DeviceBuffer::create(cap * 4, device_, st, alloc_));
    words_ = cap;
  }
  return dev_.as<int32_t>();
}

Status BatchGraphs::launch(const kv::KvArena& arena, int32_t bucket, size_t level, bool sampled,
                           const std::function<Status()>& record, cudaStream_t st) {
  if (!captured_.matches(arena)) {
    drop_graphs();
    captured_.take(arena);
  }
  if (warmed_.insert(bucket).second) return record();
  const auto key = std::make_tuple(bucket, level, sampled);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    auto g = cuda::capture_graph(st, record);
    // A capture that failed (a kernel that cannot be captured) leaves the step eager.
    if (!g.ok()) (void)cudaGetLastError();
    it = graphs_.emplace(key, g.ok() ? *g : nullptr).first;
  }
  if (it->second == nullptr) return record();
  RINFER_CUDA_RETURN(cudaGraphLaunch(it->second, st));
  ++replays_;
  return ok_status();
}

OneRowGraphs::~OneRowGraphs() {
  drop_graphs();
  if (pinned_ != nullptr) cuda::pinned_host_allocator().deallocate(pinned_, pinned_bytes());
  for (cudaEvent_t e : fed_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
}

void OneRowGraphs::drop_graphs() {
  for (auto& v : graphs_) {
    for (cudaGraphExec_t g : v) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    v.clear();
  }
  captured_.clear();
}

Status OneRowGraphs::allocate(const kv::KvSpec& spec, cudaStream_t st) {
  if (dev_.data() != nullptr && spec.n_ctx == n_ctx_ && spec.block_size == block_size_ &&
      spec.n_groups() == n_groups_) {
    return ok_status();
  }
  drop_graphs();
  RINFER_CUDA_RETURN(cudaStreamSynchronize(st));  // the old inputs may still be read
  if (pinned_ != nullptr) cuda::pinned_host_allocator().deallocate(pinned_, pinned_bytes());
  pinned_ = nullptr;
  n_ctx_ = spec.n_ctx;
  block_size_ = spec.block_size;
  n_groups_ = spec.n_groups();
  const int64_t width = spec.blocks_for(spec.n_ctx);
  auto align4 = [](size_t n) { return (n + 3) / 4 * 4; };  // 16-byte starts
  static_assert(sizeof(cuda::RowSample) % 4 == 0);
  off_sample_ = align4(4 + static_cast<size_t>(n_groups_ * width));
  off_hist_ = off_sample_ + align4(sizeof(cuda::RowSample) / 4);
  words_ = off_hist_ + static_cast<size_t>(cuda::kMaxDecodeHistory + kAheadSteps);
  RINFER_ASSIGN_OR_RETURN(void* p, cuda::pinned_host_allocator().allocate(pinned_bytes()));
  pinned_ = static_cast<int32_t*>(p);
  std::memset(pinned_, 0, pinned_bytes());
  // Pinned memory is read and written by kernels through the host's pointer (unified addressing:
  // cudaHostAlloc's memory is reachable from every device at the same address).
  pinned_dev_ = pinned_;
  // The inputs, then the parity word.
  RINFER_ASSIGN_OR_RETURN(dev_, cuda::DeviceBuffer::create((words_ + 1) * 4, device_, st, alloc_));
  for (cudaEvent_t& e : fed_) {
    if (e == nullptr) RINFER_CUDA_RETURN(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  auto* d = dev_.as<int32_t>();
  in_.token = d;
  in_.position = d + 1;
  in_.kv_len = d + 2;
  in_.tables = d + 4;
  in_.table_width = width;
  in_.sample = reinterpret_cast<const cuda::RowSample*>(d + off_sample_);
  in_.hist = d + off_hist_;
  parity_ = d + words_;
  return ok_status();
}

Status OneRowGraphs::write_inputs(const ForwardBatch& b, const kv::KvArena& arena, int32_t* p) {
  const kv::KvSpec& spec = arena.spec();
  if (b.n_seq() != 1 || b.n_tokens() != 1) {
    return invalid_argument("one-row decode: {} sequences, {} tokens", b.n_seq(), b.n_tokens());
  }
  const int32_t len = b.kv_len[0];
  if (len < 1 || len > n_ctx_) {
    return invalid_argument("one-row decode: length {} outside [1, {}]", len, n_ctx_);
  }
  const int64_t n_tab = spec.blocks_for(len);
  if (n_tab > b.table_stride) {
    return invalid_argument("one-row decode: {} blocks in a table of {}", n_tab, b.table_stride);
  }
  p[1] = b.positions[0];
  p[2] = len;
  for (int32_t g = 0; g < n_groups_; ++g) {
    const int32_t* t = b.table(g, 0);
    int32_t* dst = p + 4 + static_cast<size_t>(g) * static_cast<size_t>(in_.table_width);
    // Every block the step reads or writes is in the arena.
    for (int64_t i = spec.first_visible_block(g, len - 1); i < n_tab; ++i) {
      if (t[i] < 0 || t[i] >= arena.n_blocks(g)) {
        return invalid_argument(
            "forward: sequence 0 reads block {} (entry {}) of group {}, which has {} blocks", t[i],
            i, g, arena.n_blocks(g));
      }
    }
    std::copy(t, t + n_tab, dst);
  }
  kv_len_ = len;
  return ok_status();
}

Status OneRowGraphs::stage(const ForwardBatch& b, const kv::KvArena& arena,
                           const cuda::RowSample* sample, std::span<const int32_t> hist,
                           cudaStream_t st) {
  if (static_cast<int64_t>(hist.size()) > cuda::kMaxDecodeHistory) {
    return invalid_argument("one-row decode: a history window of {} ids", hist.size());
  }
  RINFER_RETURN_IF_ERROR(allocate(arena.spec(), st));
  // The previous step's copy is done (every step ends with a synchronization; one that stopped
  // early may have left it queued).
  RINFER_CUDA_RETURN(cudaStreamSynchronize(st));
  int32_t* p = pinned_;
  RINFER_RETURN_IF_ERROR(write_inputs(b, arena, p));
  p[0] = b.tokens[0];
  p[3] = sample != nullptr ? static_cast<int32_t>(hist.size()) : -1;  // where the id goes
  if (sample != nullptr) {
    std::memcpy(p + off_sample_, sample, sizeof(cuda::RowSample));
    std::copy(hist.begin(), hist.end(), p + off_hist_);
  }
  const size_t n = sample != nullptr ? off_hist_ + hist.size() : off_sample_;
  RINFER_CUDA_RETURN(
      cudaMemcpyAsync(dev_.data(), p, n * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  RINFER_CUDA_RETURN(cudaMemsetAsync(parity_, 0, sizeof(int32_t), st));  // the graph pulls half 0
  return ok_status();
}

Status OneRowGraphs::stage_ahead(const ForwardBatch& b, const kv::KvArena& arena,
                                 const cuda::RowSample& sample, int64_t k, int32_t w) {
  if (dev_.data() == nullptr) return invalid_argument("one-row decode: nothing staged before");
  if (w < 0 || w > cuda::kMaxDecodeHistory || k < 0 || k >= kAheadSteps) {
    return invalid_argument("one-row decode: step {} past a window of {} ids", k, w);
  }
  int32_t* p = pinned_ + static_cast<size_t>(k % 2) * words_;
  RINFER_RETURN_IF_ERROR(write_inputs(b, arena, p));
  p[3] = w + static_cast<int32_t>(k);
  std::memcpy(p + off_sample_, &sample, sizeof(cuda::RowSample));
  return ok_status();
}

Status OneRowGraphs::fed(int64_t k, cudaStream_t st) {
  if (dev_.data() == nullptr) return invalid_argument("one-row decode: nothing staged before");
  RINFER_CUDA_RETURN(cudaEventRecord(fed_[k % 2], st));
  return ok_status();
}

Result<int32_t> OneRowGraphs::wait(int64_t k) {
  RINFER_CUDA_RETURN(cudaEventSynchronize(fed_[k % 2]));
  return pinned_[2 * words_ + static_cast<size_t>(k % 2)];
}

Status OneRowGraphs::launch(const kv::KvArena& arena, bool sampled, const int32_t* ids,
                            const Capture& capture, cudaStream_t st) {
  if (sampled && ids == nullptr) return invalid_argument("one-row decode: sampled, no id");
  if (!captured_.matches(arena) || (sampled && ids != ids_)) {
    drop_graphs();
    captured_.take(arena);
    if (sampled) ids_ = ids;
  }
  size_t level = 0;
  const int64_t bound = graph_bound(kv_len_, n_ctx_, level);
  std::vector<cudaGraphExec_t>& v = graphs_[sampled ? 1 : 0];
  if (v.size() <= level) v.resize(level + 1, nullptr);
  cudaGraphExec_t& exec = v[level];
  if (exec == nullptr) {
    auto g = cuda::capture_graph(st, [&]() -> Status {
      // Words [1, off_hist_): everything but the token and the history.
      RINFER_RETURN_IF_ERROR(cuda::decode_pull(pinned_dev_ + 1, static_cast<int64_t>(words_),
                                               static_cast<int64_t>(off_hist_) - 1,
                                               dev_.as<int32_t>() + 1, parity_, st));
      RINFER_RETURN_IF_ERROR(capture(in_, bound, sampled));
      if (!sampled) return ok_status();
      return cuda::decode_feed(ids_, in_.token, const_cast<int32_t*>(in_.hist),
                               dev_.as<int32_t>() + 3, pinned_dev_ + 2 * words_, parity_, st);
    });
    if (!g.ok()) return g.status().with_context("capturing the one-row decode graph");
    exec = *g;
  }
  RINFER_CUDA_RETURN(cudaGraphLaunch(exec, st));
  ++replays_;
  return ok_status();
}

}  // namespace rinfer::llama
