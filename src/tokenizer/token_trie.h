// A byte trie of token strings for longest-match scans (special and user-defined tokens).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace rinfer {

class TokenTrie {
 public:
  TokenTrie() {
    nodes_.emplace_back();
    root_.fill(-1);
  }

  bool empty() const { return nodes_.size() == 1; }

  // Adds `text` for token `id` (the first id added for a string wins). Empty strings are ignored.
  void add(std::string_view text, int32_t id) {
    if (text.empty()) return;
    int32_t node = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto b = static_cast<uint8_t>(text[i]);
      int32_t child = i == 0 ? root_[b] : find_child(node, b);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        if (i == 0) {
          root_[b] = child;
        } else {
          nodes_[node].kids.emplace_back(b, child);
        }
      }
      node = child;
    }
    if (nodes_[node].id < 0) nodes_[node].id = id;
  }

  // The longest token that `accept(id)` allows starting at text[pos]: {id, length}, or {-1, 0}.
  template <typename Accept>
  std::pair<int32_t, size_t> longest_match(std::string_view text, size_t pos,
                                           Accept&& accept) const {
    std::pair<int32_t, size_t> best{-1, 0};
    int32_t node = root_[static_cast<uint8_t>(text[pos])];
    size_t i = pos + 1;
    while (node >= 0) {
      const Node& n = nodes_[node];
      if (n.id >= 0 && accept(n.id)) best = {n.id, i - pos};
      if (i >= text.size()) break;
      node = find_child(node, static_cast<uint8_t>(text[i]));
      ++i;
    }
    return best;
  }
  // Whether any token starts with this byte (a cheap pre-check for scans).
  bool may_start(uint8_t b) const { return root_[b] >= 0; }

 private:
  struct Node {
    int32_t id = -1;
    std::vector<std::pair<uint8_t, int32_t>> kids;
  };
  int32_t find_child(int32_t node, uint8_t b) const {
    for (const auto& [k, c] : nodes_[node].kids) {
      if (k == b) return c;
    }
    return -1;
  }
  std::vector<Node> nodes_;
  std::array<int32_t, 256> root_;
};

}  // namespace rinfer
