// BERT's text normalizer and pre-tokenizer (Hugging Face `tokenizers`' BertNormalizer and
// BertPreTokenizer), the first two stages of the WordPiece tokenizer (tokenizer/wordpiece.h).
//
// normalize, in this order (each stage optional, as the tokenizer.json says):
//   clean_text            NUL, U+FFFD and control characters (categories Cc, Cf, Co except tab,
//                         newline and carriage return) are removed; whitespace becomes ' '
//   handle_chinese_chars  each CJK ideograph gets a space on either side
//   strip_accents         canonical decomposition (NFD), then nonspacing marks (Mn) removed
//   lowercase             per character, Unicode's lowercase mapping
// pre_tokenize: split on whitespace (dropped) and around every punctuation character (ASCII
// punctuation, or Unicode categories P*), which each become a word of their own.
//
// Unicode properties come from utf8proc (Debian libutf8proc). The input must be valid UTF-8:
// anything else is an error naming the byte offset.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;
  bool lowercase = true;
};

Result<std::string> bert_normalize(std::string_view text, const BertNormalizerOptions& opts);

// The words of normalized text, as views into it.
std::vector<std::string_view> bert_pre_tokenize(std::string_view normalized);

}  // namespace rinfer
