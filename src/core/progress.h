// A progress line for long work (bench, perplexity, quantize), redrawn in place on stderr:
//
//   perplexity  [ 7/14]  50%  1.8 window/s  ETA 4 s  ppl 18.12
//
// Drawn only when stderr is a terminal (isatty) and RINFER_NO_PROGRESS is unset: piped or
// redirected output, CI logs and tests see nothing. Redraws at most every 100 ms (and on the
// last step); finish() ends the line. Not thread-safe: update it from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace rinfer {

class Progress {
 public:
  // `total` <= 0: unknown (no percentage or ETA). `unit` names one step ("window", "tensor").
  Progress(std::string label, int64_t total, std::string unit = "step");
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Steps done so far; `note` is shown after the ETA ("ppl 18.12").
  void update(int64_t done, const std::string& note = "");
  void set_label(std::string label) { label_ = std::move(label); }
  // Clears the line (nothing when nothing was drawn).
  void finish();

  bool enabled() const { return enabled_; }
  // The text update() would draw (for tests; no terminal needed).
  std::string format(int64_t done, double seconds, const std::string& note) const;

  // Whether progress lines are drawn in this process (stderr is a terminal, RINFER_NO_PROGRESS
  // unset).
  static bool terminal();

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  int64_t total_;
  std::string unit_;
  bool enabled_;
  bool drawn_ = false;
  size_t last_width_ = 0;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

}  // namespace rinfer
