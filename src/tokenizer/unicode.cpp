#include "tokenizer/unicode.h"

namespace rinfer::unicode {

int32_t decode_utf8(std::string_view text, size_t pos, size_t* len) {
  *len = 1;
  if (pos >= text.size()) return -1;
  const size_t n = text.size() - pos;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data() + pos);
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return b0;
  size_t need;
  uint32_t cp;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    need = 2, cp = b0 & 0x1Fu, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 3, cp = b0 & 0x0Fu, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 4, cp = b0 & 0x07u, min = 0x10000;
  } else {
    return -1;
  }
  if (n < need) return -1;
  for (size_t i = 1; i < need; ++i) {
    if ((p[i] & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (p[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  *len = need;
  return static_cast<int32_t>(cp);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(std::string_view text, size_t* bad_offset) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len;
    if (decode_utf8(text, pos, &len) < 0) {
      if (bad_offset != nullptr) *bad_offset = pos;
      return false;
    }
    pos += len;
  }
  return true;
}

size_t complete_utf8_prefix(std::string_view bytes) {
  // Look back at most 3 bytes for the start of a multi-byte sequence.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(bytes[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    size_t need = 0;
    if ((b & 0xE0) == 0xC0)
      need = 2;
    else if ((b & 0xF0) == 0xE0)
      need = 3;
    else if ((b & 0xF8) == 0xF0)
      need = 4;
    if (need <= back) return n;  // ASCII, invalid lead, or already complete
    // An incomplete sequence: hold it back only if what is there can still become valid.
    const auto b1 = back >= 2 ? static_cast<unsigned char>(bytes[n - back + 1]) : 0;
    if (back >= 2) {
      // Reject prefixes that can never be valid (overlong/surrogate/out of range second byte).
      if (need == 3 && b == 0xE0 && b1 < 0xA0) return n;
      if (need == 3 && b == 0xED && b1 > 0x9F) return n;
      if (need == 4 && b == 0xF0 && b1 < 0x90) return n;
      if (need == 4 && b == 0xF4 && b1 > 0x8F) return n;
    }
    if (need == 2 && b < 0xC2) return n;
    if (need == 4 && b > 0xF4) return n;
    return n - back;
  }
  return n;
}

namespace {

ByteLevelAlphabet make_alphabet() {
  ByteLevelAlphabet a;
  a.cp_to_byte.fill(-1);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next++;
    a.byte_to_cp[b] = cp;
    append_utf8(a.byte_to_utf8[b], cp);
    a.cp_to_byte[cp] = static_cast<int16_t>(b);
  }
  return a;
}

}  // namespace

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet = make_alphabet();
  return alphabet;
}

bool byte_level_decode(std::string_view piece, std::string& out) {
  const auto& a = byte_level_alphabet();
  out.clear();
  size_t pos = 0;
  while (pos < piece.size()) {
    size_t len;
    const int32_t cp = decode_utf8(piece, pos, &len);
    if (cp < 0 || cp >= static_cast<int32_t>(a.cp_to_byte.size()) || a.cp_to_byte[cp] < 0) {
      return false;
    }
    out += static_cast<char>(a.cp_to_byte[cp]);
    pos += len;
  }
  return true;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& a = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += a.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}

}  // namespace rinfer::unicode
