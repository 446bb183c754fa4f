// 64 chat prompts of different lengths (16 topics in 4 forms), for the tests that serve many
// requests of a real model together and each alone.
#pragma once

#include <string>
#include <vector>

namespace rinfer::test {

inline std::vector<std::string> chat_prompts() {
  const char* topics[] = {"the moon",   "bread",        "rain",      "a violin",
                          "chess",      "the ocean",    "volcanoes", "bees",
                          "a library",  "winter",       "trains",    "coffee",
                          "the desert", "a lighthouse", "music",     "mountains"};
  const char* forms[] = {"What is {}?", "Write one sentence about {}.",
                         "Explain {} to a child in two sentences.",
                         "List three facts about {}, and say which one surprises people most."};
  std::vector<std::string> out;
  for (const char* f : forms) {
    for (const char* t : topics) {
      std::string s = f;
      s.replace(s.find("{}"), 2, t);
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace rinfer::test
