// Shared by the image classifier tests (CPU and CUDA): the reference logits of
// tests/tools/gen_vision_goldens.py (RINFER_VISION_GOLDENS names another file: the GPU machine
// writes the ResNet-50 entry of the checkpoint it makes there) and its synthetic input.
#pragma once

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace rinfer::test {

inline const nlohmann::json& vision_goldens() {
  static const nlohmann::json j = [] {
    const char* env = std::getenv("RINFER_VISION_GOLDENS");
    std::ifstream f(env != nullptr && *env != '\0'
                        ? std::string(env)
                        : test_data_path("vision/classifier_goldens.json"));
    return nlohmann::json::parse(f);
  }();
  return j;
}

inline std::vector<float> floats(const nlohmann::json& a) { return a.get<std::vector<float>>(); }

// x[c, h, w] = sin(0.001 * (h * 224 + w) + c) * 2, laid out NHWC (the golden script's input).
inline std::vector<float> synthetic_image() {
  std::vector<float> x(224 * 224 * 3);
  for (int h = 0; h < 224; ++h)
    for (int w = 0; w < 224; ++w)
      for (int c = 0; c < 3; ++c)
        x[(h * 224 + w) * 3 + c] = static_cast<float>(std::sin(0.001 * (h * 224 + w) + c) * 2);
  return x;
}

}  // namespace rinfer::test
