// The CUDA runner's KV arena (llama_cuda_arena.h).
#include "models/llama/cuda/llama_cuda_arena.h"

#include <algorithm>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace rinfer::llama {

namespace {

// K and V per layer on the device: [n_blocks(group), block_size, kv_dim] of the spec's dtype.
class DeviceKvArena final : public kv::KvArena {
 public:
  static Result<std::unique_ptr<DeviceKvArena>> create(const kv::KvSpec& spec,
                                                       std::span<const int32_t> n_blocks,
                                                       int device, cudaStream_t compute) {
    if (n_blocks.size() != static_cast<size_t>(spec.n_groups())) {
      return invalid_argument("kv arena: {} block counts for {} groups", n_blocks.size(),
                              spec.n_groups());
    }
    std::unique_ptr<DeviceKvArena> a(new DeviceKvArena());
    a->spec_ = spec;
    a->n_blocks_.assign(n_blocks.begin(), n_blocks.end());
    a->device_ = device;
    a->compute_ = compute;
    RINFER_ASSIGN_OR_RETURN(cuda::DeviceAllocator * alloc, cuda::plain_device_allocator(device));
    RINFER_ASSIGN_OR_RETURN(a->copy_, cuda::Stream::create(device));
    RINFER_ASSIGN_OR_RETURN(a->ready_, cuda::Event::create(device));
    RINFER_ASSIGN_OR_RETURN(a->copied_, cuda::Event::create(device));
    const uint64_t elem = dtype_traits(spec.dtype).block_bytes;
    for (int64_t l = 0; l < spec.n_layer; ++l) {
      const int32_t nb = n_blocks[static_cast<size_t>(spec.group_of_layer[static_cast<size_t>(l)])];
      const auto bytes = static_cast<size_t>(
          static_cast<uint64_t>(nb) * static_cast<uint64_t>(spec.block_size * spec.kv_dim) * elem);
      for (int kv = 0; kv < 2; ++kv) {
        auto b = cuda::DeviceBuffer::create(std::max<size_t>(bytes, 16), device, compute, alloc);
        if (!b.ok()) {
          return b.status().with_context(
              fmt::format("allocating the KV cache on cuda:{} ({} in all, layer {})", device,
                          spec.describe(), l));
        }
        RINFER_CUDA_RETURN(cudaMemsetAsync(b->data(), 0, b->bytes(), compute));
        a->storage_.push_back(std::move(*b));
      }
      a->k_.push_back(a->storage_[a->storage_.size() - 2].data());
      a->v_.push_back(a->storage_.back().data());
    }
    RINFER_CUDA_RETURN(cudaStreamSynchronize(compute));
    return a;
  }

  Device device() const override { return Device::cuda(device_); }

  // Device -> host (a swap out) or device -> device: on the copy stream, after the compute
  // stream's work so far, and the compute stream waits for them before its next pass.
  Status copy_blocks(kv::KvArena& dst, std::span<const kv::BlockCopy> copies) const override {
    RINFER_RETURN_IF_ERROR(check_copies(dst, copies));
    return copy(*this, dst, copies);
  }
  // New buffers on the compute stream (after its work so far), the old blocks copied over.
  Status grow(std::span<const int32_t> n_blocks) override {
    RINFER_RETURN_IF_ERROR(check_grow(n_blocks));
    RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(device_));
    RINFER_ASSIGN_OR_RETURN(cuda::DeviceAllocator * alloc, cuda::plain_device_allocator(device_));
    const uint64_t per_block = static_cast<uint64_t>(spec_.block_size * spec_.kv_dim) *
                               dtype_traits(spec_.dtype).block_bytes;
    std::vector<cuda::DeviceBuffer> storage;
    for (int64_t l = 0; l < spec_.n_layer; ++l) {
      const auto grp = static_cast<size_t>(spec_.group_of_layer[static_cast<size_t>(l)]);
      const uint64_t keep = per_block * static_cast<uint64_t>(n_blocks_[grp]);
      const uint64_t bytes = per_block * static_cast<uint64_t>(n_blocks[grp]);
      for (int kv = 0; kv < 2; ++kv) {
        auto b = cuda::DeviceBuffer::create(static_cast<size_t>(std::max<uint64_t>(bytes, 16)),
                                            device_, compute_, alloc);
        if (!b.ok()) {
          return b.status().with_context(
              fmt::format("growing the KV cache to {} blocks", n_blocks[grp]));
        }
        auto* dst = static_cast<uint8_t*>(b->data());
        RINFER_CUDA_RETURN(
            cudaMemcpyAsync(dst, kv == 0 ? k(l) : v(l), keep, cudaMemcpyDeviceToDevice, compute_));
        RINFER_CUDA_RETURN(cudaMemsetAsync(dst + keep, 0, bytes - keep, compute_));
        storage.push_back(std::move(*b));
      }
    }
    RINFER_CUDA_RETURN(cudaStreamSynchronize(compute_));
    storage_ = std::move(storage);
    for (int64_t l = 0; l < spec_.n_layer; ++l) {
      k_[static_cast<size_t>(l)] = storage_[static_cast<size_t>(2 * l)].data();
      v_[static_cast<size_t>(l)] = storage_[static_cast<size_t>(2 * l + 1)].data();
    }
    n_blocks_.assign(n_blocks.begin(), n_blocks.end());
    return ok_status();
  }
  // Host -> device (a swap in).
  Status pull_blocks(const kv::KvArena& src, std::span<const kv::BlockCopy> copies) override {
    RINFER_RETURN_IF_ERROR(src.check_copies(*this, copies));
    return copy(src, *this, copies);
  }

 private:
  DeviceKvArena() = default;

  Status copy(const kv::KvArena& from, kv::KvArena& to,
              std::span<const kv::BlockCopy> copies) const {
    if (copies.empty()) return ok_status();
    RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard g, cuda::DeviceGuard::set(device_));
    cudaStream_t cs = copy_.get();
    RINFER_CUDA_RETURN(cudaEventRecord(ready_.get(), compute_));
    RINFER_CUDA_RETURN(cudaStreamWaitEvent(cs, ready_.get(), 0));
    const uint64_t block = static_cast<uint64_t>(spec_.block_size * spec_.kv_dim) *
                           dtype_traits(spec_.dtype).block_bytes;
    for (const kv::BlockCopy& c : copies) {
      for (int32_t l : spec_.groups[static_cast<size_t>(c.group)].layers) {
        for (int kv = 0; kv < 2; ++kv) {
          const auto* s = static_cast<const uint8_t*>(kv == 0 ? from.k(l) : from.v(l));
          auto* d = static_cast<uint8_t*>(kv == 0 ? to.k(l) : to.v(l));
          RINFER_CUDA_RETURN(cudaMemcpyAsync(d + static_cast<uint64_t>(c.dst) * block,
                                             s + static_cast<uint64_t>(c.src) * block, block,
                                             cudaMemcpyDefault, cs));
        }
      }
    }
    RINFER_CUDA_RETURN(cudaEventRecord(copied_.get(), cs));
    RINFER_CUDA_RETURN(cudaStreamWaitEvent(compute_, copied_.get(), 0));
    // The host side of a swap out is read by the next swap in (same stream) or freed with the
    // arena; a pageable host buffer makes the copy synchronous anyway.
    return ok_status();
  }

  int device_ = 0;
  cudaStream_t compute_ = nullptr;
  cuda::Stream copy_;
  cuda::Event ready_, copied_;
  std::vector<cuda::DeviceBuffer> storage_;
};

}  // namespace

Result<std::unique_ptr<kv::KvArena>> make_device_arena(const kv::KvSpec& spec,
                                                       std::span<const int32_t> n_blocks,
                                                       int device, cudaStream_t compute) {
  RINFER_ASSIGN_OR_RETURN(auto a, DeviceKvArena::create(spec, n_blocks, device, compute));
  return std::unique_ptr<kv::KvArena>(std::move(a));
}

}  // namespace rinfer::llama
