#include "kv/kv_arena.h"

#include <cstring>

#include "core/error.h"

namespace rinfer::kv {

uint64_t KvArena::bytes() const {
  uint64_t b = 0;
  for (int32_t g = 0; g < spec_.n_groups(); ++g) {
    b += spec_.block_bytes(g) * static_cast<uint64_t>(n_blocks(g));
  }
  return b;
}

Status KvArena::pull_blocks(const KvArena& src, std::span<const BlockCopy> /*copies*/) {
  return unsupported("kv arena: copies from {} into {} are not supported", src.device().to_string(),
                     device().to_string());
}

Status KvArena::check_grow(std::span<const int32_t> n_blocks) const {
  if (n_blocks.size() != n_blocks_.size()) {
    return invalid_argument("kv arena: {} block counts for {} groups", n_blocks.size(),
                            n_blocks_.size());
  }
  for (size_t g = 0; g < n_blocks.size(); ++g) {
    if (n_blocks[g] < n_blocks_[g]) {
      return invalid_argument("kv arena: group {} cannot shrink from {} to {} blocks", g,
                              n_blocks_[g], n_blocks[g]);
    }
  }
  return ok_status();
}

Status KvArena::check_copies(const KvArena& dst, std::span<const BlockCopy> copies) const {
  if (dst.spec_.n_layer != spec_.n_layer || dst.spec_.kv_dim != spec_.kv_dim ||
      dst.spec_.block_size != spec_.block_size || dst.spec_.dtype != spec_.dtype ||
      dst.spec_.n_groups() != spec_.n_groups()) {
    return invalid_argument("kv arena: copy between arenas of different specs ({} vs {})",
                            spec_.describe(), dst.spec_.describe());
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    const BlockCopy& c = copies[i];
    if (c.group < 0 || c.group >= spec_.n_groups() || c.src < 0 || c.src >= n_blocks(c.group) ||
        c.dst < 0 || c.dst >= dst.n_blocks(c.group)) {
      return invalid_argument("kv arena: copy {} (group {}, block {} -> {}) is out of range", i,
                              c.group, c.src, c.dst);
    }
  }
  return ok_status();
}

Result<std::unique_ptr<HostKvArena>> HostKvArena::create(const KvSpec& spec,
                                                         std::span<const int32_t> n_blocks) {
  if (n_blocks.size() != static_cast<size_t>(spec.n_groups())) {
    return invalid_argument("kv arena: {} block counts for {} groups", n_blocks.size(),
                            spec.n_groups());
  }
  auto a = std::unique_ptr<HostKvArena>(new HostKvArena());
  a->spec_ = spec;
  a->n_blocks_.assign(n_blocks.begin(), n_blocks.end());
  for (int64_t l = 0; l < spec.n_layer; ++l) {
    const int32_t nb = n_blocks[static_cast<size_t>(spec.group_of_layer[static_cast<size_t>(l)])];
    for (int kv = 0; kv < 2; ++kv) {
      auto t = Tensor::empty(Dims{nb, spec.block_size, static_cast<int64_t>(spec.row_bytes())},
                             DType::kU8);
      if (!t.ok()) {
        return t.status().with_context(
            fmt::format("allocating the KV cache ({} in all)", spec.describe()));
      }
      std::memset(t->mutable_data(), 0, t->nbytes());
      a->storage_.push_back(std::move(*t));
    }
    a->k_.push_back(a->storage_[a->storage_.size() - 2].mutable_data());
    a->v_.push_back(a->storage_.back().mutable_data());
  }
  return a;
}

Status HostKvArena::copy_blocks(KvArena& dst, std::span<const BlockCopy> copies) const {
  RINFER_RETURN_IF_ERROR(check_copies(dst, copies));
  if (!dst.device().is_cpu()) return dst.pull_blocks(*this, copies);
  const uint64_t block = static_cast<uint64_t>(spec_.block_size) * spec_.row_bytes();
  for (const BlockCopy& c : copies) {
    for (int32_t l : spec_.groups[static_cast<size_t>(c.group)].layers) {
      for (int kv = 0; kv < 2; ++kv) {
        const auto* s = static_cast<const uint8_t*>(kv == 0 ? k(l) : v(l));
        auto* d = static_cast<uint8_t*>(kv == 0 ? dst.k(l) : dst.v(l));
        std::memcpy(d + static_cast<uint64_t>(c.dst) * block,
                    s + static_cast<uint64_t>(c.src) * block, block);
      }
    }
  }
  return ok_status();
}

Status HostKvArena::grow(std::span<const int32_t> n_blocks) {
  RINFER_RETURN_IF_ERROR(check_grow(n_blocks));
  std::vector<Tensor> storage;
  const uint64_t per_block = static_cast<uint64_t>(spec_.block_size) * spec_.row_bytes();
  for (int64_t l = 0; l < spec_.n_layer; ++l) {
    const auto g = static_cast<size_t>(spec_.group_of_layer[static_cast<size_t>(l)]);
    for (int kv = 0; kv < 2; ++kv) {
      auto t = Tensor::empty(
          Dims{n_blocks[g], spec_.block_size, static_cast<int64_t>(spec_.row_bytes())}, DType::kU8);
      if (!t.ok()) {
        return t.status().with_context(
            fmt::format("growing the KV cache to {} blocks", n_blocks[g]));
      }
      const uint64_t keep = per_block * static_cast<uint64_t>(n_blocks_[g]);
      auto* dst = static_cast<uint8_t*>(t->mutable_data());
      std::memcpy(dst, kv == 0 ? k(l) : v(l), keep);
      std::memset(dst + keep, 0, t->nbytes() - keep);
      storage.push_back(std::move(*t));
    }
  }
  storage_ = std::move(storage);
  for (int64_t l = 0; l < spec_.n_layer; ++l) {
    k_[static_cast<size_t>(l)] = storage_[static_cast<size_t>(2 * l)].mutable_data();
    v_[static_cast<size_t>(l)] = storage_[static_cast<size_t>(2 * l + 1)].mutable_data();
  }
  n_blocks_.assign(n_blocks.begin(), n_blocks.end());
  return ok_status();
}

}  // namespace rinfer::kv
