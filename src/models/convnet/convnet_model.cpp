// ConvNetModel: load (checkpoint -> graph -> folded or not) and the CPU runner, which runs the
// graph's nodes in order over NHWC buffers assigned by liveness (a node's output takes a buffer
// freed by nodes no longer read), sized once for the runner's largest batch.
#include "models/convnet/convnet_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "models/convnet/convnet_blocks.h"

namespace rinfer::convnet {
namespace {

class CpuRunner : public ImageClassifierRunner {
 public:
  CpuRunner(const ConvNetModel& m, const ClassifierRunnerOptions& opts) : m_(m), opts_(opts) {}

  const ClassifierRunnerOptions& options() const override { return opts_; }

  Status plan(int64_t n, int64_t h, int64_t w) {
    const Graph& g = m_.graph();
    dims_ = node_dims(g, h, w);
    std::vector<size_t> last_use = last_uses(g);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const NodeDims& d = dims_[i];
      if (d.h < 1 || d.w < 1) {
        return invalid_argument("{}x{} images are too small for '{}' ({}x{} out)", h, w,
                                g.nodes[i].name, d.h, d.w);
      }
    }
    // Fused blocks: the chain's first node writes the last one's output, reading its input all
    // the while; the two nodes inside have no buffer.
    fused_.assign(g.nodes.size(), 0);
    if (m_.fused_blocks()) {
      fused_ = fusable_chains(g);
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        const auto in = static_cast<size_t>(g.nodes[i].input);
        if (fused_[i] == 1 && g.nodes[i].input >= 0) last_use[in] = std::max(last_use[in], i + 2);
      }
    }
    tapped_ = tapped_nodes(g);
    std::vector<size_t> need(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const bool inside = fused_[i] == 1 || (fused_[i] == 2 && fused_[i - 1] == 1);
      need[i] = inside ? 0 : static_cast<size_t>(n * dims_[i].h * dims_[i].w * dims_[i].c);
    }
    const std::vector<size_t> cap = assign_buffers(need, last_use, slot_);
    bufs_.resize(cap.size());
    for (size_t b = 0; b < cap.size(); ++b) bufs_[b].resize(cap[b]);
    planned_ = {n, h, w};
    return Status();
  }

  Status classify(const ImageBatch& batch, float* logits) override {
    RINFER_RETURN_IF_ERROR(check_image_batch(batch, opts_));
    if (planned_[0] < batch.n || planned_[1] != batch.height || planned_[2] != batch.width) {
      RINFER_RETURN_IF_ERROR(plan(std::max(batch.n, opts_.max_batch), batch.height, batch.width));
    }
    const Graph& g = m_.graph();
    const cpu::OpContext& ctx = m_.load_options().cpu.ops;
    const int64_t n = batch.n;
    const auto out_of = [&](int i) -> float* {
      return bufs_[static_cast<size_t>(slot_[static_cast<size_t>(i)])].data();
    };
    // Node i's output to the taps (ImageBatch::taps), when it is one and they want its kind.
    const auto tap = [&](size_t i) {
      const TapKind kind = tap_kind_of_node(g.nodes[i]);
      if (batch.taps == nullptr || !tapped_[i] || !batch.taps->wants(kind)) return;
      const NodeDims& d = dims_[i];
      batch.taps->record(kind, static_cast<int32_t>(i), out_of(static_cast<int>(i)), n,
                         d.h * d.w * d.c);
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& nd = g.nodes[i];
      const NodeDims in = nd.input < 0 ? NodeDims{batch.height, batch.width, 3}
                                       : dims_[static_cast<size_t>(nd.input)];
      const float* x = nd.input < 0 ? batch.pixels.data() : out_of(nd.input);
      if (fused_[i] == 1) {  // expand, depthwise, project: band by band into the project's output
        const Node& pj = g.nodes[i + 2];
        const FusedBlock f{&nd, &g.nodes[i + 1], &pj, &m_.packed(i), &m_.packed(i + 2)};
        RINFER_RETURN_IF_ERROR(run_fused_block(ctx, f, n, in.h, in.w, x,
                                               pj.residual >= 0 ? out_of(pj.residual) : nullptr,
                                               out_of(static_cast<int>(i + 2))));
        i += 2;
        tap(i);
        continue;
      }
      float* y = out_of(static_cast<int>(i));
      const int64_t rows = n * dims_[i].h * dims_[i].w;  // output pixels
      switch (nd.kind) {
        case NodeKind::kConv:
          RINFER_RETURN_IF_ERROR(run_conv(ctx, nd, m_.packed(i), n, in, x, y, rows));
          break;
        case NodeKind::kMaxPool:
          RINFER_RETURN_IF_ERROR(
              cpu::max_pool2d(ctx, x, n, in.h, in.w, in.c, nd.k, nd.stride, nd.pad, y));
          break;
        case NodeKind::kGlobalAvgPool: cpu::global_avg_pool(ctx, x, n, in.h, in.w, in.c, y); break;
        case NodeKind::kLinear:
          RINFER_RETURN_IF_ERROR(cpu::matmul(ctx, m_.head_weight(), x, n, y));
          if (!nd.bias.empty()) cpu::add_bias(ctx, y, nd.bias.data(), n, nd.c_out);
          break;
      }
      tap(i);
    }
    const float* out = out_of(static_cast<int>(g.nodes.size()) - 1);
    std::copy(out, out + n * g.n_classes, logits);
    return Status();
  }

 private:
  Status run_conv(const cpu::OpContext& ctx, const Node& nd, const cpu::PackedF32& pw, int64_t n,
                  const NodeDims& in, const float* x, float* y, int64_t rows) {
    const cpu::PackedF32* packed = pw.defined() ? &pw : nullptr;
    const cpu::Conv2dShape s = conv_shape(nd, n, in.h, in.w);
    const float* res =
        nd.residual >= 0
            ? bufs_[static_cast<size_t>(slot_[static_cast<size_t>(nd.residual)])].data()
            : nullptr;
    const float* bias = nd.bias.empty() ? nullptr : nd.bias.data();
    if (m_.fused_epilogue() && !nd.bn.present()) {
      return cpu::conv2d(ctx, s, x, nd.w.data(), {bias, res, nd.act}, y, packed);
    }
    // The unfused baseline: the convolution, then the batch norm, the residual and the
    // activation each as a pass over the output.
    RINFER_RETURN_IF_ERROR(
        cpu::conv2d(ctx, s, x, nd.w.data(), {bias, nullptr, cpu::Activation::kNone}, y));
    if (nd.bn.present()) {
      cpu::batch_norm(ctx, y, rows, nd.c_out, nd.bn.gamma.data(), nd.bn.beta.data(),
                      nd.bn.mean.data(), nd.bn.var.data(), nd.bn.eps, cpu::Activation::kNone);
    }
    if (res != nullptr) cpu::add(ctx, y, res, rows * nd.c_out, y);
    if (nd.act != cpu::Activation::kNone) {
      cpu::bias_activation(ctx, y, nullptr, rows, nd.c_out, nd.act);
    }
    return Status();
  }

  const ConvNetModel& m_;
  ClassifierRunnerOptions opts_;
  std::vector<NodeDims> dims_;
  std::vector<int> slot_;      // node -> buffer (-1: none, inside a fused block)
  std::vector<int8_t> fused_;  // 1: a fused block starts here; 2: inside one
  std::vector<bool> tapped_;   // node -> its output is a tap (tapped_nodes)
  std::vector<std::vector<float>> bufs_;
  std::array<int64_t, 3> planned_{0, 0, 0};
};

Status check_device(const std::string& path, const LoadOptions& opts) {
#if defined(RINFER_WITH_CUDA)
  constexpr bool kCuda = true;
#else
  constexpr bool kCuda = false;
#endif
  if (!opts.device.is_cpu() && !(kCuda && opts.device.is_cuda())) {
    return unsupported("{}: the image classifiers run on the CPU{} in this build, not {}", path,
                       kCuda ? " and CUDA" : "", opts.device.to_string());
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<ConvNetModel>> ConvNetModel::load(const std::string& path,
                                                         const ConvNetSpec& spec,
                                                         const LoadOptions& opts) {
  RINFER_RETURN_IF_ERROR(check_device(path, opts));
  RINFER_ASSIGN_OR_RETURN(TorchCheckpoint ckpt, TorchCheckpoint::open(path));
  return from_checkpoint(ckpt, spec, opts);
}

Result<std::unique_ptr<ConvNetModel>> ConvNetModel::from_checkpoint(const TorchCheckpoint& ckpt,
                                                                    const ConvNetSpec& spec,
                                                                    const LoadOptions& opts) {
  RINFER_RETURN_IF_ERROR(check_device(ckpt.path(), opts));
  auto m = std::unique_ptr<ConvNetModel>(new ConvNetModel());
  m->path_ = ckpt.path();
  m->opts_ = opts;
  RINFER_ASSIGN_OR_RETURN(m->graph_, build_graph(ckpt, spec));
  if (opts.fusion.batchnorm) fold_batch_norms(m->graph_);
  const Node& head = m->graph_.nodes.back();
  RINFER_ASSIGN_OR_RETURN(
      m->head_w_, Tensor::wrap(head.w.data(), head.w.size() * sizeof(float),
                               Dims{head.c_out, head.c_in}, DType::kF32, Device::cpu(), nullptr));
  m->packed_.resize(m->graph_.nodes.size());
  for (size_t i = 0; i < m->graph_.nodes.size(); ++i) {
    const Node& n = m->graph_.nodes[i];
    m->weight_bytes_ += (n.w.size() + n.bias.size()) * 4;
    if (n.kind == NodeKind::kConv && n.groups == 1 && opts.device.is_cpu()) {
      m->packed_[i] = cpu::PackedF32::pack(n.w.data(), n.c_out, n.k * n.k * n.c_in);
    }
  }
  return m;
}

std::string ConvNetModel::describe() const {
  int64_t convs = 0;
  for (const Node& n : graph_.nodes) convs += n.kind == NodeKind::kConv ? 1 : 0;
  return fmt::format(
      "{} network, {} convolutions, {} classes, {:.2f} M parameters, {:.1f} MB of "
      "weights, batch norms {}, {} epilogue{}",
      graph_.family, convs, graph_.n_classes, double(graph_.n_params) / 1e6,
      double(weight_bytes_) / 1e6, opts_.fusion.batchnorm ? "folded" : "separate",
      opts_.fusion.conv_epilogue ? "fused" : "separate", fused_blocks() ? ", blocks fused" : "");
}

Result<std::unique_ptr<ImageClassifierRunner>> ConvNetModel::create_runner(
    const ClassifierRunnerOptions& opts) const {
  if (opts.max_batch < 1 || opts.height < 1 || opts.width < 1) {
    return invalid_argument("classifier runner: max_batch {} and image {}x{} must be >= 1",
                            opts.max_batch, opts.height, opts.width);
  }
  if (opts_.device.is_cuda()) {
#if defined(RINFER_WITH_CUDA)
    return make_cuda_runner(*this, opts);
#endif
  }
  auto r = std::make_unique<CpuRunner>(*this, opts);
  RINFER_RETURN_IF_ERROR(r->plan(opts.max_batch, opts.height, opts.width));
  return std::unique_ptr<ImageClassifierRunner>(std::move(r));
}

}  // namespace rinfer::convnet
