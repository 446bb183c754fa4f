// The CPU runner of the Llama-family sample: multi-sequence forward batches over a paged host
// KV arena. The projections and the MLP run once over all the batch's rows (the rows of every
// sequence share each weight read); only the attention is per sequence, through
// cpu::paged_attention over each sequence's block table.
#include <cstring>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/quantize_8bit.h"
#include "kv/kv_arena.h"
#include "models/llama/llama_model.h"

namespace rinfer::llama {

namespace {

// Keys and values of the batch's rows are made in scratch, then scattered into their blocks.
class PagedAccess final : public KvAccess {
 public:
  PagedAccess(const LlamaModel& m, ForwardScratch& s, const ForwardBatch& b, kv::KvArena& arena,
              std::span<const int64_t> slots, std::span<const cpu::AttentionSeq> seqs)
      : m_(m), s_(s), b_(b), arena_(arena), slots_(slots), seqs_(seqs) {}

  void new_kv(int64_t /*il*/, float** k, float** v) override {
    *k = s_.k.mutable_data_as<float>();
    *v = s_.v.mutable_data_as<float>();
  }

  Status attend(int64_t il, const float* q, float* attn) override {
    const DecoderHParams& hp = m_.hparams();
    const kv::KvSpec& spec = arena_.spec();
    const int64_t kv_dim = hp.kv_dim(), nt = b_.n_tokens();
    const int32_t g = spec.group_of_layer[static_cast<size_t>(il)];
    auto* k = static_cast<uint8_t*>(arena_.k(il));  // [n_blocks, block_size, row_bytes]
    auto* v = static_cast<uint8_t*>(arena_.v(il));
    const float* k_new = s_.k.data_as<float>();  // [nt, kv_dim]
    const float* v_new = s_.v.data_as<float>();
    const int64_t* slot = slots_.data() + static_cast<int64_t>(g) * nt;  // [nt] rows of the arena
    const auto rb = static_cast<int64_t>(spec.row_bytes());
    const bool i8 = spec.dtype == DType::kI8;
    const int64_t group = spec.i8_group();
    scales_.resize(static_cast<size_t>(kv_dim / group));
    for (int64_t r = 0; r < nt; ++r) {
      if (i8) {  // codes per KV head, then the heads' scales (kv::KvSpec::row_bytes)
        for (const auto& [src, dst] : {std::pair{k_new, k}, std::pair{v_new, v}}) {
          uint8_t* row = dst + slot[r] * rb;
          quantize_rows_int8(src + r * kv_dim, kv_dim / group, group,
                             reinterpret_cast<int8_t*>(row), scales_.data());
          std::memcpy(row + kv_dim, scales_.data(), scales_.size() * 4);
        }
        continue;
      }
      std::memcpy(k + slot[r] * rb, k_new + r * kv_dim, static_cast<size_t>(rb));
      std::memcpy(v + slot[r] * rb, v_new + r * kv_dim, static_cast<size_t>(rb));
    }
    cpu::PagedAttentionShape as;
    as.n_head = hp.n_head;
    as.n_head_kv = hp.n_head_kv;
    as.head_dim = hp.head_dim;
    as.kv_dtype = spec.dtype;
    as.kv_group = i8 ? group : 0;
    as.kv_row_stride = i8 ? rb : kv_dim;
    as.block_size = spec.block_size;
    as.n_blocks = arena_.n_blocks(g);
    as.scale = m_.attention_scale();
    as.window = spec.groups[static_cast<size_t>(g)].window;
    as.causal = b_.mask == MaskKind::kCausal;
    const auto n_seq = static_cast<size_t>(b_.n_seq());
    return cpu::paged_attention(m_.ops(), as, seqs_.subspan(static_cast<size_t>(g) * n_seq, n_seq),
                                q, k, v, attn);
  }

  OpCost attend_cost(int64_t il) const override {
    const DecoderHParams& hp = m_.hparams();
    const kv::KvSpec& spec = arena_.spec();
    const int32_t g = spec.group_of_layer[static_cast<size_t>(il)];
    const auto n_seq = static_cast<size_t>(b_.n_seq());
    shapes_.clear();
    for (const cpu::AttentionSeq& a : seqs_.subspan(static_cast<size_t>(g) * n_seq, n_seq)) {
      shapes_.push_back({a.n_tokens, a.n_kv});
    }
    return attention_cost(shapes_, hp.n_head, hp.n_head_kv, hp.head_dim,
                          b_.mask == MaskKind::kCausal, spec.groups[static_cast<size_t>(g)].window,
                          static_cast<double>(spec.row_bytes()) / static_cast<double>(spec.kv_dim),
                          4);
  }

 private:
  const LlamaModel& m_;
  ForwardScratch& s_;
  const ForwardBatch& b_;
  kv::KvArena& arena_;
  std::span<const int64_t> slots_;           // [n_groups, nt]
  std::span<const cpu::AttentionSeq> seqs_;  // [n_groups, n_seq]
  mutable std::vector<AttentionSeqShape> shapes_;
  std::vector<float> scales_;  // one row's scales (int8 KV: kv_dim / group)
};

class LlamaRunner final : public DecoderRunner {
 public:
  LlamaRunner(const LlamaModel& m, RunnerOptions o, ForwardScratch s)
      : m_(m), opts_(o), scratch_(std::move(s)) {}

  const RunnerOptions& options() const override { return opts_; }
  Device device() const override { return Device::cpu(); }

  Result<std::unique_ptr<kv::KvArena>> create_arena(const kv::KvSpec& spec,
                                                    std::span<const int32_t> n_blocks) override {
    RINFER_RETURN_IF_ERROR(check_spec(spec));
    RINFER_ASSIGN_OR_RETURN(auto a, kv::HostKvArena::create(spec, n_blocks));
    return std::unique_ptr<kv::KvArena>(std::move(a));
  }

  Status forward(const ForwardBatch& b, kv::KvArena& arena, float* logits) override {
    const kv::KvSpec& spec = arena.spec();
    RINFER_RETURN_IF_ERROR(check_spec(spec));
    if (!arena.device().is_cpu()) {
      return invalid_argument("forward: the KV arena lives on {}; this runner is the CPU's",
                              arena.device().to_string());
    }
    RINFER_RETURN_IF_ERROR(
        check_forward_batch(b, spec, m_.hparams().n_embd, opts_.max_tokens, logits));
    if (b.n_seq() > opts_.max_seqs) {
      return invalid_argument("forward: {} sequences, the runner takes at most {}", b.n_seq(),
                              opts_.max_seqs);
    }
    if (b.mask == MaskKind::kBidirectional) {
      for (int32_t g = 0; g < spec.n_groups(); ++g) {
        if (spec.groups[static_cast<size_t>(g)].window != 0) {
          return invalid_argument("forward: a bidirectional mask with a sliding window");
        }
      }
    }
    RINFER_RETURN_IF_ERROR(plan(b, arena));
    PagedAccess kv(m_, scratch_, b, arena, slots_, seqs_);
    // Batch invariance: the rows of one-token sequences (decodes) that lead the batch are each
    // computed as alone, and so is every logits row (alone, a pass asks for one).
    cpu::OpContext ctx = m_.ops();
    int32_t s1 = 0;
    while (s1 < b.n_seq() && b.query_start[static_cast<size_t>(s1) + 1] == s1 + 1) ++s1;
    ctx.single_rows = s1;
    std::optional<HostOpTimer> timer;
    if (b.profile != nullptr) timer.emplace(b.profile);
    OpTimer* t = timer ? &*timer : nullptr;
    RINFER_RETURN_IF_ERROR(m_.run_layers(ctx, scratch_, b.tokens, b.embeddings, b.positions, kv,
                                         b.positions[0], b.cancel, b.taps, t));
    if (b.logit_rows.empty()) return ok_status();
    ctx.single_rows = static_cast<int64_t>(b.logit_rows.size());
    return m_.compute_logits(ctx, scratch_, b.logit_rows, logits, b.taps, t);
  }

 private:
  Status check_spec(const kv::KvSpec& spec) const {
    return check_runner_spec(spec, m_.hparams(), m_.kv_dtype(), "CPU");
  }

  // Every row's arena row per group (checked against the arena), and each group's attention
  // sequences.
  Status plan(const ForwardBatch& b, const kv::KvArena& arena) {
    const kv::KvSpec& spec = arena.spec();
    const int64_t nt = b.n_tokens(), bs = spec.block_size;
    const int32_t n_seq = b.n_seq();
    slots_.resize(static_cast<size_t>(spec.n_groups() * nt));
    seqs_.resize(static_cast<size_t>(spec.n_groups() * n_seq));
    for (int32_t g = 0; g < spec.n_groups(); ++g) {
      for (int32_t s = 0; s < n_seq; ++s) {
        const int32_t q0 = b.query_start[static_cast<size_t>(s)];
        const int32_t q1 = b.query_start[static_cast<size_t>(s) + 1];
        const int32_t* table = b.table(g, s);
        for (int32_t r = q0; r < q1; ++r) {
          const int32_t pos = b.positions[static_cast<size_t>(r)];
          const int32_t blk = table[pos / bs];
          if (blk < 0 || blk >= arena.n_blocks(g)) {
            return invalid_argument(
                "forward: sequence {} writes position {} to block {} of group {} ({} blocks)", s,
                pos, blk, g, arena.n_blocks(g));
          }
          slots_[static_cast<size_t>(g * nt + r)] = static_cast<int64_t>(blk) * bs + pos % bs;
        }
        cpu::AttentionSeq& as = seqs_[static_cast<size_t>(g * n_seq + s)];
        as.q_start = q0;
        as.n_tokens = q1 - q0;
        as.n_kv = b.kv_len[static_cast<size_t>(s)];
        as.block_table = table;
      }
    }
    return ok_status();
  }

  const LlamaModel& m_;
  RunnerOptions opts_;
  ForwardScratch scratch_;
  std::vector<int64_t> slots_;           // [n_groups, n_tokens]
  std::vector<cpu::AttentionSeq> seqs_;  // [n_groups, n_seq]
};

}  // namespace

Result<std::unique_ptr<DecoderRunner>> LlamaModel::create_runner(const RunnerOptions& opts) const {
  if (!opts_.device.is_cpu()) {
    return unsupported("create_runner: this model's weights are on {}", opts_.device.to_string());
  }
  if (opts.max_tokens <= 0 || opts.max_seqs <= 0) {
    return invalid_argument("create_runner: max_tokens {} and max_seqs {} must be positive",
                            opts.max_tokens, opts.max_seqs);
  }
  RINFER_ASSIGN_OR_RETURN(ForwardScratch s, ForwardScratch::create(hp_, opts.max_tokens));
  return std::unique_ptr<DecoderRunner>(new LlamaRunner(*this, opts, std::move(s)));
}

}  // namespace rinfer::llama
