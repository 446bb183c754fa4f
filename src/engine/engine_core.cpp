#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/memory_plan.h"
#include "core/thread_pool.h"
#include "models/op_profile.h"

namespace rinfer {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

int64_t Request::max_length(int64_t n_ctx) const {
  if (params.max_tokens <= 0) return n_ctx;
  return std::min(n_ctx, n_prompt + params.max_tokens);
}

EngineCore::EngineCore(const DecoderModel& model, EngineCoreOptions opts, TextStreamFactory text)
    : model_(model), opts_(std::move(opts)), text_factory_(std::move(text)) {}

EngineCore::~EngineCore() = default;

Result<std::unique_ptr<EngineCore>> EngineCore::create(const DecoderModel& model,
                                                       EngineCoreOptions opts,
                                                       TextStreamFactory text) {
  std::unique_ptr<EngineCore> e(new EngineCore(model, std::move(opts), std::move(text)));
  RINFER_RETURN_IF_ERROR(e->init());
  return e;
}

Status EngineCore::init() {
  SchedulerConfig& sc = opts_.scheduler;
  if (opts_.n_ctx <= 0) return invalid_argument("engine: n_ctx {} must be positive", opts_.n_ctx);
  if (sc.max_batched_tokens <= 0 || sc.max_seqs <= 0) {
    return invalid_argument("engine: max_batched_tokens {} and max_seqs {} must be positive",
                            sc.max_batched_tokens, sc.max_seqs);
  }
  if (sc.max_seqs > sc.max_batched_tokens) {
    // Every running request must get its decode token in a step.
    return invalid_argument("engine: max_seqs {} exceeds max_batched_tokens {}", sc.max_seqs,
                            sc.max_batched_tokens);
  }
  if (!(sc.watermark >= 0.0 && sc.watermark < 1.0)) {
    return invalid_argument("engine: watermark {} must be in [0, 1)", sc.watermark);
  }
  const bool contiguous = opts_.layout == kv::Layout::kContiguous;
  if (!contiguous && opts_.block_size <= 0) {
    return invalid_argument("engine: block_size {} must be positive", opts_.block_size);
  }
  RINFER_ASSIGN_OR_RETURN(kv::KvSpec spec,
                          model_.kv_spec(opts_.n_ctx, contiguous ? opts_.n_ctx : opts_.block_size));
  // Contiguous: a block is a whole sequence, so the pool is the seats; prefix sharing needs
  // blocks smaller than a sequence.
  if (contiguous) {
    opts_.prefix_caching = false;
    sc.watermark = 0.0;
  }
  sc.reserve_max_length = opts_.reserve_max_length || contiguous;
  std::vector<int32_t> n_blocks(static_cast<size_t>(spec.n_groups()));
  const bool grows = !contiguous && opts_.kv_blocks == 0 && opts_.prealloc == KvPrealloc::kAuto;
  for (int32_t g = 0; g < spec.n_groups(); ++g) {
    const int64_t seat = spec.max_blocks_per_seq(g, sc.max_batched_tokens);
    const int64_t n = opts_.kv_blocks > 0 ? opts_.kv_blocks
                      : contiguous        ? sc.max_seqs
                      : grows             ? seat
                                          : sc.max_seqs * seat;
    if (sc.max_seqs * seat > INT32_MAX / 2 || n > INT32_MAX / 2) {
      return invalid_argument("engine: {} KV blocks are too many", sc.max_seqs * seat);
    }
    n_blocks[static_cast<size_t>(g)] = static_cast<int32_t>(n);
    if (grows) max_blocks_.push_back(static_cast<int32_t>(sc.max_seqs * seat));
  }
  uint64_t bytes = 0;
  for (int32_t g = 0; g < spec.n_groups(); ++g) {
    bytes += spec.block_bytes(g) * static_cast<uint64_t>(n_blocks[static_cast<size_t>(g)]);
  }
  RunnerOptions ro;
  ro.max_tokens = sc.max_batched_tokens;
  ro.max_seqs = sc.max_seqs;
  RINFER_ASSIGN_OR_RETURN(runner_, model_.create_runner(ro));
  if (auto avail = memory_available(runner_->device()); avail.ok()) {
    MemoryPlan plan;
    plan.items.push_back(
        {sc.max_seqs == 1 && opts_.kv_blocks == 0
             ? fmt::format("the KV cache for {} positions", opts_.n_ctx)
             : fmt::format("the KV cache for {} seats x {} positions", sc.max_seqs, opts_.n_ctx),
         bytes});
    if (opts_.swap_blocks != 0 && runner_->device().is_cpu()) {
      // The swap space is host memory too.
      uint64_t swap = 0;
      for (int32_t g = 0; g < spec.n_groups(); ++g) {
        const int64_t n =
            opts_.swap_blocks < 0 ? n_blocks[static_cast<size_t>(g)] : opts_.swap_blocks;
        swap += spec.block_bytes(g) * static_cast<uint64_t>(n);
      }
      plan.items.push_back({"the KV swap space", swap});
    }
    plan.hint =
        opts_.memory_hint.empty() ? "lower batching.max_seqs or the context" : opts_.memory_hint;
    RINFER_RETURN_IF_ERROR(check_memory_plan(plan, *avail));
  }
  RINFER_ASSIGN_OR_RETURN(arena_, runner_->create_arena(spec, n_blocks));
  kv::KvManagerOptions ko;
  ko.n_blocks = n_blocks;
  ko.prefix_caching = opts_.prefix_caching;
  if (opts_.swap_blocks < 0) {
    ko.n_host_blocks = n_blocks;
  } else if (opts_.swap_blocks > 0) {
    ko.n_host_blocks.assign(n_blocks.size(), opts_.swap_blocks);
  }
  if (!ko.n_host_blocks.empty()) {
    RINFER_ASSIGN_OR_RETURN(auto host, kv::HostKvArena::create(spec, ko.n_host_blocks));
    host_arena_ = std::move(host);
  }
  RINFER_ASSIGN_OR_RETURN(kv::KvManager m, kv::KvManager::create(spec, ko));
  kv_ = std::make_unique<kv::KvManager>(std::move(m));
  scheduler_ = std::make_unique<Scheduler>(sc, *kv_, opts_.n_ctx);
  logits_.resize(static_cast<size_t>(sc.max_seqs * model_.hparams().n_vocab));
  return ok_status();
}

Result<RequestId> EngineCore::submit(RequestParams p) {
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (p.prompt.empty()) return invalid_argument("the prompt is empty");
  for (size_t i = 0; i < p.prompt.size(); ++i) {
    if (p.prompt[i] < 0 || p.prompt[i] >= n_vocab) {
      return invalid_argument("prompt token {} (at {}) is out of the vocabulary [0, {})",
                              p.prompt[i], i, n_vocab);
    }
  }
  if (static_cast<int64_t>(p.prompt.size()) >= opts_.n_ctx) {
    return out_of_range(
        "the prompt is {} tokens but the context holds {} (context_length), with room for at "
        "least one generated token: shorten the prompt or raise context_length",
        p.prompt.size(), opts_.n_ctx);
  }
  if (p.max_tokens < 0) return invalid_argument("max_tokens {} is negative", p.max_tokens);
  RINFER_RETURN_IF_ERROR(p.sampling.validate().with_context("sampling"));

  auto r = std::make_unique<Request>();
  r->n_prompt = static_cast<int64_t>(p.prompt.size());
  r->tokens = p.prompt;
  r->tokens.reserve(static_cast<size_t>(r->max_length(opts_.n_ctx)));
  r->sampler = std::make_unique<Sampler>(p.sampling, n_vocab);
  if (p.constraint) r->constraint = p.constraint->start();
  if (text_factory_) r->text = text_factory_();
  r->stop = StopStringFilter(p.stop);
  r->stats.prompt_tokens = r->n_prompt;
  r->submitted = Clock::now();
  r->params = std::move(p);
  RequestId id = 0;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    id = next_id_++;
    r->id = id;
    r->arrival = id;
    inbox_.push_back(std::move(r));
    live_.fetch_add(1);
  }
  inbox_cv_.notify_all();
  return id;
}

void EngineCore::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    aborts_.push_back(id);
  }
  inbox_cv_.notify_all();
}

bool EngineCore::has_work() const {
  if (live_.load() > 0) return true;
  std::lock_guard<std::mutex> lock(inbox_mu_);
  return !aborts_.empty();
}

void EngineCore::wait_for_work(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(inbox_mu_);
  inbox_cv_.wait_for(lock, timeout, [&] { return live_.load() > 0 || !aborts_.empty(); });
}

void EngineCore::admit_inbox() {
  std::vector<std::unique_ptr<Request>> fresh;
  std::vector<RequestId> aborts;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    fresh.swap(inbox_);
    aborts.swap(aborts_);
  }
  for (std::unique_ptr<Request>& r : fresh) {
    Request* p = r.get();
    requests_.emplace(p->id, std::move(r));
    scheduler_->add(p);
  }
  for (RequestId id : aborts) {
    auto it = requests_.find(id);
    if (it != requests_.end()) finish(*it->second, FinishReason::kAborted, ok_status());
  }
}

void EngineCore::finish(Request& r, FinishReason why, Status error, std::string text,
                        std::span<const int32_t> tokens, int32_t sampled) {
  scheduler_->remove(&r);
  if (r.text && why != FinishReason::kStopString && why != FinishReason::kError) {
    // What the detokenizer and the stop filter still hold belongs to the reply.
    text += r.stop.push(r.text->finish());
    text += r.stop.flush();
  }
  r.stats.generated_tokens = r.n_generated();
  r.stats.total_ms = ms_between(r.submitted, Clock::now());
  ++stats_.finished;
  if (why != FinishReason::kError && why != FinishReason::kAborted) {
    const auto len = static_cast<double>(r.tokens.size());
    ++n_lengths_;
    const double d = len - len_mean_;
    len_mean_ += d / static_cast<double>(n_lengths_);
    len_m2_ += d * (len - len_mean_);
  }
  RequestEvent ev;
  ev.id = r.id;
  ev.tokens = tokens;
  ev.text = text;
  ev.logits = tokens.empty() ? std::span<const float>() : std::span<const float>(r.logits);
  ev.sampled = sampled;
  ev.finish = why;
  ev.error = std::move(error);
  ev.stats = &r.stats;
  if (r.params.on_event) r.params.on_event(ev);
  const RequestId id = r.id;
  requests_.erase(id);  // r is gone
  live_.fetch_sub(1);
}

Status EngineCore::build_batch(const SchedulerOutput& s) {
  tokens_.clear();
  positions_.clear();
  query_start_.assign(1, 0);
  kv_len_.clear();
  logit_rows_.clear();
  int32_t stride = 1;
  for (const ScheduledSeq& q : s.seqs) {
    const Request& r = *q.req;
    for (int64_t i = r.computed; i < r.computed + q.n_new; ++i) {
      tokens_.push_back(r.tokens[static_cast<size_t>(i)]);
      positions_.push_back(static_cast<int32_t>(i));
    }
    query_start_.push_back(static_cast<int32_t>(tokens_.size()));
    kv_len_.push_back(static_cast<int32_t>(r.computed + q.n_new));
    if (r.computed + q.n_new == static_cast<int64_t>(r.tokens.size())) {
      logit_rows_.push_back(static_cast<int32_t>(tokens_.size()) - 1);
    }
    stride = std::max(stride, static_cast<int32_t>(kv_->spec().blocks_for(r.computed + q.n_new)));
  }
  const int32_t n_groups = kv_->spec().n_groups();
  const auto n_seq = static_cast<int64_t>(s.seqs.size());
  tables_.assign(static_cast<size_t>(n_groups * n_seq * stride), kv::kNoBlock);
  for (int32_t g = 0; g < n_groups; ++g) {
    for (int64_t i = 0; i < n_seq; ++i) {
      const auto t = kv_->table(s.seqs[static_cast<size_t>(i)].req->id, g);
      const auto n = std::min<int64_t>(stride, static_cast<int64_t>(t.size()));
      std::copy(t.begin(), t.begin() + n, tables_.begin() + (g * n_seq + i) * stride);
    }
  }
  table_stride_ = stride;
  return ok_status();
}

void EngineCore::sample_and_stream(Request& r, std::span<float> row, StepStats& st) {
  if (r.params.want_logits) r.logits.assign(row.begin(), row.end());
  if (r.constraint) {
    // Structured output: only the tokens the grammar allows next can be drawn, and the one
    // drawn advances it (logprobs keep the model's own row, taken above).
    if (Status a = take_pending(r); !a.ok()) {
      return stream_token(r, a.with_context(r.params.constraint->describe()), st);
    }
    if (Status m = r.constraint->mask(row); !m.ok()) return stream_token(r, m, st);
    Result<int32_t> tok = r.sampler->sample(row, r.tokens);
    if (tok.ok()) {
      if (Status a = r.constraint->accept(*tok); !a.ok()) {
        return stream_token(r, a.with_context(r.params.constraint->describe()), st);
      }
    }
    return stream_token(r, std::move(tok), st);
  }
  stream_token(r, r.sampler->sample(row, r.tokens), st);
}

void EngineCore::stream_token(Request& r, Result<int32_t> tok, StepStats& st) {
  if (!tok.ok()) {
    const Status& e = tok.status();
    finish(r, FinishReason::kError,
           e.code() == StatusCode::kDataLoss
               ? Status(e.code(),
                        fmt::format("the model produced non-finite logits at generation step {} "
                                    "(step 1 samples the prompt's last row): the weights may be "
                                    "corrupt (NaN or inf in the model file): {}",
                                    r.n_generated() + 1, e.message()))
               : e);
    ++st.n_finished;
    return;
  }
  const auto now = Clock::now();
  const int32_t sampled = *tok;
  const auto forced_at = static_cast<size_t>(r.n_generated());
  r.tokens.push_back(forced_at < r.params.forced.size() ? r.params.forced[forced_at] : sampled);
  r.fresh_token = true;
  const int32_t last = r.tokens.back();
  ++st.n_sampled;
  ++stats_.generated_tokens;
  if (r.n_generated() == 1) r.stats.ttft_ms = ms_between(r.submitted, now);
  r.stats.generated_tokens = r.n_generated();
  FinishReason why = FinishReason::kNone;
  std::string text;
  if (r.text && !r.params.ignore_eos && r.text->is_end_of_generation(last)) {
    why = FinishReason::kEndOfGeneration;
  } else {
    if (r.text) {
      text = r.stop.push(r.text->push(last));
      if (r.stop.stopped()) why = FinishReason::kStopString;
    }
    if (why == FinishReason::kNone && r.params.max_tokens > 0 &&
        r.n_generated() >= r.params.max_tokens) {
      why = FinishReason::kMaxTokens;
    }
    if (why == FinishReason::kNone && static_cast<int64_t>(r.tokens.size()) >= opts_.n_ctx) {
      why = FinishReason::kContextFull;
    }
  }
  const std::span<const int32_t> new_tokens(&last, 1);
  if (why != FinishReason::kNone) {
    ++st.n_finished;
    finish(r, why, ok_status(), std::move(text), new_tokens, sampled);
    return;
  }
  RequestEvent ev;
  ev.id = r.id;
  ev.tokens = new_tokens;
  ev.text = text;
  ev.logits = r.logits;
  ev.sampled = sampled;
  ev.stats = &r.stats;
  if (r.params.on_event) r.params.on_event(ev);
}

Status EngineCore::maybe_grow() {
  if (max_blocks_.empty()) return ok_status();
  double mean = len_mean_, var = n_lengths_ > 1 ? len_m2_ / static_cast<double>(n_lengths_) : 0;
  if (n_lengths_ == 0) {
    // Nothing finished yet: the requests present, at the lengths they have reached.
    if (requests_.empty()) return ok_status();
    double sum = 0, sum2 = 0;
    for (const auto& [id, r] : requests_) {
      const auto len = static_cast<double>(r->tokens.size());
      sum += len;
      sum2 += len * len;
    }
    const auto n = static_cast<double>(requests_.size());
    mean = sum / n;
    var = std::max(0.0, sum2 / n - mean * mean);
  }
  const double per_seat = std::min(2.0 * mean + std::sqrt(var), static_cast<double>(opts_.n_ctx));
  const kv::KvSpec& spec = kv_->spec();
  const int64_t seats = opts_.scheduler.max_seqs;
  std::vector<int32_t> want(max_blocks_.size());
  bool grow = false;
  uint64_t bytes = 0;
  for (int32_t g = 0; g < spec.n_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    const int64_t seat = std::min(spec.blocks_for(static_cast<int64_t>(std::ceil(per_seat))) + 1,
                                  spec.max_blocks_per_seq(g, opts_.scheduler.max_batched_tokens));
    const int32_t have = arena_->n_blocks(g);
    int64_t w = std::min<int64_t>(max_blocks_[gi], seats * seat);
    // Grow by a quarter at least, so a slowly rising mean does not copy the arena every step.
    if (w > have && w < have + have / 4) w = std::min<int64_t>(max_blocks_[gi], have + have / 4);
    want[gi] = static_cast<int32_t>(std::max<int64_t>(w, have));
    grow = grow || want[gi] > have;
    bytes += spec.block_bytes(g) * static_cast<uint64_t>(want[gi] - have);
  }
  if (!grow) return ok_status();
  // The new arena is made before the old one goes: both must fit.
  if (auto avail = memory_available(runner_->device()); avail.ok()) {
    if (bytes + arena_->bytes() > avail->bytes) return ok_status();  // stay; preemption copes
  }
  RINFER_RETURN_IF_ERROR(arena_->grow(want));
  RINFER_RETURN_IF_ERROR(kv_->grow(want));
  ++stats_.kv_grows;
  return ok_status();
}

Result<StepStats> EngineCore::step() {
  StepStats st;
  admit_inbox();
  RINFER_RETURN_IF_ERROR(maybe_grow());
  RINFER_ASSIGN_OR_RETURN(SchedulerOutput s, scheduler_->schedule());
  for (auto& [r, why] : s.failed) {
    finish(*r, FinishReason::kError, why);
    ++st.n_finished;
  }
  st.n_preempted = s.n_preempted;
  stats_.preemptions += s.n_preempted;
  if (s.seqs.empty()) {
    interrupt_.store(false);
    return st;
  }
  ++stats_.steps;
  stats_.computed_tokens += s.n_tokens();
  // One-token sequences lead the batch: the runner computes their rows as it would alone.
  std::stable_partition(s.seqs.begin(), s.seqs.end(),
                        [](const ScheduledSeq& q) { return q.n_new == 1; });
  if (!s.swap_out.empty()) RINFER_RETURN_IF_ERROR(arena_->copy_blocks(*host_arena_, s.swap_out));
  if (!s.swap_in.empty()) RINFER_RETURN_IF_ERROR(host_arena_->copy_blocks(*arena_, s.swap_in));
  RINFER_RETURN_IF_ERROR(build_batch(s));
  ForwardBatch b;
  b.tokens = tokens_;
  b.positions = positions_;
  b.query_start = query_start_;
  b.kv_len = kv_len_;
  b.block_tables = tables_;
  b.table_stride = table_stride_;
  b.logit_rows = logit_rows_;
  b.cancel = &interrupt_;
  b.profile = profile_;
  st.n_seqs = static_cast<int64_t>(s.seqs.size());
  st.n_tokens = b.n_tokens();
  const auto t0 = Clock::now();
  for (const ScheduledSeq& q : s.seqs) {
    if (!q.req->scheduled_once) {
      q.req->scheduled_once = true;
      q.req->stats.queue_ms = ms_between(q.req->submitted, t0);
    }
  }
  // The rows are sampled on the runner's device when it takes every row's settings and no
  // request wants its logits; each draw comes from the request's own RNG, as on the host.
  bool on_device = !logit_rows_.empty();
  for (const ScheduledSeq& q : s.seqs) {
    const Request& r = *q.req;
    if (r.computed + q.n_new != static_cast<int64_t>(r.tokens.size())) continue;
    on_device = on_device && !r.params.want_logits &&
                (r.constraint == nullptr || runner_->masks_on_device()) &&
                runner_->samples_on_device(r.sampler->params());
  }
  Status fwd;
  const int64_t pass_begin = profile_ != nullptr ? now_ns() : 0;
  if (on_device) {
    row_sampling_.clear();
    rng_saved_.clear();
    mask_jobs_.clear();
    const auto words = static_cast<size_t>(token_mask_words(model_.hparams().n_vocab));
    for (const ScheduledSeq& q : s.seqs) {
      Request& r = *q.req;
      if (r.computed + q.n_new != static_cast<int64_t>(r.tokens.size())) continue;
      DecoderRunner::RowSampling rs;
      rs.sampling = &r.sampler->params();
      rs.history = r.tokens;
      if (r.constraint) mask_jobs_.push_back({&r, row_sampling_.size(), {}});
      if (rs.sampling->temperature > 0.0f) {  // only a draw moves the RNG
        rng_saved_.emplace_back(&r, r.sampler->rng());
        // A double just under 1 must not round up to 1.0f.
        rs.uniform =
            std::min(static_cast<float>(r.sampler->next_uniform()), std::nextafter(1.0f, 0.0f));
      }
      row_sampling_.push_back(rs);
    }
    if (runs_ahead(s)) {
      decode_ahead(*s.seqs[0].req, b, st);
      st.forward_ms = ms_between(t0, Clock::now());
      return st;
    }
    sampled_.resize(row_sampling_.size());
    std::function<Status()> prepare;
    if (!mask_jobs_.empty()) {
      // The masks go where the runner uploads them from (pinned memory), else into mask_bits_.
      uint32_t* bits = runner_->mask_staging(row_sampling_.size());
      if (bits == nullptr) {
        mask_bits_.resize(row_sampling_.size() * words);
        bits = mask_bits_.data();
      }
      for (const MaskJob& j : mask_jobs_) row_sampling_[j.row].allow = bits + j.row * words;
      prepare = [this] { return fill_masks(); };
    }
    fwd = runner_->forward_sampled(b, *arena_, row_sampling_, sampled_.data(), prepare);
  } else {
    fwd = runner_->forward(b, *arena_, logits_.data());
  }
  st.forward_ms = ms_between(t0, Clock::now());
  if (profile_ != nullptr && fwd.ok()) {
    profile_->record_pass(
        {pass_begin, now_ns(), b.n_tokens(), b.n_seq(), static_cast<int64_t>(b.logit_rows.size())});
  }
  if (on_device && !fwd.ok()) {
    // The draws go back: the step runs again (cancelled) or its requests fail.
    for (auto& [r, rng] : rng_saved_) r->sampler->set_rng(rng);
  }
  if (fwd.code() == StatusCode::kCancelled) {
    interrupt_.store(false);
    return st;  // nothing advanced; the requests run again next step
  }
  interrupt_.store(false);
  if (!fwd.ok()) {
    // The pass failed (a device error, a bad table): its requests fail, the engine goes on.
    for (const ScheduledSeq& q : s.seqs) finish(*q.req, FinishReason::kError, fwd);
    st.n_finished += st.n_seqs;
    return st;
  }
  const int64_t n_vocab = model_.hparams().n_vocab;
  size_t out = 0, next_job = 0;
  for (const ScheduledSeq& q : s.seqs) {
    Request& r = *q.req;
    if (r.computed < r.n_prompt) stats_.prompt_tokens += std::min(q.n_new, r.n_prompt - r.computed);
    r.computed += q.n_new;
    kv_->commit(r.id, r.tokens, r.computed);
    if (r.computed == static_cast<int64_t>(r.tokens.size())) {
      if (on_device) {
        const int32_t id = sampled_[out];
        // The jobs are in row order: this row's, if constrained, is the next one.
        const MaskJob* job = nullptr;
        if (next_job < mask_jobs_.size() && mask_jobs_[next_job].row == out) {
          job = &mask_jobs_[next_job++];
        }
        if (job != nullptr && !job->status.ok()) {
          stream_token(r, job->status.with_context(r.params.constraint->describe()), st);
        } else if (id < 0 && job != nullptr) {
          stream_token(r,
                       internal_error("{}: no token the grammar allows has a finite logit",
                                      r.params.constraint->describe()),
                       st);
        } else if (id < 0) {
          stream_token(r, data_loss("the logits row holds NaN or +inf, or no finite value"), st);
        } else {
          // The grammar takes the token with the next step's mask, off this thread.
          if (job != nullptr) r.pending_accept = id;
          stream_token(r, id, st);
        }
      } else {
        sample_and_stream(r,
                          std::span<float>(logits_.data() + static_cast<int64_t>(out) * n_vocab,
                                           static_cast<size_t>(n_vocab)),
                          st);
      }
      ++out;
    }
  }
  return st;
}

// The masks of this step's constrained rows, on a pool of host threads (called by the runner
// once the pass is queued on the device): each job's error stays with its row.
Status EngineCore::fill_masks() {
  if (!mask_pool_)
    mask_pool_ = std::make_unique<ThreadPool>(std::min(16, ThreadPool::hardware_threads()));
  const auto words = static_cast<size_t>(token_mask_words(model_.hparams().n_vocab));
  mask_pool_->run(static_cast<int64_t>(mask_jobs_.size()), [&](int64_t task, int /*thread*/) {
    MaskJob& j = mask_jobs_[static_cast<size_t>(task)];
    std::span<uint32_t> bits(const_cast<uint32_t*>(row_sampling_[j.row].allow), words);
    j.status = take_pending(*j.req);
    if (j.status.ok()) j.status = j.req->constraint->fill(bits);
    if (!j.status.ok()) std::fill(bits.begin(), bits.end(), 0xFFFFFFFFu);
  });
  return ok_status();
}

// The constraint takes the token the device sampled last step, if it has not yet.
Status EngineCore::take_pending(Request& r) {
  if (r.pending_accept < 0) return ok_status();
  const int32_t t = r.pending_accept;
  r.pending_accept = -1;
  return r.constraint->accept(t);
}

void EngineCore::clear_prefix_cache() { kv_->clear_prefix_cache(); }

Status EngineCore::run_until_idle() {
  while (has_work()) {
    RINFER_ASSIGN_OR_RETURN(StepStats st, step());
    (void)st;
  }
  return ok_status();
}

Result<RequestOutcome> run_request(EngineCore& core, RequestParams params,
                                   const std::atomic<bool>* cancel) {
  RequestOutcome out;
  Status error;
  RequestCallback inner = std::move(params.on_event);
  params.on_event = [&](const RequestEvent& ev) {
    if (inner) inner(ev);
    if (ev.finish != FinishReason::kNone) {
      out.finish = ev.finish;
      out.stats = *ev.stats;
      error = ev.error;
    }
  };
  RINFER_ASSIGN_OR_RETURN(const RequestId id, core.submit(std::move(params)));
  bool aborted = false;
  while (out.finish == FinishReason::kNone) {
    if (!aborted && cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      core.abort(id);
      aborted = true;
    }
    RINFER_RETURN_IF_ERROR(core.step().status());
  }
  if (out.finish == FinishReason::kError) return error;
  return out;
}

EngineStats EngineCore::stats() const {
  EngineStats s = stats_;
  s.running = scheduler_->n_running();
  s.waiting = scheduler_->n_waiting();
  s.kv = kv_->usage();
  return s;
}

}  // namespace rinfer
