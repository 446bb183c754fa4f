// rinfer tune's trials and what it writes of them: the report (Markdown, JSON, and an SVG of
// decode speed against precision) and the trial cache (a JSON file of measured trials keyed by
// git sha, machine, device, recipe and settings, so that a second run measures nothing twice).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rinfer/status.h"
#include "tools/tune_space.h"

namespace rinfer {

struct TuneSpeed {
  double total_ms = 0;  // prompt + generated tokens, one request (median of the repeats)
  double probe_ms = 0;  // the first, short run (prompt + 8 tokens): the pruning probe
  double decode_tps = 0;
  double prefill_tps = 0;
};

struct TunePrecision {
  double top1 = 0, mean_kl = 0, ppl_change = 0;
  bool passed = false;
  std::string failures;
};

struct TuneTrial {
  int id = 0;
  std::string base;       // the recipe file the trial is over (a path)
  TuneSettings settings;  // its knobs
  std::string change;     // what it changes against the trial it was made from
  std::string verdict;    // "start", "best", "kept", "slower", "pruned", "gate failed", ...
  std::optional<TuneSpeed> speed;
  std::optional<TunePrecision> precision;
  std::string key;        // its trial cache key
  bool cached = false;    // measured by an earlier run (the trial cache)
  bool accepted = false;  // became the best when it ran
};

nlohmann::json trial_json(const TuneTrial& t);

// The cache: key -> {speed, precision}.
class TuneCache {
 public:
  // A missing file is an empty cache; an unreadable or malformed one is an error naming it.
  static Result<TuneCache> open(const std::string& path);
  bool find(const std::string& key, TuneTrial& t) const;  // fills speed and precision
  void put(const std::string& key, const TuneTrial& t);
  Status save() const;  // atomically
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::shared_ptr<nlohmann::json> j_;
};

struct TuneSummary {
  std::string target, start, reference, device, machine, git_sha, date;
  std::string objective;  // what was minimized, in words
  // llm-serve: a load's wall time; TuneSpeed's decode_tps and prefill_tps are then the load's
  // output and total (input + output) tokens/s.
  bool serving = false;
  double budget_min = 0, elapsed_s = 0;
  bool budget_reached = false;
  int best = -1;  // trial id
  int start_id = 0;
  int duplicates = 0;  // settings whose recipe ran as an earlier trial
};

std::string tune_markdown(const TuneSummary& s, const std::vector<TuneTrial>& trials);
nlohmann::json tune_json(const TuneSummary& s, const std::vector<TuneTrial>& trials);
// Decode tokens/s against mean KL to the reference, a point per measured trial (the gate's
// failures and the best marked).
std::string tune_svg(const TuneSummary& s, const std::vector<TuneTrial>& trials);

}  // namespace rinfer
