// The CUDA runner's decode steps replayed from graphs (batch buckets and one-row steps), the
// one-row step kernel by kernel, and the model's runner factory (see llama_cuda_runner.h).
#include "models/llama/cuda/llama_cuda_runner.h"

namespace rinfer::llama {

// The bucket of a decode step that a batch graph runs (cuda_graphs; 2 or more sequences of one
// new token each, every row's logits wanted), else 0.
int32_t LlamaCudaRunner::batch_graph_bucket(const ForwardBatch& b,
                                            std::span<const RowSampling> samples) const {
  if (!m_.opts_.cuda.graphs || b.mask != MaskKind::kCausal || b.n_tokens() != b.n_seq() ||
      b.logit_rows.size() != static_cast<size_t>(b.n_seq()) ||
      (!samples.empty() && samples.size() != b.logit_rows.size())) {
    return 0;
  }
  return BatchGraphs::bucket(b.n_seq(), std::min(opts_.max_tokens, logit_cap_));
}

// b (a decode step) padded to `bucket` sequences of length 1 over block 0, its tables the
// blocks of n_ctx positions wide; the spans point into the pad_ vectors.
const ForwardBatch& LlamaCudaRunner::pad(const ForwardBatch& b, const kv::KvSpec& spec,
                                         int32_t bucket) {
  const auto n = static_cast<size_t>(b.n_seq()), B = static_cast<size_t>(bucket);
  const auto width = static_cast<size_t>(spec.blocks_for(spec.n_ctx));
  const auto G = static_cast<size_t>(spec.n_groups());
  auto fill = [B](std::vector<int32_t>& v, std::span<const int32_t> src, int32_t with) {
    v.assign(src.begin(), src.end());
    v.resize(B, with);
  };
  fill(pad_tokens_, b.tokens, 0);
  fill(pad_positions_, b.positions, 0);
  fill(pad_kv_len_, b.kv_len, 1);
  pad_query_start_.resize(B + 1);
  std::iota(pad_query_start_.begin(), pad_query_start_.end(), 0);
  pad_rows_.resize(B);
  std::iota(pad_rows_.begin(), pad_rows_.end(), 0);
  pad_tables_.assign(G * B * width, 0);
  for (size_t g = 0; g < G; ++g) {
    for (size_t s = 0; s < n; ++s) {
      const auto n_tab = static_cast<size_t>(std::min<int64_t>(
          spec.blocks_for(b.kv_len[s]), std::min<int64_t>(b.table_stride, width)));
      const int32_t* t = b.table(static_cast<int32_t>(g), static_cast<int32_t>(s));
      const auto at = static_cast<std::ptrdiff_t>((g * B + s) * width);
      std::copy(t, t + n_tab, pad_tables_.begin() + at);
    }
  }
  ForwardBatch& p = padded_;
  p = ForwardBatch{};
  p.tokens = pad_tokens_;
  p.positions = pad_positions_;
  p.query_start = pad_query_start_;
  p.kv_len = pad_kv_len_;
  p.block_tables = pad_tables_;
  p.table_stride = static_cast<int32_t>(width);
  p.logit_rows = pad_rows_;
  return p;
}

// A decode step of 2 or more sequences replayed from the graph of its bucket and length bound
// (llama_cuda_graphs.h: BatchGraphs), its inputs staged into the graphs' fixed buffer.
Status LlamaCudaRunner::run_batch_graph(const ForwardBatch& b, kv::KvArena& arena,
                                        std::span<const RowSampling> samples, int32_t bucket,
                                        int64_t max_len) {
  if (b.cancel != nullptr && b.cancel->load()) {
    return Status(StatusCode::kCancelled, "forward: interrupted");
  }
  const kv::KvSpec& spec = arena.spec();
  const ForwardBatch& pb = pad(b, spec, bucket);
  RINFER_RETURN_IF_ERROR(stage(pb, arena, samples, b.n_seq()));
  if (!batch_graphs_) batch_graphs_ = std::make_unique<BatchGraphs>(m_.device_, m_.alloc_);
  RINFER_ASSIGN_OR_RETURN(int32_t * in, batch_graphs_->inputs(layout_.total, stream_));
  RINFER_RETURN_IF_ERROR(upload(in));
  size_t level = 0;
  const int64_t bound = graph_bound(max_len, spec.n_ctx, level);
  const bool sampled = !samples.empty();
  const int64_t before = batch_graphs_->replays();
  RINFER_RETURN_IF_ERROR(batch_graphs_->launch(
      arena, bucket, level, sampled, [&] { return encode(pb, arena, bound, sampled); }, stream_));
  m_.graph_steps_ += batch_graphs_->replays() - before;
  return ok_status();
}

Status LlamaCudaRunner::ensure_one_row_scratch() {
  if (one_row_) return ok_status();
  RINFER_ASSIGN_OR_RETURN(LlamaCudaModel::Scratch s, m_.allocate_scratch());
  one_row_ = std::move(s);
  return ok_status();
}

// The one-row step replayed from a CUDA graph of its length bound (llama_cuda_graphs.h), its
// inputs staged into the graphs' fixed buffers.
Status LlamaCudaRunner::run_one_row_graph(const ForwardBatch& b, kv::KvArena& arena,
                                          std::span<const RowSampling> samples) {
  RINFER_RETURN_IF_ERROR(ensure_one_row_scratch());
  if (!graphs_) graphs_ = std::make_unique<OneRowGraphs>(m_.device_, m_.alloc_);
  std::optional<cuda::RowSample> rs;
  std::span<const int32_t> hist;
  if (!samples.empty()) {
    size_t w = 0;
    RINFER_ASSIGN_OR_RETURN(rs, sample_row(samples[0], 0, w));
    hist = samples[0].history.last(w);
  }
  RINFER_RETURN_IF_ERROR(graphs_->stage(b, arena, rs ? &*rs : nullptr, hist, stream_));
  const OneRowGraphs::Capture capture = one_row_capture(arena);
  const int64_t before = graphs_->replays();
  RINFER_RETURN_IF_ERROR(graphs_->launch(arena, rs.has_value(), ids_dev_, capture, stream_));
  m_.graph_steps_ += graphs_->replays() - before;
  out_logits_ = one_row_->logits;
  return ok_status();
}

// Records the one-row step of `bound` positions over `arena`, reading the graphs' inputs.
OneRowGraphs::Capture LlamaCudaRunner::one_row_capture(kv::KvArena& arena) {
  return [this, &arena](const OneRowGraphs::Inputs& in, int64_t bound, bool sampled) -> Status {
    LlamaCudaModel::Scratch& s = *one_row_;
    const int64_t hd = m_.hp_.head_dim;
    s.tokens = in.token;
    s.positions = in.position;
    LlamaCudaModel::PagedPass pp;
    pp.arena = &arena;
    pp.ap.kv_len = in.kv_len;
    pp.ap.scale =
        m_.hp_.attn_scale > 0 ? m_.hp_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
    pp.n_kv = bound;
    pp.tables = in.tables;
    pp.group_stride = in.table_width;
    pp.workspace = attn_ws_.data();
    pp.workspace_bytes = attn_ws_bytes_;
    m_.paged_ = &pp;
    const Status fs = m_.forward(s);
    m_.paged_ = nullptr;
    RINFER_RETURN_IF_ERROR(fs);
    if (!sampled) return ok_status();
    return cuda::sample_rows(s.logits, 1, m_.hp_.n_vocab, in.sample, in.hist, ids_dev_, stream_);
  };
}

// The same step launched kernel by kernel (cuda_graphs off, or fusion.qkv off: the unfused
// attention reads the slots and work items of the general staging): its attention through
// LlamaCudaModel::PagedPass.
Status LlamaCudaRunner::run_one_row(const ForwardBatch& b, kv::KvArena& arena,
                                    const cuda::PagedAttentionParams& ap,
                                    std::span<const RowSampling> samples) {
  RINFER_RETURN_IF_ERROR(ensure_one_row_scratch());
  LlamaCudaModel::Scratch& s = *one_row_;
  // The pass's token and position come from this runner's staged inputs.
  s.tokens = const_cast<int32_t*>(dev(layout_.tokens));
  s.positions = const_cast<int32_t*>(dev(layout_.positions));
  LlamaCudaModel::PagedPass pp;
  pp.arena = &arena;
  pp.ap = ap;
  pp.n_kv = b.kv_len[0];
  pp.tables = dev(layout_.tables);
  pp.group_stride = static_cast<int64_t>(b.n_seq()) * b.table_stride;
  pp.slots = dev(layout_.slots);
  pp.out = attnb_.as<uint16_t>();
  pp.workspace = attn_ws_.data();
  pp.workspace_bytes = attn_ws_bytes_;
  PassCosts costs;
  if (timer_ != nullptr) {
    costs = pass_costs(m_.hp_, b, arena.spec());
    pp.costs = &costs;
  }
  m_.paged_ = &pp;
  m_.op_timer_ = timer_;
  const Status fs = m_.forward(s);
  m_.paged_ = nullptr;
  m_.op_timer_ = nullptr;
  RINFER_RETURN_IF_ERROR(fs);
  out_logits_ = s.logits;
  if (samples.empty()) return ok_status();
  OpScope op(timer_, "sample", m_.hp_.n_layer, stream_cost(m_.hp_.n_vocab, 1, 4, 1));
  return cuda::sample_rows(s.logits, 1, m_.hp_.n_vocab,
                           reinterpret_cast<const cuda::RowSample*>(dev(layout_.samples)),
                           dev(layout_.hist), ids_dev_, stream_);
}

// Pinned staging of masked rows, and its device copy: [masks | settings | history windows], in
// 4-byte words. Grown only by mask_staging (between passes: every pass ends synchronized).
Status LlamaCudaRunner::reserve_masked(size_t words) {
  if (words <= masked_cap_) return ok_status();
  const size_t cap = std::max(words, 2 * masked_cap_);
  if (masked_pinned_ != nullptr) {
    cuda::pinned_host_allocator().deallocate(masked_pinned_, masked_cap_ * 4);
  }
  masked_pinned_ = nullptr;
  masked_cap_ = 0;
  RINFER_ASSIGN_OR_RETURN(void* p, cuda::pinned_host_allocator().allocate(cap * 4));
  masked_pinned_ = static_cast<uint32_t*>(p);
  masked_cap_ = cap;
  RINFER_ASSIGN_OR_RETURN(masked_dev_,
                          DeviceBuffer::create(cap * 4, m_.device_, stream_, m_.alloc_));
  return ok_status();
}

namespace {
size_t align4(size_t k) { return (k + 3) / 4 * 4; }  // 16-byte starts
// Words of n rows' settings and history windows (at most kMaxDecodeHistory ids a row).
size_t masked_tail_words(size_t n) {
  static_assert(sizeof(cuda::RowSample) % 4 == 0);
  return align4(n * sizeof(cuda::RowSample) / 4) + align4(n * cuda::kMaxDecodeHistory);
}
}  // namespace

uint32_t* LlamaCudaRunner::mask_staging(size_t n_rows) {
  const size_t W = static_cast<size_t>((m_.hp_.n_vocab + 31) / 32);
  if (!reserve_masked(align4(n_rows * W) + masked_tail_words(n_rows)).ok()) return nullptr;
  return masked_pinned_;
}

// The rows of a pass that ran unsampled (its logits at out_logits_), each masked by the tokens
// it may take, then sampled: the masks (written in place by the engine when it took
// mask_staging), the rows' settings and their history windows go up in one copy.
Status LlamaCudaRunner::sample_masked(std::span<const RowSampling> rows) {
  const int64_t V = m_.hp_.n_vocab;
  const auto W = static_cast<size_t>((V + 31) / 32);
  const size_t n = rows.size();
  RINFER_RETURN_IF_ERROR(sample_rows_of(rows, masked_rows_, masked_hist_));
  const size_t samples_at = align4(n * W);
  const size_t hist_at = samples_at + align4(n * sizeof(cuda::RowSample) / 4);
  const size_t total = hist_at + masked_hist_.size();
  if (total > masked_cap_) {
    // The masks are elsewhere (the engine took no staging): grow, then copy them all.
    RINFER_RETURN_IF_ERROR(reserve_masked(total));
  }
  uint32_t* p = masked_pinned_;
  for (size_t i = 0; i < n; ++i) {
    uint32_t* dst = p + i * W;
    if (rows[i].allow == nullptr) {
      std::fill_n(dst, W, 0xFFFFFFFFu);
    } else if (rows[i].allow != dst) {
      std::memcpy(dst, rows[i].allow, W * sizeof(uint32_t));
    }
  }
  std::memcpy(p + samples_at, masked_rows_.data(), n * sizeof(cuda::RowSample));
  std::memcpy(p + hist_at, masked_hist_.data(), masked_hist_.size() * sizeof(int32_t));
  uint32_t* d = masked_dev_.as<uint32_t>();
  RINFER_CUDA_RETURN(
      cudaMemcpyAsync(d, p, total * sizeof(uint32_t), cudaMemcpyHostToDevice, stream_));
  auto* logits = const_cast<float*>(out_logits_);  // this runner's own buffer
  RINFER_RETURN_IF_ERROR(cuda::mask_tokens(logits, static_cast<int64_t>(n), V, d, stream_));
  return cuda::sample_rows(logits, static_cast<int64_t>(n), V,
                           reinterpret_cast<const cuda::RowSample*>(d + samples_at),
                           reinterpret_cast<const int32_t*>(d + hist_at), ids_dev_, stream_);
}

Result<kv::KvSpec> LlamaCudaModel::kv_spec(int64_t n_ctx, int64_t block_size) const {
  RINFER_ASSIGN_OR_RETURN(kv::KvSpec s, DecoderModel::kv_spec(n_ctx, block_size));
  s.dtype = kv_dtype_;
  return s;
}

Result<std::unique_ptr<DecoderRunner>> LlamaCudaModel::create_runner(
    const RunnerOptions& opts) const {
  // The runner queues the model's own kernels on its stream (one-row decode steps run forward()
  // with its paged attention): it drives the model, which this const interface hands over.
  RINFER_ASSIGN_OR_RETURN(auto r,
                          LlamaCudaRunner::create(const_cast<LlamaCudaModel&>(*this), opts));
  return std::unique_ptr<DecoderRunner>(std::move(r));
}

}  // namespace rinfer::llama
