// `rinfer info <model> [--json]`: architecture, hyper-parameters, tensors and tokenizer of a
// model file, without loading the weights.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "core/cuda_info.h"
#include "core/thread_pool.h"
#include "formats/model_cache.h"
#include "formats/model_info.h"
#include "models/model.h"
#include "models/registry.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

template <typename T>
nlohmann::ordered_json opt_json(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json info_json(const ModelInfo& m) {
  nlohmann::ordered_json dtypes = nlohmann::ordered_json::object();
  for (const auto& [dtype, u] : m.by_dtype) {
    dtypes[std::string(dtype_name(dtype))] = {
        {"tensors", u.tensors}, {"elements", u.elements}, {"bytes", u.bytes}};
  }
  return {
      {"path", m.path},
      {"format", m.format},
      {"format_version", m.format_version},
      {"file_bytes", m.file_bytes},
      {"name", m.name},
      {"architecture", m.architecture},
      {"hparams",
       {{"n_layers", opt_json(m.n_layers)},
        {"n_embd", opt_json(m.n_embd)},
        {"n_ff", opt_json(m.n_ff)},
        {"n_head", opt_json(m.n_head)},
        {"n_head_kv", opt_json(m.n_head_kv)},
        {"head_dim", opt_json(m.head_dim)},
        {"context_length", opt_json(m.context_length)},
        {"rope_freq_base", opt_json(m.rope_freq_base)},
        {"sliding_window", opt_json(m.sliding_window)},
        {"norm_eps", opt_json(m.norm_eps)},
        {"vocab_size", opt_json(m.vocab_size)},
        {"n_convolutions", opt_json(m.n_convolutions)},
        {"input_channels", opt_json(m.input_channels)},
        {"n_classes", opt_json(m.n_classes)}}},
      {"tensors", {{"count", m.n_tensors}, {"elements", m.n_elements}, {"bytes", m.tensor_bytes}}},
      {"dtypes", dtypes},
      {"tokenizer", {{"kind", m.tokenizer}, {"tokens", m.tokenizer_tokens}}},
      {"chat_template", m.has_chat_template},
  };
}

}  // namespace

void add_info_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "info", "Show a model file's architecture, hyper-parameters, tensors and tokenizer");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("model", *model,
                  "A GGUF file, a safetensors file or directory, a PyTorch checkpoint (.pth), or "
                  "a model name from the cache (e.g. smollm2-135m-instruct-q4_1)")
      ->required();
  cmd->add_flag("--json", *json, "Print JSON instead of text");
  cmd->callback([&exit_code, model, json] {
    auto path = resolve_model(*model);
    if (!path.ok()) {
      exit_code = report_error(path.status().message());
      return;
    }
    auto info = read_model_info(path.value());
    if (!info.ok()) {
      exit_code = report_error(info.status().message());
      return;
    }
    // The registry's family for it (what runs it), and whether `rinfer run` can use it.
    const ModelFamily* family = find_family(metadata_of(info.value()));
    if (info->architecture.empty() && family != nullptr) {
      // A state dict names no architecture: the family that runs it (its network comes from
      // the recipe).
      info->architecture = std::string(family->name);
    }
    const Status runs = check_text_generation(info.value());
    if (*json) {
      nlohmann::ordered_json j = info_json(info.value());
      j["task"] = family != nullptr ? nlohmann::ordered_json(model_task_name(family->task))
                                    : nlohmann::ordered_json(nullptr);
      j["text_generation"] = {{"ok", runs.ok()},
                              {"reason", runs.ok() ? std::string() : runs.message()}};
      std::cout << json_text(j) << "\n";
    } else {
      std::cout << format_model_info(info.value());
      if (family != nullptr) {
        std::cout << fmt::format("{:<18} {}\n", "task", model_task_name(family->task));
      }
      std::cout << fmt::format("{:<18} {}\n", "rinfer run",
                               runs.ok() ? std::string("yes (text generation)")
                                         : "no: " + runs.message());
    }
    exit_code = 0;
  });
}

void add_devices_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("devices", "List the CPU and the CUDA devices rinfer can use");
  cmd->callback([&exit_code] {
    std::cout << fmt::format("cpu      {} hardware threads\n", ThreadPool::hardware_threads());
    auto devices = cuda_devices();
    if (!devices.ok()) {
      std::cout << "cuda     none: " << devices.status().message() << "\n";
      exit_code = 0;
      return;
    }
    std::cout << "cuda     " << cuda_versions() << "\n";
    for (const auto& d : devices.value()) {
      Status st = cuda_self_test(d.index);
      std::cout << fmt::format("cuda:{}   {}, sm_{}{}, {} SMs, {:.1f} GiB, kernel launch {}\n",
                               d.index, d.name, d.cc_major, d.cc_minor, d.multiprocessors,
                               static_cast<double>(d.total_memory) / (1 << 30),
                               st.ok() ? "ok" : st.message());
    }
    exit_code = 0;
  });
}

}  // namespace rinfer
