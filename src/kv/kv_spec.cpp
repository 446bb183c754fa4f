#include "kv/kv_spec.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace rinfer::kv {

std::string_view layout_name(Layout l) { return l == Layout::kContiguous ? "contiguous" : "paged"; }

Result<KvSpec> KvSpec::make(std::span<const int64_t> windows, int64_t kv_dim, DType dtype,
                            int64_t block_size, int64_t n_ctx, int64_t head_dim) {
  if (windows.empty()) return invalid_argument("kv spec: no layers");
  if (kv_dim <= 0) return invalid_argument("kv spec: kv_dim {} must be positive", kv_dim);
  if (block_size <= 0) {
    return invalid_argument("kv spec: block_size {} must be positive", block_size);
  }
  if (n_ctx <= 0) return invalid_argument("kv spec: n_ctx {} must be positive", n_ctx);
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16 &&
      dtype != DType::kI8) {
    return invalid_argument("kv spec: dtype {} (f32, bf16, f16 or i8)", dtype_name(dtype));
  }
  if (head_dim < 0 || (head_dim > 0 && kv_dim % head_dim != 0)) {
    return invalid_argument("kv spec: head_dim {} does not divide kv_dim {}", head_dim, kv_dim);
  }
  if (dtype == DType::kI8 && (head_dim == 0 || head_dim % 4 != 0)) {
    return invalid_argument("kv spec: i8 needs a head_dim that is a multiple of 4, not {}",
                            head_dim);
  }
  KvSpec s;
  s.n_layer = static_cast<int64_t>(windows.size());
  s.kv_dim = kv_dim;
  s.dtype = dtype;
  s.head_dim = head_dim;
  s.block_size = block_size;
  s.n_ctx = n_ctx;
  for (size_t l = 0; l < windows.size(); ++l) {
    const int64_t w = windows[l];
    if (w < 0) return invalid_argument("kv spec: layer {} has a negative window {}", l, w);
    auto it = std::find_if(s.groups.begin(), s.groups.end(),
                           [&](const GroupSpec& g) { return g.window == w; });
    if (it == s.groups.end()) {
      s.groups.push_back(GroupSpec{w, {}});
      it = s.groups.end() - 1;
    }
    s.group_of_layer.push_back(static_cast<int32_t>(it - s.groups.begin()));
    s.slot_in_group.push_back(static_cast<int32_t>(it->layers.size()));
    it->layers.push_back(static_cast<int32_t>(l));
  }
  return s;
}

uint64_t KvSpec::row_bytes() const {
  const auto n = static_cast<uint64_t>(kv_dim);
  if (dtype == DType::kI8) return n + 4 * (n / static_cast<uint64_t>(i8_group()));
  return n * static_cast<uint64_t>(dtype_traits(dtype).block_bytes);
}

uint64_t KvSpec::block_bytes(int32_t g) const {
  const auto n_layers = static_cast<uint64_t>(groups[static_cast<size_t>(g)].layers.size());
  return n_layers * 2 * static_cast<uint64_t>(block_size) * row_bytes();
}

int64_t KvSpec::max_blocks_per_seq(int32_t g, int64_t chunk) const {
  const int64_t full = blocks_for(n_ctx);
  const int64_t w = groups[static_cast<size_t>(g)].window;
  if (w == 0) return full;
  return std::min(full, blocks_for(w + std::max<int64_t>(chunk, 1) - 1) + 1);
}

std::string KvSpec::describe() const {
  std::string g;
  uint64_t per_pos = 0;
  for (int32_t i = 0; i < n_groups(); ++i) {
    const GroupSpec& gs = groups[static_cast<size_t>(i)];
    if (!g.empty()) g += ", ";
    g += gs.window > 0 ? fmt::format("{} layers window {}", gs.layers.size(), gs.window)
                       : fmt::format("{} layers full", gs.layers.size());
    per_pos += block_bytes(i) / static_cast<uint64_t>(block_size);
  }
  return fmt::format("{} group{} ({}), block {}, {}, {} B/position", n_groups(),
                     n_groups() == 1 ? "" : "s", g, block_size, dtype_name(dtype), per_pos);
}

}  // namespace rinfer::kv
