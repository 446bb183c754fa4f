// The Llama-family forward pass (see llama_model.h for the math).
#include "models/llama/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace rinfer::llama {

namespace {

// x[r, :] += b for n rows of width n.
void add_bias(const cpu::OpContext& ctx, float* x, const Tensor& bias, int64_t n_rows, int64_t n) {
  if (!bias.defined()) return;
  const float* b = bias.data_as<float>();
  for (int64_t r = 0; r < n_rows; ++r) cpu::add(ctx, x + r * n, b, n, x + r * n);
}

// Copies nt rows [nt, kv_dim] into a ring of `rows` rows starting at row r0, wrapping once.
void copy_to_ring(const float* src, int64_t nt, int64_t kv_dim, float* ring, int64_t rows,
                  int64_t r0) {
  const int64_t n1 = std::min(nt, rows - r0);  // rows before the wrap
  std::memcpy(ring + r0 * kv_dim, src, static_cast<size_t>(n1 * kv_dim) * sizeof(float));
  std::memcpy(ring, src + n1 * kv_dim, static_cast<size_t>((nt - n1) * kv_dim) * sizeof(float));
}

}  // namespace

Result<KvCache> LlamaModel::create_cache(int64_t n_ctx) const {
  if (hp_.layer_attn.empty()) return KvCache::create(hp_.n_layer, n_ctx, hp_.kv_dim());
  std::vector<int64_t> windows;
  windows.reserve(hp_.layer_attn.size());
  for (const DecoderHParams::LayerAttn& la : hp_.layer_attn) windows.push_back(la.window);
  return KvCache::create(KvCacheSpec::windowed(windows, n_ctx, hp_.kv_dim(), opts_.max_batch));
}

Status LlamaModel::infer(const DecoderBatch& batch, KvCache& cache, float* logits) {
  RINFER_RETURN_IF_ERROR(check_decoder_batch(batch, cache, logits));
  const auto n = static_cast<int64_t>(batch.tokens.size());
  if (cache.n_layer() != hp_.n_layer || cache.kv_dim() != hp_.kv_dim()) {
    return invalid_argument("infer: KV cache is [{} layers, kv_dim {}], model needs [{}, {}]",
                            cache.n_layer(), cache.kv_dim(), hp_.n_layer, hp_.kv_dim());
  }
  if (cache.backend() != nullptr) {
    return invalid_argument("infer: the KV cache lives on a device; this model runs on the CPU");
  }
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const int64_t w = hp_.layer_attn.empty() ? 0 : hp_.layer_attn[static_cast<size_t>(il)].window;
    if (cache.is_ring(il) && (w == 0 || cache.window(il) != w)) {
      return invalid_argument(
          "infer: KV cache layer {} is a ring of {} rows for window {}, but the layer's window is "
          "{}",
          il, cache.rows(il), cache.window(il), w);
    }
  }
  const int64_t n_past = cache.size();

  // A ring layer's cache limits the chunk (its first token must still see its window).
  const int64_t chunk = std::min(opts_.max_batch, cache.max_chunk());
  size_t out = 0;  // logit rows written so far
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t nc = std::min(chunk, n - c0);
    // This chunk's requested rows, made chunk-relative in a small fixed buffer.
    const size_t first = out;
    while (out < batch.logit_rows.size() && batch.logit_rows[out] < c0 + nc) ++out;
    rows_.assign(batch.logit_rows.begin() + static_cast<std::ptrdiff_t>(first),
                 batch.logit_rows.begin() + static_cast<std::ptrdiff_t>(out));
    for (int32_t& r : rows_) r -= static_cast<int32_t>(c0);
    float* chunk_logits =
        logits == nullptr ? nullptr : logits + static_cast<int64_t>(first) * hp_.n_vocab;
    Status st =
        forward_chunk(batch.tokens.subspan(static_cast<size_t>(c0), static_cast<size_t>(nc)),
                      batch.positions.subspan(static_cast<size_t>(c0), static_cast<size_t>(nc)),
                      rows_, cache, chunk_logits, batch.cancel);
    if (st.ok()) st = cache.commit(nc);
    if (!st.ok()) {
      // A ring may already have overwritten positions before n_past (an earlier chunk of this
      // batch): then nothing is kept.
      if (!cache.truncate(n_past).ok()) {
        cache.clear();
        return st.with_context("the KV cache was cleared");
      }
      return st;
    }
  }
  return ok_status();
}

float LlamaModel::attention_scale() const {
  return hp_.attn_scale > 0 ? hp_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hp_.head_dim));
}

namespace {

// The single-sequence KV cache (kv/kv_cache.h): new keys and values go straight into their
// cache rows; a chunk that would cross a ring's end is made in scratch and copied in two pieces.
class CacheAccess final : public KvAccess {
 public:
  CacheAccess(const LlamaModel& m, ForwardScratch& s, KvCache& cache, int64_t nt)
      : m_(m), s_(s), cache_(cache), nt_(nt), n_past_(cache.size()) {}

  void new_kv(int64_t il, float** k, float** v) override {
    const int64_t kv_dim = m_.hparams().kv_dim();
    const int64_t row0 = cache_.row_of(il, n_past_);
    wraps_ = row0 + nt_ > cache_.rows(il);
    *k = wraps_ ? s_.k.mutable_data_as<float>() : cache_.k(il) + row0 * kv_dim;
    *v = wraps_ ? s_.v.mutable_data_as<float>() : cache_.v(il) + row0 * kv_dim;
  }

  Status attend(int64_t il, const float* q, float* attn) override {
    const DecoderHParams& hp = m_.hparams();
    const int64_t kv_dim = hp.kv_dim(), kv_rows = cache_.rows(il);
    if (wraps_) {
      const int64_t row0 = cache_.row_of(il, n_past_);
      copy_to_ring(s_.k.data_as<float>(), nt_, kv_dim, cache_.k(il), kv_rows, row0);
      copy_to_ring(s_.v.data_as<float>(), nt_, kv_dim, cache_.v(il), kv_rows, row0);
    }
    cpu::AttentionShape as;
    as.n_tokens = nt_;
    as.n_kv = n_past_ + nt_;
    as.n_head = hp.n_head;
    as.n_head_kv = hp.n_head_kv;
    as.head_dim = hp.head_dim;
    as.kv_row_stride = kv_dim;
    as.scale = m_.attention_scale();
    as.window = hp.layer_attn.empty() ? 0 : hp.layer_attn[static_cast<size_t>(il)].window;
    as.kv_rows = cache_.is_ring(il) ? kv_rows : 0;
    return cpu::attention(m_.ops(), as, q, cache_.k(il), cache_.v(il), attn);
  }

 private:
  const LlamaModel& m_;
  ForwardScratch& s_;
  KvCache& cache_;
  int64_t nt_;
  int64_t n_past_;
  bool wraps_ = false;
};

}  // namespace

Status LlamaModel::forward_chunk(std::span<const int32_t> tokens,
                                 std::span<const int32_t> positions, std::span<const int32_t> rows,
                                 KvCache& cache, float* logits, const std::atomic<bool>* cancel) {
  const auto nt = static_cast<int64_t>(tokens.size());
  const int64_t n_past = cache.size();
  // Ring rows about to be overwritten may hold positions a later truncate() would need.
  cache.note_written(n_past + nt);
  CacheAccess kv(*this, scratch_, cache, nt);
  RINFER_RETURN_IF_ERROR(
      run_layers(opts_.cpu.ops, scratch_, tokens, {}, positions, kv, n_past, cancel));
  if (rows.empty()) return ok_status();
  return compute_logits(opts_.cpu.ops, scratch_, rows, logits);
}

Status LlamaModel::run_layers(const cpu::OpContext& ctx, ForwardScratch& s,
                              std::span<const int32_t> tokens, std::span<const float> embeddings,
                              std::span<const int32_t> positions, KvAccess& kv, int64_t pos0,
                              const std::atomic<bool>* cancel) const {
  const auto nt = static_cast<int64_t>(tokens.size());
  const int64_t e = hp_.n_embd, hd = hp_.head_dim, kv_dim = hp_.kv_dim();
  const int64_t q_dim = hp_.n_head * hd, n_ff = hp_.n_ff;
  if (nt > s.rows) {
    return internal_error("forward: {} tokens for scratch of {} rows", nt, s.rows);
  }

  float* x = s.x.mutable_data_as<float>();        // [nt, n_embd]
  float* h = s.h.mutable_data_as<float>();        // [nt, n_embd]
  float* q = s.q.mutable_data_as<float>();        // [nt, n_head, head_dim]
  float* attn = s.attn.mutable_data_as<float>();  // [nt, n_head, head_dim]
  float* gate = s.gate.mutable_data_as<float>();  // [nt, n_ff]
  float* up = s.up.mutable_data_as<float>();      // [nt, n_ff]

  if (embeddings.empty()) {
    RINFER_RETURN_IF_ERROR(cpu::get_rows(tok_embd_, tokens, x));
    if (hp_.embd_scale != 1.0f) {
      for (int64_t i = 0; i < nt * e; ++i) x[i] *= hp_.embd_scale;
    }
  } else {
    std::memcpy(x, embeddings.data(), static_cast<size_t>(nt * e) * sizeof(float));
  }
  if (observer_) observer_(-1, pos0, x, nt, e);

  cpu::RopeParams rope = hp_.rope;
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      return cancelled_error("cancelled before layer {} of {} (position {})", il, hp_.n_layer,
                             pos0);
    }
    const LayerWeights& l = layers_[static_cast<size_t>(il)];
    float* k_new = nullptr;  // [nt, n_head_kv, head_dim]
    float* v_new = nullptr;
    kv.new_kv(il, &k_new, &v_new);

    cpu::rms_norm(ctx, x, l.attn_norm.data_as<float>(), nt, e, hp_.norm_eps, h);
    if (opts_.fusion.qkv) {
      // One pass: h quantized once, the rows of all three matrices split over the pool together.
      const Tensor* ws[] = {&l.wq, &l.wk, &l.wv};
      float* ys[] = {q, k_new, v_new};
      RINFER_RETURN_IF_ERROR(cpu::matmul_multi(ctx, ws, h, nt, ys));
    } else {
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.wq, h, nt, q));
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.wk, h, nt, k_new));
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.wv, h, nt, v_new));
    }
    add_bias(ctx, q, l.bq, nt, q_dim);
    add_bias(ctx, k_new, l.bk, nt, kv_dim);
    add_bias(ctx, v_new, l.bv, nt, kv_dim);
    if (hp_.qk_norm) {  // per head: [nt * n_head, head_dim]
      cpu::rms_norm(ctx, q, l.q_norm.data_as<float>(), nt * hp_.n_head, hd, hp_.norm_eps, q);
      cpu::rms_norm(ctx, k_new, l.k_norm.data_as<float>(), nt * hp_.n_head_kv, hd, hp_.norm_eps,
                    k_new);
    }
    if (!hp_.layer_attn.empty()) {
      const DecoderHParams::LayerAttn& la = hp_.layer_attn[static_cast<size_t>(il)];
      rope.freq_base = la.rope_base;
      rope.freq_scale = la.rope_scale;
    }
    cpu::rope(ctx, q, nt, hp_.n_head, hd, positions, rope);
    cpu::rope(ctx, k_new, nt, hp_.n_head_kv, hd, positions, rope);
    RINFER_RETURN_IF_ERROR(kv.attend(il, q, attn));
    RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.wo, attn, nt, h));  // h: [nt, n_embd]
    if (hp_.post_norms) {
      cpu::rms_norm(ctx, h, l.post_attn_norm.data_as<float>(), nt, e, hp_.norm_eps, h);
    }
    cpu::add(ctx, x, h, nt * e, x);

    cpu::rms_norm(ctx, x, l.ffn_norm.data_as<float>(), nt, e, hp_.norm_eps, h);
    if (opts_.fusion.swiglu) {
      const Tensor* ws[] = {&l.w_gate, &l.w_up};
      float* ys[] = {gate, up};
      RINFER_RETURN_IF_ERROR(cpu::matmul_multi(ctx, ws, h, nt, ys));
    } else {
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.w_gate, h, nt, gate));
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.w_up, h, nt, up));
    }
    if (hp_.gelu_ffn) {
      cpu::geglu_tanh(ctx, gate, up, nt * n_ff, gate);
    } else {
      cpu::swiglu(ctx, gate, up, nt * n_ff, gate);
    }
    RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.w_down, gate, nt, h));
    if (hp_.post_norms) {
      cpu::rms_norm(ctx, h, l.post_ffn_norm.data_as<float>(), nt, e, hp_.norm_eps, h);
    }
    cpu::add(ctx, x, h, nt * e, x);
    if (observer_) observer_(il, pos0, x, nt, e);
  }
  return ok_status();
}

Status LlamaModel::compute_logits(const cpu::OpContext& ctx, ForwardScratch& s,
                                  std::span<const int32_t> rows, float* logits) const {
  const int64_t e = hp_.n_embd;
  float* x = s.x.mutable_data_as<float>();
  float* h = s.h.mutable_data_as<float>();
  // Only the requested rows go through the output norm and the (large) output projection.
  const auto n_out = static_cast<int64_t>(rows.size());
  for (int64_t r = 0; r < n_out; ++r) {
    const int64_t src = rows[static_cast<size_t>(r)];
    if (src != r) std::memcpy(x + r * e, x + src * e, static_cast<size_t>(e) * sizeof(float));
  }
  cpu::rms_norm(ctx, x, output_norm_.data_as<float>(), n_out, e, hp_.norm_eps, h);
  return cpu::matmul(ctx, output_, h, n_out, logits);  // [n_out, n_vocab]
}

}  // namespace rinfer::llama
