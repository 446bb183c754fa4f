// cuDNN convolution plans: the operation graph, the heuristics' engine configs, execution plans
// timed on the caller's buffers, the variant pack per run.
#include "ops/cuda/conv_cudnn.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/vision_ops.h"

namespace rinfer::cuda {

namespace {

// Tensor ids of the variant pack.
enum Uid : int64_t { kX = 1, kW = 2, kY = 3, kBias = 4, kResidual = 5, kVirtual = 100 };

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A 4-D tensor [n, c, h, w] stored NHWC.
Result<BackendDesc> nhwc_tensor(int64_t uid, cudnnDataType_t dtype, int64_t n, int64_t c, int64_t h,
                                int64_t w, bool is_virtual) {
  RINFER_ASSIGN_OR_RETURN(BackendDesc t,
                          BackendDesc::create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor"));
  RINFER_RETURN_IF_ERROR(t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  RINFER_RETURN_IF_ERROR(t.set_i64(CUDNN_ATTR_TENSOR_DIMENSIONS, {n, c, h, w}));
  RINFER_RETURN_IF_ERROR(t.set_i64(CUDNN_ATTR_TENSOR_STRIDES, {h * w * c, 1, w * c, c}));
  RINFER_RETURN_IF_ERROR(t.set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, {uid}));
  RINFER_RETURN_IF_ERROR(t.set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {16}));
  const bool v = is_virtual;
  RINFER_RETURN_IF_ERROR(t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
  RINFER_RETURN_IF_ERROR(t.finalize());
  return t;
}

Result<BackendDesc> pointwise_desc(cudnnPointwiseMode_t mode, Activation act) {
  RINFER_ASSIGN_OR_RETURN(BackendDesc p,
                          BackendDesc::create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise"));
  RINFER_RETURN_IF_ERROR(p.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  RINFER_RETURN_IF_ERROR(p.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  if (mode == CUDNN_POINTWISE_RELU_FWD) {
    const float lo = 0.0f;
    RINFER_RETURN_IF_ERROR(p.set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_FLOAT, 1, &lo));
    if (act == Activation::kRelu6) {
      const float hi = 6.0f;
      RINFER_RETURN_IF_ERROR(p.set(CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_FLOAT, 1, &hi));
    }
  }
  if (mode == CUDNN_POINTWISE_SWISH_FWD) {
    const float beta = 1.0f;
    RINFER_RETURN_IF_ERROR(p.set(CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
  }
  RINFER_RETURN_IF_ERROR(p.finalize());
  return p;
}

// y = x op b (b null: unary).
Result<BackendDesc> pointwise_op(const BackendDesc& pw, const BackendDesc& x, const BackendDesc* b,
                                 const BackendDesc& y) {
  RINFER_ASSIGN_OR_RETURN(
      BackendDesc op,
      BackendDesc::create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation"));
  RINFER_RETURN_IF_ERROR(op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw));
  RINFER_RETURN_IF_ERROR(op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x));
  if (b != nullptr) RINFER_RETURN_IF_ERROR(op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b));
  RINFER_RETURN_IF_ERROR(op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y));
  RINFER_RETURN_IF_ERROR(op.finalize());
  return op;
}

}  // namespace

// Everything a plan refers to stays alive with it.
struct CudnnConv::Plan {
  std::vector<BackendDesc> descs;  // tensors, operations, the graph
  BackendDesc plan;
  std::vector<int64_t> uids;
};

namespace {

struct Graph {
  std::vector<BackendDesc> descs;
  BackendDesc op_graph;
  std::vector<int64_t> uids;
};

Result<Graph> build_graph(const CudnnHandle& h, const Conv2dShape& s, cudnnDataType_t dt, bool bias,
                          bool residual, Activation act, bool fuse) {
  Graph g;
  const int64_t oh = s.out_h(), ow = s.out_w();
  const bool epilogue = fuse && (bias || residual || act != Activation::kNone);
  RINFER_ASSIGN_OR_RETURN(BackendDesc x, nhwc_tensor(kX, dt, s.n, s.c_in, s.h, s.w, false));
  RINFER_ASSIGN_OR_RETURN(BackendDesc w, nhwc_tensor(kW, dt, s.c_out, s.c_in, s.kh, s.kw, false));
  RINFER_ASSIGN_OR_RETURN(BackendDesc y, nhwc_tensor(kY, dt, s.n, s.c_out, oh, ow, false));
  g.uids = {kX, kW, kY};
  int64_t next_virtual = kVirtual;
  auto virt = [&]() {
    return nhwc_tensor(next_virtual++, CUDNN_DATA_FLOAT, s.n, s.c_out, oh, ow, true);
  };

  RINFER_ASSIGN_OR_RETURN(BackendDesc conv,
                          BackendDesc::create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution"));
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2;
  RINFER_RETURN_IF_ERROR(
      conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  RINFER_RETURN_IF_ERROR(
      conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  RINFER_RETURN_IF_ERROR(conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
  RINFER_RETURN_IF_ERROR(conv.set_i64(CUDNN_ATTR_CONVOLUTION_DILATIONS, {1, 1}));
  RINFER_RETURN_IF_ERROR(
      conv.set_i64(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {s.stride_h, s.stride_w}));
  RINFER_RETURN_IF_ERROR(
      conv.set_i64(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {s.pad_top, s.pad_left}));
  RINFER_RETURN_IF_ERROR(
      conv.set_i64(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {s.pad_bottom, s.pad_right}));
  RINFER_RETURN_IF_ERROR(conv.finalize());

  std::vector<BackendDesc> ops;
  // The tensor each stage writes: the last one writes y.
  BackendDesc cur;
  if (epilogue) {
    RINFER_ASSIGN_OR_RETURN(cur, virt());
  }
  {
    RINFER_ASSIGN_OR_RETURN(
        BackendDesc op, BackendDesc::create(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                            "convolution operation"));
    const float alpha = 1.0f, beta = 0.0f;
    RINFER_RETURN_IF_ERROR(
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    RINFER_RETURN_IF_ERROR(
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    RINFER_RETURN_IF_ERROR(op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv));
    RINFER_RETURN_IF_ERROR(op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x));
    RINFER_RETURN_IF_ERROR(op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w));
    RINFER_RETURN_IF_ERROR(
        op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, epilogue ? cur : y));
    RINFER_RETURN_IF_ERROR(op.finalize());
    ops.push_back(std::move(op));
  }
  if (epilogue) {
    // The stages after the convolution, each reading the previous one's (virtual) output.
    struct Stage {
      cudnnPointwiseMode_t mode;
      int64_t operand;  // uid of the second input, 0: unary
    };
    std::vector<Stage> stages;
    if (bias) stages.push_back({CUDNN_POINTWISE_ADD, kBias});
    if (residual) stages.push_back({CUDNN_POINTWISE_ADD, kResidual});
    if (act == Activation::kRelu || act == Activation::kRelu6) {
      stages.push_back({CUDNN_POINTWISE_RELU_FWD, 0});
    } else if (act == Activation::kSilu) {
      stages.push_back({CUDNN_POINTWISE_SWISH_FWD, 0});
    }
    for (size_t i = 0; i < stages.size(); ++i) {
      const bool last = i + 1 == stages.size();
      BackendDesc out;
      if (!last) {
        RINFER_ASSIGN_OR_RETURN(out, virt());
      }
      BackendDesc operand;
      if (stages[i].operand == kBias) {
        RINFER_ASSIGN_OR_RETURN(operand,
                                nhwc_tensor(kBias, CUDNN_DATA_FLOAT, 1, s.c_out, 1, 1, false));
      } else if (stages[i].operand == kResidual) {
        RINFER_ASSIGN_OR_RETURN(operand, nhwc_tensor(kResidual, dt, s.n, s.c_out, oh, ow, false));
      }
      if (stages[i].operand != 0) g.uids.push_back(stages[i].operand);
      RINFER_ASSIGN_OR_RETURN(BackendDesc pw, pointwise_desc(stages[i].mode, act));
      RINFER_ASSIGN_OR_RETURN(
          BackendDesc op,
          pointwise_op(pw, cur, stages[i].operand != 0 ? &operand : nullptr, last ? y : out));
      ops.push_back(std::move(op));
      g.descs.push_back(std::move(pw));
      if (stages[i].operand != 0) g.descs.push_back(std::move(operand));
      g.descs.push_back(std::move(cur));
      if (!last) cur = std::move(out);
    }
  }
  RINFER_ASSIGN_OR_RETURN(
      g.op_graph, BackendDesc::create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph"));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const BackendDesc& op : ops) raw.push_back(op.get());
  RINFER_RETURN_IF_ERROR(g.op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                        static_cast<int64_t>(raw.size()), raw.data()));
  cudnnHandle_t hh = h.get();
  RINFER_RETURN_IF_ERROR(
      g.op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &hh));
  RINFER_RETURN_IF_ERROR(g.op_graph.finalize());
  for (BackendDesc& d : ops) g.descs.push_back(std::move(d));
  g.descs.push_back(std::move(x));
  g.descs.push_back(std::move(w));
  g.descs.push_back(std::move(y));
  g.descs.push_back(std::move(conv));
  return g;
}

// The engine configs of the heuristics' `mode`, best first.
Result<std::vector<BackendDesc>> engine_configs(const BackendDesc& op_graph,
                                                cudnnBackendHeurMode_t mode) {
  RINFER_ASSIGN_OR_RETURN(BackendDesc heur, BackendDesc::create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
                                                                "engine heuristics"));
  RINFER_RETURN_IF_ERROR(heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph));
  RINFER_RETURN_IF_ERROR(heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  RINFER_RETURN_IF_ERROR(heur.finalize());
  int64_t count = 0;
  RINFER_RETURN_IF_ERROR(
      cudnn_status(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                   "counting the heuristics' engine configs"));
  std::vector<BackendDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    RINFER_ASSIGN_OR_RETURN(
        BackendDesc c, BackendDesc::create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
    raw.push_back(c.get());
    cfgs.push_back(std::move(c));
  }
  if (count == 0) return cfgs;
  int64_t got = 0;
  RINFER_RETURN_IF_ERROR(
      cudnn_status(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
                   "reading the heuristics' engine configs"));
  cfgs.resize(static_cast<size_t>(std::min(got, count)));
  return cfgs;
}

// The engine's global index, and whether it reduces in reduced precision (skipped).
struct EngineInfo {
  int64_t index = -1;
  bool reduced_precision = false;
};
EngineInfo engine_info(const BackendDesc& cfg) {
  EngineInfo info;
  auto eng = BackendDesc::create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  if (!eng.ok()) return info;
  cudnnBackendDescriptor_t e = eng->get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) != CUDNN_STATUS_SUCCESS) {
    return info;
  }
  static_cast<void>(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                             &n, &info.index));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n_notes = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n_notes,
                               notes) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n_notes && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i) {
      if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) {
        info.reduced_precision = true;
      }
    }
  }
  return info;
}

Result<BackendDesc> variant_pack(const std::vector<int64_t>& uids, const ConvBuffers& b,
                                 void* workspace) {
  std::vector<void*> ptrs;
  for (int64_t u : uids) {
    switch (u) {
      case kX: ptrs.push_back(const_cast<uint16_t*>(b.x)); break;
      case kW: ptrs.push_back(const_cast<uint16_t*>(b.w)); break;
      case kY: ptrs.push_back(b.y); break;
      case kBias: ptrs.push_back(const_cast<float*>(b.bias)); break;
      default: ptrs.push_back(const_cast<uint16_t*>(b.residual)); break;
    }
  }
  RINFER_ASSIGN_OR_RETURN(
      BackendDesc vp, BackendDesc::create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack"));
  RINFER_RETURN_IF_ERROR(vp.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                static_cast<int64_t>(uids.size()), uids.data()));
  RINFER_RETURN_IF_ERROR(vp.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                static_cast<int64_t>(ptrs.size()), ptrs.data()));
  RINFER_RETURN_IF_ERROR(
      vp.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
  RINFER_RETURN_IF_ERROR(vp.finalize());
  return vp;
}

Status execute(const CudnnHandle& h, const BackendDesc& plan, const std::vector<int64_t>& uids,
               const ConvBuffers& b, void* workspace, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(cudnn_status(cudnnSetStream(h.get(), stream), "cudnnSetStream"));
  RINFER_ASSIGN_OR_RETURN(BackendDesc vp, variant_pack(uids, b, workspace));
  return cudnn_status(cudnnBackendExecute(h.get(), plan.get(), vp.get()), "cudnnBackendExecute");
}

// Median milliseconds of 3 runs after one warm-up; a negative value when a run fails.
float time_plan(const CudnnHandle& h, const BackendDesc& plan, const std::vector<int64_t>& uids,
                const ConvBuffers& b, void* workspace, cudaStream_t stream) {
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) return -1.0f;
  std::vector<float> ms;
  bool ok = execute(h, plan, uids, b, workspace, stream).ok();
  for (int r = 0; ok && r < 3; ++r) {
    ok = cudaEventRecord(e0, stream) == cudaSuccess &&
         execute(h, plan, uids, b, workspace, stream).ok() &&
         cudaEventRecord(e1, stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess;
    float t = 0.0f;
    ok = ok && cudaEventElapsedTime(&t, e0, e1) == cudaSuccess;
    ms.push_back(t);
  }
  ok = cudaStreamSynchronize(stream) == cudaSuccess && ok;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  static_cast<void>(cudaGetLastError());
  if (!ok) return -1.0f;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

Result<CudnnConv> CudnnConv::create(const CudnnHandle& h, const Conv2dShape& s,
                                    const ConvBuffers& bufs, Activation act,
                                    const CudnnConvOptions& o, void* workspace,
                                    size_t workspace_limit, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_conv2d(s));
  if (s.groups != 1 || s.c_in % 8 != 0 || s.c_out % 8 != 0) {
    return invalid_argument(
        "cudnn convolution: groups {}, c_in {}, c_out {} (ungrouped, channels multiples of 8)",
        s.groups, s.c_in, s.c_out);
  }
  if (bufs.x == nullptr || bufs.w == nullptr || bufs.y == nullptr || !aligned16(bufs.x) ||
      !aligned16(bufs.w) || !aligned16(bufs.y) || !aligned16(bufs.residual)) {
    return invalid_argument("cudnn convolution: x, w and y must be non-null and 16-byte aligned");
  }
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF16) {
    return invalid_argument("cudnn convolution: elements {} (bf16 or f16)", dtype_name(o.dtype));
  }
  CudnnConv c;
  c.s_ = s;
  c.dtype_ = o.dtype;
  c.act_ = act;
  c.has_bias_ = bufs.bias != nullptr;
  c.has_residual_ = bufs.residual != nullptr;
  const bool any_epilogue = c.has_bias_ || c.has_residual_ || act != Activation::kNone;
  std::string tried;
  for (const bool fuse : {true, false}) {
    if (fuse && !(o.fuse_epilogue && any_epilogue)) continue;
    auto g = build_graph(h, s, o.dtype == DType::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16,
                         c.has_bias_, c.has_residual_, act, fuse);
    if (!g.ok()) {
      tried += fmt::format("; {}: {}", fuse ? "fused" : "alone", g.status().message());
      continue;
    }
    std::shared_ptr<Plan> best;
    float best_ms = 0.0f;
    int timed = 0;
    int64_t best_index = -1;
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      auto cfgs = engine_configs(g->op_graph, mode);
      if (!cfgs.ok()) {
        tried += fmt::format("; heuristics: {}", cfgs.status().message());
        continue;
      }
      for (BackendDesc& cfg : *cfgs) {
        const EngineInfo info = engine_info(cfg);
        if (info.reduced_precision) continue;
        auto plan = BackendDesc::create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        if (!plan.ok()) continue;
        cudnnHandle_t hh = h.get();
        if (!plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &hh).ok() ||
            !plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg).ok() ||
            !plan->finalize().ok()) {
          static_cast<void>(cudaGetLastError());
          continue;
        }
        int64_t ws = 0, n = 0;
        if (cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
            ws < 0 || static_cast<size_t>(ws) > workspace_limit) {
          continue;
        }
        float ms = 0.0f;
        if (o.autotune > 1) {
          ms = time_plan(h, *plan, g->uids, bufs, workspace, stream);
          if (ms < 0.0f) continue;
        }
        if (best == nullptr || ms < best_ms) {
          best = std::make_shared<Plan>();
          best->plan = std::move(plan).value();
          best->uids = g->uids;
          best_ms = ms;
          best_index = info.index;
          c.ws_ = static_cast<size_t>(ws);
        }
        if (++timed >= std::max(o.autotune, 1)) break;
      }
      if (best != nullptr) break;
    }
    if (best == nullptr) {
      tried += fmt::format("; {}: no engine builds", fuse ? "fused" : "alone");
      continue;
    }
    // The graph's descriptors go with the plan (cuDNN's plan may refer to them).
    best->descs = std::move(g->descs);
    best->descs.push_back(std::move(g->op_graph));
    c.plan_ = std::move(best);
    c.fused_ = fuse;
    c.engine_ = fmt::format("engine {}{}", best_index, fuse ? " (fused)" : "");
    return c;
  }
  return unsupported("cudnn convolution {}x{}x{} -> {} (kernel {}x{}, stride {}): no plan{}", s.h,
                     s.w, s.c_in, s.c_out, s.kh, s.kw, s.stride_h, tried);
}

Status CudnnConv::run(const CudnnHandle& h, const ConvBuffers& b, void* workspace,
                      cudaStream_t stream) const {
  if ((b.bias != nullptr) != has_bias_ || (b.residual != nullptr) != has_residual_) {
    return invalid_argument("cudnn convolution: bias / residual differ from the plan's");
  }
  if (!fused_) {
    ConvBuffers alone = b;
    alone.bias = nullptr;
    alone.residual = nullptr;
    RINFER_RETURN_IF_ERROR(execute(h, plan_->plan, plan_->uids, alone, workspace, stream));
    if (!has_bias_ && !has_residual_ && act_ == Activation::kNone) return ok_status();
    return channel_epilogue(dtype_, b.y, s_.n * s_.out_h() * s_.out_w(), s_.c_out, nullptr, b.bias,
                            b.residual, act_, stream);
  }
  return execute(h, plan_->plan, plan_->uids, b, workspace, stream);
}

}  // namespace rinfer::cuda
