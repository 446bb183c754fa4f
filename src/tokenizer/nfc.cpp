#include "tokenizer/nfc.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "tokenizer/unicode.h"

namespace rinfer::unicode {

namespace {

// utf8proc's NFC of one valid UTF-8 run, appended to out.
void nfc_run(std::string_view run, std::string& out) {
  if (run.empty()) return;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    out.append(run);  // cannot happen on valid UTF-8 short of memory: the text as it is
  } else {
    out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  }
  std::free(mapped);
}

}  // namespace

bool may_need_nfc(std::string_view s) {
  // U+0300 is 0xCC 0x80 in UTF-8: every code point below it has a lead byte below 0xCC.
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) >= 0xCC; });
}

std::string nfc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t run = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    if (decode_utf8(s, i, &len) < 0) {
      nfc_run(s.substr(run, i - run), out);
      out.append(s.substr(i, len));
      run = i + len;
    }
    i += len;
  }
  nfc_run(s.substr(run), out);
  return out;
}

}  // namespace rinfer::unicode
