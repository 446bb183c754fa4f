// Unicode Normalization Form C, as Hugging Face tokenizers' NFC normalizer applies it before
// Qwen2's pre-tokenizer: utf8proc's composition (the library the BERT normalizer uses).
#pragma once

#include <string>
#include <string_view>

namespace rinfer::unicode {

// Whether `s` may change under NFC: it holds a code point at or above U+0300 (every text below
// that, ASCII and Latin-1 included, is in NFC already). A cheap test before nfc().
bool may_need_nfc(std::string_view s);

// The NFC form of `s`. Bytes that are not valid UTF-8 are kept as they are and end a run: each
// valid run between them is normalized on its own.
std::string nfc(std::string_view s);

}  // namespace rinfer::unicode
