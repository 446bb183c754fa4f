// The BERT forward pass on the CPU: every matrix through the SIMD matmuls (or, with
// cpu.bf16_matmuls, the AMX bf16 matmul) over all rows of the batch at once, bidirectional
// attention per sequence through paged_attention (block size 1, each sequence's own rows; AMX
// attention_bf16 with cpu.bf16_matmuls),
// LayerNorm with the residual fused, the erf GELU with its bias.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "models/bert/bert_model.h"
#include "ops/cpu/attention_bf16.h"

namespace rinfer::bert {

namespace {

class CpuRunner final : public EncoderRunner {
 public:
  CpuRunner(const BertModel& m, const EncoderRunnerOptions& opts) : m_(m), opts_(opts) {}

  Status init() {
    if (opts_.max_rows <= 0 || opts_.max_rows > (int64_t{1} << 20)) {
      return invalid_argument("encoder runner: max_rows {} is out of range [1, 1048576]",
                              opts_.max_rows);
    }
    const EncoderHParams& hp = m_.hparams();
    const auto rows = static_cast<size_t>(opts_.max_rows);
    for (std::vector<float>* v : {&x_, &q_, &k_, &v_, &attn_, &tmp_}) {
      v->resize(rows * static_cast<size_t>(hp.n_embd));
    }
    ff_.resize(rows * static_cast<size_t>(hp.n_ff));
    table_.resize(rows);
    for (size_t i = 0; i < rows; ++i) table_[i] = static_cast<int32_t>(i);
    return ok_status();
  }

  const EncoderRunnerOptions& options() const override { return opts_; }

  Status encode(const EncoderBatch& b, float* hidden) override {
    RINFER_RETURN_IF_ERROR(forward(b));
    std::memcpy(hidden, x_.data(), static_cast<size_t>(b.n_rows() * m_.hparams().n_embd) * 4);
    return ok_status();
  }

  Status embed(const EncoderBatch& b, const PoolingOptions& pooling, float* out) override {
    RINFER_RETURN_IF_ERROR(forward(b));
    cpu::pool_rows(pooling.kind, pooling.normalize, x_.data(), m_.hparams().n_embd,
                   b.slot_starts.first(b.lengths.size()), b.lengths, out);
    if (b.taps != nullptr && b.taps->wants(TapKind::kPooled)) {
      b.taps->record(TapKind::kPooled, static_cast<int32_t>(m_.hparams().n_layer), out, b.n_seqs(),
                     m_.hparams().n_embd);
    }
    return ok_status();
  }

 private:
  Status forward(const EncoderBatch& b);

  const BertModel& m_;
  EncoderRunnerOptions opts_;
  std::vector<float> x_, q_, k_, v_, attn_, tmp_, ff_;
  std::vector<int32_t> table_;  // row r -> r: each sequence's rows are its "blocks" of one
  std::vector<int32_t> ids_, pos_;
  std::vector<cpu::AttentionSeq> seqs_;
};

Status CpuRunner::forward(const EncoderBatch& b) {
  const EncoderHParams& hp = m_.hparams();
  RINFER_RETURN_IF_ERROR(check_encoder_batch(b, hp, opts_.max_rows));
  const BertWeights& w = m_.weights();
  const cpu::OpContext& ctx = m_.load_options().cpu.ops;
  const int64_t n = b.n_rows(), e = hp.n_embd;

  // Embeddings: word + position (within the slot) + token type, then LayerNorm.
  float* x = x_.data();  // [n, e]
  RINFER_RETURN_IF_ERROR(cpu::get_rows(w.word_emb, b.tokens, x));
  pos_.resize(static_cast<size_t>(n));
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    for (int32_t r = b.slot_starts[static_cast<size_t>(s)];
         r < b.slot_starts[static_cast<size_t>(s) + 1]; ++r) {
      pos_[static_cast<size_t>(r)] = r - b.slot_starts[static_cast<size_t>(s)];
    }
  }
  const float* pe = w.pos_emb.data_as<float>();
  const float* te = w.type_emb.data_as<float>();
  for (int64_t r = 0; r < n; ++r) {
    const float* p = pe + int64_t{pos_[static_cast<size_t>(r)]} * e;
    const float* t =
        te + (b.type_ids.empty() ? 0 : int64_t{b.type_ids[static_cast<size_t>(r)]}) * e;
    float* xr = x + r * e;
    for (int64_t i = 0; i < e; ++i) xr[i] += p[i] + t[i];
  }
  cpu::layer_norm(ctx, x, nullptr, w.emb_ln_g.data_as<float>(), w.emb_ln_b.data_as<float>(), n, e,
                  hp.norm_eps, x);
  // The taps (models/taps.h) the caller asked for: rows [n, e] of the batch.
  const auto tap = [&](TapKind kind, int64_t layer, const float* rows) {
    if (b.taps != nullptr && b.taps->wants(kind)) {
      b.taps->record(kind, static_cast<int32_t>(layer), rows, n, e);
    }
  };
  tap(TapKind::kEmbed, -1, x);

  seqs_.clear();
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t start = b.slot_starts[static_cast<size_t>(s)];
    const int32_t len = b.lengths[static_cast<size_t>(s)];
    seqs_.push_back(cpu::AttentionSeq{start, len, len, table_.data() + start});
  }
  cpu::PagedAttentionShape as;
  as.n_head = hp.n_head;
  as.n_head_kv = hp.n_head;
  as.head_dim = hp.head_dim();
  as.kv_row_stride = e;
  as.block_size = 1;
  as.n_blocks = n;
  as.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim()));
  as.causal = false;
  // With the matrices on AMX tiles, attention too (head sizes the tile kernel takes).
  const cpu::EncoderAttentionShape bf16_as{hp.n_head, hp.head_dim(), e, as.scale};
  const bool amx_attention = !w.bf16.empty() && ctx.impl == cpu::Impl::kFast &&
                             hp.head_dim() % 32 == 0 && hp.head_dim() <= 256;
  const bool padded = [&] {
    for (int64_t s = 0; s < b.n_seqs(); ++s) {
      if (b.slot_starts[static_cast<size_t>(s) + 1] - b.slot_starts[static_cast<size_t>(s)] !=
          b.lengths[static_cast<size_t>(s)]) {
        return true;
      }
    }
    return false;
  }();
  // Padding rows get no attention output: they stay zero, so every later op sees finite values.
  if (padded) std::fill(attn_.begin(), attn_.begin() + n * e, 0.0f);

  for (size_t il = 0; il < w.layers.size(); ++il) {
    if (b.cancel != nullptr && b.cancel->load(std::memory_order_relaxed)) {
      return cancelled_error("encode: cancelled before layer {}", il);
    }
    const BertLayer& l = w.layers[il];
    const BertBf16Layer* p = w.bf16.empty() ? nullptr : &w.bf16[il];
    // y [n, n_out] = x [n, n_in] W^T + bias: the AMX tiles with the bias in their epilogue when
    // the model packed its matrices, else the SIMD matmul and add_bias.
    auto mm = [&](const Tensor& f32, const cpu::PackedBf16* packed, const Tensor& bias,
                  const float* in, float* out, int64_t n_out) -> Status {
      if (packed != nullptr)
        return cpu::matmul_bf16(ctx, *packed, in, n, out, bias.data_as<float>());
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, f32, in, n, out));
      cpu::add_bias(ctx, out, bias.data_as<float>(), n, n_out);
      return ok_status();
    };
    if (p != nullptr) {
      RINFER_RETURN_IF_ERROR(mm(l.wq, &p->wq, l.bq, x, q_.data(), e));
      RINFER_RETURN_IF_ERROR(mm(l.wk, &p->wk, l.bk, x, k_.data(), e));
      RINFER_RETURN_IF_ERROR(mm(l.wv, &p->wv, l.bv, x, v_.data(), e));
    } else {
      const Tensor* qkv_w[] = {&l.wq, &l.wk, &l.wv};
      float* qkv_y[] = {q_.data(), k_.data(), v_.data()};
      RINFER_RETURN_IF_ERROR(cpu::matmul_multi(ctx, qkv_w, x, n, qkv_y));
      cpu::add_bias(ctx, q_.data(), l.bq.data_as<float>(), n, e);
      cpu::add_bias(ctx, k_.data(), l.bk.data_as<float>(), n, e);
      cpu::add_bias(ctx, v_.data(), l.bv.data_as<float>(), n, e);
    }
    if (amx_attention) {
      RINFER_RETURN_IF_ERROR(
          cpu::attention_bf16(ctx, bf16_as, seqs_, q_.data(), k_.data(), v_.data(), attn_.data()));
    } else {
      RINFER_RETURN_IF_ERROR(
          cpu::paged_attention(ctx, as, seqs_, q_.data(), k_.data(), v_.data(), attn_.data()));
    }
    RINFER_RETURN_IF_ERROR(
        mm(l.wo, p != nullptr ? &p->wo : nullptr, l.bo, attn_.data(), tmp_.data(), e));
    const auto layer = static_cast<int64_t>(il);
    tap(TapKind::kAttnOut, layer, tmp_.data());
    cpu::layer_norm(ctx, tmp_.data(), x, l.ln1_g.data_as<float>(), l.ln1_b.data_as<float>(), n, e,
                    hp.norm_eps, x);
    tap(TapKind::kMlpNorm, layer, x);
    // The intermediate bias goes with the GELU (one pass).
    if (p != nullptr) {
      RINFER_RETURN_IF_ERROR(cpu::matmul_bf16(ctx, p->w1, x, n, ff_.data()));
    } else {
      RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, l.w1, x, n, ff_.data()));
    }
    cpu::gelu_erf(ctx, ff_.data(), l.b1.data_as<float>(), n, hp.n_ff);
    RINFER_RETURN_IF_ERROR(
        mm(l.w2, p != nullptr ? &p->w2 : nullptr, l.b2, ff_.data(), tmp_.data(), e));
    tap(TapKind::kMlpOut, layer, tmp_.data());
    cpu::layer_norm(ctx, tmp_.data(), x, l.ln2_g.data_as<float>(), l.ln2_b.data_as<float>(), n, e,
                    hp.norm_eps, x);
    tap(TapKind::kBlockOut, layer, x);
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<EncoderRunner>> make_cpu_runner(const BertModel& m,
                                                       const EncoderRunnerOptions& opts) {
  auto r = std::make_unique<CpuRunner>(m, opts);
  RINFER_RETURN_IF_ERROR(r->init());
  return std::unique_ptr<EncoderRunner>(std::move(r));
}

}  // namespace rinfer::bert
