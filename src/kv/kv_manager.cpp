#include "kv/kv_manager.h"

#include <algorithm>

#include "core/error.h"

namespace rinfer::kv {

Result<KvManager> KvManager::create(KvSpec spec, KvManagerOptions opts) {
  const auto n_groups = static_cast<size_t>(spec.n_groups());
  if (n_groups == 0) return invalid_argument("kv manager: the spec has no layer groups");
  if (opts.n_blocks.size() != n_groups) {
    return invalid_argument("kv manager: {} block counts for {} groups", opts.n_blocks.size(),
                            n_groups);
  }
  if (!opts.n_host_blocks.empty() && opts.n_host_blocks.size() != n_groups) {
    return invalid_argument("kv manager: {} host block counts for {} groups",
                            opts.n_host_blocks.size(), n_groups);
  }
  KvManager m;
  for (size_t g = 0; g < n_groups; ++g) {
    if (opts.n_blocks[g] <= 0) {
      return invalid_argument("kv manager: group {} has {} blocks", g, opts.n_blocks[g]);
    }
    m.pools_.emplace_back(opts.n_blocks[g], spec.block_size);
    if (!opts.n_host_blocks.empty()) m.host_.emplace_back(opts.n_host_blocks[g], spec.block_size);
  }
  m.spec_ = std::move(spec);
  m.opts_ = std::move(opts);
  return m;
}

Status KvManager::grow(std::span<const int32_t> n_blocks) {
  if (n_blocks.size() != pools_.size()) {
    return invalid_argument("kv manager: {} block counts for {} groups", n_blocks.size(),
                            pools_.size());
  }
  for (size_t g = 0; g < pools_.size(); ++g) {
    if (n_blocks[g] < pools_[g].size()) {
      return invalid_argument("kv manager: group {} cannot shrink from {} to {} blocks", g,
                              pools_[g].size(), n_blocks[g]);
    }
  }
  for (size_t g = 0; g < pools_.size(); ++g) {
    pools_[g].grow(n_blocks[g]);
    opts_.n_blocks[g] = n_blocks[g];
  }
  return ok_status();
}

Result<int64_t> KvManager::attach(SeqId seq, std::span<const int32_t> tokens, uint64_t extra_key) {
  if (has(seq)) return invalid_argument("kv manager: sequence {} is already attached", seq);
  const int32_t n_groups = spec_.n_groups();
  Seq s;
  s.tables.resize(static_cast<size_t>(n_groups));
  s.extra = extra_key;
  const int64_t bs = spec_.block_size;
  int64_t hit = 0;  // blocks
  if (opts_.prefix_caching && !tokens.empty()) {
    const int64_t k_max = (static_cast<int64_t>(tokens.size()) - 1) / bs;
    std::vector<uint64_t> h;
    h.reserve(static_cast<size_t>(k_max));
    uint64_t parent = 0;
    for (int64_t k = 0; k < k_max; ++k) {
      parent = hash_block(parent, extra_key,
                          tokens.subspan(static_cast<size_t>(k * bs), static_cast<size_t>(bs)));
      h.push_back(parent);
    }
    auto key = [&](int64_t k) {
      return BlockKey{h[static_cast<size_t>(k)], k == 0 ? 0 : h[static_cast<size_t>(k - 1)],
                      tokens.subspan(static_cast<size_t>(k * bs), static_cast<size_t>(bs))};
    };
    auto cached = [&](int32_t g, int64_t k) {
      return pools_[static_cast<size_t>(g)].lookup(key(k)).has_value();
    };
    // Full groups: the longest run from the start; sliding groups: the blocks in the window
    // of the hit's end.
    int64_t full = k_max;
    for (int32_t g = 0; g < n_groups; ++g) {
      if (spec_.groups[static_cast<size_t>(g)].window != 0) continue;
      int64_t k = 0;
      while (k < full && cached(g, k)) ++k;
      full = k;
    }
    for (hit = full; hit > 0; --hit) {
      bool ok = true;
      for (int32_t g = 0; g < n_groups && ok; ++g) {
        if (spec_.groups[static_cast<size_t>(g)].window == 0) continue;
        for (int64_t k = spec_.first_visible_block(g, hit * bs); k < hit && ok; ++k)
          ok = cached(g, k);
      }
      if (ok) break;
    }
    for (int32_t g = 0; g < n_groups; ++g) {
      std::vector<BlockId>& t = s.tables[static_cast<size_t>(g)];
      const int64_t first = spec_.first_visible_block(g, hit * bs);
      for (int64_t k = 0; k < hit; ++k) {
        if (k < first) {
          t.push_back(kNoBlock);
          continue;
        }
        const BlockId b = *pools_[static_cast<size_t>(g)].lookup(key(k));
        pools_[static_cast<size_t>(g)].ref(b);
        t.push_back(b);
      }
    }
    s.hashes.assign(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(hit));
    prefix_queries_ += k_max;
    prefix_hits_ += hit;
  }
  seqs_.emplace(seq, std::move(s));
  return hit * bs;
}

int64_t KvManager::blocks_needed(SeqId seq, int64_t n_total) const {
  const Seq& s = at(seq);
  const int64_t want = spec_.blocks_for(n_total);
  int64_t n = 0;
  for (const std::vector<BlockId>& t : s.tables) {
    n += std::max<int64_t>(0, want - static_cast<int64_t>(t.size()));
  }
  return n;
}

bool KvManager::allocate(SeqId seq, int64_t n_total, int32_t watermark) {
  Seq& s = at(seq);
  if (s.swapped) return false;
  const int64_t want = spec_.blocks_for(n_total);
  for (size_t g = 0; g < s.tables.size(); ++g) {
    const int64_t need = want - static_cast<int64_t>(s.tables[g].size());
    if (need > 0 && pools_[g].num_free() - need < watermark) return false;
  }
  for (size_t g = 0; g < s.tables.size(); ++g) {
    while (static_cast<int64_t>(s.tables[g].size()) < want) {
      s.tables[g].push_back(*pools_[g].allocate());
    }
  }
  return true;
}

void KvManager::register_full_blocks(Seq& s, std::span<const int32_t> tokens, int64_t n_computed) {
  const int64_t bs = spec_.block_size;
  const int64_t limit = std::min<int64_t>(n_computed, static_cast<int64_t>(tokens.size()));
  for (auto k = static_cast<int64_t>(s.hashes.size()); (k + 1) * bs <= limit; ++k) {
    const auto blk = tokens.subspan(static_cast<size_t>(k * bs), static_cast<size_t>(bs));
    const uint64_t parent = s.hashes.empty() ? 0 : s.hashes.back();
    const uint64_t h = hash_block(parent, s.extra, blk);
    for (size_t g = 0; g < s.tables.size(); ++g) {
      const BlockId b = s.tables[g][static_cast<size_t>(k)];
      if (b != kNoBlock) pools_[g].register_block(b, BlockKey{h, parent, blk});
    }
    s.hashes.push_back(h);
  }
}

void KvManager::release_out_of_window(Seq& s, int64_t n_computed) {
  for (size_t g = 0; g < s.tables.size(); ++g) {
    if (spec_.groups[g].window == 0) continue;
    // The token at position n_computed and every later one see nothing before this block.
    const int64_t first = spec_.first_visible_block(static_cast<int32_t>(g), n_computed);
    std::vector<BlockId>& t = s.tables[g];
    for (int64_t k = std::min<int64_t>(first, static_cast<int64_t>(t.size())) - 1; k >= 0; --k) {
      BlockId& b = t[static_cast<size_t>(k)];
      if (b == kNoBlock) break;  // released earlier, and so is everything before it
      pools_[g].unref(b);
      b = kNoBlock;
    }
  }
}

void KvManager::commit(SeqId seq, std::span<const int32_t> tokens, int64_t n_computed) {
  Seq& s = at(seq);
  if (s.swapped) return;
  if (opts_.prefix_caching) register_full_blocks(s, tokens, n_computed);
  release_out_of_window(s, n_computed);
}

void KvManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  std::vector<BlockPool>& pools = s.swapped ? host_ : pools_;
  for (size_t g = 0; g < s.tables.size(); ++g) {
    for (auto b = s.tables[g].rbegin(); b != s.tables[g].rend(); ++b) {
      if (*b != kNoBlock) pools[g].unref(*b);
    }
  }
  seqs_.erase(it);
}

bool KvManager::is_swapped(SeqId seq) const { return at(seq).swapped; }

Result<std::vector<BlockCopy>> KvManager::swap_out(SeqId seq) {
  Seq& s = at(seq);
  if (host_.empty()) return invalid_argument("kv manager: no swap space");
  if (s.swapped) return invalid_argument("kv manager: sequence {} is already swapped out", seq);
  for (size_t g = 0; g < s.tables.size(); ++g) {
    const auto n = std::count_if(s.tables[g].begin(), s.tables[g].end(),
                                 [](BlockId b) { return b != kNoBlock; });
    if (n > host_[g].num_free()) {
      return out_of_memory(
          "kv manager: swapping out sequence {} needs {} host blocks of group "
          "{}, {} are free",
          seq, n, g, host_[g].num_free());
    }
  }
  std::vector<BlockCopy> copies;
  for (size_t g = 0; g < s.tables.size(); ++g) {
    for (BlockId& b : s.tables[g]) {
      if (b == kNoBlock) continue;
      const BlockId h = *host_[g].allocate();
      copies.push_back(BlockCopy{static_cast<int32_t>(g), b, h});
      b = h;
    }
    // Released last block first, as free() does.
    for (auto c = copies.rbegin(); c != copies.rend(); ++c) {
      if (c->group == static_cast<int32_t>(g)) pools_[g].unref(c->src);
    }
  }
  s.swapped = true;
  return copies;
}

bool KvManager::can_swap_in(SeqId seq) const {
  const Seq& s = at(seq);
  if (!s.swapped) return false;
  for (size_t g = 0; g < s.tables.size(); ++g) {
    const auto n = std::count_if(s.tables[g].begin(), s.tables[g].end(),
                                 [](BlockId b) { return b != kNoBlock; });
    if (n > pools_[g].num_free()) return false;
  }
  return true;
}

Result<std::vector<BlockCopy>> KvManager::swap_in(SeqId seq, std::span<const int32_t> tokens) {
  if (!can_swap_in(seq)) {
    return out_of_memory("kv manager: no device room to swap sequence {} back in", seq);
  }
  Seq& s = at(seq);
  std::vector<BlockCopy> copies;
  const int64_t bs = spec_.block_size;
  for (size_t g = 0; g < s.tables.size(); ++g) {
    for (size_t k = 0; k < s.tables[g].size(); ++k) {
      BlockId& b = s.tables[g][k];
      if (b == kNoBlock) continue;
      const BlockId d = *pools_[g].allocate();
      copies.push_back(BlockCopy{static_cast<int32_t>(g), b, d});
      host_[g].unref(b);
      b = d;
      const auto kk = static_cast<int64_t>(k);
      if (opts_.prefix_caching && kk < static_cast<int64_t>(s.hashes.size()) &&
          (kk + 1) * bs <= static_cast<int64_t>(tokens.size())) {
        pools_[g].register_block(
            d, BlockKey{s.hashes[k], k == 0 ? 0 : s.hashes[k - 1],
                        tokens.subspan(k * static_cast<size_t>(bs), static_cast<size_t>(bs))});
      }
    }
  }
  s.swapped = false;
  return copies;
}

std::span<const BlockId> KvManager::table(SeqId seq, int32_t g) const {
  return at(seq).tables[static_cast<size_t>(g)];
}

void KvManager::clear_prefix_cache() {
  for (BlockPool& p : pools_) p.clear_cache();
}

int32_t KvManager::min_free_blocks() const {
  int32_t m = pools_[0].num_free();
  for (const BlockPool& p : pools_) m = std::min(m, p.num_free());
  return m;
}

KvUsage KvManager::usage() const {
  KvUsage u;
  for (const BlockPool& p : pools_) {
    const PoolStats st = p.stats();
    u.used_blocks += st.n_used();
    u.total_blocks += st.n_blocks;
    u.cached_blocks += st.n_cached;
    u.evictions += st.evictions;
  }
  u.prefix_hits = prefix_hits_;
  u.prefix_queries = prefix_queries_;
  return u;
}

std::vector<SeqId> KvManager::sequences() const {
  std::vector<SeqId> ids;
  ids.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status KvManager::check_invariants() const {
  for (size_t g = 0; g < pools_.size(); ++g) {
    RINFER_RETURN_IF_ERROR(pools_[g].check_invariants().with_context(fmt::format("group {}", g)));
    if (!host_.empty()) {
      RINFER_RETURN_IF_ERROR(
          host_[g].check_invariants().with_context(fmt::format("host group {}", g)));
    }
    std::vector<int32_t> dev(static_cast<size_t>(pools_[g].size()), 0);
    std::vector<int32_t> host(host_.empty() ? 0 : static_cast<size_t>(host_[g].size()), 0);
    for (const auto& [id, s] : seqs_) {
      const std::vector<BlockId>& t = s.tables[g];
      std::vector<int32_t>& refs = s.swapped ? host : dev;
      bool released = true;  // kNoBlock only before the first held block
      for (size_t k = 0; k < t.size(); ++k) {
        if (t[k] == kNoBlock) {
          if (!released || spec_.groups[g].window == 0) {
            return internal_error("kv manager: sequence {} group {} has a hole at block {}", id, g,
                                  k);
          }
          continue;
        }
        released = false;
        if (t[k] < 0 || t[k] >= static_cast<BlockId>(refs.size())) {
          return internal_error("kv manager: sequence {} group {} holds block {} of {}", id, g,
                                t[k], refs.size());
        }
        ++refs[static_cast<size_t>(t[k])];
      }
      if (s.hashes.size() > t.size()) {
        return internal_error("kv manager: sequence {} has {} hashes for {} blocks", id,
                              s.hashes.size(), t.size());
      }
    }
    for (size_t b = 0; b < dev.size(); ++b) {
      if (dev[b] != pools_[g].ref_count(static_cast<BlockId>(b))) {
        return internal_error("kv manager: group {} block {} has ref {} but {} tables hold it", g,
                              b, pools_[g].ref_count(static_cast<BlockId>(b)), dev[b]);
      }
    }
    for (size_t b = 0; b < host.size(); ++b) {
      if (host[b] != host_[g].ref_count(static_cast<BlockId>(b))) {
        return internal_error("kv manager: host group {} block {} has ref {} but {} tables hold it",
                              g, b, host_[g].ref_count(static_cast<BlockId>(b)), host[b]);
      }
    }
  }
  return ok_status();
}

}  // namespace rinfer::kv
