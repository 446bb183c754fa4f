// A decoder model for tests that runs another model's runner and then hands each pass's logits
// to after_forward(), which may change them: a planted fault, a non-finite value. Everything
// else (hyper-parameters, KV layout, arenas) is the wrapped model's.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "models/model.h"

namespace rinfer::test {

class LogitsHook : public DecoderModel {
 public:
  // `inner` must outlive this model.
  explicit LogitsHook(const DecoderModel& inner) : inner_(inner) {}
  std::string_view architecture() const override { return inner_.architecture(); }
  std::string describe() const override { return inner_.describe(); }
  uint64_t weight_bytes_per_token() const override { return inner_.weight_bytes_per_token(); }
  const DecoderHParams& hparams() const override { return inner_.hparams(); }
  Result<kv::KvSpec> kv_spec(int64_t n_ctx, int64_t block_size) const override {
    return inner_.kv_spec(n_ctx, block_size);
  }
  Result<std::unique_ptr<DecoderRunner>> create_runner(const RunnerOptions& o) const override {
    RINFER_ASSIGN_OR_RETURN(auto r, inner_.create_runner(o));
    return std::unique_ptr<DecoderRunner>(new Runner(std::move(r), *this));
  }

 protected:
  // After each successful pass: logits [b.logit_rows.size(), n_vocab].
  virtual void after_forward(const ForwardBatch& b, float* logits) const = 0;

 private:
  class Runner final : public DecoderRunner {
   public:
    Runner(std::unique_ptr<DecoderRunner> r, const LogitsHook& m) : r_(std::move(r)), m_(m) {}
    const RunnerOptions& options() const override { return r_->options(); }
    Device device() const override { return r_->device(); }
    Status forward(const ForwardBatch& b, kv::KvArena& kv, float* logits) override {
      RINFER_RETURN_IF_ERROR(r_->forward(b, kv, logits));
      m_.after_forward(b, logits);
      return ok_status();
    }
    Result<std::unique_ptr<kv::KvArena>> create_arena(const kv::KvSpec& spec,
                                                      std::span<const int32_t> n) override {
      return r_->create_arena(spec, n);
    }

   private:
    std::unique_ptr<DecoderRunner> r_;
    const LogitsHook& m_;
  };
  const DecoderModel& inner_;
};

}  // namespace rinfer::test
