#include "tokenizer/streaming_decoder.h"

#include "tokenizer/unicode.h"

namespace rinfer {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer),
      skip_special_(skip_special),
      strip_space_(tokenizer.add_space_prefix()) {}

std::string StreamingDecoder::push(int32_t id) {
  std::string out;
  if (id < 0 || id >= tokenizer_.vocab_size()) return out;
  const bool control = tokenizer_.is_control(id);
  if (control && skip_special_) return out;
  std::string_view text = tokenizer_.token_text(id);
  if (strip_space_ && !control) {  // the same rule as Tokenizer::decode
    if (!text.empty() && text[0] == ' ') text.remove_prefix(1);
    strip_space_ = false;
  }
  pending_ += text;
  drain(out, false);
  return out;
}

std::string StreamingDecoder::finish() {
  std::string out;
  drain(out, true);
  strip_space_ = tokenizer_.add_space_prefix();
  return out;
}

void StreamingDecoder::drain(std::string& out, bool final) {
  const std::string_view p = pending_;
  const size_t complete = final ? p.size() : unicode::complete_utf8_prefix(p);
  size_t pos = 0;
  while (pos < complete) {
    size_t len;
    if (unicode::decode_utf8(p.substr(0, complete), pos, &len) < 0) {
      out += kReplacement;
      pos += 1;
    } else {
      out.append(p.substr(pos, len));
      pos += len;
    }
  }
  pending_.erase(0, complete);
}

}  // namespace rinfer
