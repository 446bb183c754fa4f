#include "tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/unicode.h"

namespace rinfer::unicode {

namespace {

struct CombiningRange {
  uint32_t first, last, cls;
};
struct Decomposition {
  uint32_t cp, first, second, composes;
};
#include "tokenizer/nfc_tables.inc"

// Hangul syllables (algorithmic, UAX #15 / Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint32_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCombiningClass);
  const auto* it =
      std::upper_bound(std::begin(kCombiningClass), end, cp,
                       [](uint32_t c, const CombiningRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClass)) return 0;
  --it;
  return cp <= it->last ? it->cls : 0;
}

const Decomposition* decomposition(uint32_t cp) {
  const auto* end = std::end(kDecomposition);
  const auto* it = std::lower_bound(std::begin(kDecomposition), end, cp,
                                    [](const Decomposition& d, uint32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = decomposition(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

// The primary composites, by (first, second): built once from the decompositions that compose.
struct Pair {
  uint64_t key;
  uint32_t composite;
};
const std::vector<Pair>& compositions() {
  static const std::vector<Pair> pairs = [] {
    std::vector<Pair> p;
    for (const Decomposition& d : kDecomposition) {
      if (d.composes) p.push_back({(uint64_t{d.first} << 21) | d.second, d.cp});
    }
    std::sort(p.begin(), p.end(), [](const Pair& a, const Pair& b) { return a.key < b.key; });
    return p;
  }();
  return pairs;
}

// The composite of a starter and the next character, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const std::vector<Pair>& p = compositions();
  const uint64_t key = (uint64_t{a} << 21) | b;
  auto it = std::lower_bound(p.begin(), p.end(), key,
                             [](const Pair& x, uint64_t k) { return x.key < k; });
  return it != p.end() && it->key == key ? it->composite : 0;
}

// One valid run of code points: decomposed, ordered, composed, appended to out.
void normalize_run(std::vector<uint32_t>& d, std::string& out) {
  // Canonical ordering: a stable sort of each run of non-starters by class.
  for (size_t i = 1; i < d.size(); ++i) {
    const uint32_t c = combining_class(d[i]);
    if (c == 0) continue;
    size_t j = i;
    while (j > 0 && combining_class(d[j - 1]) > c) {
      std::swap(d[j - 1], d[j]);
      --j;
    }
  }
  // Canonical composition.
  if (!d.empty()) {
    size_t starter = 0, n = 1;
    uint32_t last_class = combining_class(d[0]) == 0 ? 0 : 256;
    bool have_starter = last_class == 0;
    for (size_t i = 1; i < d.size(); ++i) {
      const uint32_t ch = d[i];
      const uint32_t cls = combining_class(ch);
      const uint32_t composite = have_starter ? compose(d[starter], ch) : 0;
      if (composite != 0 && (last_class < cls || last_class == 0)) {
        d[starter] = composite;
        continue;
      }
      if (cls == 0) {
        starter = n;
        have_starter = true;
      }
      last_class = cls;
      d[n++] = ch;
    }
    d.resize(n);
  }
  for (uint32_t cp : d) append_utf8(out, cp);
  d.clear();
}

}  // namespace

bool may_need_nfc(std::string_view s) {
  // U+0300 is 0xCC 0x80 in UTF-8: every code point below it has a lead byte below 0xCC.
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) >= 0xCC; });
}

std::string nfc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::vector<uint32_t> run;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const int32_t cp = decode_utf8(s, i, &len);
    if (cp < 0) {
      normalize_run(run, out);
      out.append(s.substr(i, len));
    } else {
      decompose(static_cast<uint32_t>(cp), run);
    }
    i += len;
  }
  normalize_run(run, out);
  return out;
}

}  // namespace rinfer::unicode
