#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/token_trie.h"
#include "tokenizer/tokenizer_model.h"

namespace rinfer {

namespace {

// Token texts that end a turn in the usual chat formats (llama.cpp's end-of-generation list).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",  "<end_of_turn>",         "<|endoftext|>", "<|eom_id|>",
    "<EOT>",      "<|return|>", "<|call|>", "<｜end▁of▁sentence｜>", "</s>",          "<eos>",
};

bool is_special_type(TokenType t) { return t == TokenType::kControl || t == TokenType::kUnknown; }

Result<std::optional<int32_t>> gguf_token_id(const GgufFile& file, std::string_view key,
                                             int32_t vocab_size) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return std::optional<int32_t>();
  const auto id = v->as_int();
  if (!id) return data_loss("{}: '{}' is not an integer", file.path(), key);
  // Some converters write -1 (or an id past the vocabulary) for "none".
  if (*id < 0) return std::optional<int32_t>();
  if (*id >= vocab_size) {
    return data_loss("{}: '{}' = {} is outside the vocabulary of {} tokens", file.path(), key, *id,
                     vocab_size);
  }
  return std::optional<int32_t>(static_cast<int32_t>(*id));
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> TokenizerBuilder::build(TokenizerKind kind, std::string pre_name,
                                                           std::unique_ptr<Vocab> vocab,
                                                           std::unique_ptr<TokenizerModel> model) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->kind_ = kind;
  t->pre_name_ = std::move(pre_name);
  // Qwen2's tokenizer.json normalizes to NFC before its pre-tokenizer (llama.cpp does not; the
  // goldens are Hugging Face's).
  t->nfc_ = kind == TokenizerKind::kByteLevelBpe && t->pre_name_ == "qwen2";
  t->specials_ = std::make_unique<TokenTrie>();
  t->special_always_.assign(vocab->pieces.size(), false);
  for (int32_t i = 0; i < vocab->size(); ++i) {
    const TokenType type = vocab->type(i);
    // SentencePiece matches user-defined pieces itself, on the normalized text.
    const bool always = type == TokenType::kUserDefined && kind == TokenizerKind::kByteLevelBpe;
    if (is_special_type(type) || always) t->specials_->add(vocab->pieces[i], i);
    if (always) {
      t->special_always_[i] = true;
      t->has_always_ = true;
    }
  }
  for (int32_t id : {vocab->eos, vocab->eot, vocab->eom}) {
    if (id >= 0) t->eog_ids_.push_back(id);
  }
  for (std::string_view text : kEndOfGenerationTexts) {
    const int32_t id = vocab->piece_ids.find(text);
    if (id >= 0 && is_special_type(vocab->type(id))) t->eog_ids_.push_back(id);
  }
  t->vocab_ = std::move(vocab);
  t->model_ = std::move(model);
  return t;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  const std::string& path = file.path();
  RINFER_ASSIGN_OR_RETURN(std::string_view model_name, file.require_string("tokenizer.ggml.model"));
  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->array_type() != GgufType::kString) {
    return data_loss("{}: 'tokenizer.ggml.tokens' is missing or not an array of strings", path);
  }
  const size_t n = tokens->array_strings().size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return data_loss("{}: 'tokenizer.ggml.tokens' has {} tokens", path, n);
  }
  auto vocab = std::make_unique<Vocab>();
  vocab->pieces.assign(tokens->array_strings().begin(), tokens->array_strings().end());
  vocab->types.assign(n, TokenType::kNormal);
  if (const GgufValue* types = file.find("tokenizer.ggml.token_type"); types != nullptr) {
    auto v = types->to_vector<int32_t>();
    if (!v || v->size() != n) {
      return data_loss("{}: 'tokenizer.ggml.token_type' is not {} integers", path, n);
    }
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = (*v)[i];
      if (t < 0 || t > 6) {
        return data_loss("{}: 'tokenizer.ggml.token_type'[{}] = {} is not a token type (0-6)", path,
                         i, t);
      }
      vocab->types[i] = static_cast<TokenType>(t);
    }
  }
  if (const GgufValue* scores = file.find("tokenizer.ggml.scores"); scores != nullptr) {
    auto v = scores->to_vector<float>();
    if (!v || v->size() != n) {
      return data_loss("{}: 'tokenizer.ggml.scores' is not {} numbers", path, n);
    }
    vocab->scores = std::move(*v);
  }
  const auto vsize = static_cast<int32_t>(n);
  const std::pair<std::string_view, int32_t*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &vocab->bos},
      {"tokenizer.ggml.eos_token_id", &vocab->eos},
      {"tokenizer.ggml.unknown_token_id", &vocab->unk},
      {"tokenizer.ggml.padding_token_id", &vocab->pad},
      {"tokenizer.ggml.eot_token_id", &vocab->eot},
      {"tokenizer.ggml.eom_token_id", &vocab->eom},
  };
  for (const auto& [key, dst] : ids) {
    RINFER_ASSIGN_OR_RETURN(auto id, gguf_token_id(file, key, vsize));
    if (id) *dst = *id;
  }
  const bool spm = model_name == "llama";
  vocab->add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  vocab->add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  vocab->add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  vocab->index_pieces();

  if (model_name == "gpt2") {
    const GgufValue* merges = file.find("tokenizer.ggml.merges");
    if (merges == nullptr || merges->array_type() != GgufType::kString) {
      return data_loss("{}: 'tokenizer.ggml.merges' is missing or not an array of strings", path);
    }
    std::vector<std::pair<std::string_view, std::string_view>> pairs;
    pairs.reserve(merges->array_strings().size());
    for (std::string_view m : merges->array_strings()) {
      const size_t sp = m.find(' ');
      if (sp == std::string_view::npos || sp == 0 || sp + 1 == m.size()) {
        return data_loss("{}: 'tokenizer.ggml.merges'[{}] = '{}' is not 'left right'", path,
                         pairs.size(), m);
      }
      pairs.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    // A missing pre-tokenizer name means GPT-2's (what the original GGUF converters assumed).
    const std::string_view pre_name = file.get_string("tokenizer.ggml.pre").value_or("gpt2");
    auto pre = PreTokenizer::from_name(pre_name);
    if (!pre.ok()) return pre.status().with_context(path);
    std::string canonical = pre.value()->name();
    // Llama-3's tokenizer.json sets ignore_merges (a word that is a token is taken whole).
    const bool ignore_merges = canonical == "llama-bpe";
    // GGUF's unknown_token_id of a BPE model is often reused EOS (SmolLM2: <|endoftext|>), so
    // bytes without a token are dropped, as llama.cpp does.
    auto model = make_bpe_model(*vocab, pairs, std::move(pre).value(), ignore_merges, -1);
    if (!model.ok()) return model.status().with_context(path);
    return TokenizerBuilder::build(TokenizerKind::kByteLevelBpe, std::move(canonical),
                                   std::move(vocab), std::move(model).value());
  }
  if (spm) {
    if (vocab->scores.empty()) {
      return data_loss("{}: SentencePiece ('llama') tokenizer without 'tokenizer.ggml.scores'",
                       path);
    }
    auto model = make_spm_model(*vocab);
    if (!model.ok()) return model.status().with_context(path);
    return TokenizerBuilder::build(TokenizerKind::kSentencePiece, "", std::move(vocab),
                                   std::move(model).value());
  }
  return unsupported("{}: tokenizer model '{}' is not supported (gpt2 and llama are)", path,
                     model_name);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) {
    const std::string json = (fs::path(model_path) / "tokenizer.json").string();
    if (!fs::exists(json, ec))
      return not_found("{}: no tokenizer.json in the directory", model_path);
    return from_hf_json(json);
  }
  if (model_path.size() >= 5 && model_path.ends_with(".json")) return from_hf_json(model_path);
  RINFER_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(model_path));
  return from_gguf(file);
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                               const EncodeOptions& options) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (options.add_special && vocab_->add_bos && vocab_->bos >= 0) out.push_back(vocab_->bos);
  bool starts_text = true;
  if (options.parse_special || has_always_) {
    // Control tokens are parsed outside the plain ranges only: ranges[r] is the first range
    // that does not end before pos, `limit` where the next one starts.
    const std::span<const TextRange> ranges = options.plain_ranges;
    size_t r = 0;
    bool in_plain = false;
    // Inside the user's content no token that could end or open a turn is matched.
    const auto marker = [&](int32_t id) {
      if (is_end_of_generation(id)) return true;
      const std::string_view t = vocab_->text[static_cast<size_t>(id)];
      return std::find(options.markers.begin(), options.markers.end(), t) != options.markers.end();
    };
    const auto accept = [&](int32_t id) {
      if (in_plain) return special_always_[id] && !marker(id);
      return special_always_[id] || options.parse_special;
    };
    size_t frag = 0, pos = 0;
    while (pos < text.size()) {
      if (!specials_->may_start(static_cast<uint8_t>(text[pos]))) {
        ++pos;
        continue;
      }
      while (r < ranges.size() && ranges[r].end <= pos) ++r;
      in_plain = r < ranges.size() && ranges[r].begin <= pos;
      const size_t limit = r < ranges.size() && !in_plain ? ranges[r].begin : text.size();
      auto [id, len] = specials_->longest_match(text, pos, accept);
      if (id >= 0 && !special_always_[id] && pos + len > limit) {
        // A control token that would run into the content: the longest match before it.
        std::tie(id, len) = specials_->longest_match(text.substr(0, limit), pos, accept);
      }
      if (id < 0) {
        ++pos;
        continue;
      }
      if (pos > frag) {
        RINFER_RETURN_IF_ERROR(encode_fragment(text.substr(frag, pos - frag), starts_text, out));
      }
      out.push_back(id);
      starts_text = true;
      pos += len;
      frag = pos;
    }
    if (frag < text.size()) {
      RINFER_RETURN_IF_ERROR(encode_fragment(text.substr(frag), starts_text, out));
    }
  } else if (!text.empty()) {
    RINFER_RETURN_IF_ERROR(encode_fragment(text, starts_text, out));
  }
  if (options.add_special && vocab_->add_eos && vocab_->eos >= 0) out.push_back(vocab_->eos);
  return out;
}

Status Tokenizer::encode_fragment(std::string_view frag, bool& starts_text,
                                  std::vector<int32_t>& out) const {
  if (nfc_ && unicode::may_need_nfc(frag)) {
    return model_->encode_fragment(unicode::nfc(frag), starts_text, out);
  }
  return model_->encode_fragment(frag, starts_text, out);
}

Status Tokenizer::check_ids(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_->size()) {
      return out_of_range("token id {} (at position {}) is outside the vocabulary [0, {})", ids[i],
                          i, vocab_->size());
    }
  }
  return ok_status();
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  RINFER_RETURN_IF_ERROR(check_ids(ids));
  std::string out;
  bool strip_space = kind_ == TokenizerKind::kSentencePiece && vocab_->add_space_prefix;
  for (int32_t id : ids) {
    const bool control = is_control(id);
    if (control && skip_special) continue;
    std::string_view text = vocab_->text[id];
    if (strip_space && !control) {
      if (!text.empty() && text[0] == ' ') text.remove_prefix(1);
      strip_space = false;
    }
    out += text;
  }
  return out;
}

std::string_view Tokenizer::piece(int32_t id) const {
  return id >= 0 && id < vocab_->size() ? std::string_view(vocab_->pieces[id]) : "";
}
std::string_view Tokenizer::token_text(int32_t id) const {
  return id >= 0 && id < vocab_->size() ? std::string_view(vocab_->text[id]) : "";
}
std::optional<int32_t> Tokenizer::find_token(std::string_view piece) const {
  const int32_t id = vocab_->piece_ids.find(piece);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}
int32_t Tokenizer::vocab_size() const { return vocab_->size(); }
int32_t Tokenizer::bos() const { return vocab_->bos; }
int32_t Tokenizer::eos() const { return vocab_->eos; }
int32_t Tokenizer::unk() const { return vocab_->unk; }
int32_t Tokenizer::pad() const { return vocab_->pad; }
bool Tokenizer::add_bos() const { return vocab_->add_bos && vocab_->bos >= 0; }
bool Tokenizer::add_eos() const { return vocab_->add_eos && vocab_->eos >= 0; }
bool Tokenizer::add_space_prefix() const {
  return kind_ == TokenizerKind::kSentencePiece && vocab_->add_space_prefix;
}
TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < vocab_->size() ? vocab_->type(id) : TokenType::kUndefined;
}
bool Tokenizer::is_control(int32_t id) const { return is_special_type(token_type(id)); }
bool Tokenizer::is_end_of_generation(int32_t id) const {
  for (int32_t e : eog_ids_) {
    if (e == id) return true;
  }
  return false;
}
std::string Tokenizer::describe() const {
  if (kind_ == TokenizerKind::kSentencePiece) return "SentencePiece BPE";
  return "byte-level BPE (" + pre_name_ + ")";
}
std::string Tokenizer::pre_tokenizer() const { return pre_name_; }

}  // namespace rinfer
