#include "engine/llm_engine.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "engine/strategy_options.h"
#include "formats/model_cache.h"
#include "models/registry.h"
#include "strategies/registry.h"

namespace rinfer {

namespace {

// What to change when the KV cache does not fit: the context, named by where it was set.
std::string kv_memory_hint(const RecipeConfig& r, const LoadOptions& opts, const DecoderHParams& hp,
                           bool ctx_from_model) {
  const std::string where = r.origins().where("context_length");
  std::string hint = ctx_from_model
                         ? fmt::format(
                               "context_length 0 takes the model's training context ({} positions, "
                               "{}); set a smaller context_length or --ctx",
                               hp.n_ctx_train, where)
                         : fmt::format("lower the context (context_length, set by {})", where);
  if (opts.device.is_cuda() && opts.kv_dtype == DType::kF32) {
    hint += ", or set strategies.kv_cache.dtype to bf16 (half the bytes)";
  }
  return hint;
}

}  // namespace

Result<std::unique_ptr<LlmEngine>> LlmEngine::create(const RecipeConfig& recipe,
                                                     const LlmEngineOptions& options) {
  std::unique_ptr<LlmEngine> e(new LlmEngine());
  e->recipe_ = recipe;
  RecipeConfig& r = e->recipe_;
  if (r.scenario != "llm-chat" && r.scenario != "llm-serve") {
    return unsupported(
        "{}: scenario '{}' is not an LLM scenario{}", r.path, r.scenario,
        r.scenario == "embedding" ? " (embedding recipes: rinfer embed, index, search)" : "");
  }
  RINFER_RETURN_IF_ERROR(r.sampling.validate().with_context(r.path + ": sampling"));
  // The strategies composed and validated, then the device checked against this machine.
  LoadOptions opts;
  RINFER_ASSIGN_OR_RETURN(e->model_path_, prepare_model_load(r, opts));

  e->pool_ = std::make_unique<ThreadPool>(r.strategies.threads);
  opts.cpu.ops.pool = e->pool_.get();
  opts.max_batch = 512;
  auto sample = TextGenerationSample::load_model(e->model_path_, opts,
                                                 r.chat_template.value_or(std::string()));
  if (!sample.ok()) {
    return is_random_source(e->model_path_)
               ? sample.status().with_context(r.origins().where("model"))
               : sample.status();
  }
  e->sample_ = std::move(sample).value();

  const DecoderHParams& hp = e->sample_->decoder().hparams();
  const bool ctx_from_model = r.context_length == 0;
  if (r.context_length == 0) r.context_length = hp.n_ctx_train;
  if (r.context_length > hp.n_ctx_train) {
    spdlog::warn("{}: context_length {} is longer than the model's training context {}",
                 r.origins().where("context_length"), r.context_length, hp.n_ctx_train);
  }
  e->seed_ = r.seed_set ? r.sampling.seed : std::random_device{}();
  e->sampling_ = r.sampling;
  e->sampling_.seed = e->seed_;

  e->memory_hint_ = kv_memory_hint(r, opts, hp, ctx_from_model);
  if (options.model_only) return e;
  // The engine core on every device; kv_cache off (the baseline) is the core recomputing every
  // sequence each step.
  EngineCoreOptions co = engine_core_options(r.strategies, r.context_length);
  co.memory_hint = e->memory_hint_;
  if (options.seats > 0) {
    co.scheduler.max_seqs = options.seats;
    co.scheduler.max_batched_tokens =
        std::max<int64_t>(co.scheduler.max_batched_tokens, options.seats);
  }
  const TextGenerationSample* text = e->sample_.get();
  auto core =
      EngineCore::create(e->sample_->decoder(), co, [text] { return text->postprocess_stream(); });
  if (!core.ok()) return core.status().with_context(r.path);
  e->core_ = std::move(core).value();
  return e;
}

Result<EngineCore*> LlmEngine::scoring_core(int64_t seats) {
  if (core_) return core_.get();
  EngineCoreOptions co = engine_core_options(recipe_.strategies, recipe_.context_length);
  co.memory_hint = memory_hint_;
  co.scheduler.max_seqs = std::max<int64_t>(1, seats);
  if (seats > 1 && co.kv_blocks == 0 && co.prealloc == KvPrealloc::kMax) {
    co.prealloc = KvPrealloc::kAuto;
  }
  auto core = EngineCore::create(sample_->decoder(), co, {});
  if (!core.ok()) return core.status().with_context(recipe_.path);
  core_ = std::move(core).value();
  return core_.get();
}

void LlmEngine::reset() {
  if (core_) core_->clear_prefix_cache();
}

Result<GenerationResult> LlmEngine::generate(std::span<const int32_t> prompt,
                                             const PieceCallback& on_piece,
                                             const std::atomic<bool>* cancel,
                                             std::shared_ptr<const TokenConstraint> constraint) {
  if (!core_) {
    return invalid_argument("{}: this engine was made for its model alone (model_only)", recipe_.path);
  }
  RequestParams p;
  p.prompt.assign(prompt.begin(), prompt.end());
  p.sampling = sampling_;
  p.sampling.seed = seed_ + calls_++;
  p.max_tokens = recipe_.max_tokens;
  p.stop = recipe_.stop;
  p.constraint = std::move(constraint);
  GenerationResult res;
  p.on_event = [&](const RequestEvent& ev) {
    res.tokens.insert(res.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    if (!ev.text.empty()) {
      res.text += ev.text;
      if (on_piece) on_piece(ev.text);
    }
  };
  RINFER_ASSIGN_OR_RETURN(const RequestOutcome out, run_request(*core_, std::move(p), cancel));
  res.finish = out.finish;
  res.stats = out.stats;
  return res;
}

Result<GrammarCompiler*> LlmEngine::grammars() {
  std::lock_guard<std::mutex> lock(grammars_mu_);
  if (!grammars_) {
    const Tokenizer* t = sample_->tokenizer();
    if (t == nullptr) {
      return invalid_argument("{}: the model has no tokenizer, so no grammar can constrain it",
                              recipe_.path);
    }
    RINFER_ASSIGN_OR_RETURN(grammars_, GrammarCompiler::create(*t, decoder().hparams().n_vocab));
  }
  return grammars_.get();
}

std::string LlmEngine::tokenizer_text() const {
  const Tokenizer* t = sample_->tokenizer();
  return t != nullptr ? t->describe() : std::string("none");
}

std::string LlmEngine::describe() const {
  if (core_) {
    const kv::KvArena& a = core_->kv_arena();
    return fmt::format(
        "model     {}\n          {}\n          tokenizer {}; {}\n"
        "device    {}\nstrategy  {}\nkv cache  {:.1f} MiB ({} positions x {} seats, {}){}\n"
        "sampling  {}\n",
        model_path_, sample_->decoder().describe(), tokenizer_text(), sample_->chat_template_note(),
        recipe_.device.to_string(), recipe_.strategies_summary(),
        static_cast<double>(a.bytes()) / (1 << 20), recipe_.context_length,
        core_->options().scheduler.max_seqs, a.spec().describe(),
        recipe_.strategies.kv_cache ? "" : "; disabled: recomputes the sequence every step",
        sampling_.to_string());
  }
  return fmt::format("model     {}\n          {}\n          tokenizer {}; {}\ndevice    {}\n",
                     model_path_, sample_->decoder().describe(), tokenizer_text(),
                     sample_->chat_template_note(), recipe_.device.to_string());
}

}  // namespace rinfer
