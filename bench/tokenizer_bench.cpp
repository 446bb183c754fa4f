// Tokenizer encode throughput, single thread, on English prose: SmolLM2 (byte-level BPE) and
// Gemma 3 (SentencePiece BPE), at 1 MB and 10 MB (linear scaling), plus a 1 MB run of one
// character (no quadratic blow-up).
//
//   tokenizer_bench [--repeat N] [--machine NAME] [--out FILE]
//
// Models come from the model cache (RINFER_MODEL_DIR); a missing one is reported and skipped.
// With --out, writes JSON (git sha, date, machine, build) for bench/results/<machine>/.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/model_cache.h"
#include "tokenizer/tokenizer.h"
#include "bench_util.h"

namespace {

using rinfer::bench::cpu_model;

// Sentences of ordinary English prose; the text is made by drawing them with an LCG.
constexpr const char* kSentences[] = {
    "The river had been rising for three days before anyone in the village took it seriously.",
    "She opened the window, and the smell of rain and cut grass filled the small kitchen.",
    "Most of the engineers agreed that the old bridge would not survive another winter.",
    "He wrote the letter twice, tore up both copies, and finally sent a short telegram instead.",
    "In 1887 the company employed more than four hundred workers at its mill by the harbour.",
    "Nobody remembered who had planted the orchard, but everyone remembered its apples.",
    "The committee met on Thursday afternoon to discuss the budget for the coming year.",
    "Children ran along the beach, chasing gulls that rose lazily into the grey sky.",
    "It is difficult to explain why some ideas spread quickly while others are forgotten.",
    "The museum's collection includes maps, letters, photographs and several hundred books.",
    "After the storm, the fishermen counted their boats and found that two were missing.",
    "Her grandfather had taught her to read the weather from the shape of the clouds.",
    "The new library will open in the spring, according to a statement from the mayor's office.",
    "Scientists measured the temperature of the lake every morning for nearly a decade.",
    "They walked in silence until the lights of the town appeared below the hill.",
    "Although the train was late, the passengers seemed patient and even cheerful.",
    "The recipe calls for two cups of flour, a pinch of salt and a little warm milk.",
    "His first novel sold poorly, but the second made him famous almost overnight.",
    "Every Sunday the market square filled with farmers selling cheese, bread and honey.",
    "The report concluded that the accident could have been prevented by simple maintenance.",
    "A narrow path led through the forest to a clearing where an old cabin stood.",
    "The teacher asked the students to describe, in their own words, what they had seen.",
    "Prices rose sharply during the summer, and many families struggled to pay their rent.",
    "He had always wanted to visit the mountains, but work kept him in the city.",
    "The orchestra played until midnight, and the audience refused to let them leave.",
    "Researchers believe the ancient road once connected the coast with the inland cities.",
    "When the power failed, the hospital switched to its generators within seconds.",
    "The lighthouse keeper kept a careful record of every ship that passed the point.",
    "She learned to speak French, German and Italian before she was twenty years old.",
    "The garden was quiet except for the humming of bees among the lavender.",
    "Few people realised how much the small factory meant to the economy of the valley.",
    "The judge listened carefully to both sides before announcing her decision.",
    "Snow covered the fields, and the only sound was the creak of the farmhouse door.",
    "I don't think they'll finish the building before the end of the year, he said.",
    "The map showed a lake where, in fact, there was only a wide and muddy marsh.",
    "Over the next few weeks, the volunteers repaired the roof and painted the walls.",
    "The students' questions were sharper than the professor had expected.",
    "They couldn't agree on a name for the boat, so they simply called it the Boat.",
    "The harvest was the best in living memory, and the barns could hardly hold it.",
    "Far to the north, the first lights of the aurora began to flicker across the sky.",
};

std::string english_text(size_t bytes, uint64_t seed) {
  std::string out;
  out.reserve(bytes + 256);
  uint64_t state = seed;
  constexpr size_t n = sizeof(kSentences) / sizeof(kSentences[0]);
  size_t in_paragraph = 0;
  while (out.size() < bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    out += kSentences[(state >> 33) % n];
    if (++in_paragraph == 3 + (state >> 20) % 5) {
      out += "\n\n";
      in_paragraph = 0;
    } else {
      out += ' ';
    }
  }
  out.resize(bytes);  // the text is ASCII: any cut is a character boundary
  return out;
}

// The 1-minute load average: other work on the machine slows a single-thread benchmark down.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double v = 0;
  f >> v;
  return v;
}

struct Row {
  std::string model, tokenizer, text;
  size_t bytes = 0, tokens = 0;
  double seconds = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  std::string out_path;
  std::string machine = rinfer::bench::machine_short_name(false, "");
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a == "--machine" && i + 1 < argc) {
      machine = argv[++i];
    } else {
      std::fprintf(stderr, "usage: tokenizer_bench [--repeat N] [--machine NAME] [--out FILE]\n");
      return 2;
    }
  }
  const std::string text_1mb = english_text(1'000'000, 42);
  const std::string text_10mb = english_text(10'000'000, 42);
  const std::string run_1mb(1'000'000, 'a');
  std::vector<Row> rows;
  for (const char* name : {"smollm2-135m-instruct-q4_1", "gemma3-270m-q4_k_m"}) {
    auto path = rinfer::resolve_model(name);
    if (!path.ok()) {
      std::fprintf(stderr, "skip %s: %s\n", name, path.status().message().c_str());
      continue;
    }
    auto file = rinfer::GgufFile::open(path.value());
    if (!file.ok()) {
      std::fprintf(stderr, "skip %s: %s\n", name, file.status().message().c_str());
      continue;
    }
    auto tok = rinfer::Tokenizer::from_gguf(file.value());
    if (!tok.ok()) {
      std::fprintf(stderr, "skip %s: %s\n", name, tok.status().message().c_str());
      continue;
    }
    const std::pair<const char*, const std::string*> texts[] = {
        {"english 1 MB", &text_1mb}, {"english 10 MB", &text_10mb}, {"one char 1 MB", &run_1mb}};
    for (const auto& [label, text] : texts) {
      Row r{name, tok.value()->describe(), label, text->size(), 0, 1e30};
      for (int k = 0; k < repeat; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        auto ids = tok.value()->encode(*text, {.add_special = false, .parse_special = false});
        const auto t1 = std::chrono::steady_clock::now();
        if (!ids.ok()) {
          std::fprintf(stderr, "%s: %s\n", name, ids.status().message().c_str());
          return 1;
        }
        r.tokens = ids->size();
        r.seconds = std::min(r.seconds, std::chrono::duration<double>(t1 - t0).count());
      }
      rows.push_back(r);
    }
  }
  std::printf("%-28s %-28s %-14s %10s %10s %9s %11s %8s\n", "model", "tokenizer", "text", "bytes",
              "tokens", "ms", "MB/s", "ns/byte");
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const Row& r : rows) {
    const double mbps = static_cast<double>(r.bytes) / 1e6 / r.seconds;
    const double ns_per_byte = r.seconds * 1e9 / static_cast<double>(r.bytes);
    std::printf("%-28s %-28s %-14s %10zu %10zu %9.1f %11.1f %8.1f\n", r.model.c_str(),
                r.tokenizer.c_str(), r.text.c_str(), r.bytes, r.tokens, r.seconds * 1e3, mbps,
                ns_per_byte);
    results.push_back({{"model", r.model},
                       {"tokenizer", r.tokenizer},
                       {"text", r.text},
                       {"bytes", r.bytes},
                       {"tokens", r.tokens},
                       {"seconds", r.seconds},
                       {"mb_per_s", mbps},
                       {"tokens_per_s", static_cast<double>(r.tokens) / r.seconds},
                       {"ns_per_byte", ns_per_byte}});
  }
  const double load = load_average();
  std::printf("load average %.2f on %ld hardware threads\n", load, sysconf(_SC_NPROCESSORS_ONLN));
  std::printf(
      "single thread, best of %d; MB = 10^6 bytes. Limit: not memory bandwidth (a core streams "
      "GB/s); the cost is per byte and per merge (regex, hash lookups, heap).\n",
      repeat);
  if (!out_path.empty()) {
    const std::string src = RINFER_SOURCE_DIR;
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    utsname u{};
    uname(&u);
    nlohmann::ordered_json j = {
        {"benchmark", "tokenizer"},
        {"git_sha", rinfer::bench::git_sha(src)},
        {"git_dirty",
         rinfer::bench::git_dirty(src, "src/tokenizer")},
        {"date", date},
        {"machine",
         {{"name", machine},
          {"cpu", cpu_model()},
          {"hardware_threads", sysconf(_SC_NPROCESSORS_ONLN)},
          {"load_average_1min", load},
          {"os", std::string(u.sysname) + " " + u.release}}},
        {"device", "cpu, one thread"},
        {"method", "encode() of the whole text, add_special and parse_special off, best of " +
                       std::to_string(repeat)},
        {"results", results},
        {"limit",
         "compute-bound per byte and per merge (PCRE2 JIT pre-tokenizer, hash lookups, merge "
         "heap); memory bandwidth is not the limit"},
    };
    if (rinfer::bench::write_json(out_path, j) != 0) return 1;
  }
  return 0;
}
