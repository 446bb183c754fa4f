#include "tokenizer/wordpiece.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "core/input_file.h"
#include "core/strings.h"
#include "tokenizer/unicode.h"

namespace rinfer {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxTokenizerJsonBytes = size_t{256} << 20;

Status read_normalizer(const json& n, BertNormalizerOptions& o, bool& enabled) {
  if (n.is_null()) {
    enabled = false;
    return ok_status();
  }
  const std::string type = n.value("type", "");
  if (type != "BertNormalizer") {
    return unsupported("normalizer '{}' is not supported (BertNormalizer or none)", type);
  }
  o.clean_text = n.value("clean_text", true);
  o.handle_chinese_chars = n.value("handle_chinese_chars", true);
  o.lowercase = n.value("lowercase", true);
  const json& sa = n.contains("strip_accents") ? n["strip_accents"] : json();
  o.strip_accents = sa.is_boolean() ? sa.get<bool>() : o.lowercase;  // null follows lowercase
  return ok_status();
}

// The [CLS] / [SEP] ids of a TemplateProcessing of BERT's shape, or of a BertProcessing.
Status read_post_processor(const json& p, int32_t& cls, int32_t& sep) {
  const std::string type = p.is_object() ? p.value("type", "") : "";
  if (type == "BertProcessing") {
    cls = p.at("cls").at(1).get<int32_t>();
    sep = p.at("sep").at(1).get<int32_t>();
    return ok_status();
  }
  if (type != "TemplateProcessing") {
    return unsupported(
        "post_processor '{}' is not supported (TemplateProcessing or "
        "BertProcessing of the [CLS] A [SEP] form)",
        type.empty() ? "none" : type);
  }
  auto piece = [](const json& e) -> std::string {
    if (e.contains("SpecialToken"))
      return "special:" + e["SpecialToken"].at("id").get<std::string>();
    return "seq:" + e.at("Sequence").at("id").get<std::string>();
  };
  std::vector<std::string> single;
  for (const json& e : p.at("single")) single.push_back(piece(e));
  if (single.size() != 3 || single[1] != "seq:A" || !single[0].starts_with("special:") ||
      !single[2].starts_with("special:")) {
    return unsupported("post_processor: only the single template [CLS] $A [SEP] is supported");
  }
  const json& st = p.at("special_tokens");
  auto id_of = [&](const std::string& s) -> Result<int32_t> {
    const std::string name = s.substr(8);
    if (!st.contains(name) || st[name].at("ids").size() != 1) {
      return data_loss("post_processor: special token '{}' has no single id", name);
    }
    return st[name]["ids"][0].get<int32_t>();
  };
  RINFER_ASSIGN_OR_RETURN(cls, id_of(single[0]));
  RINFER_ASSIGN_OR_RETURN(sep, id_of(single[2]));
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::load(const std::string& path) {
  std::string file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    file = (std::filesystem::path(path) / "tokenizer.json").string();
  }
  auto text = read_regular_file(file, kMaxTokenizerJsonBytes);
  if (!text.ok()) return text.status().with_context("tokenizer.json");
  return parse(*text, file);
}

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::parse(const std::string& text,
                                                                      const std::string& file) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss("{}: not valid JSON", file);
  std::unique_ptr<WordPieceTokenizer> t(new WordPieceTokenizer());
  try {
    const json& m = j.at("model");
    const std::string type = m.value("type", "");
    if (type != "WordPiece") {
      return unsupported("{}: model type '{}' is not supported here (an encoder needs WordPiece)",
                         file, type.empty() ? "(none)" : type);
    }
    t->prefix_ = m.value("continuing_subword_prefix", "##");
    t->max_word_chars_ = m.value("max_input_chars_per_word", int64_t{100});
    const json& vocab = m.at("vocab");
    if (!vocab.is_object() || vocab.empty())
      return data_loss("{}: model.vocab is not a non-empty map of pieces to ids", file);
    const size_t n = vocab.size();
    t->pieces_.assign(n, std::string());
    std::vector<bool> seen(n, false);
    for (const auto& [piece, idv] : vocab.items()) {
      const auto id = idv.get<int64_t>();
      if (id < 0 || static_cast<size_t>(id) >= n || seen[static_cast<size_t>(id)]) {
        return data_loss(
            "{}: model.vocab: piece {} has id {}, but the {} ids must be 0..{} and "
            "distinct",
            file, rinfer::quoted(piece), id, n, n - 1);
      }
      seen[static_cast<size_t>(id)] = true;
      t->pieces_[static_cast<size_t>(id)] = piece;
      t->ids_.emplace(piece, static_cast<int32_t>(id));
    }
    const std::string unk = m.value("unk_token", "[UNK]");
    t->unk_ = t->find(unk);
    if (t->unk_ < 0)
      return data_loss("{}: the unknown token {} is not in the vocabulary", file,
                       rinfer::quoted(unk));
    Status st = read_normalizer(j.value("normalizer", json()), t->norm_, t->normalize_);
    if (st.ok()) {
      const json& pre = j.value("pre_tokenizer", json());
      if (!pre.is_object() || pre.value("type", "") != "BertPreTokenizer") {
        st = unsupported("pre_tokenizer '{}' is not supported (BertPreTokenizer)",
                         pre.is_object() ? pre.value("type", "") : "none");
      }
    }
    if (st.ok()) st = read_post_processor(j.value("post_processor", json()), t->cls_, t->sep_);
    if (!st.ok()) return st.with_context(file);
    for (const json& a : j.value("added_tokens", json::array())) {
      if (!a.value("special", false)) continue;
      const std::string content = a.at("content").get<std::string>();
      const int32_t id = a.at("id").get<int32_t>();
      if (id < 0 || id >= t->vocab_size() || content.empty()) {
        return data_loss("{}: added token {} has id {} outside the vocabulary", file,
                         rinfer::quoted(content), id);
      }
      t->specials_.emplace_back(content, id);
      if (content == "[PAD]") t->pad_ = id;
    }
    if (const json& pad = j.value("padding", json()); pad.is_object() && pad.contains("pad_id")) {
      t->pad_ = pad["pad_id"].get<int32_t>();
    }
    if (t->pad_ < 0) t->pad_ = 0;
    for (int32_t id : {t->cls_, t->sep_, t->pad_}) {
      if (id < 0 || id >= t->vocab_size()) {
        return data_loss("{}: special token id {} is outside the vocabulary of {}", file, id,
                         t->vocab_size());
      }
    }
  } catch (const json::exception& e) {
    return data_loss("{}: unexpected tokenizer.json structure: {}", file, e.what());
  }
  return t;
}

int32_t WordPieceTokenizer::find(std::string_view piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

std::string_view WordPieceTokenizer::piece(int32_t id) const {
  return id >= 0 && id < vocab_size() ? std::string_view(pieces_[static_cast<size_t>(id)])
                                      : std::string_view();
}

Result<std::string> WordPieceTokenizer::decode(std::span<const int32_t> ids,
                                               bool skip_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      return invalid_argument("token id {} (position {}) is outside the vocabulary of {}", id, i,
                              vocab_size());
    }
    if (skip_special && std::any_of(specials_.begin(), specials_.end(),
                                    [&](const auto& sp) { return sp.second == id; })) {
      continue;
    }
    std::string_view p = pieces_[static_cast<size_t>(id)];
    if (!prefix_.empty() && p.starts_with(prefix_)) {
      p.remove_prefix(prefix_.size());
    } else if (!out.empty()) {
      out += ' ';
    }
    out += p;
  }
  // clean_up_tokenization_spaces, as the tokenizers library applies it.
  static constexpr std::pair<std::string_view, std::string_view> kCleanups[] = {
      {" .", "."},     {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"},   {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kCleanups) {
    for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size())) {
      out.replace(at, from.size(), to);
    }
  }
  return out;
}

std::string WordPieceTokenizer::describe() const {
  return fmt::format("WordPiece, {} pieces{}", pieces_.size(),
                     normalize_ && norm_.lowercase ? ", lowercase" : "");
}

void WordPieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out,
                                     std::string& buf) const {
  // Character boundaries (the word is valid UTF-8: it came out of the normalizer).
  std::vector<size_t> bounds{0};
  for (size_t pos = 0; pos < word.size();) {
    size_t len = 0;
    unicode::decode_utf8(word, pos, &len);
    pos += len;
    bounds.push_back(pos);
  }
  const size_t n_chars = bounds.size() - 1;
  if (static_cast<int64_t>(n_chars) > max_word_chars_) {
    out.push_back(unk_);
    return;
  }
  const size_t first = out.size();
  for (size_t s = 0; s < n_chars;) {
    int32_t id = -1;
    size_t e = n_chars;
    for (; e > s; --e) {
      buf.assign(s > 0 ? prefix_ : std::string());
      buf.append(word.substr(bounds[s], bounds[e] - bounds[s]));
      id = find(buf);
      if (id >= 0) break;
    }
    if (id < 0) {  // a part matches nothing: the whole word is unknown
      out.resize(first);
      out.push_back(unk_);
      return;
    }
    out.push_back(id);
    s = e;
  }
}

Status WordPieceTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized;
  if (normalize_) {
    RINFER_ASSIGN_OR_RETURN(normalized, bert_normalize(text, norm_));
  } else {
    normalized.assign(text);
  }
  std::string buf;
  for (std::string_view w : bert_pre_tokenize(normalized)) encode_word(w, out, buf);
  return ok_status();
}

Result<std::vector<int32_t>> WordPieceTokenizer::encode_pieces(std::string_view text) const {
  size_t bad = 0;
  if (!unicode::is_valid_utf8(text, &bad)) {
    return invalid_argument("the text is not valid UTF-8 at byte {}", bad);
  }
  std::vector<int32_t> out;
  size_t plain = 0;  // start of the text not yet encoded
  for (size_t pos = 0; pos < text.size();) {
    size_t best = 0;
    int32_t best_id = -1;
    for (const auto& [content, id] : specials_) {
      if (content.size() > best && text.substr(pos, content.size()) == content) {
        best = content.size();
        best_id = id;
      }
    }
    if (best == 0) {
      ++pos;
      continue;
    }
    RINFER_RETURN_IF_ERROR(encode_plain(text.substr(plain, pos - plain), out));
    out.push_back(best_id);
    pos += best;
    plain = pos;
  }
  RINFER_RETURN_IF_ERROR(encode_plain(text.substr(plain), out));
  return out;
}

Result<TokenEncoding> WordPieceTokenizer::encode(std::string_view text, int64_t max_length) const {
  if (max_length < 2)
    return invalid_argument("max_length {} leaves no room for [CLS] and [SEP]", max_length);
  RINFER_ASSIGN_OR_RETURN(std::vector<int32_t> pieces, encode_pieces(text));
  TokenEncoding e;
  const auto room = static_cast<size_t>(max_length - 2);
  e.truncated = pieces.size() > room;
  if (e.truncated) pieces.resize(room);
  e.ids.reserve(pieces.size() + 2);
  e.ids.push_back(cls_);
  e.ids.insert(e.ids.end(), pieces.begin(), pieces.end());
  e.ids.push_back(sep_);
  e.type_ids.assign(e.ids.size(), 0);
  return e;
}

Result<TokenEncoding> WordPieceTokenizer::encode_pair(std::string_view a, std::string_view b,
                                                      int64_t max_length) const {
  if (max_length < 3)
    return invalid_argument("max_length {} leaves no room for a pair's [CLS] and two [SEP]",
                            max_length);
  auto pa = encode_pieces(a);
  if (!pa.ok()) return pa.status().with_context("first text");
  auto pb = encode_pieces(b);
  if (!pb.ok()) return pb.status().with_context("second text");
  std::vector<int32_t>& x = *pa;
  std::vector<int32_t>& y = *pb;
  TokenEncoding e;
  const auto room = static_cast<size_t>(max_length - 3);
  if (x.size() + y.size() > room) {  // tokenizers' LongestFirst
    e.truncated = true;
    size_t n1 = x.size(), n2 = y.size();
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    n2 = n1 > room ? n1 : std::max(n1, room - n1);
    if (n1 + n2 > room) {
      n1 = room / 2;
      n2 = n1 + room % 2;
    }
    if (swap) std::swap(n1, n2);
    x.resize(std::min(x.size(), n1));
    y.resize(std::min(y.size(), n2));
  }
  e.ids.push_back(cls_);
  e.ids.insert(e.ids.end(), x.begin(), x.end());
  e.ids.push_back(sep_);
  e.type_ids.assign(e.ids.size(), 0);
  e.ids.insert(e.ids.end(), y.begin(), y.end());
  e.ids.push_back(sep_);
  e.type_ids.resize(e.ids.size(), 1);
  return e;
}

}  // namespace rinfer
