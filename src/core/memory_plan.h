// Checking planned allocations against the machine before making them. A KV cache sized for
// the recipe's context (`rinfer run R --ctx 900000`: about 40 GiB for SmolLM2-135M) is reserved
// by the OS lazily, page by page as positions fill, so the allocation itself succeeds and a long
// session is later killed by the kernel without a word. LlmEngine::create therefore compares
// what it is about to allocate with what the device has free, and refuses (kOutOfMemory) with
// both figures in MiB and what to change:
//
//   the KV cache for 900000 positions needs 39,551 MiB but 20,780 MiB are available (host:
//   MemAvailable in /proc/meminfo): lower the context (--ctx, or the recipe's context_length
//   at r.yaml:8:17)
//
// check_memory_plan is a pure function of the figures (unit-tested); memory_available is the
// thin probe (/proc/meminfo's MemAvailable on the host, cudaMemGetInfo for cuda:N).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "rinfer/status.h"

namespace rinfer {

// One planned allocation.
struct MemoryItem {
  std::string what;  // "the KV cache for 900000 positions"
  uint64_t bytes = 0;
};

// Allocations about to be made on one device.
struct MemoryPlan {
  std::vector<MemoryItem> items;
  std::string hint;  // what to change to need less, naming the flag / recipe key that set it

  uint64_t total_bytes() const;
};

// What the device has free now.
struct MemoryAvailable {
  uint64_t bytes = 0;
  std::string source;  // "host: MemAvailable in /proc/meminfo", "cuda:0: cudaMemGetInfo"
};

// OK when the plan fits in what is available (equal fits); otherwise kOutOfMemory naming each
// item, the total and what is available in MiB (needs rounded up, available rounded down),
// the source of the figure, and the plan's hint.
Status check_memory_plan(const MemoryPlan& plan, const MemoryAvailable& available);

// "39,551 MiB": bytes in MiB with thousands separators, rounded up (round_up) or down.
std::string format_mib(uint64_t bytes, bool round_up = true);

// MemAvailable of a /proc/meminfo text, in bytes (kNotFound when the line is missing, as on
// kernels older than 3.14; kDataLoss when it is malformed).
Result<uint64_t> parse_meminfo_available(std::string_view meminfo);

// What `device` has free now: the host's MemAvailable (Linux /proc/meminfo) for the CPU, the
// free device memory (cudaMemGetInfo) for cuda:N. An error when it cannot be told (another OS,
// no /proc, a CPU-only build): callers then skip the check.
Result<MemoryAvailable> memory_available(const Device& device);

}  // namespace rinfer
