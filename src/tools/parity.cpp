// `rinfer parity --model PATH --tokens tokens.i32 --ref logits.f32 [--device cpu|cuda:N]
//  [--weights keep|bf16|...] [--max-rel-l2 X] [--min-top1 Y] [--json out.json]
//  [--dump ours.f32]`:
// teacher-forces the token ids through the engine core (EngineCore::score: one sequence in the
// paged KV pool, the logits of every row, in passes of at most the runner's logit rows; --step:
// one token a pass, the decode path) and compares the logits with a reference (PyTorch/transformers, written by scripts/device/hf_reference.py):
// relative L2, max |diff|, top-1 agreement and KL(ref || ours). Exit 0 when the thresholds hold,
// 1 when one fails or on an error. --dump writes our logits in the reference's format (so one
// device's output can be the reference of another); with --dump and no --ref nothing is compared.
//
// Files are raw little-endian: tokens int32 [n_tokens], reference f32 [n_tokens, n_vocab].
#include <fmt/format.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "core/thread_pool.h"
#include "engine/logit_metrics.h"
#include "formats/model_cache.h"
#include "engine/engine_core.h"
#include "models/model.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

static_assert(std::endian::native == std::endian::little, "parity files are little-endian");

struct ParityArgs {
  std::string model;
  std::string device = "cpu";
  std::string tokens;
  std::string ref;
  std::string weights = "keep";
  std::string kv = "auto";  // the KV cache's elements: auto (the device's default), bf16, f32
  std::string kernels = "fast";
  int threads = 0;
  double max_rel_l2 = 2e-2;
  double min_top1 = 0.99;
  std::string json;
  std::string dump;
  bool step = false;  // one token per forward (the decode path) instead of one prefill
};

// A whole binary file whose size is a multiple of `elem` bytes.
Result<std::vector<char>> read_binary(const std::string& path, size_t elem, const char* what) {
  auto read = read_regular_file(path);  // a FIFO, device or directory is refused at once
  if (!read.ok()) return read.status().with_context(fmt::format("{} file", what));
  const std::string& bytes = *read;
  const size_t size = bytes.size();
  if (size == 0) return data_loss("{} file '{}' is empty", what, path);
  if (size % elem != 0) {
    return data_loss("{} file '{}' has {} bytes, not a multiple of {} ({}-byte values)", what, path,
                     size, elem, elem);
  }
  return std::vector<char>(bytes.begin(), bytes.end());
}

// The files an output must not be.
std::vector<std::string> parity_inputs(const ParityArgs& a) { return {a.tokens, a.ref, a.model}; }

struct ParityResult {
  LogitComparison cmp;
  int64_t n_tokens = 0;
  int64_t n_vocab = 0;
  double forward_s = 0;
  int64_t passes = 0;  // forward passes of the engine core
  std::string describe;
};

Result<ParityResult> run(const ParityArgs& a, ThreadPool& pool) {
  RINFER_ASSIGN_OR_RETURN(const Device device, parse_device(a.device));
  LoadOptions opts;
  opts.cpu.ops.pool = &pool;
  if (a.kernels == "reference") opts.cpu.ops.impl = cpu::Impl::kReference;
  opts.device = device;
  if (a.kv != "auto") opts.kv_dtype = dtype_from_name(a.kv);  // bf16 or f32 (checked by CLI11)
  if (a.weights != "keep") {
    const auto dt = dtype_from_name(a.weights);
    if (!dt)
      return invalid_argument("--weights '{}': not a dtype name (keep, bf16, ...)", a.weights);
    opts.weight_format = *dt;
    if (device.is_cpu()) {
      std::fprintf(stderr,
                   "parity: note: the CPU model runs the stored weights; --weights %s is applied "
                   "by the CUDA model\n",
                   a.weights.c_str());
    }
  }

  // Tokens and reference logits, sizes checked against each other and the model.
  RINFER_ASSIGN_OR_RETURN(std::vector<char> tok_bytes, read_binary(a.tokens, 4, "tokens"));
  std::vector<int32_t> tokens(tok_bytes.size() / 4);
  std::memcpy(tokens.data(), tok_bytes.data(), tok_bytes.size());
  std::vector<char> ref_bytes;
  if (!a.ref.empty()) {
    RINFER_ASSIGN_OR_RETURN(ref_bytes, read_binary(a.ref, 4, "reference logits"));
  }

  RINFER_ASSIGN_OR_RETURN(const std::string model_path, resolve_model(a.model));
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<DecoderModel> model,
                          load_decoder_model(model_path, opts));
  ParityResult r;
  r.describe = model->describe();
  r.n_tokens = static_cast<int64_t>(tokens.size());
  r.n_vocab = model->hparams().n_vocab;
  const uint64_t want = static_cast<uint64_t>(r.n_tokens) * static_cast<uint64_t>(r.n_vocab) * 4;
  if (!a.ref.empty() && ref_bytes.size() != want) {
    return data_loss(
        "reference logits file '{}' has {} bytes; {} tokens x vocabulary {} x 4 bytes = {} "
        "expected ({} rows in the file)",
        a.ref, ref_bytes.size(), r.n_tokens, r.n_vocab, want,
        static_cast<double>(ref_bytes.size()) / 4.0 / static_cast<double>(r.n_vocab));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= r.n_vocab) {
      return out_of_range(
          "tokens file '{}': token {} at index {} is outside the vocabulary [0, {})", a.tokens,
          tokens[i], i, r.n_vocab);
    }
  }
  if (r.n_tokens > model->hparams().n_ctx_train) {
    std::fprintf(stderr, "parity: note: %lld tokens exceed the training context %lld\n",
                 static_cast<long long>(r.n_tokens),
                 static_cast<long long>(model->hparams().n_ctx_train));
  }

  // One seat, a context of exactly the tokens, a step budget of all of them (or one, --step).
  EngineCoreOptions co;
  co.n_ctx = r.n_tokens;
  co.prefix_caching = false;
  co.queue_ahead = false;
  co.scheduler.max_seqs = 1;
  co.scheduler.max_batched_tokens = a.step ? 1 : r.n_tokens;
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::create(*model, co, {}));
  std::vector<float> logits(static_cast<size_t>(r.n_tokens) * static_cast<size_t>(r.n_vocab));
  const auto t0 = std::chrono::steady_clock::now();
  RINFER_RETURN_IF_ERROR(
      core->score(tokens, 0, 0,
                  [&](int64_t row, std::span<const float> l) {
                    std::copy(l.begin(), l.end(),
                              logits.begin() + row * static_cast<std::ptrdiff_t>(r.n_vocab));
                    ++r.passes;
                    return ok_status();
                  })
          .with_context(a.step ? "decode steps" : fmt::format("prefill of {} tokens", r.n_tokens)));
  r.forward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (!a.dump.empty()) {
    RINFER_RETURN_IF_ERROR(
        write_file_atomically(a.dump,
                              std::string_view(reinterpret_cast<const char*>(logits.data()),
                                               logits.size() * sizeof(float)),
                              parity_inputs(a))
            .with_context("writing the logits (--dump)"));
  }
  if (a.ref.empty()) return r;
  std::vector<float> ref(ref_bytes.size() / 4);
  std::memcpy(ref.data(), ref_bytes.data(), ref_bytes.size());
  r.cmp = compare_logits(ref.data(), logits.data(), r.n_tokens, r.n_vocab);
  return r;
}

int run_parity(const ParityArgs& a) {
  if (a.ref.empty() && a.dump.empty()) {
    return report_error("parity: give --ref (reference logits to compare with) or --dump");
  }
  // The outputs are checked before the model loads (core/output_file.h).
  for (const std::string* out : {&a.dump, &a.json}) {
    if (out->empty()) continue;
    auto checked = check_output_path(*out, parity_inputs(a));
    if (!checked.ok()) return report_error(checked.status().message());
  }
  ThreadPool pool(a.threads);
  auto r = run(a, pool);
  if (!r.ok()) return report_error(r.status().message());
  if (a.ref.empty()) {
    std::printf(
        "parity: %s on %s, %lld tokens x vocabulary %lld, forward %.3f s: logits written "
        "to %s\n",
        a.model.c_str(), a.device.c_str(), static_cast<long long>(r->n_tokens),
        static_cast<long long>(r->n_vocab), r->forward_s, a.dump.c_str());
    return 0;
  }
  const LogitComparison& c = r->cmp;
  // NaN never passes (comparisons with NaN are false).
  const bool l2_ok = c.rel_l2 <= a.max_rel_l2;
  const bool top1_ok = c.top1_agreement >= a.min_top1;
  const bool pass = l2_ok && top1_ok;

  std::printf("parity: %s on %s, %lld tokens x vocabulary %lld, %lld forward passes %.3f s\n",
              a.model.c_str(), a.device.c_str(), static_cast<long long>(r->n_tokens),
              static_cast<long long>(r->n_vocab), static_cast<long long>(r->passes),
              r->forward_s);
  std::printf("  %s\n", r->describe.c_str());
  std::printf("  %-18s %-12s %-12s %s\n", "metric", "value", "threshold", "");
  std::printf("  %-18s %-12.4e <= %-9.3g %s\n", "rel L2", c.rel_l2, a.max_rel_l2,
              l2_ok ? "ok" : "FAIL");
  std::printf("  %-18s %-12.6f >= %-9.4g %s\n", "top-1 agreement", c.top1_agreement, a.min_top1,
              top1_ok ? "ok" : "FAIL");
  std::printf("  %-18s %-12.4e\n", "max |diff|", c.max_abs);
  std::printf("  %-18s %-12.4e\n", "mean KL (nats)", c.mean_kl);
  std::printf("  %-18s %-12.4e\n", "max KL (nats)", c.max_kl);
  std::printf("%s\n", pass ? "PASS" : "FAIL");

  if (!a.json.empty()) {
    // NaN/inf are not JSON numbers: write them as null.
    const auto num = [](double v) {
      return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
    };
    nlohmann::json j = {
        {"model", a.model},
        {"device", a.device},
        {"weights", a.weights},
        {"kv_cache", a.kv},
        {"kernels", a.kernels},
        {"mode", a.step ? "decode steps (one token per forward)" : "prefill"},
        {"passes", r->passes},
        {"describe", r->describe},
        {"n_tokens", r->n_tokens},
        {"n_vocab", r->n_vocab},
        {"forward_s", r->forward_s},
        {"metrics",
         {{"rows", c.rows},
          {"rel_l2", num(c.rel_l2)},
          {"max_abs", num(c.max_abs)},
          {"top1_agreement", num(c.top1_agreement)},
          {"mean_kl", num(c.mean_kl)},
          {"max_kl", num(c.max_kl)}}},
        {"thresholds", {{"max_rel_l2", a.max_rel_l2}, {"min_top1", a.min_top1}}},
        {"pass", pass},
    };
    const Status st = write_file_atomically(a.json, json_text(j) + "\n", parity_inputs(a));
    if (!st.ok()) return report_error(st.with_context("writing --json").message());
  }
  return pass ? 0 : 1;
}

}  // namespace

void add_parity_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "parity", "Compare a model's logits for given token ids with reference logits (PyTorch)");
  auto a = std::make_shared<ParityArgs>();
  cmd->add_option("--model", a->model, "Model: GGUF file, HF directory or cache name")->required();
  cmd->add_option("--tokens", a->tokens, "Token ids: raw little-endian int32 [n_tokens]")
      ->required();
  cmd->add_option("--ref", a->ref, "Reference logits: raw little-endian f32 [n_tokens, n_vocab]");
  cmd->add_option("--dump", a->dump, "Write our logits (f32 [n_tokens, n_vocab]) to this file");
  cmd->add_option("--device", a->device, "cpu or cuda:N")->capture_default_str();
  cmd->add_option("--weights", a->weights, "Weight format at load: keep, bf16, f16, q8_0, ...")
      ->capture_default_str();
  cmd->add_option("--kv", a->kv,
                  "KV cache elements: auto (bf16 on CUDA, f32 on the CPU), bf16, f32")
      ->check(CLI::IsMember({"auto", "bf16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--kernels", a->kernels, "CPU kernels")
      ->check(CLI::IsMember({"fast", "reference"}))
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU threads (0: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--max-rel-l2", a->max_rel_l2, "Fail when the relative L2 error is above")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd->add_option("--min-top1", a->min_top1, "Fail when the top-1 agreement is below")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--json", a->json, "Write the result as JSON to this file");
  cmd->add_flag("--step", a->step,
                "Teacher-force one token per forward (the decode path) instead of one prefill");
  cmd->callback([&exit_code, a] { exit_code = run_parity(*a); });
}

}  // namespace rinfer
