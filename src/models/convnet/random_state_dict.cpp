#include "models/convnet/random_state_dict.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace rinfer::convnet {

namespace {

class StateDict {
 public:
  explicit StateDict(uint32_t seed) : rng_(seed) {}

  // A convolution's weight [c_out, c_in, k, k], Kaiming normal with fan out (torchvision).
  void conv(const std::string& name, int64_t c_out, int64_t c_in, int64_t k) {
    std::normal_distribution<float> n(0.0f, std::sqrt(2.0f / static_cast<float>(c_out * k * k)));
    add(name + ".weight", {c_out, c_in, k, k}, [&] { return n(rng_); });
  }
  void batch_norm(const std::string& name, int64_t c) {
    add_uniform(name + ".weight", {c}, 0.5f, 1.0f);
    add_uniform(name + ".bias", {c}, -0.1f, 0.1f);
    add_uniform(name + ".running_mean", {c}, -0.1f, 0.1f);
    add_uniform(name + ".running_var", {c}, 0.5f, 1.5f);
  }
  // torch.nn.Linear's default: uniform in +-1/sqrt(fan in), weight and bias.
  void linear(const std::string& name, int64_t out, int64_t in) {
    const float b = 1.0f / std::sqrt(static_cast<float>(in));
    add_uniform(name + ".weight", {out, in}, -b, b);
    add_uniform(name + ".bias", {out}, -b, b);
  }

  std::vector<TorchCheckpoint::F32Tensor> take() { return std::move(tensors_); }

 private:
  void add_uniform(std::string name, std::vector<int64_t> shape, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    add(std::move(name), std::move(shape), [&] { return d(rng_); });
  }
  template <typename Draw>
  void add(std::string name, std::vector<int64_t> shape, Draw draw) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = draw();
    tensors_.push_back({std::move(name), std::move(shape), std::move(v)});
  }

  std::mt19937 rng_;
  std::vector<TorchCheckpoint::F32Tensor> tensors_;
};

// torchvision's resnet50: the stem, four stages of bottleneck blocks (the first of each with a
// projection shortcut, "downsample"), the linear head; in the state dict's order.
std::vector<TorchCheckpoint::F32Tensor> resnet50() {
  StateDict sd(50);
  sd.conv("conv1", 64, 3, 7);
  sd.batch_norm("bn1", 64);
  const int64_t blocks[] = {3, 4, 6, 3};
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = int64_t{64} << stage;
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      sd.conv(p + ".conv1", planes, in, 1);
      sd.batch_norm(p + ".bn1", planes);
      sd.conv(p + ".conv2", planes, planes, 3);
      sd.batch_norm(p + ".bn2", planes);
      sd.conv(p + ".conv3", planes * 4, planes, 1);
      sd.batch_norm(p + ".bn3", planes * 4);
      if (b == 0) {
        sd.conv(p + ".downsample.0", planes * 4, in, 1);
        sd.batch_norm(p + ".downsample.1", planes * 4);
      }
      in = planes * 4;
    }
  }
  sd.linear("fc", 1000, in);
  return sd.take();
}

}  // namespace

std::vector<std::string> random_shape_names() { return {"resnet-50"}; }

Result<TorchCheckpoint> random_state_dict(std::string_view shape, const std::string& source) {
  if (shape == "resnet-50") return TorchCheckpoint::from_f32_tensors(source, resnet50());
  return invalid_argument("{}: no random convolutional network of shape '{}' (resnet-50)", source,
                          shape);
}

}  // namespace rinfer::convnet
