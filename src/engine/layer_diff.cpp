#include "engine/layer_diff.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace rinfer {

namespace {
std::pair<int32_t, int> key_of(TapKind kind, int32_t layer) {
  return {layer, static_cast<int>(kind)};
}
}  // namespace

void TapRecorder::record(TapKind kind, int32_t layer, const float* rows, int64_t n_rows,
                         int64_t width) {
  if (!wants(kind) || n_rows <= 0 || width <= 0) return;
  Stream& s = streams_[key_of(kind, layer)];
  if (s.width == 0) {
    s.kind = kind;
    s.layer = layer;
    s.width = width;
  } else if (s.width != width && status_.ok()) {
    status_ = internal_error("tap {}: rows of {} values after rows of {}",
                             tap_label(kind, layer), width, s.width);
    return;
  }
  s.values.insert(s.values.end(), rows, rows + n_rows * width);
}

const TapRecorder::Stream* TapRecorder::find(TapKind kind, int32_t layer) const {
  auto it = streams_.find(key_of(kind, layer));
  return it == streams_.end() ? nullptr : &it->second;
}

void TapComparer::record(TapKind kind, int32_t layer, const float* rows, int64_t n_rows,
                         int64_t width) {
  if (!wants(kind) || n_rows <= 0 || !status_.ok()) return;
  const TapRecorder::Stream* a = ref_.find(kind, layer);
  if (a == nullptr) {
    status_ = invalid_argument("{}: the second run has it, the first does not",
                               tap_label(kind, layer));
    return;
  }
  if (a->width != width) {
    status_ = invalid_argument("{}: rows of {} values against {} in the first run",
                               tap_label(kind, layer), width, a->width);
    return;
  }
  Acc& acc = acc_[key_of(kind, layer)];
  if (acc.rows + n_rows > a->rows()) {
    status_ = invalid_argument("{}: the second run has more rows than the first ({})",
                               tap_label(kind, layer), a->rows());
    return;
  }
  const float* ref = a->values.data() + acc.rows * width;
  const int64_t n = n_rows * width;
  for (int64_t i = 0; i < n; ++i) {
    const double x = ref[i], y = rows[i], d = y - x;
    acc.d2 += d * d;
    acc.a2 += x * x;
    acc.b2 += y * y;
    acc.ab += x * y;
    const double ad = std::fabs(d);
    if (!(ad <= acc.max_abs)) acc.max_abs = ad;  // NaN sticks
  }
  acc.rows += n_rows;
}

Result<std::vector<TapDiff>> TapComparer::results() const {
  RINFER_RETURN_IF_ERROR(ref_.status());
  RINFER_RETURN_IF_ERROR(status_);
  std::vector<TapDiff> out;
  for (const auto& [key, a] : ref_.streams()) {
    if (!wants(a.kind)) continue;
    auto it = acc_.find(key);
    if (it == acc_.end()) {
      return invalid_argument("{}: the first run has it, the second does not (its device or "
                              "runner gives other taps)",
                              tap_label(a.kind, a.layer));
    }
    const Acc& acc = it->second;
    if (acc.rows != a.rows()) {
      return invalid_argument("{}: {} rows in the second run, {} in the first",
                              tap_label(a.kind, a.layer), acc.rows, a.rows());
    }
    TapDiff d;
    d.kind = a.kind;
    d.layer = a.layer;
    d.rows = acc.rows;
    d.width = a.width;
    const double inf = std::numeric_limits<double>::infinity();
    d.rel_l2 = acc.a2 > 0 ? std::sqrt(acc.d2 / acc.a2) : (acc.d2 > 0 ? inf : acc.d2);
    d.cosine = acc.a2 > 0 && acc.b2 > 0 ? acc.ab / std::sqrt(acc.a2 * acc.b2)
                                        : (acc.a2 == acc.b2 ? 1.0 : 0.0);
    if (std::isnan(acc.d2)) d.cosine = std::nan("");
    d.max_abs = acc.max_abs;
    out.push_back(d);
  }
  return out;
}

std::optional<size_t> first_past(std::span<const TapDiff> diffs, double threshold) {
  for (size_t i = 0; i < diffs.size(); ++i) {
    if (!(diffs[i].rel_l2 <= threshold)) return i;
  }
  return std::nullopt;
}

std::optional<size_t> first_difference(std::span<const TapDiff> diffs) {
  for (size_t i = 0; i < diffs.size(); ++i) {
    if (diffs[i].rel_l2 != 0) return i;  // NaN too
  }
  return std::nullopt;
}

std::optional<std::pair<size_t, double>> largest_growth(std::span<const TapDiff> diffs) {
  std::optional<std::pair<size_t, double>> best;
  std::optional<double> before;  // the residual stream's error entering the layer
  for (size_t i = 0; i < diffs.size(); ++i) {
    const TapDiff& d = diffs[i];
    if (d.kind != TapKind::kEmbed && d.kind != TapKind::kBlockOut) continue;
    if (before && *before > 0 && std::isfinite(*before) && d.kind == TapKind::kBlockOut) {
      const double ratio = d.rel_l2 / *before;
      if (!best || ratio > best->second) best = std::make_pair(i, ratio);
    }
    before = d.rel_l2;
  }
  return best;
}

std::string tap_label(TapKind kind, int32_t layer) {
  if (kind == TapKind::kEmbed || kind == TapKind::kPooled || kind == TapKind::kLogits) {
    return std::string(tap_name(kind));
  }
  return fmt::format("layer {} {}", layer, tap_name(kind));
}

}  // namespace rinfer
