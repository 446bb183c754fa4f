#include "models/llama/random_weights.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/memory_plan.h"
#include "formats/gguf_writer.h"

namespace rinfer::llama {

namespace {

// splitmix64: a fast, well-mixed stream for weights nobody reads for their values.
struct Draws {
  uint64_t state;
  float uniform() {  // [-1, 1)
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
};

class Builder {
 public:
  explicit Builder(uint64_t seed) : draws_{seed} {}

  Status matrix(const std::string& name, int64_t n_out, int64_t n_in) {
    std::vector<float> v(static_cast<size_t>(n_out * n_in));
    const float a = 1.0f / std::sqrt(static_cast<float>(n_in));
    for (float& x : v) x = a * draws_.uniform();
    return add(name, {n_out, n_in}, std::move(v));
  }
  Status norm(const std::string& name, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = 1.0f + 0.1f * draws_.uniform();
    return add(name, {n}, std::move(v));
  }
  GgufWriter& writer() { return w_; }

 private:
  Status add(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
    std::string bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    return w_.add_tensor(name, DType::kF32, std::move(shape), std::move(bytes));
  }
  Draws draws_;
  GgufWriter w_;
};

uint64_t f32_image_bytes(const DecoderHParams& hp) {
  const auto e = static_cast<uint64_t>(hp.n_embd);
  const auto q = static_cast<uint64_t>(hp.n_head * hp.head_dim);
  const auto kv = static_cast<uint64_t>(hp.kv_dim());
  const auto ff = static_cast<uint64_t>(hp.n_ff);
  const uint64_t layer = e * (2 * q + 2 * kv) + 3 * e * ff + 2 * e;
  const uint64_t embd = static_cast<uint64_t>(hp.n_vocab) * e * (hp.tied_output ? 1 : 2);
  return 4 * (embd + e + static_cast<uint64_t>(hp.n_layer) * layer);
}

}  // namespace

Result<std::unique_ptr<LlamaModel>> make_random_host_model(const DecoderHParams& hp, DType dtype,
                                                           uint64_t seed, const LoadOptions& opts) {
  // The weights as drawn, then the GGUF image they are copied into.
  if (auto avail = memory_available(Device::cpu()); avail.ok()) {
    MemoryPlan plan;
    plan.items.push_back({fmt::format("the random {} weights as f32, twice (drawn, then laid "
                                      "out as GGUF)",
                                      hp.architecture),
                          2 * f32_image_bytes(hp)});
    plan.hint = "pick a smaller shape, or make the model on a CUDA device";
    RINFER_RETURN_IF_ERROR(check_memory_plan(plan, *avail));
  }
  Builder b(seed);
  GgufWriter& w = b.writer();
  const std::string a = "llama.";
  w.set("general.architecture", GgufWriter::Value::string("llama"));
  w.set("general.name", GgufWriter::Value::string("random weights"));
  w.set(a + "block_count", GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(hp.n_layer)));
  w.set(a + "embedding_length", GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(hp.n_embd)));
  w.set(a + "feed_forward_length",
        GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(hp.n_ff)));
  w.set(a + "attention.head_count",
        GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(hp.n_head)));
  w.set(a + "attention.head_count_kv",
        GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(hp.n_head_kv)));
  w.set(a + "attention.key_length",
        GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(hp.head_dim)));
  w.set(a + "context_length",
        GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(hp.n_ctx_train)));
  w.set(a + "vocab_size", GgufWriter::Value::of<uint32_t>(static_cast<uint32_t>(hp.n_vocab)));
  w.set(a + "attention.layer_norm_rms_epsilon", GgufWriter::Value::of<float>(hp.norm_eps));
  w.set(a + "rope.freq_base", GgufWriter::Value::of<float>(hp.rope.freq_base));

  const int64_t e = hp.n_embd, q = hp.n_head * hp.head_dim, kv = hp.kv_dim();
  RINFER_RETURN_IF_ERROR(b.matrix("token_embd.weight", hp.n_vocab, e));
  RINFER_RETURN_IF_ERROR(b.norm("output_norm.weight", e));
  if (!hp.tied_output) RINFER_RETURN_IF_ERROR(b.matrix("output.weight", hp.n_vocab, e));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = fmt::format("blk.{}.", il);
    RINFER_RETURN_IF_ERROR(b.norm(p + "attn_norm.weight", e));
    RINFER_RETURN_IF_ERROR(b.matrix(p + "attn_q.weight", q, e));
    RINFER_RETURN_IF_ERROR(b.matrix(p + "attn_k.weight", kv, e));
    RINFER_RETURN_IF_ERROR(b.matrix(p + "attn_v.weight", kv, e));
    RINFER_RETURN_IF_ERROR(b.matrix(p + "attn_output.weight", e, q));
    RINFER_RETURN_IF_ERROR(b.norm(p + "ffn_norm.weight", e));
    RINFER_RETURN_IF_ERROR(b.matrix(p + "ffn_gate.weight", hp.n_ff, e));
    RINFER_RETURN_IF_ERROR(b.matrix(p + "ffn_up.weight", hp.n_ff, e));
    RINFER_RETURN_IF_ERROR(b.matrix(p + "ffn_down.weight", e, hp.n_ff));
  }
  RINFER_ASSIGN_OR_RETURN(std::string bytes, w.to_bytes());
  auto file = MappedFile::from_bytes(fmt::format("random:{}", hp.architecture), std::move(bytes));
  RINFER_ASSIGN_OR_RETURN(GgufFile g, GgufFile::parse(std::move(file)));

  LoadOptions o = opts;
  if (!o.weight_format && dtype != DType::kF32) {
    o.weight_format = dtype;
    o.convert_embeddings = true;
  }
  return LlamaModel::load(std::make_shared<const GgufFile>(std::move(g)), o);
}

}  // namespace rinfer::llama
