// Shared by the tokenizer tests: the goldens made by tests/tools/gen_tokenizer_goldens.py and the
// reference models' tokenizers (loaded once per process).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "formats/gguf.h"
#include "test_util.h"
#include "tokenizer/nfc.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace rinfer::test {

inline const nlohmann::json& goldens(const std::string& file) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    std::ifstream f(test_data_path("tokenizer/" + file), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    it = cache.emplace(file, nlohmann::json::parse(ss.str())).first;
  }
  return it->second;
}

// The reference model's tokenizer, or nullptr when the model is not in the cache.
inline const Tokenizer* reference_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  std::unique_ptr<Tokenizer> tok;
  if (auto path = reference_model(name)) {
    auto file = GgufFile::open(*path);
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    if (file.ok()) {
      auto t = Tokenizer::from_gguf(file.value());
      EXPECT_TRUE(t.ok()) << t.status().to_string();
      if (t.ok()) tok = std::move(t).value();
    }
  }
  return cache.emplace(name, std::move(tok)).first->second.get();
}

// The same LCG text as gen_tokenizer_goldens.py's lcg_text().
inline std::string lcg_text(const nlohmann::json& cases, size_t target_bytes, uint64_t seed) {
  std::string out;
  uint64_t state = seed;
  const uint64_t n = cases.size();
  while (out.size() < target_bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    out += cases[(state >> 33) % n]["text"].get<std::string>();
    out += ((state >> 20) & 1) ? "\n" : " ";
  }
  return out;
}

// What decode(encode(s)) gives back: SentencePiece turns a literal U+2581 into a space; byte-level
// BPE drops the bytes that have no token in the vocabulary (SmolLM2 lacks 21 of them).
inline std::string expected_round_trip(const Tokenizer& tok, std::string_view s) {
  std::string out;
  if (tok.kind() == TokenizerKind::kSentencePiece) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 2;
      } else {
        out += s[i];
      }
    }
    return out;
  }
  // A tokenizer that normalizes gives back the NFC form (Qwen2's).
  std::string nfc_text;
  if (tok.pre_tokenizer() == "qwen2") {
    nfc_text = unicode::nfc(s);
    s = nfc_text;
  }
  bool has[256];
  for (int b = 0; b < 256; ++b) {
    has[b] = tok.find_token(unicode::byte_level_encode(std::string(1, static_cast<char>(b))))
                 .has_value();
  }
  for (char c : s) {
    if (has[static_cast<unsigned char>(c)]) out += c;
  }
  return out;
}

inline std::string fnv1a64(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xFF;
      h *= 0x100000001B3ull;
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace rinfer::test
