// The convolutional image classifiers (MobileNetV2, EfficientNet-Lite, ResNet) from a PyTorch
// state dict and the recipe's ConvNetSpec: the graph of convnet_graph.h with its weights on the
// host, run by the CPU runner (and by the CUDA runner on a GPU). Strategies at load:
// fusion.batchnorm folds each batch norm into its convolution (off: a batch_norm op after each
// convolution, the baseline); fusion.conv_epilogue applies the bias, the residual and the
// activation inside the convolution (off: separate passes over its output); fusion.blocks runs
// each inverted-residual block band by band (convnet_blocks.h).
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"
#include "models/convnet/convnet_graph.h"
#include "models/image_classifier.h"
#include "ops/cpu/gemm_packed_f32.h"

namespace rinfer::convnet {

class ConvNetModel : public ImageClassifierModel {
 public:
  static Result<std::unique_ptr<ConvNetModel>> load(const std::string& path,
                                                    const ConvNetSpec& spec,
                                                    const LoadOptions& opts);
  // From a state dict already read (or made: random_state_dict.h).
  static Result<std::unique_ptr<ConvNetModel>> from_checkpoint(const TorchCheckpoint& ckpt,
                                                               const ConvNetSpec& spec,
                                                               const LoadOptions& opts);

  std::string_view architecture() const override { return graph_.family; }
  std::string describe() const override;
  uint64_t weight_bytes_per_token() const override { return weight_bytes_; }
  int64_t n_classes() const override { return graph_.n_classes; }
  double flops_per_image(int64_t height, int64_t width) const override {
    return graph_flops(graph_, height, width);
  }
  Result<std::unique_ptr<ImageClassifierRunner>> create_runner(
      const ClassifierRunnerOptions& opts) const override;

  const Graph& graph() const { return graph_; }
  const LoadOptions& load_options() const { return opts_; }
  // The linear head's weight as a matmul operand, [n_classes, channels].
  const Tensor& head_weight() const { return head_w_; }
  bool fused_epilogue() const { return opts_.fusion.conv_epilogue; }
  // fusion.blocks, which needs the batch norms folded and the epilogues fused.
  bool fused_blocks() const {
    return opts_.fusion.blocks && opts_.fusion.batchnorm && opts_.fusion.conv_epilogue;
  }
  // Node i's weights packed for the GEMM (ungrouped convolutions), else undefined.
  const cpu::PackedF32& packed(size_t i) const { return packed_[i]; }

 private:
  ConvNetModel() = default;

  std::string path_;
  Graph graph_;
  LoadOptions opts_;
  Tensor head_w_;
  std::vector<cpu::PackedF32> packed_;  // per node
  uint64_t weight_bytes_ = 0;
};

// The CUDA runner (models/convnet/cuda/convnet_cuda_runner.cpp; CUDA builds only).
Result<std::unique_ptr<ImageClassifierRunner>> make_cuda_runner(
    const ConvNetModel& m, const ClassifierRunnerOptions& opts);

}  // namespace rinfer::convnet
