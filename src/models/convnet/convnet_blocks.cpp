#include "models/convnet/convnet_blocks.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace rinfer::convnet {

namespace {

// The chain expand -> depthwise -> project at node i; `folded`: its batch norms folded too (what
// the fused kernels need), else the structure alone.
bool chain_at(const Graph& g, size_t i, bool folded) {
  if (i + 2 >= g.nodes.size()) return false;
  const Node& a = g.nodes[i];
  const Node& b = g.nodes[i + 1];
  const Node& c = g.nodes[i + 2];
  const auto pointwise = [&](const Node& n) {
    return n.kind == NodeKind::kConv && n.groups == 1 && n.k == 1 && n.stride == 1 &&
           !(folded && n.bn.present());
  };
  if (!pointwise(a) || !pointwise(c) || b.kind != NodeKind::kConv || (folded && b.bn.present())) {
    return false;
  }
  if (b.groups != b.c_in || b.c_out != b.c_in || b.input != static_cast<int>(i) ||
      c.input != static_cast<int>(i + 1) || a.residual >= 0 || b.residual >= 0) {
    return false;
  }
  // Nothing else reads a's or b's output.
  for (size_t j = i + 3; j < g.nodes.size(); ++j) {
    const Node& n = g.nodes[j];
    for (int src : {n.input, n.residual}) {
      if (src == static_cast<int>(i) || src == static_cast<int>(i + 1)) return false;
    }
  }
  return c.residual < 0 || c.residual == a.input;
}

// The chains taken greedily in order (fusable_chains).
std::vector<int8_t> chains(const Graph& g, bool folded) {
  std::vector<int8_t> fused(g.nodes.size(), 0);
  for (size_t i = 0; i + 2 < g.nodes.size(); ++i) {
    if (fused[i] != 0 || !chain_at(g, i, folded)) continue;
    fused[i] = 1;
    fused[i + 1] = fused[i + 2] = 2;
  }
  return fused;
}

}  // namespace

bool is_fusable_block(const Graph& g, size_t i) { return chain_at(g, i, true); }

std::vector<int8_t> fusable_chains(const Graph& g) { return chains(g, true); }

std::vector<bool> tapped_nodes(const Graph& g) {
  // By the structure alone: the same outputs whether the batch norms are folded or not.
  const std::vector<int8_t> fused = chains(g, false);
  std::vector<bool> tapped(g.nodes.size(), true);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (fused[i] == 1) tapped[i] = tapped[i + 1] = false;  // the projection (i + 2) stays
  }
  return tapped;
}

TapKind tap_kind_of_node(const Node& n) {
  switch (n.kind) {
    case NodeKind::kGlobalAvgPool: return TapKind::kPooled;
    case NodeKind::kLinear: return TapKind::kLogits;
    default: return TapKind::kBlockOut;
  }
}

namespace {

struct Band {
  int64_t b = 0, oy0 = 0, oy1 = 0;
};

// One band: expand the input rows it needs, depthwise them into its output rows, project those.
Status run_band(const cpu::OpContext& ctx, const FusedBlock& f, const cpu::Conv2dShape& dw,
                const Band& band, const float* x, const float* res, float* y,
                std::vector<float>& ebuf, std::vector<float>& dbuf) {
  const int64_t w = dw.w, ow = dw.out_w(), ce = dw.c_in;
  const int64_t cin = f.expand->c_in, cout = f.project->c_out;
  const int64_t first = band.oy0 * dw.stride_h - dw.pad_top;  // the first input row it reads
  const int64_t last = (band.oy1 - 1) * dw.stride_h - dw.pad_top + dw.kh - 1;
  const int64_t iy0 = std::max<int64_t>(0, first), iy1 = std::min<int64_t>(dw.h, last + 1);
  cpu::Conv2dShape s = dw;  // the band as an image of its own
  s.n = 1;
  s.h = iy1 - iy0;
  s.pad_top = first < 0 ? -first : 0;
  s.pad_bottom = last + 1 - iy1;
  ebuf.resize(static_cast<size_t>(s.h * w * ce));
  const float* xin = x + ((band.b * dw.h + iy0) * w) * cin;
  RINFER_RETURN_IF_ERROR(cpu::gemm_packed_f32(
      ctx, *f.expand_w, xin, cin, s.h * w,
      {f.expand->bias.empty() ? nullptr : f.expand->bias.data(), nullptr, f.expand->act},
      ebuf.data()));
  const int64_t rows = (band.oy1 - band.oy0) * ow;
  dbuf.resize(static_cast<size_t>(rows * ce));
  RINFER_RETURN_IF_ERROR(cpu::conv2d(
      ctx, s, ebuf.data(), f.depthwise->w.data(),
      {f.depthwise->bias.empty() ? nullptr : f.depthwise->bias.data(), nullptr, f.depthwise->act},
      dbuf.data()));
  const int64_t out0 = (band.b * dw.out_h() + band.oy0) * ow;  // the band's first output pixel
  return cpu::gemm_packed_f32(ctx, *f.project_w, dbuf.data(), ce, rows,
                              {f.project->bias.empty() ? nullptr : f.project->bias.data(),
                               res != nullptr ? res + out0 * cout : nullptr, f.project->act},
                              y + out0 * cout);
}

}  // namespace

Status run_fused_block(const cpu::OpContext& ctx, const FusedBlock& f, int64_t n, int64_t h,
                       int64_t w, const float* x, const float* res, float* y) {
  const cpu::Conv2dShape dw = conv_shape(*f.depthwise, 1, h, w);
  const int64_t oh = dw.out_h();
  // Output rows per band: about 512 KiB of expanded rows.
  const int64_t rows_in = std::max<int64_t>(1, (int64_t{128} << 10) / (w * dw.c_in));
  const int64_t per = std::clamp<int64_t>(rows_in / dw.stride_h, 1, oh);
  std::vector<Band> bands;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < oh; oy += per) bands.push_back({b, oy, std::min(oh, oy + per)});
  const int threads = ctx.pool != nullptr ? ctx.pool->size() : 1;
  const auto n_bands = static_cast<int64_t>(bands.size());
  if (threads > 1 && n_bands >= 2 * threads) {
    // Bands over the pool, each op on its thread alone.
    cpu::OpContext inner = ctx;
    inner.pool = nullptr;
    Status first;
    std::mutex mu;
    ctx.pool->parallel_for(0, n_bands, 1, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<float> ebuf, dbuf;
      for (int64_t i = i0; i < i1; ++i) {
        Status st = run_band(inner, f, dw, bands[static_cast<size_t>(i)], x, res, y, ebuf, dbuf);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first.ok()) first = std::move(st);
          return;
        }
      }
    });
    return first;
  }
  // Few bands (small images at batch 1): one at a time, each op over the pool.
  thread_local std::vector<float> ebuf, dbuf;
  for (const Band& band : bands) {
    RINFER_RETURN_IF_ERROR(run_band(ctx, f, dw, band, x, res, y, ebuf, dbuf));
  }
  return Status();
}

}  // namespace rinfer::convnet
