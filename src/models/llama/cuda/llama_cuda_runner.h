// The CUDA runner of the Llama-family sample: multi-sequence forward batches over a paged KV
// arena in device memory (bf16 blocks), with the batch's logit rows sampled on the device.
//
// One pass, every row of the batch together:
//   x = embeddings of the tokens (f32 [nt, n_embd])
//   per layer: hb = rms_norm(x) (bf16) -> qkv GEMM -> (q/k norms) -> RoPE at each row's position
//              -> K/V rows into their arena slots -> paged attention over each sequence's block
//              table (bf16 out) -> Wo GEMM -> (post norm) -> residual + norm -> gate|up GEMM ->
//              GLU (bf16) -> down GEMM -> (post norm)
//   the logit rows gathered, normed, projected (GEMM) -> logits f32 [n_out, n_vocab] on the
//   device -> copied to the host (forward) or sampled there (forward_sampled).
// The GEMMs of passes of up to batch_matvec_rows tokens (strategies.kernels.cuda) over Q4
// weights are the small-batch matvec (each weight byte read once, dequantized in registers);
// the others are cuBLASLt bf16 (quantized weights dequantized per call, see ops_cuda.h), each
// bucket of token counts with the fastest of cuBLASLt's candidates timed on its first pass
// (gemm.cpp). A decode step of one sequence (strategies.kernels.cuda.runner_matvec) runs the
// model's own decode pass instead (LlamaCudaModel::forward: the matvecs of every weight format
// with their fused norms), its attention over this arena (LlamaCudaModel::PagedPass). With
// cuda_graphs, one-sequence steps replay OneRowGraphs and decode steps of 2 or more sequences
// replay the BatchGraphs of their bucket (llama_cuda_graphs.h: this pass, padded). The runner
// queues on the model's stream; the KV arena is llama_cuda_arena.h's. The host inputs of a pass
// (tokens, positions, tables, slots, attention work items, sampling rows) go up in one copy
// from pinned memory.
//
// The class is here; its passes are in llama_cuda_runner.cpp (setup, staging, the graph and
// one-row decode steps) and llama_cuda_encode.cpp (the multi-row pass, kernel by kernel).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "kv/kv_arena.h"
#include "models/llama/cuda/llama_cuda_arena.h"
#include "models/llama/cuda/llama_cuda_graphs.h"
#include "models/llama/cuda/llama_cuda_model_internal.h"
#include "models/llama/cuda/llama_cuda_profile.h"
#include "models/llama/cuda/llama_cuda_taps.h"
#include "ops/cpu/sampler.h"

namespace rinfer::llama {

// At most this many (token x split) rows of split attention partials (bounds the workspace).
inline constexpr int64_t kSplitRows = 4096;
inline constexpr int32_t kMaxSplits = 16;

class LlamaCudaRunner final : public DecoderRunner {
 public:
  static Result<std::unique_ptr<LlamaCudaRunner>> create(LlamaCudaModel& m,
                                                         const RunnerOptions& o) {
    std::unique_ptr<LlamaCudaRunner> r(new LlamaCudaRunner(m, o));
    RINFER_RETURN_IF_ERROR(r->init());
    return r;
  }
  ~LlamaCudaRunner() override {
    if (pinned_ != nullptr) cuda::pinned_host_allocator().deallocate(pinned_, pinned_bytes_);
    if (pinned_ids_ != nullptr) {
      cuda::pinned_host_allocator().deallocate(pinned_ids_, pinned_ids_bytes_);
    }
    if (masked_pinned_ != nullptr) {
      cuda::pinned_host_allocator().deallocate(masked_pinned_, masked_cap_ * 4);
    }
  }

  const RunnerOptions& options() const override { return opts_; }
  Device device() const override { return Device::cuda(m_.device_); }
  int64_t max_logit_rows() const override { return logit_cap_; }

  Result<std::unique_ptr<kv::KvArena>> create_arena(const kv::KvSpec& spec,
                                                    std::span<const int32_t> n_blocks) override {
    RINFER_RETURN_IF_ERROR(check_spec(spec));
    return make_device_arena(spec, n_blocks, m_.device_, stream_);
  }

  Status forward(const ForwardBatch& b, kv::KvArena& arena, float* logits) override {
    RINFER_RETURN_IF_ERROR(run(b, arena, {}));
    if (b.logit_rows.empty()) return ok_status();
    const size_t n = b.logit_rows.size() * static_cast<size_t>(m_.hp_.n_vocab);
    RINFER_CUDA_RETURN(
        cudaMemcpyAsync(logits, out_logits_, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    return cuda_status(cudaStreamSynchronize(stream_), "forward");
  }

  // strategies.device_sampling off: every row goes to the host (the baseline).
  bool masks_on_device() const override { return m_.opts_.cuda.device_sampling; }
  uint32_t* mask_staging(size_t n_rows) override;

  bool samples_on_device(const SamplingParams& sp) const override {
    return m_.opts_.cuda.device_sampling &&
           cuda::decode_sampling_supported(decode_sampling(sp), m_.hp_.n_vocab).ok();
  }

  bool decodes_ahead(const SamplingParams& sp) const override {
    return one_row_graphs(m_.kv_dtype_) && samples_on_device(sp);
  }

  Result<int64_t> decode_ahead(const DecodeAhead& d, kv::KvArena& arena) override {
    if (d.first == nullptr || d.sampling.sampling == nullptr || !d.next || !d.on_token) {
      return invalid_argument("decode_ahead: no first step, sampling settings or callbacks");
    }
    if (!decodes_ahead(*d.sampling.sampling)) {
      return unsupported("decode_ahead: these settings are not run ahead on this runner");
    }
    const ForwardBatch& b0 = *d.first;
    if (!one_row(b0) || arena.device() != device()) {
      return invalid_argument("decode_ahead: the first step is not one row of one sequence on {}",
                              device().to_string());
    }
    RINFER_RETURN_IF_ERROR(check_forward_batch(b0, arena.spec(), m_.hp_.n_embd, opts_.max_tokens,
                                               logits_.as<float>()));
    if (b0.tokens[0] < 0 || b0.tokens[0] >= m_.hp_.n_vocab) {
      return invalid_argument("decode_ahead: token {} is outside the vocabulary [0, {})",
                              b0.tokens[0], m_.hp_.n_vocab);
    }
    RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(m_.device_));
    RINFER_RETURN_IF_ERROR(ensure_one_row_scratch());
    if (!graphs_) graphs_ = std::make_unique<OneRowGraphs>(m_.device_, m_.alloc_);
    size_t w = 0;
    RINFER_ASSIGN_OR_RETURN(cuda::RowSample rs, sample_row(d.sampling, 0, w));
    const auto w32 = static_cast<int32_t>(w);
    const OneRowGraphs::Capture capture = one_row_capture(arena);
    RINFER_RETURN_IF_ERROR(graphs_->stage(b0, arena, &rs, d.sampling.history.last(w), stream_));
    const int64_t before = graphs_->replays();
    Status queued = graphs_->launch(arena, true, ids_dev_, capture, stream_);
    if (queued.ok()) queued = graphs_->fed(0, stream_);
    int64_t handed = 0;
    for (int64_t k = 0; queued.ok(); ++k) {
      // Step k + 1 is queued before step k's id is read.
      const ForwardBatch* nb = nullptr;
      if (k + 1 < OneRowGraphs::kAheadSteps) {
        float u = 0.0f;
        nb = d.next(k + 1, u);
        if (nb != nullptr) {
          rs.uniform = u;
          // The penalties' window: the last repeat_last_n ids, ending with step k's.
          const int64_t end = static_cast<int64_t>(w) + k + 1;
          rs.hist_len = static_cast<int>(
              w == 0 ? 0 : std::min<int64_t>(end, d.sampling.sampling->repeat_last_n));
          rs.hist_off = static_cast<int>(end - rs.hist_len);
          queued = graphs_->stage_ahead(*nb, arena, rs, k + 1, w32);
          if (queued.ok()) queued = graphs_->launch(arena, true, ids_dev_, capture, stream_);
          if (queued.ok()) queued = graphs_->fed(k + 1, stream_);
        }
      }
      auto id = graphs_->wait(k);
      if (!id.ok()) {
        queued = id.status();
        break;
      }
      ++handed;
      if (!d.on_token(k, *id) || nb == nullptr) break;
    }
    // Nothing stays queued on the graphs' inputs (a step queued ahead of the stop).
    const Status drained = cuda_status(cudaStreamSynchronize(stream_), "decode_ahead");
    m_.graph_steps_ += graphs_->replays() - before;
    RINFER_RETURN_IF_ERROR(queued.with_context(fmt::format("decode_ahead, step {}", handed)));
    RINFER_RETURN_IF_ERROR(drained);
    return handed;
  }

  Status forward_sampled(const ForwardBatch& b, kv::KvArena& arena,
                         std::span<const RowSampling> rows, int32_t* ids,
                         const std::function<Status()>& prepare) override {
    if (rows.size() != b.logit_rows.size()) {
      return invalid_argument("forward_sampled: {} sampling rows for {} logit rows", rows.size(),
                              b.logit_rows.size());
    }
    const bool masked = std::any_of(rows.begin(), rows.end(),
                                    [](const RowSampling& r) { return r.allow != nullptr; });
    // Masked rows: the pass runs unsampled, the host fills the masks while it runs, then the
    // rows are masked and sampled (sample_masked).
    RINFER_RETURN_IF_ERROR(run(b, arena, masked ? std::span<const RowSampling>{} : rows));
    if (prepare) {
      if (Status p = prepare(); !p.ok()) {
        (void)cudaStreamSynchronize(stream_);
        return p;
      }
    }
    if (masked) RINFER_RETURN_IF_ERROR(sample_masked(rows));
    if (rows.empty()) return ok_status();
    RINFER_CUDA_RETURN(cudaMemcpyAsync(pinned_ids_, ids_dev_, rows.size() * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, stream_));
    RINFER_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "forward_sampled"));
    std::memcpy(ids, pinned_ids_, rows.size() * sizeof(int32_t));
    return ok_status();
  }

 private:
  LlamaCudaRunner(LlamaCudaModel& m, RunnerOptions o) : m_(m), opts_(o) {}

  static cuda::DecodeSampling decode_sampling(const SamplingParams& sp) {
    return LlamaCudaModel::decode_sampling(sp);
  }

  Status init() {
    const DecoderHParams& hp = m_.hp_;
    if (opts_.max_tokens <= 0 || opts_.max_seqs <= 0) {
      return invalid_argument("create_runner: max_tokens {} and max_seqs {} must be positive",
                              opts_.max_tokens, opts_.max_seqs);
    }
    if (m_.kv_dtype_ != DType::kBF16 && m_.kv_dtype_ != DType::kF32) {
      return unsupported("the CUDA runner's paged attention reads a bf16 or f32 KV cache, not {}",
                         dtype_name(m_.kv_dtype_));
    }
    if (cuda::paged_attention_tokens_per_item(hp.n_head, hp.n_head_kv) <= 0) {
      return unsupported("the CUDA runner takes at most 64 query heads per KV head ({} / {})",
                         hp.n_head, hp.n_head_kv);
    }
    RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(m_.device_));
    stream_ = m_.stream_.get();
    RINFER_ASSIGN_OR_RETURN(lt_, cuda::CublasLt::create(m_.device_));
    lt_.set_autotune(true);  // the batches' token counts vary step by step
    const int64_t T = opts_.max_tokens, S = opts_.max_seqs;
    const int64_t e = hp.n_embd, ff = hp.n_ff, R = std::max(T, S);
    auto get = [&](DeviceBuffer& b, size_t bytes) -> Status {
      RINFER_ASSIGN_OR_RETURN(
          b, DeviceBuffer::create(std::max<size_t>(bytes, 16), m_.device_, stream_, m_.alloc_));
      return ok_status();
    };
    const auto f = [](int64_t n) { return static_cast<size_t>(n) * 4; };
    const auto h = [](int64_t n) { return static_cast<size_t>(n) * 2; };
    RINFER_RETURN_IF_ERROR(get(x_, f(T * e)));
    RINFER_RETURN_IF_ERROR(get(hb_, h(R * e)));
    RINFER_RETURN_IF_ERROR(get(qkv_, f(T * m_.qkv_dim_)));
    RINFER_RETURN_IF_ERROR(get(attnb_, h(T * m_.q_dim_)));
    RINFER_RETURN_IF_ERROR(get(o_, f(R * e)));
    RINFER_RETURN_IF_ERROR(get(gu_, f(T * std::max(2 * ff, m_.qkv_dim_))));
    RINFER_RETURN_IF_ERROR(get(actb_, h(T * ff)));
    // The e4m3 codes and scales of up to kMatvecBatchMaxRows rows (matvec_f8 over f8_e4m3).
    f8_codes_bytes_ =
        static_cast<size_t>(cuda::kMatvecBatchMaxRows * std::max({e, ff, m_.q_dim_}) + 15) / 16 *
        16;
    RINFER_RETURN_IF_ERROR(get(f8_ws_, f8_codes_bytes_ + f(cuda::kMatvecBatchMaxRows)));
    gemm_ws_bytes_ = m_.gemm_ws_bytes_;
    if (gemm_ws_bytes_ > 0) RINFER_RETURN_IF_ERROR(get(gemm_ws_, gemm_ws_bytes_));
    // Split partials for at most kSplitRows (token x split) rows.
    attn_ws_bytes_ = static_cast<size_t>(kSplitRows * hp.n_head * (hp.head_dim + 2)) * 4;
    RINFER_RETURN_IF_ERROR(get(attn_ws_, attn_ws_bytes_));
    logit_cap_ = std::max(S, std::min<int64_t>(T, 256));
    RINFER_RETURN_IF_ERROR(get(logits_, f(logit_cap_ * hp.n_vocab)));
    RINFER_RETURN_IF_ERROR(get(ids_buf_, f(T)));
    ids_dev_ = ids_buf_.as<int32_t>();
    RINFER_ASSIGN_OR_RETURN(void* pi, cuda::pinned_host_allocator().allocate(f(T)));
    pinned_ids_ = static_cast<int32_t*>(pi);
    pinned_ids_bytes_ = f(T);
    return ok_status();
  }

  Status check_spec(const kv::KvSpec& spec) const {
    return check_runner_spec(spec, m_.hparams(), m_.kv_dtype_, "CUDA runner");
  }

  // Offsets (in int32 units) of the host inputs inside the staging buffers.
  struct Layout {
    size_t tokens, positions, query_start, kv_len, tables, slots, work, rows, samples, hist, total;
  };

  // Checks the batch and its blocks and lays out the pass's inputs in pinned memory (upload()
  // copies them). Sequences from n_real on are a graph's padding: their rows store no K/V (slot
  // -1) and their sampling rows are row 0's without a history.
  Status stage(const ForwardBatch& b, const kv::KvArena& arena,
               std::span<const RowSampling> samples, int32_t n_real) {
    // A pass that stopped early (cancelled, or an error) may have left its input copy queued:
    // the pinned staging is rewritten below.
    RINFER_CUDA_RETURN(cudaStreamSynchronize(stream_));
    const kv::KvSpec& spec = arena.spec();
    const DecoderHParams& hp = m_.hp_;
    const int64_t nt = b.n_tokens(), bs = spec.block_size;
    const int32_t n_seq = b.n_seq(), G = spec.n_groups();
    const auto stride = static_cast<size_t>(b.table_stride);
    attn_rows_ =
        cuda::paged_attention_rows(b.query_start, hp.n_head, hp.n_head_kv, hp.head_dim, spec.dtype);
    cuda::paged_attention_work(b.query_start, b.kv_len, hp.n_head, hp.n_head_kv, work_, attn_rows_);
    // Every block a pass reads or writes is in the arena.
    for (int32_t g = 0; g < G; ++g) {
      for (int32_t s = 0; s < n_seq; ++s) {
        const int32_t nq = b.query_start[static_cast<size_t>(s) + 1] - b.query_start[s];
        const int32_t len = b.kv_len[static_cast<size_t>(s)];
        const int64_t first = spec.first_visible_block(g, len - nq);
        const int32_t* t = b.table(g, s);
        for (int64_t i = first; i < spec.blocks_for(len); ++i) {
          if (t[i] < 0 || t[i] >= arena.n_blocks(g)) {
            return invalid_argument(
                "forward: sequence {} reads block {} (entry {}) of group {}, which has {} blocks",
                s, t[i], i, g, arena.n_blocks(g));
          }
        }
      }
    }
    // Sampling rows and their history windows.
    RINFER_RETURN_IF_ERROR(sample_rows_of(samples, rows_, hist_));
    if (!rows_.empty()) {
      cuda::RowSample pad = rows_[0];
      pad.hist_off = 0;
      pad.hist_len = 0;
      rows_.resize(b.logit_rows.size(), pad);
    }
    auto align4 = [](size_t n) { return (n + 3) / 4 * 4; };  // 16-byte starts
    Layout& L = layout_;
    size_t at = 0;
    auto take = [&](size_t n) {
      const size_t off = at;
      at += align4(n);
      return off;
    };
    L.tokens = take(static_cast<size_t>(nt));
    L.positions = take(static_cast<size_t>(nt));
    L.query_start = take(static_cast<size_t>(n_seq) + 1);
    L.kv_len = take(static_cast<size_t>(n_seq));
    L.tables = take(static_cast<size_t>(G) * n_seq * stride);
    L.slots = take(static_cast<size_t>(G) * static_cast<size_t>(nt));
    L.work = take(work_.size());
    L.rows = take(b.logit_rows.size());
    static_assert(sizeof(cuda::RowSample) % 4 == 0);
    L.samples = take(rows_.size() * sizeof(cuda::RowSample) / 4);
    L.hist = take(hist_.size());
    L.total = at;
    RINFER_RETURN_IF_ERROR(reserve(L.total));
    int32_t* p = pinned_;
    std::copy(b.tokens.begin(), b.tokens.end(), p + L.tokens);
    std::copy(b.positions.begin(), b.positions.end(), p + L.positions);
    std::copy(b.query_start.begin(), b.query_start.end(), p + L.query_start);
    std::copy(b.kv_len.begin(), b.kv_len.end(), p + L.kv_len);
    std::copy(b.block_tables.begin(), b.block_tables.end(), p + L.tables);
    std::fill_n(p + L.slots, static_cast<size_t>(G) * static_cast<size_t>(nt), -1);
    for (int32_t g = 0; g < G; ++g) {
      int32_t* slot = p + L.slots + static_cast<size_t>(g) * nt;
      for (int32_t s = 0; s < n_real; ++s) {
        const int32_t* t = b.table(g, s);
        for (int32_t r = b.query_start[static_cast<size_t>(s)];
             r < b.query_start[static_cast<size_t>(s) + 1]; ++r) {
          const int32_t pos = b.positions[static_cast<size_t>(r)];
          slot[r] = static_cast<int32_t>(t[pos / bs] * bs + pos % bs);
        }
      }
    }
    std::copy(work_.begin(), work_.end(), p + L.work);
    std::copy(b.logit_rows.begin(), b.logit_rows.end(), p + L.rows);
    std::memcpy(p + L.samples, rows_.data(), rows_.size() * sizeof(cuda::RowSample));
    std::copy(hist_.begin(), hist_.end(), p + L.hist);
    return ok_status();
  }

  // Queues the staged inputs' copy to dst, the pass's input base from then on.
  Status upload(int32_t* dst) {
    in_ = dst;
    return cuda_status(cudaMemcpyAsync(dst, pinned_, layout_.total * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream_),
                       "staging a pass's inputs");
  }

  // Every row's device sampling settings into `out`, their history windows one after another
  // into `hist`.
  Status sample_rows_of(std::span<const RowSampling> rows, std::vector<cuda::RowSample>& out,
                        std::vector<int32_t>& hist) const {
    out.clear();
    hist.clear();
    for (const RowSampling& r : rows) {
      size_t w = 0;
      RINFER_ASSIGN_OR_RETURN(cuda::RowSample rs,
                              sample_row(r, static_cast<int32_t>(hist.size()), w));
      hist.insert(hist.end(), r.history.end() - static_cast<std::ptrdiff_t>(w), r.history.end());
      out.push_back(rs);
    }
    return ok_status();
  }

  // A row's device sampling settings, its history window (the last w ids) at hist_off.
  Result<cuda::RowSample> sample_row(const RowSampling& r, int32_t hist_off, size_t& w) const {
    const SamplingParams& sp = *r.sampling;
    const bool pen =
        sp.repeat_last_n > 0 && (sp.repeat_penalty != 1.0f || sp.presence_penalty != 0.0f);
    w = pen ? std::min(r.history.size(), static_cast<size_t>(sp.repeat_last_n)) : 0;
    return cuda::row_sample(decode_sampling(sp), m_.hp_.n_vocab, hist_off, static_cast<int32_t>(w),
                            r.uniform);
  }

  // Pinned and device staging of at least n int32 (after the previous pass's copy is done:
  // every pass ends with a synchronization).
  Status reserve(size_t n) {
    if (n <= staged_cap_) return ok_status();
    const size_t cap = std::max(n, 2 * staged_cap_);
    if (pinned_ != nullptr) cuda::pinned_host_allocator().deallocate(pinned_, pinned_bytes_);
    pinned_ = nullptr;
    RINFER_ASSIGN_OR_RETURN(void* p, cuda::pinned_host_allocator().allocate(cap * 4));
    pinned_ = static_cast<int32_t*>(p);
    pinned_bytes_ = cap * 4;
    RINFER_ASSIGN_OR_RETURN(dev_in_, DeviceBuffer::create(cap * 4, m_.device_, stream_, m_.alloc_));
    staged_cap_ = cap;
    return ok_status();
  }

  const int32_t* dev(size_t off) const { return in_ + off; }

  // y[nt, n_out] = x W^T: steps of a few tokens over quantized weights through the small-batch
  // matvec (strategies.kernels.cuda.batch_matvec_rows), the others through cuBLASLt (which
  // reads a 16-bit weight once per pass already: docs/serving.md).
  Status gemm(const DeviceWeight& w, const uint16_t* x, int64_t nt, float* y) {
    if (nt <= m_.opts_.cuda.kernels.batch_matvec_rows && is_quantized(w.dtype) &&
        cuda::matvec_batch_supported(w)) {
      return cuda::matvec_batch(w, x, nt, y, stream_);
    }
    if (w.dtype == DType::kF8E4M3 && nt <= m_.opts_.cuda.kernels.batch_matvec_rows &&
        nt <= cuda::kMatvecBatchMaxRows) {
      // FP8: the rows' e4m3 codes (per-row scales), then the tensor-core matvec.
      auto* q = f8_ws_.as<uint8_t>();
      return cuda::matvec_f8_rows(w, x, DType::kBF16, nt, q,
                                  reinterpret_cast<float*>(q + f8_codes_bytes_), nullptr, y,
                                  stream_);
    }
    return cuda::gemm(lt_, w, x, nt, DType::kF32, y, 0.0f, gemm_ws_.data(), gemm_ws_bytes_,
                      stream_);
  }

  Status run(const ForwardBatch& b, kv::KvArena& arena, std::span<const RowSampling> samples) {
    const DecoderHParams& hp = m_.hp_;
    const kv::KvSpec& spec = arena.spec();
    RINFER_RETURN_IF_ERROR(check_spec(spec));
    if (arena.device() != device()) {
      return invalid_argument("forward: the KV arena lives on {}; this runner is {}'s",
                              arena.device().to_string(), device().to_string());
    }
    RINFER_RETURN_IF_ERROR(
        check_forward_batch(b, spec, hp.n_embd, opts_.max_tokens, logits_.as<float>()));
    out_logits_ = logits_.as<float>();
    if (b.n_seq() > opts_.max_seqs) {
      return invalid_argument("forward: {} sequences, the runner takes at most {}", b.n_seq(),
                              opts_.max_seqs);
    }
    if (static_cast<int64_t>(b.logit_rows.size()) > logit_cap_) {
      return invalid_argument("forward: {} logit rows, the runner holds {}", b.logit_rows.size(),
                              logit_cap_);
    }
    if (!b.embeddings.empty()) {
      return unsupported("forward: input embeddings on the CUDA runner");
    }
    for (int64_t i = 0; i < b.n_tokens(); ++i) {
      const int32_t t = b.tokens[static_cast<size_t>(i)];
      if (t < 0 || t >= hp.n_vocab) {
        return invalid_argument("forward: token {} at row {} is outside the vocabulary [0, {})", t,
                                i, hp.n_vocab);
      }
    }
    RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(m_.device_));
    // A pass with taps runs the multi-row pass eagerly (llama_cuda_taps.h); a profiled one runs
    // eagerly, kernel by kernel (llama_cuda_profile.h).
    const bool plain = b.taps == nullptr && b.profile == nullptr;
    if (plain && one_row(b) && one_row_graphs(spec.dtype)) {
      return run_one_row_graph(b, arena, samples);
    }
    int64_t max_len = 0;
    for (int32_t l : b.kv_len) max_len = std::max<int64_t>(max_len, l);
    const int32_t bucket = plain ? batch_graph_bucket(b, samples) : 0;
    if (bucket > 0) return run_batch_graph(b, arena, samples, bucket, max_len);
    if (b.profile != nullptr) {
      if (!op_timer_) op_timer_ = std::make_unique<CudaOpTimer>();
      RINFER_RETURN_IF_ERROR(op_timer_->start(b.profile, stream_, b.n_tokens()));
      timer_ = op_timer_.get();
    }
    Status ran = [&] {
      {
        OpScope op(timer_, "upload", -1, {});
        RINFER_RETURN_IF_ERROR(stage(b, arena, samples, b.n_seq()));
        RINFER_RETURN_IF_ERROR(upload(dev_in_.as<int32_t>()));
        op.set_cost({static_cast<double>(layout_.total * sizeof(int32_t)), 0});
      }
      return b.taps == nullptr && one_row(b)
                 ? run_one_row(b, arena, attention_params(b, spec, max_len), samples)
                 : encode(b, arena, max_len, !samples.empty());
    }();
    if (timer_ != nullptr) {
      timer_ = nullptr;
      const Status f = op_timer_->finish();
      if (ran.ok()) ran = f;
    }
    return ran;
  }

  // Runs `f` (a Status) as op `name` of layer `il` of the pass being profiled (timer_).
  template <typename F>
  Status timed(std::string_view name, int64_t il, const OpCost& cost, F&& f) {
    OpScope s(timer_, name, il, cost);
    return f();
  }

  // The attention's settings of a staged pass whose longest sequence is at most max_len.
  cuda::PagedAttentionParams attention_params(const ForwardBatch& b, const kv::KvSpec& spec,
                                              int64_t max_len) const {
    const DecoderHParams& hp = m_.hp_;
    const Layout& L = layout_;
    const int64_t nt = b.n_tokens(), hd = hp.head_dim;
    const auto n_work = static_cast<int32_t>(work_.size() / 2);
    const int32_t split_cap = static_cast<int32_t>(std::max<int64_t>(1, kSplitRows / nt));
    int32_t n_splits = cuda::paged_attention_splits(n_work, hp.n_head_kv, max_len, hd,
                                                    std::min(kMaxSplits, split_cap));
    if (cuda::paged_attention_workspace_bytes(nt, hp.n_head, hd, n_splits) > attn_ws_bytes_) {
      n_splits = 1;
    }
    cuda::PagedAttentionParams ap;
    ap.n_tokens = nt;
    ap.n_head = hp.n_head;
    ap.n_head_kv = hp.n_head_kv;
    ap.head_dim = hd;
    ap.q_stride = m_.qkv_dim_;
    ap.out_stride = m_.q_dim_;
    ap.block_size = static_cast<int32_t>(spec.block_size);
    ap.table_stride = b.table_stride;
    ap.causal = b.mask == MaskKind::kCausal;
    ap.scale = m_.hp_.attn_scale > 0 ? m_.hp_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
    ap.n_work = n_work;
    ap.n_splits = n_splits;
    ap.kv_dtype = spec.dtype;
    ap.rows = attn_rows_;
    ap.work = dev(L.work);
    ap.query_start = dev(L.query_start);
    ap.kv_len = dev(L.kv_len);
    return ap;
  }

  // Queues a staged pass's kernels (eagerly, or into a graph being captured: b.cancel is then
  // null); max_len bounds its sequences' lengths (it sets the attention's splits).
  Status encode(const ForwardBatch& b, kv::KvArena& arena, int64_t max_len, bool sampled);

  // The bucket of a decode step that a batch graph runs (cuda_graphs; 2 or more sequences of one
  // new token each, every row's logits wanted), else 0.
  int32_t batch_graph_bucket(const ForwardBatch& b, std::span<const RowSampling> samples) const;

  // b (a decode step) padded to `bucket` sequences of length 1 over block 0, its tables the
  // blocks of n_ctx positions wide; the spans point into the pad_ vectors.
  const ForwardBatch& pad(const ForwardBatch& b, const kv::KvSpec& spec, int32_t bucket);

  // A decode step of 2 or more sequences replayed from the graph of its bucket and length bound
  // (llama_cuda_graphs.h: BatchGraphs), its inputs staged into the graphs' fixed buffer.
  Status sample_masked(std::span<const RowSampling> rows);
  Status reserve_masked(size_t words);
  Status run_batch_graph(const ForwardBatch& b, kv::KvArena& arena,
                         std::span<const RowSampling> samples, int32_t bucket, int64_t max_len);

  // A decode step of one sequence, which runs the model's decode pass (runner_matvec).
  bool one_row(const ForwardBatch& b) const {
    return m_.opts_.cuda.kernels.runner_matvec && b.n_tokens() == 1 && b.n_seq() == 1 &&
           b.logit_rows.size() == 1 && b.mask == MaskKind::kCausal;
  }
  // Whether one-row steps replay CUDA graphs (cuda_graphs, the fused QKV and a KV layout the
  // decode attention with RoPE takes).
  bool one_row_graphs(DType kv_dtype) const {
    cuda::KvLayout kl;
    kl.dtype = kv_dtype;
    kl.head_dim = m_.hp_.head_dim;
    return m_.opts_.cuda.kernels.runner_matvec && m_.opts_.cuda.graphs && m_.opts_.fusion.qkv &&
           cuda::attention_decode_rope_supports(kl);
  }
  Status ensure_one_row_scratch();

  // The one-row step replayed from a CUDA graph of its length bound (llama_cuda_graphs.h), its
  // inputs staged into the graphs' fixed buffers.
  Status run_one_row_graph(const ForwardBatch& b, kv::KvArena& arena,
                           std::span<const RowSampling> samples);

  // Records the one-row step of `bound` positions over `arena`, reading the graphs' inputs.
  OneRowGraphs::Capture one_row_capture(kv::KvArena& arena);

  // The same step launched kernel by kernel (cuda_graphs off, or fusion.qkv off: the unfused
  // attention reads the slots and work items of the general staging): its attention through
  // LlamaCudaModel::PagedPass.
  Status run_one_row(const ForwardBatch& b, kv::KvArena& arena,
                     const cuda::PagedAttentionParams& ap, std::span<const RowSampling> samples);

  // The model's decode kernels and its stream (run_one_row drives its forward pass).
  LlamaCudaModel& m_;
  RunnerOptions opts_;
  cudaStream_t stream_ = nullptr;
  std::optional<LlamaCudaModel::Scratch> one_row_;
  std::unique_ptr<OneRowGraphs> graphs_;
  std::unique_ptr<BatchGraphs> batch_graphs_;
  // A decode step padded to its batch graph's bucket (pad()).
  ForwardBatch padded_;
  std::vector<int32_t> pad_tokens_, pad_positions_, pad_query_start_, pad_kv_len_, pad_tables_,
      pad_rows_;
  const float* out_logits_ = nullptr;  // the last pass's logit rows on the device
  cuda::CublasLt lt_;
  DeviceBuffer x_, hb_, qkv_, attnb_, o_, gu_, actb_, gemm_ws_, attn_ws_, logits_, ids_buf_;
  DeviceBuffer f8_ws_;  // [codes: f8_codes_bytes_ | scales]
  size_t f8_codes_bytes_ = 0;
  size_t gemm_ws_bytes_ = 0, attn_ws_bytes_ = 0;
  int64_t logit_cap_ = 0;
  int32_t* ids_dev_ = nullptr;
  int32_t* pinned_ids_ = nullptr;
  size_t pinned_ids_bytes_ = 0;
  // The pass's host inputs: pinned staging and its device copy.
  int32_t* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  DeviceBuffer dev_in_;
  size_t staged_cap_ = 0;
  const int32_t* in_ = nullptr;  // the pass's inputs on the device: dev_in_, or a graph's
  Layout layout_{};
  std::vector<int32_t> work_, hist_;
  std::vector<float> tap_host_;  // a tap's rows on the host
  std::unique_ptr<CudaOpTimer> op_timer_;
  OpTimer* timer_ = nullptr;  // op_timer_ while a profiled pass runs
  int32_t attn_rows_ = 64;    // the pass's paged attention rows a block (paged_attention_rows)
  std::vector<cuda::RowSample> rows_;
  // Masked rows' settings, history windows and masks: pinned staging and its device copy
  // (sample_masked), capacities in 4-byte words.
  std::vector<cuda::RowSample> masked_rows_;
  std::vector<int32_t> masked_hist_;
  uint32_t* masked_pinned_ = nullptr;
  size_t masked_cap_ = 0;
  DeviceBuffer masked_dev_;
};

}  // namespace rinfer::llama
