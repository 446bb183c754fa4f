// SentencePiece BPE (Llama-2, Gemma): the algorithm of sentencepiece's bpe_model.cc.
//
// The fragment is normalized (spaces -> U+2581 '▁', plus a leading '▁' when the model adds a dummy
// prefix), cut into symbols (the longest user-defined piece at a position, else one UTF-8
// character, else one ill-formed byte), and adjacent symbols are merged while their concatenation
// is a piece: highest score first, leftmost on ties. Symbols left without a piece become byte
// tokens <0xNN> (byte fallback) or the unknown token.
//
// Speed: two adjacent characters whose pair occurs in no piece can never end up in one token, so
// the symbol sequence is cut there into runs that merge independently (the result is identical to
// merging the whole sequence at once). Short runs use an array scan, long ones (a 1 MB run of one
// character) a priority queue, O(n log n).
#include <cstring>
#include <queue>

#include "core/error.h"
#include "tokenizer/token_trie.h"
#include "tokenizer/tokenizer_model.h"
#include "tokenizer/unicode.h"

namespace rinfer {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581
constexpr uint32_t kSpaceMarkerCp = 0x2581;
constexpr size_t kSmallRun = 32;

std::string escape_spaces(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (char c : s) {
    if (c == ' ') {
      out += kSpaceMarker;
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_spaces(std::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    if (s.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
      out += ' ';
      pos += kSpaceMarker.size();
    } else {
      out += s[pos++];
    }
  }
  return out;
}

// Parses "<0xNN>"; -1 otherwise.
int parse_byte_piece(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

// The set of code point pairs that occur next to each other inside some piece.
class BigramSet {
 public:
  void add(uint32_t a, uint32_t b) {
    const int ia = small_index(a), ib = small_index(b);
    if (ia >= 0 && ib >= 0) {
      dense_[static_cast<size_t>(ia * kDense + ib)] = true;
    } else {
      sparse_.push_back(PairMap::key(static_cast<int32_t>(a), static_cast<int32_t>(b)));
    }
  }
  void finish() {
    map_.reset(sparse_.size());
    for (uint64_t k : sparse_) {
      map_.insert(static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu), {0, 0});
    }
    sparse_.clear();
    sparse_.shrink_to_fit();
  }
  bool contains(uint32_t a, uint32_t b) const {
    const int ia = small_index(a), ib = small_index(b);
    if (ia >= 0 && ib >= 0) return dense_[static_cast<size_t>(ia * kDense + ib)];
    return map_.find(static_cast<int32_t>(a), static_cast<int32_t>(b)).merged >= 0;
  }

 private:
  static constexpr int kDense = 129;  // ASCII + '▁'
  static int small_index(uint32_t cp) {
    if (cp < 128) return static_cast<int>(cp);
    return cp == kSpaceMarkerCp ? 128 : -1;
  }
  std::vector<bool> dense_ = std::vector<bool>(kDense * kDense, false);
  std::vector<uint64_t> sparse_;
  PairMap map_;
};

class SpmModel final : public TokenizerModel {
 public:
  explicit SpmModel(const Vocab& vocab) : vocab_(vocab) {}

  Status init() {
    if (vocab_.scores.size() != vocab_.pieces.size()) {
      return data_loss("SentencePiece model without a score for each of its {} tokens",
                       vocab_.pieces.size());
    }
    // Pieces in their normalized form (user-defined pieces in GGUF carry real spaces).
    keys_.resize(vocab_.pieces.size());
    mergeable_.reset(&keys_, vocab_.pieces.size());
    std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
    for (int32_t i = 0; i < vocab_.size(); ++i) {
      const TokenType t = vocab_.type(i);
      if (t == TokenType::kByte) {
        const int b = parse_byte_piece(vocab_.pieces[i]);
        if (b >= 0 && byte_token_[b] < 0) byte_token_[b] = i;
        continue;
      }
      if (t != TokenType::kNormal && t != TokenType::kUserDefined && t != TokenType::kUndefined) {
        continue;  // control, unknown and unused pieces never come out of merges
      }
      keys_[i] = escape_spaces(vocab_.pieces[i]);
      if (keys_[i].empty()) continue;
      mergeable_.insert(i);
      if (t == TokenType::kUserDefined) user_defined_.add(keys_[i], i);
      add_bigrams(keys_[i]);
    }
    bigrams_.finish();
    for (int c = 0; c < 128; ++c)
      ascii_id_[c] = mergeable_.find(std::string(1, static_cast<char>(c)));
    build_pairs();
    return ok_status();
  }

  Status encode_fragment(std::string_view text, bool starts_text,
                         std::vector<int32_t>& out) const override {
    std::string norm;
    if (vocab_.add_space_prefix && starts_text) norm = kSpaceMarker;
    norm += escape_spaces(text);
    const std::string_view s = norm;

    // Symbols: [begin, end) in `s`, id (-1: no piece), and whether they may merge. They are
    // collected into runs that merge independently; each run is merged as soon as it ends.
    std::vector<Symbol> run;
    run.reserve(64);
    size_t pos = 0;
    while (pos < s.size()) {
      Symbol sym;
      bool matched = false;
      if (!user_defined_.empty() && user_defined_.may_start(static_cast<uint8_t>(s[pos]))) {
        const auto [id, len] = user_defined_.longest_match(s, pos, [](int32_t) { return true; });
        if (id >= 0) {
          sym = {pos, pos + len, id, 0, true};
          matched = true;
        }
      }
      if (!matched && static_cast<unsigned char>(s[pos]) < 0x80) {  // ASCII: a table lookup
        const auto c = static_cast<unsigned char>(s[pos]);
        sym = {pos, pos + 1, ascii_id_[c], c, false};
      } else if (!matched) {
        size_t len;
        const int32_t cp = unicode::decode_utf8(s, pos, &len);
        if (cp < 0) {
          sym = {pos, pos + 1, -1, 0, true};  // ill-formed byte: byte fallback
        } else {
          sym = {pos, pos + len, mergeable_.find(s.substr(pos, len)), static_cast<uint32_t>(cp),
                 false};
        }
      }
      if (!run.empty() &&
          (sym.frozen || run.back().frozen || !bigrams_.contains(run.back().cp, sym.cp))) {
        merge_run(s, run.data(), run.size(), out);
        run.clear();
      }
      run.push_back(sym);
      pos = sym.end;
    }
    if (!run.empty()) merge_run(s, run.data(), run.size(), out);
    return ok_status();
  }

 private:
  struct Symbol {
    size_t begin;
    size_t end;
    int32_t id;
    uint32_t cp;  // the code point of a single-character symbol
    bool frozen;
  };

  void add_bigrams(std::string_view piece) {
    size_t pos = 0, len;
    int32_t prev = -1;
    while (pos < piece.size()) {
      const int32_t cp = unicode::decode_utf8(piece, pos, &len);
      if (prev >= 0 && cp >= 0)
        bigrams_.add(static_cast<uint32_t>(prev), static_cast<uint32_t>(cp));
      prev = cp;
      pos += len;
    }
  }

  // Every way of cutting a mergeable piece into two mergeable pieces, with the piece's score.
  void build_pairs() {
    size_t n_pairs = 0;
    std::vector<std::pair<uint64_t, int32_t>> found;
    for (int32_t i = 0; i < vocab_.size(); ++i) {
      const std::string& k = keys_[i];
      if (k.empty() || mergeable_.find(k) != i) continue;
      size_t pos = 0, len;
      while (true) {
        unicode::decode_utf8(k, pos, &len);
        pos += len;
        if (pos >= k.size()) break;
        const int32_t l = mergeable_.find(std::string_view(k).substr(0, pos));
        const int32_t r = l < 0 ? -1 : mergeable_.find(std::string_view(k).substr(pos));
        if (r >= 0) {
          found.emplace_back(PairMap::key(l, r), i);
          ++n_pairs;
        }
      }
    }
    pairs_.reset(n_pairs);
    for (const auto& [key, id] : found) {
      int32_t bits;
      std::memcpy(&bits, &vocab_.scores[id], sizeof(bits));
      pairs_.insert(static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFFu),
                    {bits, id});
    }
  }

  // The piece that symbols a and b (adjacent) merge into, and its score; false when none.
  bool lookup(std::string_view s, const Symbol& a, const Symbol& b, int32_t* id,
              float* score) const {
    if (a.id >= 0 && b.id >= 0) {  // both are pieces: one probe of the pair table
      const PairMap::Value v = pairs_.find(a.id, b.id);
      if (v.merged < 0) return false;
      *id = v.merged;
      std::memcpy(score, &v.payload, sizeof(*score));
      return true;
    }
    // A character without a piece may still start or end one: look the text up.
    *id = mergeable_.find(s.substr(a.begin, b.end - a.begin));
    if (*id < 0) return false;
    *score = vocab_.scores[*id];
    return true;
  }

  void emit(std::string_view s, const Symbol& sym, std::vector<int32_t>& out) const {
    if (sym.id >= 0) {
      out.push_back(sym.id);
      return;
    }
    bool all_bytes = true;
    for (size_t i = sym.begin; i < sym.end; ++i) {
      all_bytes = all_bytes && byte_token_[static_cast<unsigned char>(s[i])] >= 0;
    }
    if (all_bytes) {
      for (size_t i = sym.begin; i < sym.end; ++i) {
        out.push_back(byte_token_[static_cast<unsigned char>(s[i])]);
      }
    } else if (vocab_.unk >= 0) {
      out.push_back(vocab_.unk);  // no byte fallback: one unknown token per symbol
    }
  }

  void merge_run(std::string_view s, Symbol* syms, size_t n, std::vector<int32_t>& out) const {
    if (n == 1) {
      emit(s, syms[0], out);
    } else if (n <= kSmallRun) {
      merge_small(s, syms, n, out);
    } else {
      merge_large(s, syms, n, out);
    }
  }

  void merge_small(std::string_view s, Symbol* syms, size_t n, std::vector<int32_t>& out) const {
    Symbol sym[kSmallRun];
    bool has[kSmallRun];
    int32_t pid[kSmallRun];
    float score[kSmallRun];
    for (size_t i = 0; i < n; ++i) sym[i] = syms[i];
    for (size_t i = 0; i + 1 < n; ++i) {
      has[i] = lookup(s, sym[i], sym[i + 1], &pid[i], &score[i]);
    }
    while (n > 1) {
      size_t best = n;
      for (size_t i = 0; i + 1 < n; ++i) {
        if (has[i] && (best == n || score[i] > score[best])) best = i;
      }
      if (best == n) break;
      sym[best].end = sym[best + 1].end;
      sym[best].id = pid[best];
      for (size_t j = best + 1; j + 1 < n; ++j) sym[j] = sym[j + 1];
      for (size_t j = best + 1; j + 2 < n; ++j) {
        has[j] = has[j + 1];
        pid[j] = pid[j + 1];
        score[j] = score[j + 1];
      }
      --n;
      if (best > 0) {
        has[best - 1] = lookup(s, sym[best - 1], sym[best], &pid[best - 1], &score[best - 1]);
      }
      if (best + 1 < n) {
        has[best] = lookup(s, sym[best], sym[best + 1], &pid[best], &score[best]);
      }
    }
    for (size_t i = 0; i < n; ++i) emit(s, sym[i], out);
  }

  struct Candidate {
    float score;
    int32_t left;
    int32_t right;
    int32_t id;
    size_t size;
  };
  struct Later {  // higher score first, then lower left
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.score != b.score ? a.score < b.score : a.left > b.left;
    }
  };

  void merge_large(std::string_view s, Symbol* syms, size_t count,
                   std::vector<int32_t>& out) const {
    const auto n = static_cast<int32_t>(count);
    std::vector<int32_t> prev(count), next(count);
    for (int32_t i = 0; i < n; ++i) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, Later> queue;
    auto consider = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      int32_t id;
      float score;
      if (lookup(s, syms[l], syms[r], &id, &score)) {
        queue.push({score, l, r, id, syms[r].end - syms[l].begin});
      }
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& l = syms[c.left];
      Symbol& r = syms[c.right];
      if (l.end == l.begin || r.end == r.begin || next[c.left] != c.right ||
          r.end - l.begin != c.size) {
        continue;  // stale
      }
      l.end = r.end;
      l.id = c.id;
      r.end = r.begin;  // dead
      next[c.left] = next[c.right];
      if (next[c.left] >= 0) prev[next[c.left]] = c.left;
      consider(prev[c.left], c.left);
      consider(c.left, next[c.left]);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) emit(s, syms[i], out);
  }

  const Vocab& vocab_;
  std::vector<std::string> keys_;
  StringIdMap mergeable_;
  PairMap pairs_;  // (left id, right id) -> (score bits, merged id)
  TokenTrie user_defined_;
  BigramSet bigrams_;
  int32_t byte_token_[256];
  int32_t ascii_id_[128];  // the piece of each ASCII character, -1 for none
};

}  // namespace

Result<std::unique_ptr<TokenizerModel>> make_spm_model(Vocab& vocab) {
  vocab.text.resize(vocab.pieces.size());
  for (int32_t i = 0; i < vocab.size(); ++i) {
    const TokenType t = vocab.type(i);
    const int b = t == TokenType::kByte ? parse_byte_piece(vocab.pieces[i]) : -1;
    if (b >= 0) {
      vocab.text[i] = std::string(1, static_cast<char>(b));
    } else if (t == TokenType::kControl || t == TokenType::kUnknown) {
      vocab.text[i] = vocab.pieces[i];
    } else {
      vocab.text[i] = unescape_spaces(vocab.pieces[i]);
    }
  }
  auto model = std::make_unique<SpmModel>(vocab);
  RINFER_RETURN_IF_ERROR(model->init());
  return std::unique_ptr<TokenizerModel>(std::move(model));
}

}  // namespace rinfer
