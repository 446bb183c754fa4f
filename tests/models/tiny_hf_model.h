// A tiny random Llama-family model written two ways, for tests of the Hugging Face loader:
//   * a Hugging Face checkpoint: a directory with config.json and model.safetensors (written by
//     hand: 8-byte header length, JSON header, data), f32 or bf16;
//   * the GGUF that llama.cpp's convert_hf_to_gguf.py would write from it: for llama, Wq/Wk rows
//     permuted for the adjacent-pair ("normal") RoPE, exactly as its `permute`:
//       w.reshape(n_head, 2, rows / n_head / 2, n_in).swapaxes(1, 2).reshape(rows, n_in)
//     with n_head = n_head_kv for Wk; qwen2 keeps the HF layout.
// The same weights (bf16: the bf16-rounded values, stored as f32 in the GGUF) must give the same
// logits through both loaders.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

namespace rinfer::test {

struct TinySpec {
  std::string arch = "llama";  // llama | mistral | qwen2
  int64_t n_layer = 2, n_embd = 64, n_head = 4, n_head_kv = 2, n_ff = 96, n_vocab = 300;
  int64_t n_ctx = 128;
  double rope_theta = 10000.0;
  double rope_linear = 0;  // > 0: linear RoPE scaling with this factor
  double eps = 1e-5;
  bool tied = false;
  bool bias = false;  // q/k/v biases (qwen2)
  uint64_t seed = 1;
  int64_t head_dim() const { return n_embd / n_head; }
};

struct TinyTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// HF tensor name -> values, in a fixed order (std::map).
using TinyWeights = std::map<std::string, TinyTensor>;

inline uint16_t bf16_bits(float f) { return f32_to_bf16(f); }

inline TinyWeights make_tiny_weights(const TinySpec& s, bool round_to_bf16) {
  TinyWeights w;
  uint64_t seed = s.seed * 1000;
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::vector<float> v = random_floats(n, ++seed, lo, hi);
    if (round_to_bf16) {
      for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    }
    w[name] = TinyTensor{std::move(shape), std::move(v)};
  };
  const int64_t e = s.n_embd, qd = s.n_head * s.head_dim(), kv = s.n_head_kv * s.head_dim();
  const float me = 1.5f / std::sqrt(static_cast<float>(e));
  const float mf = 1.5f / std::sqrt(static_cast<float>(s.n_ff));
  add("model.embed_tokens.weight", {s.n_vocab, e}, -1.0f, 1.0f);
  add("model.norm.weight", {e}, 0.7f, 1.3f);
  if (!s.tied) add("lm_head.weight", {s.n_vocab, e}, -me, me);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = fmt::format("model.layers.{}.", il);
    add(p + "input_layernorm.weight", {e}, 0.7f, 1.3f);
    add(p + "self_attn.q_proj.weight", {qd, e}, -me * 2, me * 2);
    add(p + "self_attn.k_proj.weight", {kv, e}, -me * 2, me * 2);
    add(p + "self_attn.v_proj.weight", {kv, e}, -me, me);
    add(p + "self_attn.o_proj.weight", {e, qd}, -me, me);
    if (s.bias) {
      add(p + "self_attn.q_proj.bias", {qd}, -0.2f, 0.2f);
      add(p + "self_attn.k_proj.bias", {kv}, -0.2f, 0.2f);
      add(p + "self_attn.v_proj.bias", {kv}, -0.2f, 0.2f);
    }
    add(p + "post_attention_layernorm.weight", {e}, 0.7f, 1.3f);
    add(p + "mlp.gate_proj.weight", {s.n_ff, e}, -me, me);
    add(p + "mlp.up_proj.weight", {s.n_ff, e}, -me, me);
    add(p + "mlp.down_proj.weight", {e, s.n_ff}, -mf, mf);
  }
  return w;
}

inline nlohmann::json tiny_config(const TinySpec& s) {
  const char* hf_arch = s.arch == "qwen2"     ? "Qwen2ForCausalLM"
                        : s.arch == "mistral" ? "MistralForCausalLM"
                                              : "LlamaForCausalLM";
  nlohmann::json c = {
      {"architectures", {hf_arch}},
      {"model_type", s.arch},
      {"hidden_size", s.n_embd},
      {"intermediate_size", s.n_ff},
      {"num_hidden_layers", s.n_layer},
      {"num_attention_heads", s.n_head},
      {"num_key_value_heads", s.n_head_kv},
      {"rms_norm_eps", s.eps},
      {"rope_theta", s.rope_theta},
      {"max_position_embeddings", s.n_ctx},
      {"vocab_size", s.n_vocab},
      {"tie_word_embeddings", s.tied},
      {"hidden_act", "silu"},
      {"torch_dtype", "float32"},
      {"rope_scaling", nullptr},
  };
  if (s.rope_linear > 0) c["rope_scaling"] = {{"type", "linear"}, {"factor", s.rope_linear}};
  if (s.arch == "qwen2") c["use_sliding_window"] = false;
  if (s.arch == "mistral") c["sliding_window"] = nullptr;
  return c;
}

// The bytes of a .safetensors file holding `w` as f32 or bf16 (header padded to 8 bytes with
// spaces, as the reference writer does).
inline std::string safetensors_bytes(const TinyWeights& w, bool bf16) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : w) {
    const size_t begin = data.size();
    for (float v : t.values) {
      if (bf16) {
        const uint16_t b = bf16_bits(v);
        data.append(reinterpret_cast<const char*>(&b), 2);
      } else {
        data.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
    header[name] = {{"dtype", bf16 ? "BF16" : "F32"},
                    {"shape", t.shape},
                    {"data_offsets", {begin, data.size()}}};
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  const uint64_t n = h.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + h + data;
}

// A fresh directory under the temp dir.
inline std::string fresh_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path d = fs::temp_directory_path() / ("rinfer_hf_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Writes the HF directory: config.json + model.safetensors. Returns the directory.
inline std::string write_hf_model(const std::string& name, const TinyWeights& w,
                                  const nlohmann::json& config, bool bf16) {
  const std::string dir = fresh_dir(name);
  write_file(dir + "/config.json", config.dump(2));
  write_file(dir + "/model.safetensors", safetensors_bytes(w, bf16));
  return dir;
}

// llama.cpp's permute: rows [n_head][2][d/2] -> [n_head][d/2][2].
inline std::vector<float> permute_rows(const TinyTensor& t, int64_t n_head) {
  const int64_t rows = t.shape[0], cols = t.shape[1], d = rows / n_head, half = d / 2;
  std::vector<float> out(t.values.size());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t dst = h * d + i * 2 + j, src = h * d + j * half + i;
        std::memcpy(&out[static_cast<size_t>(dst * cols)],
                    &t.values[static_cast<size_t>(src * cols)], static_cast<size_t>(cols) * 4);
      }
    }
  }
  return out;
}

// The GGUF that llama.cpp's converter writes from the same weights (all f32).
// permute_qk = false leaves the HF rows (a wrong conversion, for a negative test).
inline std::string write_gguf_model(const std::string& name, const TinySpec& s,
                                    const TinyWeights& w, bool permute_qk = true) {
  using V = GgufWriter::Value;
  GgufWriter g;
  const std::string a = s.arch;
  g.set("general.architecture", V::string(a));
  g.set(a + ".block_count", V::of<uint32_t>(static_cast<uint32_t>(s.n_layer)));
  g.set(a + ".context_length", V::of<uint32_t>(static_cast<uint32_t>(s.n_ctx)));
  g.set(a + ".embedding_length", V::of<uint32_t>(static_cast<uint32_t>(s.n_embd)));
  g.set(a + ".feed_forward_length", V::of<uint32_t>(static_cast<uint32_t>(s.n_ff)));
  g.set(a + ".attention.head_count", V::of<uint32_t>(static_cast<uint32_t>(s.n_head)));
  g.set(a + ".attention.head_count_kv", V::of<uint32_t>(static_cast<uint32_t>(s.n_head_kv)));
  g.set(a + ".attention.layer_norm_rms_epsilon", V::of<float>(static_cast<float>(s.eps)));
  g.set(a + ".rope.freq_base", V::of<float>(static_cast<float>(s.rope_theta)));
  g.set(a + ".vocab_size", V::of<uint32_t>(static_cast<uint32_t>(s.n_vocab)));
  if (s.rope_linear > 0) {
    g.set(a + ".rope.scaling.type", V::string("linear"));
    g.set(a + ".rope.scaling.factor", V::of<float>(static_cast<float>(s.rope_linear)));
  }
  const bool permute = permute_qk && s.arch != "qwen2";
  const auto add = [&](const std::string& gguf_name, const std::string& hf_name,
                       int64_t permute_heads = 0) {
    const TinyTensor& t = w.at(hf_name);
    std::vector<float> v = permute && permute_heads > 0 ? permute_rows(t, permute_heads) : t.values;
    const Status st =
        g.add_tensor(gguf_name, DType::kF32, t.shape,
                     std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    if (!st.ok()) ADD_FAILURE() << st.to_string();
  };
  add("token_embd.weight", "model.embed_tokens.weight");
  add("output_norm.weight", "model.norm.weight");
  if (!s.tied) add("output.weight", "lm_head.weight");
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string b = fmt::format("blk.{}.", il), p = fmt::format("model.layers.{}.", il);
    add(b + "attn_norm.weight", p + "input_layernorm.weight");
    add(b + "attn_q.weight", p + "self_attn.q_proj.weight", s.n_head);
    add(b + "attn_k.weight", p + "self_attn.k_proj.weight", s.n_head_kv);
    add(b + "attn_v.weight", p + "self_attn.v_proj.weight");
    add(b + "attn_output.weight", p + "self_attn.o_proj.weight");
    if (s.bias) {
      // (llama.cpp permutes llama's biases too; the tiny models with biases are qwen2.)
      add(b + "attn_q.bias", p + "self_attn.q_proj.bias");
      add(b + "attn_k.bias", p + "self_attn.k_proj.bias");
      add(b + "attn_v.bias", p + "self_attn.v_proj.bias");
    }
    add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight");
    add(b + "ffn_gate.weight", p + "mlp.gate_proj.weight");
    add(b + "ffn_up.weight", p + "mlp.up_proj.weight");
    add(b + "ffn_down.weight", p + "mlp.down_proj.weight");
  }
  const std::string path = fresh_dir(name) + "/model.gguf";
  const Status st = g.write(path);
  if (!st.ok()) ADD_FAILURE() << st.to_string();
  return path;
}

}  // namespace rinfer::test
