#include "models/bert/random_bert.h"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"

namespace rinfer::bert {

namespace {

struct Named {
  std::string name;
  std::vector<int64_t> shape;
  enum { kNormal, kGain, kBias } init;
};

std::vector<Named> tensor_list(const EncoderHParams& hp) {
  const int64_t e = hp.n_embd, f = hp.n_ff;
  std::vector<Named> t = {
      {"embeddings.word_embeddings.weight", {hp.n_vocab, e}, Named::kNormal},
      {"embeddings.position_embeddings.weight", {hp.n_positions, e}, Named::kNormal},
      {"embeddings.token_type_embeddings.weight", {hp.n_token_types, e}, Named::kNormal},
      {"embeddings.LayerNorm.weight", {e}, Named::kGain},
      {"embeddings.LayerNorm.bias", {e}, Named::kBias}};
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = fmt::format("encoder.layer.{}.", il);
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense"}) {
      t.push_back({p + m + ".weight", {e, e}, Named::kNormal});
      t.push_back({p + m + ".bias", {e}, Named::kBias});
    }
    t.push_back({p + "attention.output.LayerNorm.weight", {e}, Named::kGain});
    t.push_back({p + "attention.output.LayerNorm.bias", {e}, Named::kBias});
    t.push_back({p + "intermediate.dense.weight", {f, e}, Named::kNormal});
    t.push_back({p + "intermediate.dense.bias", {f}, Named::kBias});
    t.push_back({p + "output.dense.weight", {e, f}, Named::kNormal});
    t.push_back({p + "output.dense.bias", {e}, Named::kBias});
    t.push_back({p + "output.LayerNorm.weight", {e}, Named::kGain});
    t.push_back({p + "output.LayerNorm.bias", {e}, Named::kBias});
  }
  return t;
}

}  // namespace

std::vector<std::string> random_shape_names() { return {"minilm-l6", "bert-base"}; }

Result<EncoderHParams> random_shape(std::string_view name) {
  EncoderHParams hp;
  hp.architecture = "bert";
  hp.n_vocab = 30522;
  hp.n_positions = 512;
  hp.n_token_types = 2;
  hp.n_head = 12;
  hp.norm_eps = 1e-12f;
  if (name == "minilm-l6") {
    hp.n_layer = 6;
    hp.n_embd = 384;
    hp.n_ff = 1536;
  } else if (name == "bert-base") {
    hp.n_layer = 12;
    hp.n_embd = 768;
    hp.n_ff = 3072;
  } else {
    return invalid_argument("no random BERT shape '{}' (minilm-l6, bert-base)", name);
  }
  return hp;
}

std::shared_ptr<const MappedFile> random_safetensors(const EncoderHParams& hp,
                                                     const std::string& source) {
  const std::vector<Named> list = tensor_list(hp);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const Named& t : list) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + 4 * n}}};
    offset += 4 * n;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  std::string bytes(8 + h.size() + offset, '\0');
  const uint64_t hn = h.size();
  std::memcpy(bytes.data(), &hn, 8);  // little-endian, as x86
  std::memcpy(bytes.data() + 8, h.data(), h.size());
  std::mt19937 rng(22);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::uniform_real_distribution<float> gain(0.9f, 1.1f), bias(-0.02f, 0.02f);
  auto* out = reinterpret_cast<float*>(bytes.data() + 8 + h.size());
  for (const Named& t : list) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    for (uint64_t i = 0; i < n; ++i) {
      *out++ = t.init == Named::kNormal ? normal(rng)
               : t.init == Named::kGain ? gain(rng)
                                        : bias(rng);
    }
  }
  return MappedFile::from_bytes(source, std::move(bytes));
}

std::string synthetic_tokenizer_json(int64_t n_vocab) {
  // BERT's special ids: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) {
    pieces[static_cast<size_t>(i)] = fmt::format("[unused{}]", i);
  }
  pieces[0] = "[PAD]";
  pieces[100] = "[UNK]";
  pieces[101] = "[CLS]";
  pieces[102] = "[SEP]";
  pieces[103] = "[MASK]";
  int64_t id = 104;
  for (int c = 33; c < 127; ++c) {  // printable ASCII (lower case: the normalizer lowers)
    if (c >= 'A' && c <= 'Z') continue;
    pieces[static_cast<size_t>(id++)] = std::string(1, static_cast<char>(c));
    pieces[static_cast<size_t>(id++)] = "##" + std::string(1, static_cast<char>(c));
  }
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int64_t i = 0; i < n_vocab; ++i) vocab[pieces[static_cast<size_t>(i)]] = i;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (int64_t s : {0, 100, 101, 102, 103}) {
    added.push_back({{"id", s}, {"content", pieces[static_cast<size_t>(s)]}, {"special", true}});
  }
  const nlohmann::ordered_json j = {
      {"added_tokens", added},
      {"normalizer", {{"type", "BertNormalizer"}, {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor",
       {{"type", "BertProcessing"}, {"cls", {"[CLS]", 101}}, {"sep", {"[SEP]", 102}}}},
      {"model",
       {{"type", "WordPiece"},
        {"unk_token", "[UNK]"},
        {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", 100},
        {"vocab", vocab}}}};
  return j.dump();
}

}  // namespace rinfer::bert
