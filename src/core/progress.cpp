#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace rinfer {

namespace {

std::string format_seconds(double s) {
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 3600)
    return fmt::format("{}m{:02d}s", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
}

}  // namespace

bool Progress::terminal() {
  const char* off = std::getenv("RINFER_NO_PROGRESS");
  if (off != nullptr && *off != '\0' && std::string(off) != "0") return false;
  return ::isatty(STDERR_FILENO) != 0;
}

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      enabled_(terminal()),
      start_(Clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

std::string Progress::format(int64_t done, double seconds, const std::string& note) const {
  std::string s = label_;
  if (total_ > 0) {
    const int w = static_cast<int>(fmt::format("{}", total_).size());
    s += fmt::format("  [{:>{}}/{}] {:3.0f}%", done, w, total_,
                     100.0 * static_cast<double>(done) / static_cast<double>(total_));
  } else {
    s += fmt::format("  [{}]", done);
  }
  if (done > 0 && seconds > 0) {
    const double rate = static_cast<double>(done) / seconds;
    if (rate >= 1.0) {
      s += fmt::format("  {:.1f} {}/s", rate, unit_);
    } else {
      s += fmt::format("  {:.1f} s/{}", 1.0 / rate, unit_);
    }
    if (total_ > 0 && done < total_) {
      s += "  ETA " + format_seconds(static_cast<double>(total_ - done) / rate);
    }
  }
  if (!note.empty()) s += "  " + note;
  return s;
}

void Progress::update(int64_t done, const std::string& note) {
  if (!enabled_) return;
  const auto now = Clock::now();
  const bool last = total_ > 0 && done >= total_;
  if (drawn_ && !last && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const std::string line = format(done, std::chrono::duration<double>(now - start_).count(), note);
  // Pad with spaces over a longer previous line.
  const size_t pad = last_width_ > line.size() ? last_width_ - line.size() : 0;
  std::fprintf(stderr, "\r%s%*s", line.c_str(), static_cast<int>(pad), "");
  std::fflush(stderr);
  last_width_ = line.size();
  drawn_ = true;
}

void Progress::finish() {
  if (!enabled_ || !drawn_) return;
  std::fprintf(stderr, "\r%*s\r", static_cast<int>(last_width_), "");
  std::fflush(stderr);
  drawn_ = false;
  last_width_ = 0;
}

}  // namespace rinfer
