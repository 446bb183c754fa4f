#include "engine/random_model.h"

#include <optional>
#include <string_view>

#include "core/error.h"
#include "engine/strategy_options.h"
#include "models/llama/shapes.h"
#include "strategies/registry.h"
#if defined(RINFER_WITH_CUDA)
#include "models/llama/cuda/llama_cuda_model.h"
#endif

namespace rinfer {

namespace {
constexpr std::string_view kRandom = "random:";
}  // namespace

bool is_random_model(const RecipeConfig& r) { return r.model.rfind(kRandom, 0) == 0; }

Result<std::unique_ptr<DecoderModel>> make_random_model(const RecipeConfig& r) {
  const std::string rest = r.model.substr(kRandom.size());
  const size_t colon = rest.find(':');
  const std::string shape = rest.substr(0, colon);
  const std::string dname = colon == std::string::npos ? "bf16" : rest.substr(colon + 1);
  const std::optional<DType> dtype = dtype_from_name(dname);
  if (!dtype) {
    return invalid_argument("{}: model {}: unknown weight type '{}'", r.origins().where("model"),
                            r.model, dname);
  }
  auto hp = llama::named_shape(shape);
  if (!hp.ok()) return hp.status().with_context(r.origins().where("model"));
  if (!r.device.is_cuda()) {
    return unsupported("{}: random-weight models are made on a CUDA device, not {}",
                       r.origins().where("model"), r.device.to_string());
  }
  LoadOptions opts;
  GeneratorOptions g;
  RINFER_RETURN_IF_ERROR(apply_strategies(r, opts, g));
  RINFER_RETURN_IF_ERROR(check_device_available(r.device, r.origins()));
  opts.max_batch = 512;
#if defined(RINFER_WITH_CUDA)
  return llama::make_random_cuda_model(*hp, *dtype, 1234, opts);
#else
  return unsupported("{}: this build has no CUDA", r.origins().where("device"));
#endif
}

}  // namespace rinfer
