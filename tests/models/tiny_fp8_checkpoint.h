// A tiny random Llama model written as an FP8 checkpoint the way published ones store it
// (compressed-tensors' float-quantized format, as llm-compressor writes it): every layer matrix
// `*_proj.weight` as F8_E4M3 codes with a `*_proj.weight_scale` (per output channel [n_out, 1],
// or one per tensor), a static `*_proj.input_scale`, everything else F32, and
// config.json's quantization_config. The codes come from core/quantize_8bit.h's quantizer
// (checked against PyTorch's float8_e4m3fn cast); `dequantized` holds the same weights as f32
// values code * scale, the reference the loader must reproduce.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/quantize_8bit.h"
#include "tiny_hf_model.h"

namespace rinfer::test {

struct Fp8Layout {
  bool per_tensor = false;  // one scale per matrix, shape []; else [n_out, 1]
  bool bf16_scales = false;
  bool input_scales = true;
};

struct Fp8Checkpoint {
  std::string dir;
  TinyWeights dequantized;  // every tensor as f32, the layer matrices as code * scale
};

struct RawTensor {
  std::string dtype;  // "F8_E4M3", "F32", "BF16"
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string raw_safetensors_bytes(const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    const size_t begin = data.size();
    data += t.bytes;
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  const uint64_t n = h.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + h + data;
}

inline std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

inline nlohmann::json fp8_quantization_config() {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}}},
              {"input_activations",
               {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}}};
}

// The raw tensors of the FP8 checkpoint of `w` and, in *dequantized, its f32 values.
inline std::map<std::string, RawTensor> fp8_tensors(const TinyWeights& w, const Fp8Layout& layout,
                                                    TinyWeights* dequantized) {
  std::map<std::string, RawTensor> out;
  *dequantized = w;
  for (const auto& [name, t] : w) {
    if (!name.ends_with("_proj.weight")) {
      out[name] = RawTensor{"F32", t.shape, f32_bytes(t.values)};
      continue;
    }
    const int64_t n_out = t.shape[0], n_in = t.shape[1];
    std::vector<uint8_t> q(t.values.size());
    std::vector<float> scale(static_cast<size_t>(n_out));
    if (layout.per_tensor) {
      float amax = 0.0f;
      for (float v : t.values) amax = std::max(amax, std::fabs(v));
      std::fill(scale.begin(), scale.end(), amax / 448.0f);
      for (size_t i = 0; i < q.size(); ++i) q[i] = f32_to_f8e4m3(t.values[i] / scale[0]);
    } else {
      quantize_rows_f8e4m3(t.values.data(), n_out, n_in, q.data(), scale.data());
    }
    if (layout.bf16_scales) {
      for (float& s : scale) s = bf16_to_f32(f32_to_bf16(s));
    }
    std::vector<float>& deq = (*dequantized)[name].values;
    for (size_t i = 0; i < q.size(); ++i) {
      deq[i] = f8e4m3_to_f32(q[i]) * scale[i / static_cast<size_t>(n_in)];
    }
    out[name] = RawTensor{"F8_E4M3", t.shape, std::string(q.begin(), q.end())};
    const std::vector<int64_t> sshape =
        layout.per_tensor ? std::vector<int64_t>{} : std::vector<int64_t>{n_out, 1};
    if (layout.per_tensor) scale.resize(1);
    std::string sbytes;
    if (layout.bf16_scales) {
      for (float s : scale) {
        const uint16_t b = f32_to_bf16(s);
        sbytes.append(reinterpret_cast<const char*>(&b), 2);
      }
    } else {
      sbytes = f32_bytes(scale);
    }
    const std::string stem = name.substr(0, name.size() - 6);  // "...proj."
    out[name + "_scale"] = RawTensor{layout.bf16_scales ? "BF16" : "F32", sshape, sbytes};
    if (layout.input_scales) out[stem + "input_scale"] = RawTensor{"F32", {}, f32_bytes({0.05f})};
  }
  return out;
}

inline std::string write_raw_hf_model(const std::string& name,
                                      const std::map<std::string, RawTensor>& tensors,
                                      const nlohmann::json& config) {
  const std::string dir = fresh_dir(name);
  write_file(dir + "/config.json", config.dump(2));
  write_file(dir + "/model.safetensors", raw_safetensors_bytes(tensors));
  return dir;
}

inline Fp8Checkpoint write_fp8_model(const std::string& name, const TinySpec& s,
                                     const TinyWeights& w, const Fp8Layout& layout = {}) {
  Fp8Checkpoint c;
  nlohmann::json cfg = tiny_config(s);
  cfg["quantization_config"] = fp8_quantization_config();
  c.dir = write_raw_hf_model(name, fp8_tensors(w, layout, &c.dequantized), cfg);
  return c;
}

}  // namespace rinfer::test
