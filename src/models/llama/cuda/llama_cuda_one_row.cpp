// CUDA graphs of the engine core's one-sequence decode steps (llama_cuda_one_row.h).
#include "models/llama/cuda/llama_cuda_one_row.h"

#include <algorithm>
#include <cstring>

#include "core/cuda/cuda_check.h"
#include "core/cuda/pinned.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "models/llama/cuda/llama_cuda_model_internal.h"

namespace rinfer::llama {

OneRowGraphs::~OneRowGraphs() {
  drop_graphs();
  if (pinned_ != nullptr) cuda::pinned_host_allocator().deallocate(pinned_, words_ * 4);
}

void OneRowGraphs::drop_graphs() {
  for (auto& v : graphs_) {
    for (cudaGraphExec_t g : v) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    v.clear();
  }
  arena_ = nullptr;
  buffers_.clear();
}

Status OneRowGraphs::allocate(const kv::KvSpec& spec, cudaStream_t st) {
  if (dev_.data() != nullptr && spec.n_ctx == n_ctx_ && spec.block_size == block_size_ &&
      spec.n_groups() == n_groups_) {
    return ok_status();
  }
  drop_graphs();
  RINFER_CUDA_RETURN(cudaStreamSynchronize(st));  // the old inputs may still be read
  if (pinned_ != nullptr) cuda::pinned_host_allocator().deallocate(pinned_, words_ * 4);
  pinned_ = nullptr;
  n_ctx_ = spec.n_ctx;
  block_size_ = spec.block_size;
  n_groups_ = spec.n_groups();
  const int64_t width = spec.blocks_for(spec.n_ctx);
  auto align4 = [](size_t n) { return (n + 3) / 4 * 4; };  // 16-byte starts
  static_assert(sizeof(cuda::RowSample) % 4 == 0);
  off_sample_ = align4(4 + static_cast<size_t>(n_groups_ * width));
  off_hist_ = off_sample_ + align4(sizeof(cuda::RowSample) / 4);
  words_ = off_hist_ + static_cast<size_t>(cuda::kMaxDecodeHistory);
  RINFER_ASSIGN_OR_RETURN(void* p, cuda::pinned_host_allocator().allocate(words_ * 4));
  pinned_ = static_cast<int32_t*>(p);
  std::memset(pinned_, 0, words_ * 4);
  RINFER_ASSIGN_OR_RETURN(dev_, cuda::DeviceBuffer::create(words_ * 4, device_, st, alloc_));
  auto* d = dev_.as<int32_t>();
  in_.token = d;
  in_.position = d + 1;
  in_.kv_len = d + 2;
  in_.tables = d + 4;
  in_.table_width = width;
  in_.sample = reinterpret_cast<const cuda::RowSample*>(d + off_sample_);
  in_.hist = d + off_hist_;
  return ok_status();
}

Status OneRowGraphs::stage(const ForwardBatch& b, const kv::KvArena& arena,
                           const cuda::RowSample* sample, std::span<const int32_t> hist,
                           cudaStream_t st) {
  const kv::KvSpec& spec = arena.spec();
  if (b.n_seq() != 1 || b.n_tokens() != 1) {
    return invalid_argument("one-row decode: {} sequences, {} tokens", b.n_seq(), b.n_tokens());
  }
  if (static_cast<int64_t>(hist.size()) > cuda::kMaxDecodeHistory) {
    return invalid_argument("one-row decode: a history window of {} ids", hist.size());
  }
  RINFER_RETURN_IF_ERROR(allocate(spec, st));
  const int32_t len = b.kv_len[0];
  if (len < 1 || len > n_ctx_) {
    return invalid_argument("one-row decode: length {} outside [1, {}]", len, n_ctx_);
  }
  const int64_t n_tab = spec.blocks_for(len);
  if (n_tab > b.table_stride) {
    return invalid_argument("one-row decode: {} blocks in a table of {}", n_tab, b.table_stride);
  }
  // The previous step's copy is done (every step ends with a synchronization; one that stopped
  // early may have left it queued).
  RINFER_CUDA_RETURN(cudaStreamSynchronize(st));
  int32_t* p = pinned_;
  p[0] = b.tokens[0];
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
  if (sample != nullptr) {
    std::memcpy(p + off_sample_, sample, sizeof(cuda::RowSample));
    std::copy(hist.begin(), hist.end(), p + off_hist_);
  }
  const size_t n = sample != nullptr ? off_hist_ + hist.size() : off_sample_;
  kv_len_ = len;
  RINFER_CUDA_RETURN(
      cudaMemcpyAsync(dev_.data(), p, n * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  return ok_status();
}

void OneRowGraphs::check_arena(const kv::KvArena& arena) {
  const int64_t n_layer = arena.spec().n_layer;
  bool same = arena_ == &arena && buffers_.size() == static_cast<size_t>(2 * n_layer);
  for (int64_t l = 0; same && l < n_layer; ++l) {
    same = buffers_[static_cast<size_t>(2 * l)] == arena.k(l) &&
           buffers_[static_cast<size_t>(2 * l + 1)] == arena.v(l);
  }
  if (same) return;
  drop_graphs();
  arena_ = &arena;
  for (int64_t l = 0; l < n_layer; ++l) {
    buffers_.push_back(arena.k(l));
    buffers_.push_back(arena.v(l));
  }
}

Status OneRowGraphs::launch(const kv::KvArena& arena, bool sampled, const Capture& capture,
                            cudaStream_t st) {
  check_arena(arena);
  size_t level = 0;
  const int64_t bound = graph_bound(kv_len_, n_ctx_, level);
  std::vector<cudaGraphExec_t>& v = graphs_[sampled ? 1 : 0];
  if (v.size() <= level) v.resize(level + 1, nullptr);
  cudaGraphExec_t& exec = v[level];
  if (exec == nullptr) {
    auto g = cuda::capture_graph(st, [&] { return capture(in_, bound, sampled); });
    if (!g.ok()) return g.status().with_context("capturing the one-row decode graph");
    exec = *g;
  }
  RINFER_CUDA_RETURN(cudaGraphLaunch(exec, st));
  return ok_status();
}

}  // namespace rinfer::llama
