// Tokenizer::from_hf_json: a Hugging Face tokenizer.json with a BPE model.
//
// Supported: byte-level BPE (a ByteLevel pre-tokenizer, alone or in a Sequence with Digits and
// Split(Regex, Isolated) stages; ignore_merges honoured) and SentencePiece-style BPE
// (byte_fallback, normalizer Replace(' ', '▁') with an optional Prepend('▁'), or a Metaspace
// pre-tokenizer), for which the merge ranks become SentencePiece scores (score = -rank of the
// merge that makes the piece), the form GGUF converters write. added_tokens become control
// (special) or user-defined tokens. BOS/EOS ids and add flags come from tokenizer_config.json
// next to the file when there is one. Other models (WordPiece, Unigram) are unsupported.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "core/strings.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_model.h"
#include "tokenizer/unicode.h"

namespace rinfer {

namespace {

using json = nlohmann::json;

std::string regex_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

struct PreSpec {
  std::vector<std::string> patterns;
  bool byte_level = false;
  bool metaspace = false;
  bool metaspace_prefix = false;
};

Status collect_pre(const json& p, PreSpec& spec) {
  if (p.is_null()) return ok_status();
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const auto& sub : p.at("pretokenizers")) RINFER_RETURN_IF_ERROR(collect_pre(sub, spec));
  } else if (type == "ByteLevel") {
    spec.byte_level = true;
    if (p.value("add_prefix_space", false)) {
      return unsupported("ByteLevel pre-tokenizer with add_prefix_space is not supported");
    }
    if (p.value("use_regex", true)) spec.patterns.emplace_back(kGpt2Pattern);
  } else if (type == "Digits") {
    spec.patterns.emplace_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  } else if (type == "Split") {
    if (p.value("behavior", "") != "Isolated" || p.value("invert", false)) {
      return unsupported("Split pre-tokenizer with behavior '{}'{} is not supported",
                         p.value("behavior", ""), p.value("invert", false) ? " (inverted)" : "");
    }
    const json& pat = p.at("pattern");
    if (pat.contains("Regex")) {
      spec.patterns.push_back(pat.at("Regex").get<std::string>());
    } else {
      spec.patterns.push_back(regex_escape(pat.at("String").get<std::string>()));
    }
  } else if (type == "Metaspace") {
    spec.metaspace = true;
    const std::string scheme = p.value("prepend_scheme", "");
    spec.metaspace_prefix = scheme.empty() ? p.value("add_prefix_space", true) : scheme != "never";
  } else {
    return unsupported("pre-tokenizer '{}' is not supported", type);
  }
  return ok_status();
}

std::string name_of(const std::vector<std::string>& patterns) {
  if (patterns == std::vector<std::string>{kGpt2Pattern}) return "gpt2";
  if (patterns == std::vector<std::string>{kDigitPattern, kGpt2Pattern}) return "smollm";
  if (patterns == std::vector<std::string>{kLlama3Pattern}) return "llama-bpe";
  if (patterns == std::vector<std::string>{kQwen2Pattern}) return "qwen2";
  return "custom";
}

// "<s>" or {"content": "<s>", ...} -> the string.
std::optional<std::string> token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return std::nullopt;
}

Result<std::unique_ptr<Tokenizer>> parse_tokenizer_json(const json& j, const json& config) {
  const json& m = j.at("model");
  const std::string model_type = m.value("type", "BPE");
  if (model_type != "BPE")
    return unsupported("model type '{}' is not supported (BPE is)", model_type);
  PreSpec spec;
  RINFER_RETURN_IF_ERROR(collect_pre(j.value("pre_tokenizer", json()), spec));
  if (j.contains("decoder") && j["decoder"].is_object() &&
      j["decoder"].value("type", "") == "ByteLevel") {
    spec.byte_level = true;
  }
  auto vocab = std::make_unique<Vocab>();
  const json& vj = m.at("vocab");
  int64_t max_id = -1;
  for (const auto& [piece, id] : vj.items()) max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  if (j.contains("added_tokens")) {
    for (const auto& t : j["added_tokens"])
      max_id = std::max<int64_t>(max_id, t.at("id").get<int64_t>());
  }
  const size_t entries = vj.size() + (j.contains("added_tokens") ? j["added_tokens"].size() : 0);
  if (max_id < 0 || static_cast<size_t>(max_id) >= entries + 1024) {
    return data_loss("token ids are not dense: the largest is {} for {} tokens", max_id, entries);
  }
  const auto n = static_cast<size_t>(max_id + 1);
  vocab->pieces.assign(n, "");
  vocab->types.assign(n, TokenType::kUndefined);
  for (const auto& [piece, id] : vj.items()) {
    const auto i = id.get<int64_t>();
    if (i < 0) return data_loss("token '{}' has a negative id", piece);
    vocab->pieces[i] = piece;
    vocab->types[i] = TokenType::kNormal;
  }
  if (j.contains("added_tokens")) {
    for (const auto& t : j["added_tokens"]) {
      const auto i = t.at("id").get<int64_t>();
      if (i < 0) return data_loss("added token {} has a negative id", printable(t.dump(), 80));
      vocab->pieces[i] = t.at("content").get<std::string>();
      vocab->types[i] = t.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
    }
  }
  // Merges: "a b" strings or [a, b] arrays.
  std::vector<std::pair<std::string, std::string>> merge_strings;
  for (const auto& mv : m.value("merges", json::array())) {
    if (mv.is_array() && mv.size() == 2) {
      merge_strings.emplace_back(mv[0].get<std::string>(), mv[1].get<std::string>());
    } else if (mv.is_string()) {
      const std::string s = mv.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return data_loss("merge '{}' is not 'left right'", s);
      merge_strings.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      return data_loss("merge {} is neither a string nor a pair", merge_strings.size());
    }
  }
  // Special ids and flags from tokenizer_config.json.
  vocab->index_pieces();
  auto id_of = [&](const char* key) -> int32_t {
    if (!config.is_object() || !config.contains(key)) return -1;
    const auto content = token_content(config[key]);
    return content ? vocab->piece_ids.find(*content) : -1;
  };
  vocab->bos = id_of("bos_token");
  vocab->eos = id_of("eos_token");
  vocab->unk = id_of("unk_token");
  vocab->pad = id_of("pad_token");
  int32_t model_unk = -1;  // the BPE model's own unk_token (null in most byte-level models)
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    model_unk = vocab->piece_ids.find(m["unk_token"].get<std::string>());
    if (vocab->unk < 0) vocab->unk = model_unk;
  }
  const bool spm = !spec.byte_level;
  vocab->add_bos = config.is_object() ? config.value("add_bos_token", spm) : spm;
  vocab->add_eos = config.is_object() ? config.value("add_eos_token", false) : false;

  if (spec.byte_level) {
    std::vector<std::pair<std::string_view, std::string_view>> merges(merge_strings.begin(),
                                                                      merge_strings.end());
    std::string name = name_of(spec.patterns);
    RINFER_ASSIGN_OR_RETURN(auto pre, PreTokenizer::from_patterns(name, spec.patterns));
    RINFER_ASSIGN_OR_RETURN(auto model, make_bpe_model(*vocab, merges, std::move(pre),
                                                       m.value("ignore_merges", false), model_unk));
    return TokenizerBuilder::build(TokenizerKind::kByteLevelBpe, std::move(name), std::move(vocab),
                                   std::move(model));
  }
  // SentencePiece-style: spaces must become '▁' (normalizer or Metaspace).
  const json norm = j.value("normalizer", json());
  const std::string dumped = norm.dump();
  const bool replaces = dumped.find("\"Replace\"") != std::string::npos;
  if (!replaces && !spec.metaspace) {
    return unsupported("a BPE tokenizer.json without ByteLevel or '▁' handling is not supported");
  }
  if (!spec.patterns.empty()) return unsupported("regex pre-tokenizers with SentencePiece BPE");
  vocab->add_space_prefix =
      spec.metaspace ? spec.metaspace_prefix : dumped.find("\"Prepend\"") != std::string::npos;
  vocab->scores.assign(n, -1e9f);
  std::string joined;
  for (size_t r = 0; r < merge_strings.size(); ++r) {
    joined = merge_strings[r].first + merge_strings[r].second;
    const int32_t id = vocab->piece_ids.find(joined);
    if (id >= 0 && vocab->scores[id] == -1e9f) vocab->scores[id] = -static_cast<float>(r);
  }
  for (int32_t i = 0; i < vocab->size(); ++i) {
    const std::string& p = vocab->pieces[i];
    if (p.size() == 6 && p.starts_with("<0x") && p.back() == '>') {
      vocab->types[i] = TokenType::kByte;
    } else if (vocab->types[i] == TokenType::kNormal && vocab->scores[i] == -1e9f) {
      // No merge makes this piece: a multi-character one can never come out of BPE, so it must
      // not be a merge target here either (single characters stay: they are where BPE starts).
      size_t len = 0;
      if (p.empty() || unicode::decode_utf8(p, 0, &len) < 0 || len != p.size()) {
        vocab->types[i] = TokenType::kUnused;
      }
    }
  }
  if (vocab->unk >= 0) vocab->types[vocab->unk] = TokenType::kUnknown;
  RINFER_ASSIGN_OR_RETURN(auto model, make_spm_model(*vocab));
  return TokenizerBuilder::build(TokenizerKind::kSentencePiece, "", std::move(vocab),
                                 std::move(model));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(const std::string& path) {
  // Regular files only: a FIFO, device or directory is refused at once (core/input_file.h).
  auto text = read_regular_file(path);
  if (!text.ok()) return text.status().with_context("tokenizer.json");
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss("{}: not valid JSON", path);
  json config;
  const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {  // optional; when present it must be a file
    auto ctext = read_regular_file(config_path.string());
    if (!ctext.ok()) return ctext.status();
    config = json::parse(*ctext, nullptr, false);
    if (config.is_discarded()) return data_loss("{}: not valid JSON", config_path.string());
  }
  try {
    auto t = parse_tokenizer_json(j, config);
    if (!t.ok()) return t.status().with_context(path);
    return t;
  } catch (const json::exception& e) {
    return data_loss("{}: unexpected tokenizer.json structure: {}", path, e.what());
  }
}

}  // namespace rinfer
