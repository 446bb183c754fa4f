#include "tokenizer/bert_normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace rinfer {

namespace {

// Rust's char::is_whitespace (the Unicode White_Space property), which `tokenizers` uses.
bool is_white_space(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_control(int32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const utf8proc_category_t cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
}

// The CJK Unified Ideographs blocks BERT splits into single characters (BERT's
// _is_chinese_char); Hangul, kana and other scripts are not among them.
bool is_cjk_ideograph(int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_punctuation(int32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
  }
}

// Canonical decomposition of each code point, then the canonical ordering of combining marks.
std::vector<int32_t> nfd(const std::vector<int32_t>& cps) {
  std::vector<int32_t> out;
  out.reserve(cps.size() + cps.size() / 4);
  utf8proc_int32_t buf[32];
  for (int32_t c : cps) {
    int boundclass = UTF8PROC_BOUNDCLASS_START;
    const utf8proc_ssize_t n = utf8proc_decompose_char(c, buf, 32, UTF8PROC_DECOMPOSE, &boundclass);
    if (n <= 0 || n > 32) {
      out.push_back(c);
      continue;
    }
    out.insert(out.end(), buf, buf + n);
  }
  // Stable sort of each run of non-starters by combining class.
  auto ccc = [](int32_t c) { return utf8proc_get_property(c)->combining_class; };
  for (size_t i = 0; i < out.size();) {
    if (ccc(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i),
                     out.begin() + static_cast<std::ptrdiff_t>(j),
                     [&](int32_t a, int32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  return out;
}

}  // namespace

Result<std::string> bert_normalize(std::string_view text, const BertNormalizerOptions& opts) {
  std::vector<int32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 0;
    const int32_t c = unicode::decode_utf8(text, pos, &len);
    if (c < 0) return invalid_argument("the text is not valid UTF-8 at byte {}", pos);
    pos += len;
    if (opts.clean_text) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_white_space(c)) {
        cps.push_back(' ');
        continue;
      }
    }
    if (opts.handle_chinese_chars && is_cjk_ideograph(c)) {
      cps.push_back(' ');
      cps.push_back(c);
      cps.push_back(' ');
      continue;
    }
    cps.push_back(c);
  }
  if (opts.strip_accents) {
    cps = nfd(cps);
    std::erase_if(cps, [](int32_t c) { return utf8proc_category(c) == UTF8PROC_CATEGORY_MN; });
  }
  std::string out;
  out.reserve(text.size() + 8);
  for (int32_t c : cps) {
    if (opts.lowercase) {
      if (c == 0x130) {  // the one full lowercase mapping of two code points: 'İ' -> "i̇"
        out += 'i';
        unicode::append_utf8(out, 0x307);
        continue;
      }
      c = utf8proc_tolower(c);
    }
    unicode::append_utf8(out, static_cast<uint32_t>(c));
  }
  return out;
}

std::vector<std::string_view> bert_pre_tokenize(std::string_view s) {
  std::vector<std::string_view> words;
  size_t start = std::string_view::npos;  // the word being read
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 0;
    const int32_t c = unicode::decode_utf8(s, pos, &len);
    const bool space = c >= 0 && is_white_space(c);
    const bool punct = c >= 0 && is_punctuation(c);
    if (space || punct) {
      if (start != std::string_view::npos) words.push_back(s.substr(start, pos - start));
      start = std::string_view::npos;
      if (punct) words.push_back(s.substr(pos, len));
    } else if (start == std::string_view::npos) {
      start = pos;
    }
    pos += len;
  }
  if (start != std::string_view::npos) words.push_back(s.substr(start));
  return words;
}

}  // namespace rinfer
