// Small open-addressing hash maps for the tokenizers' hot paths: vocabulary lookups by string and
// merge lookups by token pair. Built once, read-only afterwards (safe to share across threads).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace rinfer {

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  if (n > 0) std::memcpy(&v, p, n);
  h = (h ^ v) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

inline uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  return x ^ (x >> 33);
}

// String -> id over strings owned elsewhere (`keys`, indexed by id; must outlive the map).
class StringIdMap {
 public:
  void reset(const std::vector<std::string>* keys, size_t expected) {
    keys_ = keys;
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  // Adds keys[id]; the first id inserted for a string wins. Returns false when already present.
  bool insert(int32_t id) {
    const std::string& k = (*keys_)[id];
    const uint64_t h = hash_bytes(k.data(), k.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s.id = id;
        s.hash = static_cast<uint32_t>(h >> 32);
        return true;
      }
      if (s.hash == static_cast<uint32_t>(h >> 32) && (*keys_)[s.id] == k) return false;
    }
  }
  // -1 when absent.
  int32_t find(std::string_view k) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(k.data(), k.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == static_cast<uint32_t>(h >> 32) && (*keys_)[s.id] == k) return s.id;
    }
  }

 private:
  struct Slot {
    int32_t id = -1;
    uint32_t hash = 0;
  };
  const std::vector<std::string>* keys_ = nullptr;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// (left id, right id) -> a 32-bit payload and the merged id (BPE: merge rank; SentencePiece: the
// merged piece's score as float bits). Key and value share a slot: one cache line per probe.
class PairMap {
 public:
  struct Value {
    int32_t payload = 0;
    int32_t merged = -1;  // -1: absent
  };
  void reset(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // The first insertion of a pair wins. Returns false when already present.
  bool insert(int32_t left, int32_t right, Value v) {
    const uint64_t k = key(left, right);
    for (size_t i = hash_u64(k) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty) {
        s.key = k;
        s.value = v;
        return true;
      }
      if (s.key == k) return false;
    }
  }
  // merged == -1 when absent.
  Value find(int32_t left, int32_t right) const {
    const uint64_t k = key(left, right);
    for (size_t i = hash_u64(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return s.value;
      if (s.key == kEmpty) return Value{};
    }
  }
  size_t memory_bytes() const { return slots_.size() * sizeof(Slot); }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key = kEmpty;
    Value value;
  };
  std::vector<Slot> slots_ = std::vector<Slot>(1);
  size_t mask_ = 0;
};

}  // namespace rinfer
