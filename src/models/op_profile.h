// Per-op profiling of forward passes (rinfer profile): a runner asked for it (ForwardBatch::
// profile) times each op of the pass it runs and hands the sink one OpRecord per op: its name,
// its layer, its start and end on the host's steady clock, and the bytes it moves and the FLOPs
// it does (for the roofline). The CPU runner times ops with the host clock; the CUDA runner with
// events on its stream (mapped onto the host clock at the pass's start, handed out when the pass
// ends) and marks each op and pass with an NVTX range for Nsight Systems. A pass with profiling
// runs eagerly (no CUDA graphs), kernel by kernel as the un-graphed path runs it.
//
// The op names (one per kind of work; a runner that fuses two names the op after the first):
//   upload     the pass's inputs staged on the host and copied to the device (CUDA)
//   embed      the token rows gathered (and scaled)
//   norm       an RMSNorm of the residual stream (a fused residual add + norm included)
//   qkv        the Q, K, V projections (their bias, a norm fused into the product included)
//   qk_norm    the per-head Q and K norms
//   rope       the rotary embedding of Q and K
//   kv_store   K and V written into the cache
//   attention  the attention over the cache (RoPE and the K/V store where one kernel does them)
//   wo         the attention output projection (and the norm fused after it)
//   post_norm  Gemma's post-attention and post-MLP norms
//   add        a residual add
//   gate_up    the MLP's gate and up projections
//   act        the MLP's activation (SwiGLU, GeGLU)
//   down       the MLP's down projection
//   logits     the output rows gathered, normed and projected onto the vocabulary
//   sample     tokens drawn on the device
// Layers: 0..n_layer-1 in the blocks; -1 before them (embed), n_layer after them.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>

namespace rinfer {

// What an op moves and computes: the bytes read and written from memory and the FLOPs (a
// multiply-add is 2).
struct OpCost {
  double bytes = 0;
  double flops = 0;
};

struct OpRecord {
  std::string_view op;  // a name of the list above (a literal: valid for the program's life)
  int32_t layer = -1;
  int64_t begin_ns = 0;  // host steady clock (now_ns)
  int64_t end_ns = 0;
  OpCost cost;
};

// One forward pass as the engine core ran it: its wall time, host work and synchronisation
// included (the step time the ops are set against).
struct PassRecord {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t n_tokens = 0;  // rows
  int32_t n_seq = 0;
  int64_t n_logits = 0;  // logit rows
};

class OpProfileSink {
 public:
  virtual ~OpProfileSink() = default;
  virtual void record_op(const OpRecord& r) = 0;
  virtual void record_pass(const PassRecord& r) = 0;
  // Time the profiler itself spent inside the next pass recorded (reading its events back after
  // the pass's work), which that pass's wall time is taken without.
  virtual void record_overhead(int64_t ns) { (void)ns; }
};

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How a runner times its ops: begin() before an op's work is queued, end() after.
class OpTimer {
 public:
  virtual ~OpTimer() = default;
  virtual void begin(std::string_view op, int32_t layer) = 0;
  virtual void end(const OpCost& cost) = 0;
};

// The host clock's timer: each op's record goes to the sink at end().
class HostOpTimer final : public OpTimer {
 public:
  explicit HostOpTimer(OpProfileSink* sink) : sink_(sink) {}
  void begin(std::string_view op, int32_t layer) override {
    cur_.op = op;
    cur_.layer = layer;
    cur_.begin_ns = now_ns();
  }
  void end(const OpCost& cost) override {
    cur_.end_ns = now_ns();
    cur_.cost = cost;
    sink_->record_op(cur_);
  }

 private:
  OpProfileSink* sink_;
  OpRecord cur_;
};

// One op timed for the scope's life; a null timer (profiling off) does nothing.
class OpScope {
 public:
  OpScope(OpTimer* t, std::string_view op, int64_t layer, const OpCost& cost) : t_(t), cost_(cost) {
    if (t_ != nullptr) t_->begin(op, static_cast<int32_t>(layer));
  }
  ~OpScope() {
    if (t_ != nullptr) t_->end(cost_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
  // The op's cost when it is known only once the op has run.
  void set_cost(const OpCost& c) { cost_ = c; }

 private:
  OpTimer* t_;
  OpCost cost_;
};

// y[rows, n_out] = x[rows, n_in] W^T: the weight's bytes read once, x and y once each.
OpCost matmul_cost(int64_t rows, int64_t n_in, int64_t n_out, double weight_bytes,
                   double x_elem_bytes, double y_elem_bytes);
// An op that reads `read` and writes `written` elements of `elem_bytes` each, `flops_per` FLOPs
// per element read.
OpCost stream_cost(int64_t read, int64_t written, double elem_bytes, double flops_per = 1);

// Attention over a paged cache: each sequence's n_new query rows against its n_kv positions
// (causal: row r of the n_new sees n_kv - n_new + r + 1; window > 0 caps that), every K/V row
// of a sequence read once (kv_elem_bytes each element), Q read and the output written in
// io_elem_bytes. FLOPs: QK^T and PV, 4 per head dim per (query, key) pair per head.
struct AttentionSeqShape {
  int64_t n_new = 0;
  int64_t n_kv = 0;
};
OpCost attention_cost(std::span<const AttentionSeqShape> seqs, int64_t n_head, int64_t n_head_kv,
                      int64_t head_dim, bool causal, int64_t window, double kv_elem_bytes,
                      double io_elem_bytes);

}  // namespace rinfer
