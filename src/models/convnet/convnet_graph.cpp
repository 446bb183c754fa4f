// build_graph: a PyTorch state dict's tensors, in their order, become convolutions (4-D
// weights), the batch norms after them (the tensors with running statistics) and the linear head
// (the 2-D weight); the names group the convolutions into blocks ("features.N", "_blocks.N",
// "layerX.Y"; anything else is a group of its own: stems and heads); the family's rule wires each
// block and the spec gives what names and shapes cannot (strides, activation, padding, epsilon).
#include "models/convnet/convnet_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "core/error.h"

namespace rinfer::convnet {
namespace {

struct Module {
  std::string prefix;
  const TorchTensor* weight = nullptr;
  const TorchTensor* bias = nullptr;
  const TorchTensor* running_mean = nullptr;
  const TorchTensor* running_var = nullptr;
};

struct RawConv {
  const Module* conv = nullptr;
  const Module* bn = nullptr;
};

std::string block_key(const std::string& prefix) {
  // "features.3.conv.0.0" -> "features.3"; "_blocks.7._depthwise_conv" -> "_blocks.7";
  // "layer2.1.conv1" -> "layer2.1"; anything else (stems, heads) is its own group.
  const auto first_two = [&](size_t from) {
    const size_t a = prefix.find('.', from);
    if (a == std::string::npos) return prefix;
    const size_t b = prefix.find('.', a + 1);
    return b == std::string::npos ? prefix : prefix.substr(0, b);
  };
  if (prefix.starts_with("features.") || prefix.starts_with("_blocks.")) return first_two(0);
  if (prefix.starts_with("layer") && prefix.size() > 5 && std::isdigit(prefix[5]) != 0) {
    return first_two(0);
  }
  return prefix;
}

Result<std::vector<float>> to_f32(const TorchCheckpoint& ckpt, const TorchTensor* t) {
  if (t->dtype != DType::kF32) {
    return unsupported("{}: tensor '{}' is {}; the image classifiers read f32 checkpoints",
                       ckpt.path(), t->name, dtype_name(t->dtype));
  }
  std::vector<float> v(t->numel);
  if (t->numel > 0) std::memcpy(v.data(), t->data, t->nbytes);
  return v;
}

class Builder {
 public:
  Builder(const TorchCheckpoint& ckpt, const ConvNetSpec& spec) : ckpt_(ckpt), spec_(spec) {}

  Result<Graph> build() {
    RINFER_RETURN_IF_ERROR(collect());
    g_.family = spec_.family;
    if (spec_.family == "inverted_residual") {
      RINFER_RETURN_IF_ERROR(inverted_residual());
    } else if (spec_.family == "resnet") {
      RINFER_RETURN_IF_ERROR(resnet());
    } else {
      return invalid_argument("{}: unknown network family '{}' (inverted_residual, resnet)",
                              ckpt_.path(), spec_.family);
    }
    return std::move(g_);
  }

 private:
  template <typename... Args>
  Status err(fmt::format_string<Args...> f, Args&&... args) {
    return invalid_argument("{}: {}", ckpt_.path(), fmt::format(f, std::forward<Args>(args)...));
  }

  // Modules by prefix in first-appearance order, then convolutions with their batch norms.
  Status collect() {
    std::map<std::string, size_t, std::less<>> index;
    for (const TorchTensor& t : ckpt_.tensors()) {
      const size_t dot = t.name.rfind('.');
      if (dot == std::string::npos) return err("tensor '{}' belongs to no module", t.name);
      const std::string prefix = t.name.substr(0, dot), leaf = t.name.substr(dot + 1);
      auto [it, fresh] = index.try_emplace(prefix, modules_.size());
      if (fresh) modules_.push_back(Module{prefix});
      Module& m = modules_[it->second];
      if (leaf == "weight") {
        m.weight = &t;
      } else if (leaf == "bias") {
        m.bias = &t;
      } else if (leaf == "running_mean") {
        m.running_mean = &t;
      } else if (leaf == "running_var") {
        m.running_var = &t;
      } else if (leaf != "num_batches_tracked") {
        return err("tensor '{}': an image classifier has no '{}' parameters", t.name, leaf);
      }
    }
    for (const Module& m : modules_) {
      if (m.weight == nullptr) return err("module '{}' has no weight", m.prefix);
      if (m.running_mean != nullptr || m.running_var != nullptr) {
        if (m.running_mean == nullptr || m.running_var == nullptr || m.bias == nullptr) {
          return err("batch norm '{}' lacks its bias, running_mean or running_var", m.prefix);
        }
        const int64_t c = m.weight->shape.size() == 1 ? m.weight->shape[0] : -1;
        for (const TorchTensor* t : {m.bias, m.running_mean, m.running_var}) {
          if (c < 0 || t->shape.size() != 1 || t->shape[0] != c) {
            return err("batch norm '{}': '{}' is not a vector of its {} channels", m.prefix,
                       t->name, c);
          }
        }
        if (convs_.empty() || convs_.back().bn != nullptr) {
          return err("batch norm '{}' follows no convolution", m.prefix);
        }
        if (convs_.back().conv->weight->shape[0] != c) {
          return err("batch norm '{}' has {} channels but convolution '{}' gives {}", m.prefix, c,
                     convs_.back().conv->prefix, convs_.back().conv->weight->shape[0]);
        }
        convs_.back().bn = &m;
      } else if (m.weight->shape.size() == 4) {
        if (head_ != nullptr) return err("convolution '{}' after the linear head", m.prefix);
        convs_.push_back(RawConv{&m});
      } else if (m.weight->shape.size() == 2) {
        if (head_ != nullptr)
          return err("two linear layers: '{}' and '{}'", head_->prefix, m.prefix);
        head_ = &m;
      } else {
        return err("'{}' is a {}-D weight: neither a convolution, a batch norm nor a linear layer",
                   m.weight->name, m.weight->shape.size());
      }
    }
    if (convs_.empty()) return err("no convolution weights (is this an image classifier?)");
    if (head_ == nullptr) return err("no linear head (a 2-D weight [classes, channels])");
    for (const RawConv& c : convs_) {
      if (c.bn == nullptr)
        return err("convolution '{}' has no batch norm after it", c.conv->prefix);
    }
    // Groups of consecutive convolutions with one block key.
    for (const RawConv& c : convs_) {
      const std::string key = block_key(c.conv->prefix);
      if (groups_.empty() || groups_.back().first != key) groups_.push_back({key, {}});
      groups_.back().second.push_back(&c);
    }
    return Status();
  }

  // Appends a convolution node reading `input`; c_in is the input's channels.
  Result<int> conv(const RawConv& rc, int input, int64_t c_in, int64_t stride, cpu::Activation act,
                   int residual = -1) {
    const TorchTensor& w = *rc.conv->weight;
    const int64_t co = w.shape[0], ci_g = w.shape[1], kh = w.shape[2], kw = w.shape[3];
    if (kh != kw || kh % 2 == 0) {
      return err("convolution '{}': kernel {}x{} (square odd kernels only)", rc.conv->prefix, kh,
                 kw);
    }
    if (ci_g < 1 || c_in % ci_g != 0 || co % (c_in / ci_g) != 0) {
      return err("convolution '{}' reads {} channels per group, but its input has {}",
                 rc.conv->prefix, ci_g, c_in);
    }
    Node n;
    n.kind = NodeKind::kConv;
    n.name = rc.conv->prefix;
    n.input = input;
    n.residual = residual;
    n.c_in = c_in, n.c_out = co, n.k = kh, n.stride = stride, n.groups = c_in / ci_g;
    n.padding = spec_.padding;
    n.pad = kh / 2;
    n.act = act;
    RINFER_ASSIGN_OR_RETURN(std::vector<float> oihw, to_f32(ckpt_, &w));
    n.w.resize(oihw.size());
    for (int64_t o = 0; o < co; ++o) {
      for (int64_t i = 0; i < ci_g; ++i) {
        for (int64_t t = 0; t < kh * kw; ++t) {
          n.w[(o * kh * kw + t) * ci_g + i] = oihw[(o * ci_g + i) * kh * kw + t];
        }
      }
    }
    if (rc.conv->bias != nullptr) {
      RINFER_ASSIGN_OR_RETURN(n.bias, to_f32(ckpt_, rc.conv->bias));
      if (static_cast<int64_t>(n.bias.size()) != co) {
        return err("convolution '{}': bias of {} for {} channels", n.name, n.bias.size(), co);
      }
    }
    RINFER_ASSIGN_OR_RETURN(n.bn.gamma, to_f32(ckpt_, rc.bn->weight));
    RINFER_ASSIGN_OR_RETURN(n.bn.beta, to_f32(ckpt_, rc.bn->bias));
    RINFER_ASSIGN_OR_RETURN(n.bn.mean, to_f32(ckpt_, rc.bn->running_mean));
    RINFER_ASSIGN_OR_RETURN(n.bn.var, to_f32(ckpt_, rc.bn->running_var));
    n.bn.eps = spec_.bn_eps;
    g_.n_params += w.numel + n.bias.size() + 2 * n.bn.gamma.size();
    g_.nodes.push_back(std::move(n));
    return static_cast<int>(g_.nodes.size()) - 1;
  }

  int add(Node n) {
    g_.nodes.push_back(std::move(n));
    return static_cast<int>(g_.nodes.size()) - 1;
  }

  Status head(int input, int64_t c) {
    Node pool;
    pool.kind = NodeKind::kGlobalAvgPool;
    pool.name = "global_avg_pool";
    pool.input = input;
    pool.c_in = pool.c_out = c;
    const int p = add(std::move(pool));
    const TorchTensor& w = *head_->weight;
    if (w.shape[1] != c) {
      return err("linear head '{}' reads {} features, but the network gives {}", head_->prefix,
                 w.shape[1], c);
    }
    Node lin;
    lin.kind = NodeKind::kLinear;
    lin.name = head_->prefix;
    lin.input = p;
    lin.c_in = c, lin.c_out = w.shape[0];
    RINFER_ASSIGN_OR_RETURN(lin.w, to_f32(ckpt_, &w));
    if (head_->bias != nullptr) {
      RINFER_ASSIGN_OR_RETURN(lin.bias, to_f32(ckpt_, head_->bias));
    }
    if (!lin.bias.empty() && static_cast<int64_t>(lin.bias.size()) != lin.c_out) {
      return err("linear head '{}': bias of {} for {} classes", lin.name, lin.bias.size(),
                 lin.c_out);
    }
    g_.n_classes = lin.c_out;
    g_.n_params += w.numel + lin.bias.size();
    add(std::move(lin));
    return Status();
  }

  Status check_block_count(size_t n_blocks) {
    if (spec_.strides.size() != n_blocks) {
      return err("the checkpoint has {} blocks but the recipe's network gives {} strides", n_blocks,
                 spec_.strides.size());
    }
    for (int64_t s : spec_.strides) {
      if (s != 1 && s != 2) return err("a block stride of {} (1 or 2)", s);
    }
    return Status();
  }

  Status inverted_residual() {
    if (groups_.size() < 3) {
      return err(
          "{} groups of convolutions: an inverted-residual network has a stem, blocks and "
          "a head",
          groups_.size());
    }
    const auto& stem = groups_.front().second;
    const auto& top = groups_.back().second;
    if (stem.size() != 1 || top.size() != 1) {
      return err("the stem '{}' and the head '{}' must be one convolution each",
                 groups_.front().first, groups_.back().first);
    }
    RINFER_RETURN_IF_ERROR(check_block_count(groups_.size() - 2));
    const cpu::Activation act = spec_.activation;
    int64_t c = stem[0]->conv->weight->shape[1];
    if (c != 3) return err("the stem '{}' reads {} channels, not RGB", stem[0]->conv->prefix, c);
    RINFER_ASSIGN_OR_RETURN(int x, conv(*stem[0], -1, c, 2, act));
    c = g_.nodes[x].c_out;
    for (size_t b = 1; b + 1 < groups_.size(); ++b) {
      const auto& [key, convs] = groups_[b];
      const int64_t stride = spec_.strides[b - 1];
      if (convs.size() != 2 && convs.size() != 3) {
        return err("block '{}' has {} convolutions (an inverted residual has 2 or 3)", key,
                   convs.size());
      }
      int h = x;
      int64_t ch = c;
      size_t i = 0;
      if (convs.size() == 3) {
        RINFER_ASSIGN_OR_RETURN(h, conv(*convs[0], x, c, 1, act));
        ch = g_.nodes[h].c_out;
        if (g_.nodes[h].k != 1) return err("block '{}': the expansion is not a 1x1", key);
        i = 1;
      }
      RINFER_ASSIGN_OR_RETURN(h, conv(*convs[i], h, ch, stride, act));
      if (g_.nodes[h].groups != ch || g_.nodes[h].c_out != ch) {
        return err("block '{}': '{}' is not a depthwise convolution", key, convs[i]->conv->prefix);
      }
      const TorchTensor& pw = *convs[i + 1]->conv->weight;
      const bool skip = stride == 1 && pw.shape[0] == c;
      RINFER_ASSIGN_OR_RETURN(h,
                              conv(*convs[i + 1], h, ch, 1, cpu::Activation::kNone, skip ? x : -1));
      if (g_.nodes[h].k != 1) return err("block '{}': the projection is not a 1x1", key);
      x = h;
      c = g_.nodes[h].c_out;
    }
    RINFER_ASSIGN_OR_RETURN(x, conv(*top[0], x, c, 1, act));
    return head(x, g_.nodes[x].c_out);
  }

  Status resnet() {
    const auto& stem = groups_.front().second;
    if (stem.size() != 1 || stem[0]->conv->weight->shape[1] != 3) {
      return err("the stem '{}' must be one convolution of the RGB image", groups_.front().first);
    }
    RINFER_RETURN_IF_ERROR(check_block_count(groups_.size() - 1));
    const cpu::Activation act = spec_.activation;
    RINFER_ASSIGN_OR_RETURN(int x, conv(*stem[0], -1, 3, 2, act));
    Node mp;
    mp.kind = NodeKind::kMaxPool;
    mp.name = "maxpool";
    mp.input = x;
    mp.c_in = mp.c_out = g_.nodes[x].c_out;
    mp.k = 3, mp.stride = 2, mp.pad = 1;
    int64_t c = mp.c_out;
    x = add(std::move(mp));
    for (size_t b = 1; b < groups_.size(); ++b) {
      const auto& [key, convs] = groups_[b];
      const int64_t stride = spec_.strides[b - 1];
      if (convs.size() != 3 && convs.size() != 4) {
        return err("block '{}' has {} convolutions (a bottleneck has 3, and a downsample)", key,
                   convs.size());
      }
      RINFER_ASSIGN_OR_RETURN(int h, conv(*convs[0], x, c, 1, act));
      RINFER_ASSIGN_OR_RETURN(h, conv(*convs[1], h, g_.nodes[h].c_out, stride, act));
      int skip = x;
      const int64_t c_out = convs[2]->conv->weight->shape[0];
      if (convs.size() == 4) {
        RINFER_ASSIGN_OR_RETURN(skip, conv(*convs[3], x, c, stride, cpu::Activation::kNone));
        if (g_.nodes[skip].c_out != c_out) {
          return err("block '{}': the downsample gives {} channels, the block {}", key,
                     g_.nodes[skip].c_out, c_out);
        }
      } else if (stride != 1 || c != c_out) {
        return err(
            "block '{}' changes the size (stride {}, {} -> {} channels) without a "
            "downsample",
            key, stride, c, c_out);
      }
      // h's producer is the 3x3; the 1x1 after it adds the skip before the activation.
      const int mid = h;
      RINFER_ASSIGN_OR_RETURN(h, conv(*convs[2], mid, g_.nodes[mid].c_out, 1, act, skip));
      x = h;
      c = c_out;
    }
    return head(x, c);
  }

  const TorchCheckpoint& ckpt_;
  const ConvNetSpec& spec_;
  std::vector<Module> modules_;
  std::vector<RawConv> convs_;
  const Module* head_ = nullptr;
  std::vector<std::pair<std::string, std::vector<const RawConv*>>> groups_;
  Graph g_;
};

}  // namespace

Result<Graph> build_graph(const TorchCheckpoint& ckpt, const ConvNetSpec& spec) {
  return Builder(ckpt, spec).build();
}

void fold_batch_norms(Graph& g) {
  for (Node& n : g.nodes) {
    if (n.kind != NodeKind::kConv || !n.bn.present()) continue;
    const int64_t per_out = static_cast<int64_t>(n.w.size()) / n.c_out;
    std::vector<float> bias(static_cast<size_t>(n.c_out));
    for (int64_t o = 0; o < n.c_out; ++o) {
      const double s = double(n.bn.gamma[o]) / std::sqrt(double(n.bn.var[o]) + double(n.bn.eps));
      for (int64_t i = 0; i < per_out; ++i) {
        float& w = n.w[o * per_out + i];
        w = static_cast<float>(double(w) * s);
      }
      const double b = n.bias.empty() ? 0.0 : double(n.bias[o]);
      bias[o] = static_cast<float>((b - double(n.bn.mean[o])) * s + double(n.bn.beta[o]));
    }
    n.bias = std::move(bias);
    n.bn = BatchNormParams{};
  }
}

cpu::Conv2dShape conv_shape(const Node& n, int64_t batch, int64_t h, int64_t w) {
  cpu::Conv2dShape s;
  s.n = batch, s.h = h, s.w = w, s.c_in = n.c_in, s.c_out = n.c_out;
  s.kh = s.kw = n.k;
  s.stride_h = s.stride_w = n.stride;
  s.groups = n.groups;
  if (n.padding == ConvPadding::kSame) {
    cpu::set_same_padding(s);
  } else {
    cpu::set_padding(s, n.pad);
  }
  return s;
}

std::vector<NodeDims> node_dims(const Graph& g, int64_t h, int64_t w) {
  std::vector<NodeDims> d(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const NodeDims in = n.input < 0 ? NodeDims{h, w, 3} : d[static_cast<size_t>(n.input)];
    switch (n.kind) {
      case NodeKind::kConv: {
        const cpu::Conv2dShape s = conv_shape(n, 1, in.h, in.w);
        d[i] = {s.out_h(), s.out_w(), n.c_out};
        break;
      }
      case NodeKind::kMaxPool:
        d[i] = {(in.h + 2 * n.pad - n.k) / n.stride + 1, (in.w + 2 * n.pad - n.k) / n.stride + 1,
                in.c};
        break;
      case NodeKind::kGlobalAvgPool:
      case NodeKind::kLinear: d[i] = {1, 1, n.c_out}; break;
    }
  }
  return d;
}

double graph_flops(const Graph& g, int64_t h, int64_t w) {
  const std::vector<NodeDims> d = node_dims(g, h, w);
  double f = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::kConv) {
      f += 2.0 * double(d[i].h * d[i].w * n.c_out) * double(n.k * n.k * (n.c_in / n.groups));
    } else if (n.kind == NodeKind::kLinear) {
      f += 2.0 * double(n.c_in * n.c_out);
    }
  }
  return f;
}

std::vector<size_t> last_uses(const Graph& g) {
  std::vector<size_t> last_use(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& nd = g.nodes[i];
    if (nd.input >= 0) last_use[static_cast<size_t>(nd.input)] = i;
    if (nd.residual >= 0) last_use[static_cast<size_t>(nd.residual)] = i;
  }
  if (!last_use.empty()) last_use.back() = g.nodes.size();
  return last_use;
}

std::vector<size_t> assign_buffers(const std::vector<size_t>& need,
                                   const std::vector<size_t>& last_use, std::vector<int>& slot) {
  std::vector<size_t> cap;  // elements per buffer
  std::vector<int> owner;   // node whose output a buffer holds; -1: free
  slot.assign(need.size(), -1);
  for (size_t i = 0; i < need.size(); ++i) {
    for (size_t b = 0; b < owner.size(); ++b) {
      if (owner[b] >= 0 && last_use[static_cast<size_t>(owner[b])] < i) owner[b] = -1;
    }
    if (need[i] == 0) continue;
    int best = -1;
    for (size_t b = 0; b < owner.size(); ++b) {
      if (owner[b] >= 0) continue;
      if (best < 0) {
        best = static_cast<int>(b);
        continue;
      }
      const bool fits = cap[b] >= need[i];
      const size_t cb = cap[static_cast<size_t>(best)];
      const bool best_fits = cb >= need[i];
      if ((fits && (!best_fits || cap[b] < cb)) || (!fits && !best_fits && cap[b] > cb)) {
        best = static_cast<int>(b);
      }
    }
    if (best < 0) {
      best = static_cast<int>(owner.size());
      cap.push_back(0);
      owner.push_back(-1);
    }
    cap[static_cast<size_t>(best)] = std::max(cap[static_cast<size_t>(best)], need[i]);
    owner[static_cast<size_t>(best)] = static_cast<int>(i);
    slot[i] = best;
  }
  return cap;
}

}  // namespace rinfer::convnet
