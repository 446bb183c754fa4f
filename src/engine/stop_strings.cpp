#include "engine/stop_strings.h"

#include <algorithm>
#include <utility>

namespace rinfer {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

void StopStringFilter::reset() {
  pending_.clear();
  stopped_ = false;
  matched_.clear();
}

std::string StopStringFilter::push(std::string_view piece) {
  if (stopped_) return {};
  pending_.append(piece);
  if (stops_.empty()) return std::exchange(pending_, {});

  // The earliest match of any stop string (the longest one when two start at the same byte).
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos == std::string::npos) continue;
    if (pos < best || (pos == best && s.size() > best_stop->size())) {
      best = pos;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    stopped_ = true;
    matched_ = *best_stop;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }

  // Hold back the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace rinfer
