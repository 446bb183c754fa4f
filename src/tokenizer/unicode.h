// UTF-8 helpers and the GPT-2 byte-level alphabet, shared by the tokenizers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rinfer::unicode {

// Decodes the UTF-8 sequence at text[pos]. Returns the code point and sets *len to its byte
// length, or returns -1 with *len = 1 when the bytes there are not a valid, shortest-form UTF-8
// sequence of a Unicode scalar value (overlongs, surrogates, > U+10FFFF, truncated sequences).
int32_t decode_utf8(std::string_view text, size_t pos, size_t* len);

// Appends the UTF-8 encoding of a code point (which must be a scalar value).
void append_utf8(std::string& out, uint32_t cp);

// True when `text` is entirely valid UTF-8; otherwise sets *bad_offset (when given) to the first
// byte that does not start a valid sequence.
bool is_valid_utf8(std::string_view text, size_t* bad_offset = nullptr);

// Length of the longest prefix of `bytes` that ends on a complete UTF-8 sequence boundary, when
// the tail may still be completed by more bytes: returns bytes.size() minus the length of a
// trailing *incomplete but so far valid* multi-byte sequence (0 to 3 bytes held back).
size_t complete_utf8_prefix(std::string_view bytes);

// GPT-2's byte-level alphabet: every byte maps to one printable code point ('Ġ' for a space,
// 'Ċ' for a newline, printable ASCII and Latin-1 to themselves).
struct ByteLevelAlphabet {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_utf8;
  // Inverse: code point -> byte, -1 when the code point is not in the alphabet (all are < 324).
  std::array<int16_t, 324> cp_to_byte{};
};
const ByteLevelAlphabet& byte_level_alphabet();

// Maps a byte-level vocabulary string ("Ġthe") back to the bytes it stands for (" the"). Returns
// false when a character is not in the alphabet (then `out` is unspecified).
bool byte_level_decode(std::string_view piece, std::string& out);
// Maps raw bytes to byte-level characters (" the" -> "Ġthe").
std::string byte_level_encode(std::string_view bytes);

}  // namespace rinfer::unicode
