// CUDA graphs of the engine core's decode steps (LlamaCudaRunner with cuda_graphs).
//
// OneRowGraphs: steps of one sequence (with strategies.kernels.cuda.runner_matvec): the model's
// decode pass over the paged arena, captured once per attention length bound (1024 positions,
// twice that, ... up to the arena's n_ctx) and sampled or not, replayed every step.
// A replay reads its inputs from fixed device buffers, written by stage() from pinned memory:
// the token, its position, the sequence's length after the step, its block table of every group
// (fixed width: the blocks of n_ctx positions) and the sampling row with its history window.
// The graphs hold the arena's buffers: they are dropped when those move (the arena grows) or
// another arena comes.
// Queued ahead (DecoderRunner::decode_ahead): after step k's replay, feed() copies its sampled id
// on the device into the token input and the history (whose window moves one id along per step,
// over room for kAheadSteps ids past the first window) and to pinned memory; stage_ahead()
// writes step k + 1's other inputs through the second of two pinned slots, so that it is queued
// while step k runs; wait(k) hands out step k's id.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "core/cuda/device_allocator.h"
#include "kv/kv_arena.h"
#include "models/model.h"
#include "ops/cuda/ops_cuda.h"
#include "rinfer/status.h"

namespace rinfer::llama {

// The arena a set of graphs was captured over and its K and V buffers then: graphs hold those
// buffers, so they are dropped when the buffers move (the arena grows) or another arena comes.
class CapturedArena {
 public:
  // Whether `arena` is the one held, with the same buffers.
  bool matches(const kv::KvArena& arena) const;
  void take(const kv::KvArena& arena);
  void clear();

 private:
  const kv::KvArena* arena_ = nullptr;
  std::vector<const void*> buffers_;  // K and V of every layer
};

// BatchGraphs: decode steps of 2 or more sequences, one new token each (the engine core's
// running batch), through the runner's own pass (GEMMs, paged attention) padded to a bucket of
// rows: 2, 4, then multiples of 8. A padding row is token 0 at position 0 of a sequence of length
// 1 over block 0, its K and V not stored (slot -1), its logits and id not read. One graph per
// bucket, attention length bound (as OneRowGraphs') and sampled or not. A bucket's first step
// runs eagerly: cuBLASLt times its candidates for a new row count then, which a capture cannot
// hold. A replay reads its inputs from one fixed device buffer (the runner's staging layout of
// the padded batch), dropped with every graph when it must grow.
class BatchGraphs {
 public:
  BatchGraphs(int device, cuda::DeviceAllocator* alloc) : device_(device), alloc_(alloc) {}
  ~BatchGraphs();
  BatchGraphs(const BatchGraphs&) = delete;
  BatchGraphs& operator=(const BatchGraphs&) = delete;

  // The bucket of n sequences (0: fewer than 2, or more than `cap` rows).
  static int32_t bucket(int32_t n, int64_t cap);
  // The fixed input buffer, at least `words` int32 (every graph dropped when it grows).
  Result<int32_t*> inputs(size_t words, cudaStream_t st);
  // Queues the step of (bucket, bound level, sampled): its graph replayed (captured first), or
  // `record` run eagerly on the bucket's first step or where the capture failed.
  Status launch(const kv::KvArena& arena, int32_t bucket, size_t level, bool sampled,
                const std::function<Status()>& record, cudaStream_t st);
  // Steps replayed from a graph so far.
  int64_t replays() const { return replays_; }

 private:
  void drop_graphs();

  int device_ = 0;
  cuda::DeviceAllocator* alloc_ = nullptr;
  cuda::DeviceBuffer dev_;
  size_t words_ = 0;
  CapturedArena captured_;
  // nullptr: a capture failed (the step runs eagerly).
  std::map<std::tuple<int32_t, size_t, bool>, cudaGraphExec_t> graphs_;
  std::set<int32_t> warmed_;  // buckets run once eagerly
  int64_t replays_ = 0;
};

class OneRowGraphs {
 public:
  // Where a replay reads its inputs (device pointers, fixed for the graphs' lifetime).
  struct Inputs {
    int32_t* token = nullptr;
    int32_t* position = nullptr;
    int32_t* kv_len = nullptr;         // the positions after this step
    const int32_t* tables = nullptr;   // group g's table at tables + g * table_width
    int64_t table_width = 0;
    const cuda::RowSample* sample = nullptr;
    const int32_t* hist = nullptr;     // the sampling row's history window
  };
  // Records the step of `bound` positions at most into the stream being captured.
  using Capture = std::function<Status(const Inputs& in, int64_t bound, bool sampled)>;

  OneRowGraphs(int device, cuda::DeviceAllocator* alloc) : device_(device), alloc_(alloc) {}
  ~OneRowGraphs();
  OneRowGraphs(const OneRowGraphs&) = delete;
  OneRowGraphs& operator=(const OneRowGraphs&) = delete;

  // Checks the step's blocks against the arena, writes its inputs to pinned memory and queues
  // their copy to the device (after the stream's work so far); sample (with hist, at most
  // cuda::kMaxDecodeHistory ids) when sampled.
  Status stage(const ForwardBatch& b, const kv::KvArena& arena, const cuda::RowSample* sample,
               std::span<const int32_t> hist, cudaStream_t st);
  // Replays the graph of the staged step (captured by `capture` first when missing). Every graph
  // starts by pulling the step's inputs from pinned memory (cuda::decode_pull); a sampled one
  // (`ids`: where its sampler writes the id) ends by feeding the id to the next step, the
  // penalties' window and pinned memory (cuda::decode_feed), so that steps queued ahead run
  // back to back with no copy between them.
  Status launch(const kv::KvArena& arena, bool sampled, const int32_t* ids, const Capture& capture,
                cudaStream_t st);

  // Steps a run queued ahead can take past its first history window.
  static constexpr int64_t kAheadSteps = 4096;
  // Queues step k's event (the graph of step k, sampled, has fed its id).
  Status fed(int64_t k, cudaStream_t st);
  // Step k's inputs but the token and the history (the sampling row's hist_off k moves its
  // window; its id goes to history slot w + k) into pinned half k % 2 (free: step k - 2 has
  // been waited for), which step k's graph pulls; nothing queued.
  Status stage_ahead(const ForwardBatch& b, const kv::KvArena& arena, const cuda::RowSample& sample,
                     int64_t k, int32_t w);
  // Waits for step k (fed) and returns its id.
  Result<int32_t> wait(int64_t k);
  // Steps replayed so far.
  int64_t replays() const { return replays_; }

 private:
  Status allocate(const kv::KvSpec& spec, cudaStream_t st);
  // Checks the step against the arena and writes its inputs but the token and the history to
  // pinned words p (0: the token's word).
  Status write_inputs(const ForwardBatch& b, const kv::KvArena& arena, int32_t* p);
  void drop_graphs();

  int device_ = 0;
  cuda::DeviceAllocator* alloc_ = nullptr;
  Inputs in_;
  int64_t n_ctx_ = 0, block_size_ = 0, kv_len_ = 0;
  int32_t n_groups_ = 0;
  size_t words_ = 0;  // int32 words of the inputs
  size_t pinned_bytes() const { return (2 * words_ + 2) * 4; }
  size_t off_sample_ = 0, off_hist_ = 0;
  int32_t* pinned_ = nullptr;      // [2 halves of words_], then the ids of steps fed [2]
  int32_t* pinned_dev_ = nullptr;  // the same memory as the device sees it
  int32_t* parity_ = nullptr;      // device: the half the next graph pulls and feeds
  const int32_t* ids_ = nullptr;   // the sampled graphs' id (captured in them)
  cudaEvent_t fed_[2] = {nullptr, nullptr};
  cuda::DeviceBuffer dev_;
  // Per length bound level: [0] logits only, [1] sampled.
  std::vector<cudaGraphExec_t> graphs_[2];
  CapturedArena captured_;
  int64_t replays_ = 0;
};

}  // namespace rinfer::llama
