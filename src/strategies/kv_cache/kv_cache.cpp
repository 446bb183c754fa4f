// strategies.kv_cache: keep each position's keys and values so a decode step runs one token.
// Baseline: recompute the whole sequence every step. Hooks: SchedulerConfig::recompute_each_step
// (engine_core_options), the
// cache's element type LoadOptions::kv_dtype (auto: bf16 on CUDA, f32 on the CPU), and the
// engine core's layout (contiguous | paged), block size and prefix caching.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(
      m.check_keys({"enabled", "dtype", "layout", "block_size", "prefix_caching", "prealloc"}));
  RINFER_ASSIGN_OR_RETURN(auto enabled, m.get_bool("enabled"));
  if (enabled) s.kv_cache = *enabled;
  RINFER_ASSIGN_OR_RETURN(auto dtype, m.get_enum("dtype", {"auto", "bf16", "f32", "int8"}));
  if (dtype) {
    constexpr DType kDtypes[] = {DType::kBF16, DType::kF32, DType::kI8};
    s.kv_dtype =
        *dtype == 0 ? std::nullopt : std::optional<DType>(kDtypes[static_cast<size_t>(*dtype - 1)]);
  }
  RINFER_ASSIGN_OR_RETURN(auto layout, m.get_enum("layout", {"contiguous", "paged"}));
  if (layout) s.kv_layout = *layout == 0 ? kv::Layout::kContiguous : kv::Layout::kPaged;
  RINFER_ASSIGN_OR_RETURN(auto block, m.get_int("block_size", 1, 1024));
  if (block) s.kv_block_size = *block;
  RINFER_ASSIGN_OR_RETURN(auto prefix, m.get_bool("prefix_caching"));
  if (prefix) s.prefix_caching = *prefix;
  RINFER_ASSIGN_OR_RETURN(auto prealloc, m.get_map("prealloc"));
  if (prealloc) {
    RINFER_RETURN_IF_ERROR(prealloc->check_keys({"policy"}));
    RINFER_ASSIGN_OR_RETURN(auto policy, prealloc->get_enum("policy", {"max", "auto"}));
    if (policy) s.kv_prealloc = *policy == 0 ? KvPrealloc::kMax : KvPrealloc::kAuto;
    note_origin(*prealloc, "policy", s);
  }
  for (const char* k : {"enabled", "dtype", "layout", "block_size", "prefix_caching"}) {
    note_origin(m, k, s);
  }
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device& device) {
  if (s.kv_layout == kv::Layout::kContiguous && s.prefix_caching &&
      s.origins.has("strategies.kv_cache.prefix_caching")) {
    return key_conflict(s.origins, "strategies.kv_cache.prefix_caching",
                        "strategies.kv_cache.layout",
                        "true needs the paged layout: a contiguous cache has one block per "
                        "sequence, never a full block to share");
  }
  if (s.kv_layout == kv::Layout::kContiguous && s.kv_prealloc == KvPrealloc::kAuto) {
    return key_conflict(s.origins, "strategies.kv_cache.prealloc.policy",
                        "strategies.kv_cache.layout",
                        "auto sizes a pool of blocks: a contiguous cache holds one whole context "
                        "per seat (use the paged layout)");
  }
  if (device.is_cpu() && s.kv_dtype == DType::kBF16) {
    return key_conflict(s.origins, "strategies.kv_cache.dtype", "device",
                        "bf16: the CPU keeps its KV cache in f32 or int8 (use auto, f32 or int8)");
  }
  if (device.is_cuda() && s.kv_dtype == DType::kI8) {
    return key_conflict(s.origins, "strategies.kv_cache.dtype", "device",
                        "int8: the CUDA attention kernels read bf16 or f32 (an 8-bit cache on CUDA "
                        "is not built yet)");
  }
  return ok_status();
}

std::string describe(const StrategyConfig& s, const Device&) {
  // The defaults (paged, block 16, prefix caching) go unsaid.
  std::vector<std::string> notes;
  if (s.kv_cache && s.kv_layout == kv::Layout::kContiguous) notes.emplace_back("contiguous");
  if (s.kv_cache && s.kv_layout == kv::Layout::kPaged && s.kv_block_size != 16) {
    notes.push_back(fmt::format("block {}", s.kv_block_size));
  }
  if (s.kv_cache && s.kv_layout == kv::Layout::kPaged && !s.prefix_caching) {
    notes.emplace_back("no prefix caching");
  }
  if (s.kv_cache && s.kv_prealloc == KvPrealloc::kAuto) notes.emplace_back("prealloc auto");
  if (s.kv_dtype) notes.emplace_back(*s.kv_dtype == DType::kI8 ? "int8" : dtype_name(*s.kv_dtype));
  std::string d = fmt::format("kv_cache {}", on_off(s.kv_cache));
  if (notes.empty()) return d;
  return fmt::format("{} ({})", d, fmt::join(notes, ", "));
}

}  // namespace

const StrategyInfo& kv_cache_strategy() {
  static const StrategyInfo info{
      "kv_cache",
      "keep every position's keys and values so a decode step runs only the new token",
      {{"enabled", "bool", "true", "false: every step recomputes the whole sequence"},
       {"dtype", "auto | bf16 | f32 | int8", "auto",
        "the cache's element type: auto is bf16 on CUDA (half the bytes a decode step reads) "
        "and f32 on the CPU; f32 on CUDA keeps keys and values unrounded; int8 (CPU) keeps 8-bit "
        "codes with an f32 scale per 16 values (max |x| / 127): under a third of "
        "f32's bytes"},
       {"layout", "contiguous | paged", "paged",
        "contiguous: one block of the whole context per sequence (the baseline); paged: blocks "
        "of block_size positions, taken as a sequence grows"},
       {"block_size", "int in [1, 1024]", "16", "positions per block (paged)"},
       {"prefix_caching", "bool", "true",
        "share the KV blocks of a prompt prefix already computed (paged)"},
       {"prealloc.policy", "max | auto", "max",
        "max: a pool for every seat at the context length; auto (paged): one seat's worth, grown "
        "to seats x (mean x 2 + std) of the lengths requests reach, capped by the context and "
        "free memory, with preemption for the longer ones"}},
      "{enabled: false}",
      "SchedulerConfig::recompute_each_step (off: the engine core recomputes each sequence every "
      "step); "
      "LoadOptions::kv_dtype (the cache's element type); EngineCoreOptions::layout, "
      "block_size, prefix_caching, prealloc",
      "cpu, cuda",
      "docs/strategies/kv_cache.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
