// Byte-level BPE: pre-tokenize, map bytes to tokens, merge by rank.
//
// Merging is "lowest rank first, leftmost on ties" (Hugging Face tokenizers and llama.cpp agree).
// Short words use a simple array scan (fast, O(n^2) in a word of at most kSmallWord bytes); longer
// words use a priority queue over a linked list of symbols with lazy invalidation, O(n log n), so a
// 1 MB word of one repeated character stays fast.
#include <climits>
#include <queue>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_model.h"
#include "tokenizer/unicode.h"

namespace rinfer {

namespace {

constexpr size_t kSmallWord = 48;

class BpeModel final : public TokenizerModel {
 public:
  BpeModel(const Vocab& vocab, std::unique_ptr<PreTokenizer> pre, bool ignore_merges,
           int32_t missing_byte)
      : vocab_(vocab),
        pre_(std::move(pre)),
        ignore_merges_(ignore_merges),
        missing_byte_(missing_byte) {}

  Status init(const std::vector<std::pair<std::string_view, std::string_view>>& merges) {
    const auto& alphabet = unicode::byte_level_alphabet();
    for (int b = 0; b < 256; ++b) byte_token_[b] = vocab_.piece_ids.find(alphabet.byte_to_utf8[b]);
    merges_.reset(merges.size());
    std::string joined;
    for (size_t r = 0; r < merges.size(); ++r) {
      const auto& [a, b] = merges[r];
      const int32_t left = vocab_.piece_ids.find(a);
      const int32_t right = vocab_.piece_ids.find(b);
      joined.assign(a);
      joined.append(b);
      const int32_t merged = vocab_.piece_ids.find(joined);
      if (left < 0 || right < 0 || merged < 0) {
        return data_loss("merge {} ('{} {}') uses a piece that is not in the vocabulary", r, a, b);
      }
      merges_.insert(left, right, {static_cast<int32_t>(r), merged});
    }
    if (ignore_merges_) {
      whole_words_.reset(&vocab_.text, vocab_.pieces.size());
      for (int32_t i = 0; i < vocab_.size(); ++i) {
        const TokenType t = vocab_.type(i);
        if (t == TokenType::kNormal || t == TokenType::kByte || t == TokenType::kUndefined) {
          whole_words_.insert(i);
        }
      }
    }
    return ok_status();
  }

  Status encode_fragment(std::string_view text, bool /*starts_text*/,
                         std::vector<int32_t>& out) const override {
    std::vector<std::pair<size_t, size_t>> pieces;
    RINFER_RETURN_IF_ERROR(pre_->split(text, pieces));
    for (const auto& [b, e] : pieces) encode_word(text.substr(b, e - b), out);
    return ok_status();
  }

 private:
  void emit(int32_t id, std::vector<int32_t>& out) const {
    if (id >= 0) {
      out.push_back(id);
    } else if (missing_byte_ >= 0) {
      out.push_back(missing_byte_);  // a byte with no token in the vocabulary
    }
  }

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
      const int32_t id = whole_words_.find(word);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    if (word.size() == 1) {
      emit(byte_token_[static_cast<unsigned char>(word[0])], out);
    } else if (word.size() <= kSmallWord) {
      encode_small(word, out);
    } else {
      encode_large(word, out);
    }
  }

  int32_t pair_rank(int32_t a, int32_t b, int32_t* merged) const {
    const PairMap::Value v = merges_.find(a, b);
    *merged = v.merged;
    return v.merged < 0 ? INT_MAX : v.payload;
  }

  void encode_small(std::string_view word, std::vector<int32_t>& out) const {
    int32_t ids[kSmallWord];
    int32_t rank[kSmallWord];
    int32_t merged[kSmallWord];
    size_t n = word.size();
    for (size_t i = 0; i < n; ++i) ids[i] = byte_token_[static_cast<unsigned char>(word[i])];
    for (size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(ids[i], ids[i + 1], &merged[i]);
    while (n > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i) {
        if (rank[i] < rank[best]) best = i;
      }
      if (rank[best] == INT_MAX) break;
      ids[best] = merged[best];
      for (size_t j = best + 1; j + 1 < n; ++j) ids[j] = ids[j + 1];
      for (size_t j = best + 1; j + 2 < n; ++j) {
        rank[j] = rank[j + 1];
        merged[j] = merged[j + 1];
      }
      --n;
      if (best > 0) rank[best - 1] = pair_rank(ids[best - 1], ids[best], &merged[best - 1]);
      if (best + 1 < n) rank[best] = pair_rank(ids[best], ids[best + 1], &merged[best]);
    }
    for (size_t i = 0; i < n; ++i) emit(ids[i], out);
  }

  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t right;
    int32_t left_id;
    int32_t right_id;
    int32_t merged;
  };
  struct Later {  // priority_queue puts the "largest" first: lower rank, then lower left, wins
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
    }
  };

  void encode_large(std::string_view word, std::vector<int32_t>& out) const {
    const auto n = static_cast<int32_t>(word.size());
    std::vector<int32_t> ids(n), prev(n), next(n);
    for (int32_t i = 0; i < n; ++i) {
      ids[i] = byte_token_[static_cast<unsigned char>(word[i])];
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    std::vector<Candidate> storage;
    storage.reserve(static_cast<size_t>(n));
    std::priority_queue<Candidate, std::vector<Candidate>, Later> queue(Later{},
                                                                        std::move(storage));
    auto consider = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      int32_t merged;
      const int32_t rank = pair_rank(ids[l], ids[r], &merged);
      if (rank != INT_MAX) queue.push({rank, l, r, ids[l], ids[r], merged});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      if (ids[c.left] != c.left_id || next[c.left] != c.right || ids[c.right] != c.right_id) {
        continue;  // stale: one side was merged since
      }
      ids[c.left] = c.merged;
      ids[c.right] = -2;  // dead
      next[c.left] = next[c.right];
      if (next[c.left] >= 0) prev[next[c.left]] = c.left;
      consider(prev[c.left], c.left);
      consider(c.left, next[c.left]);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) emit(ids[i], out);
  }

  const Vocab& vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_;
  int32_t missing_byte_;
  int32_t byte_token_[256];
  PairMap merges_;
  StringIdMap whole_words_;  // decoded bytes -> id, for ignore_merges
};

}  // namespace

Result<std::unique_ptr<TokenizerModel>> make_bpe_model(
    Vocab& vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges,
    std::unique_ptr<PreTokenizer> pre, bool ignore_merges, int32_t missing_byte) {
  // What each token decodes to: normal tokens through the byte alphabet, control and
  // user-defined tokens as their text.
  vocab.text.resize(vocab.pieces.size());
  for (int32_t i = 0; i < vocab.size(); ++i) {
    const TokenType t = vocab.type(i);
    const bool literal =
        t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
    if (literal || !unicode::byte_level_decode(vocab.pieces[i], vocab.text[i])) {
      vocab.text[i] = vocab.pieces[i];
    }
  }
  auto model = std::make_unique<BpeModel>(vocab, std::move(pre), ignore_merges, missing_byte);
  RINFER_RETURN_IF_ERROR(model->init(merges));
  return std::unique_ptr<TokenizerModel>(std::move(model));
}

}  // namespace rinfer
