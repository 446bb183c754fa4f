// Layer-by-layer comparison of two runs over the same tokens (rinfer diff): run A records its
// taps (models/taps.h) in a TapRecorder; run B hands its own to a TapComparer, which compares
// each row with A's as it comes (B is never stored). Per (layer, op), accumulated in double:
//
//   rel_l2   ||b - a||_2 / ||a||_2 over every row (0 when both are zero, +inf when only a is)
//   cosine   <a, b> / (||a|| ||b||) over the rows taken as one vector (1 when both are zero)
//   max_abs  max |b - a|
//
// Non-finite values propagate (a NaN gives NaN metrics, which never pass a threshold).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/taps.h"
#include "rinfer/status.h"

namespace rinfer {

// Which kinds a recorder or comparer wants: bit (1 << kind).
using TapMask = uint32_t;
// Every kind the runners of both devices give (mlp_act and attn_ctx, the CPU's alone, are left
// out: they come after every other kind).
inline constexpr TapMask kAllTaps = (1u << static_cast<uint32_t>(TapKind::kMlpAct)) - 1;
inline constexpr TapMask tap_bit(TapKind k) { return 1u << static_cast<uint32_t>(k); }

class TapRecorder final : public TapSink {
 public:
  struct Stream {
    TapKind kind = TapKind::kEmbed;
    int32_t layer = 0;
    int64_t width = 0;
    std::vector<float> values;  // [rows, width]: every pass's rows, in order
    int64_t rows() const { return width > 0 ? static_cast<int64_t>(values.size()) / width : 0; }
  };

  explicit TapRecorder(TapMask kinds = kAllTaps) : kinds_(kinds) {}
  bool wants(TapKind kind) const override { return (kinds_ & tap_bit(kind)) != 0; }
  void record(TapKind kind, int32_t layer, const float* rows, int64_t n_rows,
              int64_t width) override;

  // Every (kind, layer) seen, ordered by layer (embed first, logits last), then kind.
  const std::map<std::pair<int32_t, int>, Stream>& streams() const { return streams_; }
  const Stream* find(TapKind kind, int32_t layer) const;
  // A stream whose width changed between passes (a runner's bug), or ok.
  const Status& status() const { return status_; }

 private:
  TapMask kinds_;
  std::map<std::pair<int32_t, int>, Stream> streams_;  // (layer, kind)
  Status status_;
};

struct TapDiff {
  TapKind kind = TapKind::kEmbed;
  int32_t layer = 0;
  int64_t rows = 0;
  int64_t width = 0;
  double rel_l2 = 0;
  double cosine = 1;
  double max_abs = 0;
};

class TapComparer final : public TapSink {
 public:
  // `ref` must outlive the comparer.
  explicit TapComparer(const TapRecorder& ref, TapMask kinds = kAllTaps)
      : ref_(ref), kinds_(kinds) {}
  bool wants(TapKind kind) const override { return (kinds_ & tap_bit(kind)) != 0; }
  void record(TapKind kind, int32_t layer, const float* rows, int64_t n_rows,
              int64_t width) override;

  // One row per stream of the reference that B also produced, in the reference's order. An
  // error when B produced a stream A lacks, another width, more or fewer rows than A.
  Result<std::vector<TapDiff>> results() const;

 private:
  struct Acc {
    int64_t rows = 0;
    double d2 = 0, a2 = 0, b2 = 0, ab = 0, max_abs = 0;
  };
  const TapRecorder& ref_;
  TapMask kinds_;
  std::map<std::pair<int32_t, int>, Acc> acc_;
  Status status_;
};

// The first row (in order) whose rel_l2 exceeds `threshold` (a NaN counts), or nullopt.
std::optional<size_t> first_past(std::span<const TapDiff> diffs, double threshold);

// The first row (in order) whose rel_l2 is not exactly 0: where the runs start to differ.
std::optional<size_t> first_difference(std::span<const TapDiff> diffs);

// The layer whose residual stream (block_out) grew its error most over the layer before (the
// embedding for layer 0), as (index into diffs, ratio), among layers entered with a non-zero
// error (where the error starts is first_difference's answer); nullopt when there is none.
std::optional<std::pair<size_t, double>> largest_growth(std::span<const TapDiff> diffs);

// "layer 3 mlp_out", "embed", "logits".
std::string tap_label(TapKind kind, int32_t layer);

}  // namespace rinfer
