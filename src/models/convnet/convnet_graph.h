// A convolutional network as a list of nodes, built from a PyTorch state dict's names and
// shapes plus the recipe's ConvNetSpec, and run by every backend's runner. The readable forward
// pass of every family:
//   inverted_residual (MobileNetV2, EfficientNet-Lite):
//     x = act(bn(conv3x3/s2(image)))                          the stem
//     per block: h = act(bn(conv1x1(x)))  (no expansion: h = x)
//                h = act(bn(depthwise_kxk/s(h)))
//                h = bn(conv1x1(h));  x = h + x if s == 1 and the channels match, else h
//     x = act(bn(conv1x1(x)));  logits = linear(mean over the pixels of x)
//   resnet (ResNet-50, bottleneck blocks):
//     x = maxpool3x3/s2(relu(bn(conv7x7/s2(image))))
//     per block: h = relu(bn(conv1x1(x))); h = relu(bn(conv3x3/s(h))); h = bn(conv1x1(h))
//                x = relu(h + (downsample ? bn(conv1x1/s(x)) : x))
//     logits = linear(mean over the pixels of x)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/torch_checkpoint.h"
#include "models/image_classifier.h"

namespace rinfer::convnet {

enum class NodeKind : uint8_t { kConv, kMaxPool, kGlobalAvgPool, kLinear };

struct BatchNormParams {
  std::vector<float> gamma, beta, mean, var;  // [c_out]
  float eps = 1e-5f;
  bool present() const { return !gamma.empty(); }
};

struct Node {
  NodeKind kind = NodeKind::kConv;
  std::string name;   // the checkpoint prefix of its weight, e.g. "features.2.conv.1.0"
  int input = -1;     // the node whose output this reads; -1: the image
  int residual = -1;  // kConv: the node whose output is added before the activation
  // kConv: shape without the image size; kMaxPool: kh, stride_h, pad_top.
  int64_t c_in = 0, c_out = 0, k = 1, stride = 1, groups = 1, pad = 0;
  ConvPadding padding = ConvPadding::kSymmetric;
  cpu::Activation act = cpu::Activation::kNone;
  std::vector<float> w;     // kConv: OHWI [c_out, k, k, c_in / groups]; kLinear: [c_out, c_in]
  std::vector<float> bias;  // [c_out] or empty
  BatchNormParams bn;       // kConv: the batch norm after it (empty once folded)
};

struct Graph {
  std::string family;
  std::vector<Node> nodes;  // in execution order; the last is the linear head
  int64_t n_classes = 0;
  uint64_t n_params = 0;  // the checkpoint's parameters (batch-norm statistics excluded)
};

// Builds the graph; errors name the checkpoint and the tensor or block that does not fit.
Result<Graph> build_graph(const TorchCheckpoint& ckpt, const ConvNetSpec& spec);

// Folds each batch norm into its convolution: w' = w * s, b' = (b - mean) * s + beta with
// s = gamma / sqrt(var + eps) per output channel, computed in double.
void fold_batch_norms(Graph& g);

// The output size of node `i` for an input of h x w, and its FLOPs (2 per multiply-add).
struct NodeDims {
  int64_t h = 0, w = 0, c = 0;
};
std::vector<NodeDims> node_dims(const Graph& g, int64_t h, int64_t w);
cpu::Conv2dShape conv_shape(const Node& n, int64_t batch, int64_t h, int64_t w);
double graph_flops(const Graph& g, int64_t h, int64_t w);

// The last node that reads each node's output (as input or residual); the last node's output is
// read after the graph (g.nodes.size()).
std::vector<size_t> last_uses(const Graph& g);
// Buffers by liveness, for every backend's runner: in order, node i's output (need[i] elements;
// 0: no buffer, slot -1) takes the smallest free buffer that fits, else the largest free one
// (grown), else a new one; a buffer is free once the last reader of its node has run. Fills
// `slot` (node -> buffer) and returns each buffer's capacity in elements.
std::vector<size_t> assign_buffers(const std::vector<size_t>& need,
                                   const std::vector<size_t>& last_use, std::vector<int>& slot);

}  // namespace rinfer::convnet
