#include "engine/llm_engine.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <random>

#include "core/error.h"
#include "formats/model_cache.h"
#include "strategies/registry.h"

namespace rinfer {

Result<std::unique_ptr<LlmEngine>> LlmEngine::create(const RecipeConfig& recipe) {
  std::unique_ptr<LlmEngine> e(new LlmEngine());
  e->recipe_ = recipe;
  RecipeConfig& r = e->recipe_;
  if (r.scenario != "llm-chat") {
    return unsupported("{}: scenario '{}' is not an LLM scenario", r.path, r.scenario);
  }
  RINFER_RETURN_IF_ERROR(r.sampling.validate().with_context(r.path + ": sampling"));
  // The strategies composed and validated, then the device checked against this machine.
  LoadOptions opts;
  GeneratorOptions g;
  RINFER_RETURN_IF_ERROR(apply_strategies(r, opts, g));
  RINFER_RETURN_IF_ERROR(check_device_available(r.device, r.origins()));

  auto path = resolve_model(r.model_ref);
  if (!path.ok()) return path.status().with_context(r.path + ": model");
  e->model_path_ = *path;

  e->pool_ = std::make_unique<ThreadPool>(r.strategies.threads);
  opts.ops.pool = e->pool_.get();
  opts.max_batch = 512;
  auto sample = TextGenerationSample::load_model(e->model_path_, opts,
                                                 r.chat_template.value_or(std::string()));
  if (!sample.ok()) return sample.status();
  e->sample_ = std::move(sample).value();

  const DecoderHParams& hp = e->sample_->decoder().hparams();
  if (r.context_length == 0) r.context_length = hp.n_ctx_train;
  if (r.context_length > hp.n_ctx_train) {
    spdlog::warn("{}: context_length {} is longer than the model's training context {}", r.path,
                 r.context_length, hp.n_ctx_train);
  }
  auto cache = e->sample_->decoder().create_cache(r.context_length);
  if (!cache.ok()) return cache.status();
  e->cache_ = std::move(cache).value();

  e->seed_ = r.seed_set ? r.sampling.seed : std::random_device{}();
  g.prefill_chunk = opts.max_batch;
  g.max_tokens = r.max_tokens;
  g.stop = r.stop;
  g.sampling = r.sampling;
  g.sampling.seed = e->seed_;
  e->text_ = e->sample_->postprocess_stream();
  e->generator_ = std::make_unique<Generator>(e->sample_->decoder(), e->cache_, e->text_.get(), g);
  return e;
}

std::string LlmEngine::describe() const {
  return fmt::format(
      "model     {}\n          {}\n          tokenizer {}; {}\n"
      "device    {}\nstrategy  {}\nkv cache  {:.1f} MiB ({} positions){}\nsampling  {}\n",
      model_path_, sample_->decoder().describe(), sample_->tokenizer().describe(),
      sample_->chat_template_note(), recipe_.device.to_string(), recipe_.strategies_summary(),
      static_cast<double>(cache_.bytes()) / (1 << 20), cache_.n_ctx(),
      recipe_.strategies.kv_cache ? "" : " (disabled: recomputes the prefix every step)",
      generator_->options().sampling.to_string());
}

}  // namespace rinfer
