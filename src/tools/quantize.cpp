// `rinfer quantize <in.gguf> <out.gguf> --type f16|bf16|q8_0|q4_0|q4_1 [--keep-layers 0,-1]
//  [--convert-embeddings] [--threads N]`: writes a copy of a GGUF model with its weight matrices
// in another format (dequantize to f32, then ggml's reference quantizer: core/quantize.h).
//
// Converted: 2-D (and higher) tensors except token_embd / output (unless --convert-embeddings)
// and the matrices of the layers listed by --keep-layers (-1 is the last). Kept byte for byte:
// 1-D tensors (norms, biases), the kept layers and embeddings, tensors already in the target
// format. Every metadata entry is copied; general.file_type is set to the llama.cpp file type
// of --type. A matrix whose row length is not a multiple of the target's block size is refused
// with its name and shape (no silent fallback).
//
// The output path is checked before the input is opened (core/output_file.h): a directory, a
// FIFO, a device such as /dev/null, a socket, a dangling symlink, the input itself or a path in a
// missing directory is refused at once; a symlink to a regular file is written through (the
// target gets the new content, the link survives). The file is written to a temporary file next
// to the target and renamed over it, so a failed run leaves the old output as it was.
#include "core/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/output_file.h"
#include "core/progress.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/model_cache.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

struct QuantizeArgs {
  std::string in;
  std::string out;
  std::string type;
  std::vector<int64_t> keep_layers;
  bool convert_embeddings = false;
  int threads = 0;
};

// llama.cpp's llama_ftype for a file whose matrices are mostly `t`.
std::optional<uint32_t> llama_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kBF16: return 32;
    default: return std::nullopt;
  }
}

// "blk.12.attn_q.weight" -> 12; -1 for tensors outside the blocks.
int64_t layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  const std::string_view rest = name.substr(4);
  int64_t v = -1;
  const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  if (ec != std::errc() || p == rest.data() || *p != '.') return -1;
  return v;
}

bool is_embedding(std::string_view name) {
  return name == "token_embd.weight" || name == "output.weight";
}

int run_quantize(const QuantizeArgs& a) {
  const auto to = dtype_from_name(a.type);
  if (!to || !can_quantize_to(*to)) {
    return report_error(
        fmt::format("--type {}: expected one of f16, bf16, q8_0, q4_0, q4_1", a.type));
  }
  // The input: a path or a cached model's name (formats/model_cache.h).
  auto in_path = resolve_model(a.in);
  if (!in_path.ok()) return report_error(in_path.status().message());
  // Before any work: a bad output must not cost the whole conversion.
  const std::vector<std::string> inputs{*in_path};
  if (auto out = check_output_path(a.out, inputs); !out.ok()) {
    return report_error(out.status().message());
  }
  auto file = GgufFile::open(*in_path);
  if (!file.ok()) return report_error(file.status().message());
  const GgufFile& f = *file;

  int64_t n_layer = 0;  // blocks: one more than the highest blk.N index
  for (const auto& t : f.tensors()) n_layer = std::max(n_layer, layer_of(t.name) + 1);
  std::set<int64_t> keep;
  for (int64_t l : a.keep_layers) {
    const int64_t idx = l < 0 ? n_layer + l : l;
    if (idx < 0 || idx >= n_layer) {
      return report_error(fmt::format("--keep-layers {}: the model has {} layers ({}..{})", l,
                                      n_layer, -n_layer, n_layer - 1));
    }
    keep.insert(idx);
  }

  GgufWriter w(3, static_cast<uint32_t>(f.alignment()));
  for (const auto& [key, value] : f.metadata()) {
    w.set(std::string(key), GgufWriter::Value::copy_of(value));
  }
  w.set("general.file_type", GgufWriter::Value::of<uint32_t>(*llama_file_type(*to)));

  ThreadPool pool(a.threads);
  Progress bar(fmt::format("quantize {}", dtype_name(*to)),
               static_cast<int64_t>(f.tensors().size()), "tensor");
  const auto t0 = std::chrono::steady_clock::now();
  int64_t converted = 0;
  int64_t kept = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  int64_t done = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string name(t.name);
    bytes_in += t.nbytes;
    const int64_t layer = layer_of(t.name);
    const bool convert = t.shape.size() >= 2 && t.dtype != *to && dtype_traits(t.dtype).is_float &&
                         (a.convert_embeddings || !is_embedding(t.name)) &&
                         (layer < 0 || keep.count(layer) == 0);
    if (!convert) {
      const Status s = w.add_tensor_view(name, t.dtype, t.shape, {t.data, t.nbytes});
      if (!s.ok()) return report_error(s.with_context(a.in).message());
      bytes_out += t.nbytes;
      ++kept;
    } else {
      const int64_t row = t.ne.empty() ? 0 : t.ne[0];
      const int64_t bs = dtype_traits(*to).block_size;
      if (row % bs != 0) {
        bar.finish();
        return report_error(fmt::format(
            "{}: tensor '{}' ({} {}) has rows of {} values, not a multiple of {}'s block size "
            "{}; keep it (--keep-layers) or choose f16/bf16",
            a.in, name, dtype_name(t.dtype), Dims(std::span<const int64_t>(t.shape)).to_string(),
            row, dtype_name(*to), bs));
      }
      auto src = Tensor::wrap(t.data, t.nbytes, Dims(std::span<const int64_t>(t.shape)), t.dtype,
                              Device::cpu(), nullptr);
      if (!src.ok()) return report_error(src.status().with_context(a.in + ": " + name).message());
      auto q = convert_weight(*src, *to, &pool);
      if (!q.ok()) return report_error(q.status().with_context(a.in + ": " + name).message());
      std::string bytes(static_cast<const char*>(q->data()), q->nbytes());
      bytes_out += bytes.size();
      const Status s = w.add_tensor(name, *to, t.shape, std::move(bytes));
      if (!s.ok()) return report_error(s.with_context(a.in).message());
      ++converted;
    }
    bar.update(++done, name);
  }
  bar.finish();
  const Status s = w.write(a.out, inputs);
  if (!s.ok()) return report_error(s.message());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %lld tensors converted to %s, %lld kept; %.1f MB -> %.1f MB in %.1f s\n",
              a.out.c_str(), static_cast<long long>(converted),
              std::string(dtype_name(*to)).c_str(), static_cast<long long>(kept),
              static_cast<double>(bytes_in) / 1e6, static_cast<double>(bytes_out) / 1e6, secs);
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("quantize",
                                 "Write a GGUF model with its weight matrices in another format");
  auto a = std::make_shared<QuantizeArgs>();
  cmd->add_option("in", a->in, "Input GGUF file, or a cached model's name")->required();
  cmd->add_option("out", a->out,
                  "Output GGUF file: a new or regular file, replaced atomically; a symlink to a "
                  "regular file is written through (the link survives); directories, FIFOs, "
                  "devices, dangling links and the input itself are refused")
      ->required();
  cmd->add_option("--type", a->type, "f16, bf16, q8_0, q4_0 or q4_1")->required();
  cmd->add_option("--keep-layers", a->keep_layers,
                  "Layers whose matrices keep their format (-1: the last), e.g. 0,-1")
      ->delimiter(',');
  cmd->add_flag("--convert-embeddings", a->convert_embeddings,
                "Convert token_embd / output too (kept by default)");
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->callback([&exit_code, a] { exit_code = run_quantize(*a); });
}

}  // namespace rinfer
