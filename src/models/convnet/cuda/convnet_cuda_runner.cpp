// The convolutional classifiers on a CUDA device (CUDA builds only), in bf16 or, with
// strategies.quantization.weights f16, in f16 (weights and activations; sums f32 throughout).
// Weights go up once per runner (convolutions KRSC, depthwise ones tap-major [k, k, c], the head
// for cuBLASLt), biases f32; activations are NHWC in buffers assigned by liveness
// (assign_buffers), sized for max_batch. Per node:
//   ungrouped convolution -> a cuDNN plan (conv_cudnn.h), its bias, residual and activation fused
//                            into the cuDNN graph (fusion.conv_epilogue; off: channel_epilogue)
//   depthwise convolution -> depthwise_conv2d (bias and activation inside)
//   max pool / average pool -> vision_ops.h;  linear head -> cuBLASLt (f32 logits) + its bias
// The image's 3 channels are padded to 8 on the device (pack_image; the stem's weights too).
// Unfolded batch norms (fusion.batchnorm off, the baseline) are a channel_epilogue pass of
// scale and shift after their convolution. Batches run at a bucket of images (a power of two,
// up to max_batch; the rest of the bucket zero), each bucket with its own cuDNN plans and, with
// strategies.cuda_graphs, one CUDA graph replayed per batch. A batch with taps runs eagerly, each
// tapped node's output copied back after it (ImageBatch::taps).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/cuda/cublas_lt.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cudnn.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/pinned.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/quantize.h"
#include "models/convnet/convnet_blocks.h"
#include "models/convnet/convnet_model.h"
#include "ops/cuda/conv_cudnn.h"
#include "ops/cuda/ops_cuda.h"
#include "ops/cuda/vision_ops.h"

namespace rinfer::convnet {

namespace {

using cuda::DeviceBuffer;

constexpr int64_t kImageChannels = 8;  // the stem's input channels on the device
constexpr size_t kWorkspaceLimit = size_t{256} << 20;

struct DeviceNode {
  DeviceBuffer w;     // bf16 weights
  DeviceBuffer vecs;  // f32: bias [c_out], then the batch norm's scale and shift
  const float* bias = nullptr;
  const float* bn_scale = nullptr;  // unfolded batch norm, else null
  const float* bn_shift = nullptr;
  cpu::Conv2dShape shape;  // at n = 1; the bucket sets n
  bool depthwise = false;
};

// One bucket's plans and graph.
struct Bucket {
  int64_t n = 0;
  std::vector<std::unique_ptr<cuda::CudnnConv>> convs;  // per node (null: not a cuDNN conv)
  cudaGraphExec_t graph = nullptr;
  bool graph_failed = false;
};

class CudaRunner final : public ImageClassifierRunner {
 public:
  CudaRunner(const ConvNetModel& m, const ClassifierRunnerOptions& opts) : m_(m), opts_(opts) {}
  ~CudaRunner() override {
    if (stream_.get() != nullptr) static_cast<void>(stream_.synchronize());
    for (auto& [n, b] : buckets_) {
      if (b.graph != nullptr) cudaGraphExecDestroy(b.graph);
    }
    if (pinned_ != nullptr) cuda::pinned_host_allocator().deallocate(pinned_, pinned_bytes_);
  }

  Status init();
  const ClassifierRunnerOptions& options() const override { return opts_; }
  Status classify(const ImageBatch& batch, float* logits) override;
  Status rerun(int64_t n) override;

 private:
  Status upload_weights();
  Status plan_buffers();
  Result<Bucket*> bucket_for(int64_t n);
  Status forward(Bucket& b);
  Status launch(Bucket& b);  // the graph (captured on first use) or the kernels one by one
  // Node i's output to taps_ (ImageBatch::taps) when it is a tap: copied back and widened to f32
  // (forward runs eagerly while taps_ is set).
  Status tap(size_t i);
  uint16_t* out_of(int node) const {
    return buf_ptrs_[static_cast<size_t>(slot_[static_cast<size_t>(node)])];
  }
  const uint16_t* in_of(const Node& nd) const { return nd.input < 0 ? image_ : out_of(nd.input); }
  cuda::ConvBuffers conv_buffers(size_t i) const;

  uint16_t to16(float v) const { return dtype_ == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v); }

  const ConvNetModel& m_;
  ClassifierRunnerOptions opts_;
  DType dtype_ = DType::kBF16;  // weights and activations
  int device_ = 0;
  cuda::DeviceAllocator* alloc_ = nullptr;
  cuda::Stream stream_;
  cuda::CudnnHandle cudnn_;
  cuda::CublasLt lt_;
  std::vector<DeviceNode> nodes_;
  std::vector<NodeDims> dims_;
  std::vector<int> slot_;
  std::vector<DeviceBuffer> bufs_;
  std::vector<uint16_t*> buf_ptrs_;
  DeviceBuffer io_;  // pixels f32 [max_batch, h, w, 3] | image bf16 [.., 8] | logits f32
  float* pixels_ = nullptr;
  uint16_t* image_ = nullptr;
  float* logits_ = nullptr;
  DeviceBuffer workspace_;
  std::map<int64_t, Bucket> buckets_;
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  TapSink* taps_ = nullptr;  // the taps of the batch in flight (null: off)
  int64_t tap_n_ = 0;        // its images (the bucket's padding is not tapped)
  std::vector<bool> tapped_;
  std::vector<uint16_t> tap16_;
  std::vector<float> tap32_;
};

Status CudaRunner::tap(size_t i) {
  if (taps_ == nullptr || !tapped_[i]) return ok_status();
  const Node& nd = m_.graph().nodes[i];
  const TapKind kind = tap_kind_of_node(nd);
  if (!taps_->wants(kind)) return ok_status();
  const NodeDims& d = dims_[i];
  const int64_t width = d.h * d.w * d.c;
  const auto count = static_cast<size_t>(tap_n_ * width);
  tap32_.resize(count);
  cudaStream_t st = stream_.get();
  if (nd.kind == NodeKind::kLinear) {  // the f32 logits
    RINFER_CUDA_RETURN(
        cudaMemcpyAsync(tap32_.data(), logits_, count * 4, cudaMemcpyDeviceToHost, st));
    RINFER_RETURN_IF_ERROR(stream_.synchronize());
  } else {
    tap16_.resize(count);
    RINFER_CUDA_RETURN(cudaMemcpyAsync(tap16_.data(), out_of(static_cast<int>(i)), count * 2,
                                       cudaMemcpyDeviceToHost, st));
    RINFER_RETURN_IF_ERROR(stream_.synchronize());
    for (size_t k = 0; k < count; ++k) {
      tap32_[k] = dtype_ == DType::kF16 ? f16_to_f32(tap16_[k]) : bf16_to_f32(tap16_[k]);
    }
  }
  taps_->record(kind, static_cast<int32_t>(i), tap32_.data(), tap_n_, width);
  return ok_status();
}

Status CudaRunner::upload_weights() {
  const Graph& g = m_.graph();
  cudaStream_t st = stream_.get();
  nodes_.resize(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& nd = g.nodes[i];
    DeviceNode& d = nodes_[i];
    const std::string what = fmt::format("uploading '{}'", nd.name);
    std::vector<float> vecs;
    if (!nd.bias.empty()) vecs.insert(vecs.end(), nd.bias.begin(), nd.bias.end());
    if (nd.bn.present()) {
      // y * scale + shift with scale = gamma / sqrt(var + eps), shift = beta - mean * scale.
      std::vector<float> scale(static_cast<size_t>(nd.c_out)), shift(scale.size());
      for (size_t c = 0; c < scale.size(); ++c) {
        const double s = double(nd.bn.gamma[c]) / std::sqrt(double(nd.bn.var[c]) + nd.bn.eps);
        scale[c] = static_cast<float>(s);
        shift[c] = static_cast<float>(double(nd.bn.beta[c]) - double(nd.bn.mean[c]) * s);
      }
      vecs.insert(vecs.end(), scale.begin(), scale.end());
      vecs.insert(vecs.end(), shift.begin(), shift.end());
    }
    if (!vecs.empty()) {
      RINFER_ASSIGN_OR_RETURN(d.vecs, DeviceBuffer::create(vecs.size() * 4, device_, st, alloc_));
      RINFER_CUDA_RETURN(
          cudaMemcpyAsync(d.vecs.data(), vecs.data(), vecs.size() * 4, cudaMemcpyHostToDevice, st));
      const float* base = d.vecs.as<float>();
      if (!nd.bias.empty()) {
        d.bias = base;
        base += nd.c_out;
      }
      if (nd.bn.present()) {
        d.bn_scale = base;
        d.bn_shift = base + nd.c_out;
      }
    }
    if (nd.kind != NodeKind::kConv && nd.kind != NodeKind::kLinear) continue;
    d.shape = conv_shape(nd, 1, 1, 1);
    d.depthwise = nd.kind == NodeKind::kConv && d.shape.depthwise();
    if (nd.kind == NodeKind::kConv && !d.depthwise && nd.groups != 1) {
      return unsupported("'{}': grouped convolutions ({} groups) do not run on CUDA", nd.name,
                         nd.groups);
    }
    std::vector<uint16_t> w;
    const int64_t taps = nd.k * nd.k;
    if (nd.kind == NodeKind::kLinear) {  // [n_classes, c_in], as is
      w.resize(nd.w.size());
      for (size_t j = 0; j < w.size(); ++j) w[j] = to16(nd.w[j]);
    } else if (d.depthwise) {  // [c, k, k, 1] -> [k, k, c]
      w.resize(static_cast<size_t>(taps * nd.c_out));
      for (int64_t c = 0; c < nd.c_out; ++c)
        for (int64_t t = 0; t < taps; ++t)
          w[static_cast<size_t>(t * nd.c_out + c)] = to16(nd.w[static_cast<size_t>(c * taps + t)]);
    } else if (nd.input < 0) {  // the stem: c_in 3 padded to kImageChannels
      if (nd.c_in != 3)
        return unsupported("'{}': the stem takes {} channels, not 3", nd.name, nd.c_in);
      w.assign(static_cast<size_t>(nd.c_out * taps * kImageChannels), 0);
      for (int64_t o = 0; o < nd.c_out * taps; ++o)
        for (int64_t c = 0; c < 3; ++c)
          w[static_cast<size_t>(o * kImageChannels + c)] =
              to16(nd.w[static_cast<size_t>(o * 3 + c)]);
      d.shape.c_in = kImageChannels;
    } else {
      w.resize(nd.w.size());
      for (size_t j = 0; j < w.size(); ++j) w[j] = to16(nd.w[j]);
    }
    if (nd.kind == NodeKind::kConv && !d.depthwise &&
        (d.shape.c_in % 8 != 0 || d.shape.c_out % 8 != 0)) {
      return unsupported("'{}': {} -> {} channels (multiples of 8 on CUDA)", nd.name, d.shape.c_in,
                         d.shape.c_out);
    }
    RINFER_ASSIGN_OR_RETURN(d.w, DeviceBuffer::create(w.size() * 2, device_, st, alloc_));
    RINFER_CUDA_RETURN(
        cudaMemcpyAsync(d.w.data(), w.data(), w.size() * 2, cudaMemcpyHostToDevice, st));
    RINFER_RETURN_IF_ERROR(stream_.synchronize());  // w and vecs leave the host vectors' scope
  }
  return stream_.synchronize();
}

Status CudaRunner::plan_buffers() {
  const Graph& g = m_.graph();
  const int64_t n = opts_.max_batch;
  dims_ = node_dims(g, opts_.height, opts_.width);
  std::vector<size_t> need(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeDims& d = dims_[i];
    if (d.h < 1 || d.w < 1) {
      return invalid_argument("{}x{} images are too small for '{}' ({}x{} out)", opts_.height,
                              opts_.width, g.nodes[i].name, d.h, d.w);
    }
    // The head writes the f32 logits of io_, not a buffer.
    need[i] = g.nodes[i].kind == NodeKind::kLinear ? 0 : static_cast<size_t>(n * d.h * d.w * d.c);
  }
  const std::vector<size_t> cap = assign_buffers(need, last_uses(g), slot_);
  cudaStream_t st = stream_.get();
  size_t total = 0;
  for (size_t b = 0; b < cap.size(); ++b) {
    auto buf = DeviceBuffer::create(cap[b] * 2, device_, st, alloc_);
    if (!buf.ok()) {
      return buf.status().with_context(
          fmt::format("classifier on CUDA: activations for max_batch {} ({:.1f} MB so far)", n,
                      double(total) / 1e6));
    }
    total += cap[b] * 2;
    bufs_.push_back(std::move(buf).value());
    buf_ptrs_.push_back(bufs_.back().as<uint16_t>());
    // Timing cuDNN's candidates on zeros would flatter them: random values.
    RINFER_RETURN_IF_ERROR(cuda::fill_random(buf_ptrs_.back(), dtype_, static_cast<int64_t>(cap[b]),
                                             -1.0f, 1.0f, b + 1, st));
  }
  const auto px = static_cast<size_t>(n * opts_.height * opts_.width);
  const size_t pixels_b = (px * 3 * 4 + 255) / 256 * 256;
  const size_t image_b = (px * kImageChannels * 2 + 255) / 256 * 256;
  const size_t logits_b = static_cast<size_t>(n * g.n_classes) * 4;
  RINFER_ASSIGN_OR_RETURN(io_,
                          DeviceBuffer::create(pixels_b + image_b + logits_b, device_, st, alloc_));
  auto* base = static_cast<uint8_t*>(io_.data());
  pixels_ = reinterpret_cast<float*>(base);
  image_ = reinterpret_cast<uint16_t*>(base + pixels_b);
  logits_ = reinterpret_cast<float*>(base + pixels_b + image_b);
  RINFER_RETURN_IF_ERROR(cuda::fill_random(
      image_, dtype_, static_cast<int64_t>(px * kImageChannels), -1.0f, 1.0f, 99, st));
  RINFER_ASSIGN_OR_RETURN(workspace_, DeviceBuffer::create(kWorkspaceLimit, device_, st, alloc_));
  pinned_bytes_ = std::max(px * 3 * 4, logits_b);
  RINFER_ASSIGN_OR_RETURN(pinned_, cuda::pinned_host_allocator().allocate(pinned_bytes_));
  return stream_.synchronize();
}

Status CudaRunner::init() {
  const LoadOptions& lo = m_.load_options();
  dtype_ = lo.weight_format.value_or(DType::kBF16);
  if (dtype_ != DType::kBF16 && dtype_ != DType::kF16) {
    return unsupported("classifier on CUDA: weights {} (bf16 or f16)", dtype_name(dtype_));
  }
  device_ = lo.device.index;
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard guard, cuda::DeviceGuard::set(device_));
  RINFER_ASSIGN_OR_RETURN(
      alloc_, cuda::device_allocator(device_, lo.cuda.allocator == AllocatorKind::kPlain));
  RINFER_ASSIGN_OR_RETURN(stream_, cuda::Stream::create(device_));
  RINFER_ASSIGN_OR_RETURN(cudnn_, cuda::CudnnHandle::create(device_));
  RINFER_ASSIGN_OR_RETURN(lt_, cuda::CublasLt::create(device_));
  RINFER_RETURN_IF_ERROR(upload_weights());
  tapped_ = tapped_nodes(m_.graph());
  return plan_buffers();
}

cuda::ConvBuffers CudaRunner::conv_buffers(size_t i) const {
  const Node& nd = m_.graph().nodes[i];
  const DeviceNode& d = nodes_[i];
  cuda::ConvBuffers b;
  b.x = in_of(nd);
  b.w = d.w.as<uint16_t>();
  b.y = out_of(static_cast<int>(i));
  // Unfolded batch norms and unfused epilogues apply bias, residual and activation afterwards.
  if (m_.fused_epilogue() && d.bn_scale == nullptr) {
    b.bias = d.bias;
    b.residual = nd.residual >= 0 ? out_of(nd.residual) : nullptr;
  }
  return b;
}

Result<Bucket*> CudaRunner::bucket_for(int64_t n) {
  int64_t bn = 1;
  while (bn < n) bn *= 2;
  bn = std::min(bn, opts_.max_batch);
  auto it = buckets_.find(bn);
  if (it != buckets_.end()) return &it->second;
  Bucket b;
  b.n = bn;
  const Graph& g = m_.graph();
  b.convs.resize(g.nodes.size());
  cuda::CudnnConvOptions co;
  co.dtype = dtype_;
  co.fuse_epilogue = m_.fused_epilogue();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& nd = g.nodes[i];
    const DeviceNode& d = nodes_[i];
    if (nd.kind != NodeKind::kConv || d.depthwise) continue;
    const NodeDims in = nd.input < 0 ? NodeDims{opts_.height, opts_.width, kImageChannels}
                                     : dims_[static_cast<size_t>(nd.input)];
    cpu::Conv2dShape s = conv_shape(nd, bn, in.h, in.w);
    s.c_in = d.shape.c_in;
    const cuda::ConvBuffers cb = conv_buffers(i);
    const bool inside = m_.fused_epilogue() && d.bn_scale == nullptr;
    const cpu::Activation act = inside ? nd.act : cpu::Activation::kNone;
    auto conv = cuda::CudnnConv::create(cudnn_, s, cb, act, co, workspace_.data(),
                                        workspace_.bytes(), stream_.get());
    if (!conv.ok()) return conv.status().with_context(fmt::format("'{}'", nd.name));
    b.convs[i] = std::make_unique<cuda::CudnnConv>(std::move(conv).value());
  }
  return &buckets_.emplace(bn, std::move(b)).first->second;
}

Status CudaRunner::forward(Bucket& b) {
  const Graph& g = m_.graph();
  cudaStream_t st = stream_.get();
  const int64_t n = b.n;
  RINFER_RETURN_IF_ERROR(cuda::pack_image(dtype_, pixels_, n * opts_.height * opts_.width,
                                          kImageChannels, image_, st));
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& nd = g.nodes[i];
    const DeviceNode& d = nodes_[i];
    const NodeDims in = nd.input < 0 ? NodeDims{opts_.height, opts_.width, kImageChannels}
                                     : dims_[static_cast<size_t>(nd.input)];
    const int64_t rows = n * dims_[i].h * dims_[i].w;
    uint16_t* y = nd.kind == NodeKind::kLinear ? nullptr : out_of(static_cast<int>(i));
    switch (nd.kind) {
      case NodeKind::kConv: {
        const bool inside = m_.fused_epilogue() && d.bn_scale == nullptr;
        if (d.depthwise) {
          cpu::Conv2dShape s = conv_shape(nd, n, in.h, in.w);
          RINFER_RETURN_IF_ERROR(cuda::depthwise_conv2d(
              dtype_, s, in_of(nd), d.w.as<uint16_t>(), inside ? d.bias : nullptr,
              inside && nd.residual < 0 ? nd.act : cpu::Activation::kNone, y, st));
          if (inside && nd.residual >= 0) {
            RINFER_RETURN_IF_ERROR(cuda::channel_epilogue(
                dtype_, y, rows, nd.c_out, nullptr, nullptr, out_of(nd.residual), nd.act, st));
          }
        } else {
          RINFER_RETURN_IF_ERROR(b.convs[i]->run(cudnn_, conv_buffers(i), workspace_.data(), st));
        }
        if (!inside) {  // the baseline: batch norm (or bias), residual and activation in a pass
          const bool bn = d.bn_scale != nullptr;
          if (bn && d.bias != nullptr) {  // a conv bias before an unfolded batch norm
            RINFER_RETURN_IF_ERROR(cuda::channel_epilogue(
                dtype_, y, rows, nd.c_out, nullptr, d.bias, nullptr, cpu::Activation::kNone, st));
          }
          RINFER_RETURN_IF_ERROR(cuda::channel_epilogue(
              dtype_, y, rows, nd.c_out, d.bn_scale, bn ? d.bn_shift : d.bias,
              nd.residual >= 0 ? out_of(nd.residual) : nullptr, nd.act, st));
        }
        break;
      }
      case NodeKind::kMaxPool:
        RINFER_RETURN_IF_ERROR(cuda::max_pool2d(dtype_, in_of(nd), n, in.h, in.w, in.c, nd.k,
                                                nd.stride, nd.pad, y, st));
        break;
      case NodeKind::kGlobalAvgPool:
        RINFER_RETURN_IF_ERROR(
            cuda::global_avg_pool(dtype_, in_of(nd), n, in.h * in.w, in.c, y, st));
        break;
      case NodeKind::kLinear:
        RINFER_RETURN_IF_ERROR(cuda::gemm_lowp(lt_, dtype_, d.w.data(), nd.c_in, in_of(nd), nd.c_in,
                                               n, nd.c_out, nd.c_in, DType::kF32, logits_, 0.0f,
                                               st));
        if (d.bias != nullptr) {
          RINFER_RETURN_IF_ERROR(cuda::channel_epilogue(DType::kF32, logits_, n, nd.c_out, nullptr,
                                                        d.bias, nullptr, cpu::Activation::kNone,
                                                        st));
        }
        break;
    }
    RINFER_RETURN_IF_ERROR(tap(i));
  }
  return ok_status();
}

Status CudaRunner::launch(Bucket& b) {
  cudaStream_t st = stream_.get();
  const bool graphs = m_.load_options().cuda.graphs;
  if (graphs && b.graph == nullptr && !b.graph_failed) {
    RINFER_RETURN_IF_ERROR(forward(b));  // warm-up: cuBLASLt picks its algorithm outside
    RINFER_RETURN_IF_ERROR(stream_.synchronize());
    RINFER_CUDA_RETURN(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    const Status fs = forward(b);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(st, &graph);
    if (fs.ok() && end == cudaSuccess && cudaGraphInstantiate(&b.graph, graph, 0) == cudaSuccess) {
      // captured
    } else {
      b.graph = nullptr;
      b.graph_failed = true;  // run the kernels one by one from now on
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    static_cast<void>(cudaGetLastError());
  }
  if (b.graph != nullptr) {
    RINFER_CUDA_RETURN(cudaGraphLaunch(b.graph, st));
  } else {
    RINFER_RETURN_IF_ERROR(forward(b));
  }
  return ok_status();
}

Status CudaRunner::rerun(int64_t n) {
  if (n < 1 || n > opts_.max_batch) {
    return invalid_argument("rerun: {} images (1 to {})", n, opts_.max_batch);
  }
  if (buckets_.empty()) return invalid_argument("rerun: no batch classified yet");
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard guard, cuda::DeviceGuard::set(device_));
  RINFER_ASSIGN_OR_RETURN(Bucket * b, bucket_for(n));
  RINFER_RETURN_IF_ERROR(launch(*b));
  return stream_.synchronize();
}

Status CudaRunner::classify(const ImageBatch& batch, float* logits) {
  RINFER_RETURN_IF_ERROR(check_image_batch(batch, opts_));
  if (batch.height != opts_.height || batch.width != opts_.width) {
    return invalid_argument("classifier on CUDA: {}x{} images, the runner was made for {}x{}",
                            batch.height, batch.width, opts_.height, opts_.width);
  }
  RINFER_ASSIGN_OR_RETURN(cuda::DeviceGuard guard, cuda::DeviceGuard::set(device_));
  RINFER_ASSIGN_OR_RETURN(Bucket * b, bucket_for(batch.n));
  cudaStream_t st = stream_.get();
  const size_t px = static_cast<size_t>(opts_.height * opts_.width * 3);
  auto* staged = static_cast<float*>(pinned_);
  std::memcpy(staged, batch.pixels.data(), batch.pixels.size() * 4);
  std::fill(staged + batch.pixels.size(), staged + static_cast<size_t>(b->n) * px, 0.0f);
  RINFER_CUDA_RETURN(cudaMemcpyAsync(pixels_, staged, static_cast<size_t>(b->n) * px * 4,
                                     cudaMemcpyHostToDevice, st));
  if (batch.taps != nullptr) {  // eagerly, node by node, each tap copied back
    taps_ = batch.taps;
    tap_n_ = batch.n;
    const Status ran = forward(*b);
    taps_ = nullptr;
    RINFER_RETURN_IF_ERROR(ran);
  } else {
    RINFER_RETURN_IF_ERROR(launch(*b));
  }
  const size_t out_b = static_cast<size_t>(batch.n * m_.n_classes()) * 4;
  RINFER_CUDA_RETURN(cudaMemcpyAsync(pinned_, logits_, out_b, cudaMemcpyDeviceToHost, st));
  RINFER_RETURN_IF_ERROR(stream_.synchronize());
  std::memcpy(logits, pinned_, out_b);
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<ImageClassifierRunner>> make_cuda_runner(
    const ConvNetModel& m, const ClassifierRunnerOptions& opts) {
  auto r = std::make_unique<CudaRunner>(m, opts);
  RINFER_RETURN_IF_ERROR(r->init());
  return std::unique_ptr<ImageClassifierRunner>(std::move(r));
}

}  // namespace rinfer::convnet
