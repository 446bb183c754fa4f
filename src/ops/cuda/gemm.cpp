// GEMM through cuBLASLt: y[n_tokens, n_out] = x[n_tokens, n_in] * W^T (+ beta * y), bf16 or
// f16 operands, f32 accumulation and scale, f32 or bf16 output.
//
// cuBLASLt is column-major: row-major W [n_out, ld_w] is the column-major k x m matrix with
// lda = ld_w, used transposed (op(A) = A^T, m = n_out); row-major x [n_tokens, ld_x] is the
// column-major k x n matrix B (n = n_tokens); the column-major m x n result with ldc = n_out is
// row-major y [n_tokens, n_out]. The heuristic's first algorithm is cached per problem
// (shape, types, beta, pointer alignment) in the CublasLt handle; with autotuning on, the
// fastest of the heuristic's best eight, timed on the first problem of each bucket of token
// counts, serves the bucket.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::cuda {

namespace {

#define RINFER_CUBLAS_RETURN(call) RINFER_RETURN_IF_ERROR(cublas_status((call), #call))

int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t al = 256;
  while (al > 1 && a % static_cast<uintptr_t>(al) != 0) al /= 2;
  return al;
}

template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtDeleter {
  void operator()(T p) const { static_cast<void>(Destroy(p)); }
};
using DescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>,
                                LtDeleter<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>,
                                  LtDeleter<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>>;
using PrefPtr =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                    LtDeleter<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>>;

Result<LayoutPtr> make_layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  RINFER_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
  return LayoutPtr(l);
}

// Token counts that share a tuned algorithm: up to 32 by eights, up to 1024 by 64, then powers
// of two.
int64_t token_bucket(int64_t n) {
  if (n <= 32) return (n + 7) / 8 * 8;
  if (n <= 1024) return (n + 63) / 64 * 64;
  int64_t b = 2048;
  while (b < n) b *= 2;
  return b;
}

// The tuned algorithms of every handle, by device and bucketed problem.
struct TunedAlgos {
  std::mutex mu;
  std::map<std::pair<int, CublasLt::AlgoKey>, cublasLtMatmulAlgo_t> algos;
};
TunedAlgos& tuned_algos() {
  static TunedAlgos* t = new TunedAlgos();  // never destroyed: used until exit
  return *t;
}

// Times the heuristic's best candidates on this problem (y is overwritten; beta must be 0) and
// returns the fastest; nullopt when none ran.
Result<std::optional<cublasLtMatmulAlgo_t>> tune(CublasLt& lt, cublasLtMatmulDesc_t desc,
                                                 cublasLtMatrixLayout_t la,
                                                 cublasLtMatrixLayout_t lb,
                                                 cublasLtMatrixLayout_t lc,
                                                 cublasLtMatmulPreference_t pref, const void* w,
                                                 const void* x, void* y, cudaStream_t stream) {
  constexpr int kCandidates = 8, kReps = 3;
  cublasLtMatmulHeuristicResult_t res[kCandidates] = {};
  int n_res = 0;
  RINFER_CUBLAS_RETURN(cublasLtMatmulAlgoGetHeuristic(lt.handle(), desc, la, lb, lc, lc, pref,
                                                      kCandidates, res, &n_res));
  RINFER_ASSIGN_OR_RETURN(Event e0, Event::create(lt.device()));
  RINFER_ASSIGN_OR_RETURN(Event e1, Event::create(lt.device()));
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
  const float alpha = 1.0f, beta = 0.0f;
  std::optional<cublasLtMatmulAlgo_t> best;
  float best_ms = 0.0f;
  for (int i = 0; i < n_res; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > lt.workspace_bytes()) {
      continue;
    }
    auto run = [&] {
      return cublasLtMatmul(lt.handle(), desc, &alpha, w, la, x, lb, &beta, y, lc, y, lc,
                            &res[i].algo, lt.workspace(), lt.workspace_bytes(), stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    RINFER_CUDA_RETURN(cudaEventRecord(e0.get(), stream));
    bool ok = true;
    for (int r = 0; r < kReps && ok; ++r) ok = run() == CUBLAS_STATUS_SUCCESS;
    RINFER_CUDA_RETURN(cudaEventRecord(e1.get(), stream));
    RINFER_CUDA_RETURN(cudaEventSynchronize(e1.get()));
    float ms = 0.0f;
    RINFER_CUDA_RETURN(cudaEventElapsedTime(&ms, e0.get(), e1.get()));
    if (ok && (!best || ms < best_ms)) {
      best = res[i].algo;
      best_ms = ms;
    }
  }
  return best;
}

// The matmul of gemm_lowp and gemm_f8 (checked by them): ab the operands' type; with a_scale and
// b_scale (FP8), per-row scales of W (n_out) and of x (n_tokens), cuBLASLt's outer-vector
// scaling.
Status matmul_lt(CublasLt& lt, DType ab_dtype, const void* w, int64_t ld_w, const void* x,
                 int64_t ld_x, int64_t n_tokens, int64_t n_out, int64_t n_in, DType y_dtype,
                 void* y, float beta, const float* a_scale, const float* b_scale,
                 cudaStream_t stream) {
  if (y_dtype != DType::kF32 && y_dtype != DType::kBF16) {
    return invalid_argument("gemm: output must be f32 or bf16, not {}", dtype_name(y_dtype));
  }
  if (n_tokens <= 0 || n_out <= 0 || n_in <= 0) {
    return invalid_argument("gemm: empty problem {}x{}x{}", n_tokens, n_out, n_in);
  }
  if (ld_w < n_in || ld_x < n_in) {
    return invalid_argument("gemm: leading dims ({}, {}) below n_in {}", ld_w, ld_x, n_in);
  }
  if (w == nullptr || x == nullptr || y == nullptr) return invalid_argument("gemm: null pointer");
  if (lt.handle() == nullptr) return invalid_argument("gemm: CublasLt not created");

  const cudaDataType_t ab = ab_dtype == DType::kBF16  ? CUDA_R_16BF
                            : ab_dtype == DType::kF16 ? CUDA_R_16F
                                                      : CUDA_R_8F_E4M3;
  const cudaDataType_t yt = y_dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(lt.device()));

  cublasLtMatmulDesc_t desc_raw = nullptr;
  RINFER_CUBLAS_RETURN(cublasLtMatmulDescCreate(&desc_raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  DescPtr desc(desc_raw);
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  RINFER_CUBLAS_RETURN(
      cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  RINFER_CUBLAS_RETURN(
      cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  if (a_scale != nullptr) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    RINFER_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(
        desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    RINFER_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(
        desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    RINFER_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(
        desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
    RINFER_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(
        desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
  }
  RINFER_ASSIGN_OR_RETURN(LayoutPtr la, make_layout(ab, n_in, n_out, ld_w));
  RINFER_ASSIGN_OR_RETURN(LayoutPtr lb, make_layout(ab, n_in, n_tokens, ld_x));
  RINFER_ASSIGN_OR_RETURN(LayoutPtr lc, make_layout(yt, n_out, n_tokens, n_out));

  const int64_t al_a = alignment_of(w), al_b = alignment_of(x), al_c = alignment_of(y);
  const CublasLt::AlgoKey key = {n_tokens,
                                 n_out,
                                 n_in,
                                 ld_w,
                                 ld_x,
                                 static_cast<int64_t>(ab),
                                 static_cast<int64_t>(yt),
                                 beta != 0.0f ? 1 : 0,
                                 al_a * 1000 + al_b,
                                 al_c};
  auto it = lt.algos().find(key);
  if (it == lt.algos().end()) {
    cublasLtMatmulPreference_t pref_raw = nullptr;
    RINFER_CUBLAS_RETURN(cublasLtMatmulPreferenceCreate(&pref_raw));
    PrefPtr pref(pref_raw);
    const uint64_t ws = lt.workspace_bytes();
    RINFER_CUBLAS_RETURN(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t aa = static_cast<uint32_t>(al_a), ab_ = static_cast<uint32_t>(al_b),
                   ac = static_cast<uint32_t>(al_c);
    RINFER_CUBLAS_RETURN(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
    RINFER_CUBLAS_RETURN(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab_, sizeof(ab_)));
    RINFER_CUBLAS_RETURN(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac)));
    RINFER_CUBLAS_RETURN(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac)));
    std::optional<cublasLtMatmulAlgo_t> chosen;
    if (lt.autotune() && beta == 0.0f) {
      CublasLt::AlgoKey bkey = key;
      bkey[0] = token_bucket(n_tokens);
      const std::pair<int, CublasLt::AlgoKey> tkey{lt.device(), bkey};
      TunedAlgos& t = tuned_algos();
      std::unique_lock<std::mutex> lock(t.mu);
      auto tit = t.algos.find(tkey);
      if (tit != t.algos.end()) {
        // The bucket's algorithm, if it takes this exact problem.
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(lt.handle(), desc.get(), la.get(), lb.get(), lc.get(), lc.get(),
                                    &tit->second, &check) == CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= lt.workspace_bytes()) {
          chosen = tit->second;
        }
      } else {
        RINFER_ASSIGN_OR_RETURN(chosen, tune(lt, desc.get(), la.get(), lb.get(), lc.get(),
                                             pref.get(), w, x, y, stream));
        if (chosen) t.algos.emplace(tkey, *chosen);
      }
    }
    if (!chosen) {
      cublasLtMatmulHeuristicResult_t res{};
      int n_res = 0;
      RINFER_CUBLAS_RETURN(cublasLtMatmulAlgoGetHeuristic(lt.handle(), desc.get(), la.get(),
                                                          lb.get(), lc.get(), lc.get(), pref.get(),
                                                          1, &res, &n_res));
      if (n_res == 0) {
        return unsupported("gemm: cuBLASLt has no algorithm for {}x{}x{} ({} -> {})", n_tokens,
                           n_out, n_in, dtype_name(ab_dtype), dtype_name(y_dtype));
      }
      chosen = res.algo;
    }
    it = lt.algos().emplace(key, *chosen).first;
  }
  const float alpha = 1.0f;
  RINFER_CUBLAS_RETURN(cublasLtMatmul(lt.handle(), desc.get(), &alpha, w, la.get(), x, lb.get(),
                                      &beta, y, lc.get(), y, lc.get(), &it->second, lt.workspace(),
                                      lt.workspace_bytes(), stream));
  return ok_status();
}

}  // namespace

Status gemm_lowp(CublasLt& lt, DType ab_dtype, const void* w, int64_t ld_w, const void* x,
                 int64_t ld_x, int64_t n_tokens, int64_t n_out, int64_t n_in, DType y_dtype,
                 void* y, float beta, cudaStream_t stream) {
  if (ab_dtype != DType::kBF16 && ab_dtype != DType::kF16) {
    return invalid_argument("gemm: operands must be bf16 or f16, not {}", dtype_name(ab_dtype));
  }
  return matmul_lt(lt, ab_dtype, w, ld_w, x, ld_x, n_tokens, n_out, n_in, y_dtype, y, beta, nullptr,
                   nullptr, stream);
}

Status gemm_f8(CublasLt& lt, const DeviceWeight& w, const uint8_t* xq, const float* x_scale,
               int64_t n_tokens, DType y_dtype, void* y, cudaStream_t stream) {
  if (w.dtype != DType::kF8E4M3 || w.data == nullptr || w.scales == nullptr || w.n_in % 16 != 0) {
    return invalid_argument("gemm_f8: the weight is {}, not a loaded f8_e4m3 layout",
                            dtype_name(w.dtype));
  }
  if (xq == nullptr || x_scale == nullptr) return invalid_argument("gemm_f8: null pointer");
  return matmul_lt(lt, DType::kF8E4M3, w.data, w.n_in, xq, w.n_in, n_tokens, w.n_out, w.n_in,
                   y_dtype, y, 0.0f, static_cast<const float*>(w.scales), x_scale, stream);
}

Result<bool> gemm_f8_supported(CublasLt& lt) {
  static std::mutex mu;
  static std::map<int, bool> known;  // by device
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(lt.device()); it != known.end()) return it->second;
  // One small FP8 problem with outer-vector scales: does this cuBLASLt run it here?
  RINFER_ASSIGN_OR_RETURN(Stream st, Stream::create(lt.device()));
  constexpr int64_t kN = 64;
  RINFER_ASSIGN_OR_RETURN(DeviceBuffer buf,
                          DeviceBuffer::create(3 * kN * kN * 4, lt.device(), st.get()));
  auto* base = static_cast<uint8_t*>(buf.data());
  RINFER_CUDA_RETURN(cudaMemsetAsync(base, 0, buf.bytes(), st.get()));
  DeviceWeight w;
  w.dtype = DType::kF8E4M3;
  w.n_out = w.n_in = w.ld = kN;
  w.data = base;
  w.scales = base + kN * kN;
  const auto* xq = base + 2 * kN * kN;
  const auto* xs = reinterpret_cast<const float*>(base + 3 * kN * kN);
  const Status s = gemm_f8(lt, w, xq, xs, kN, DType::kF32, base + 4 * kN * kN, st.get());
  const bool ok = s.ok() && cudaStreamSynchronize(st.get()) == cudaSuccess;
  (void)cudaGetLastError();
  known[lt.device()] = ok;
  return ok;
}

size_t gemm_workspace_bytes(const DeviceWeight& w) {
  if (w.dtype == DType::kBF16) return 0;
  const int64_t ld = (w.n_in + 7) / 8 * 8;
  return static_cast<size_t>(w.n_out) * static_cast<size_t>(ld) * 2;
}

Status gemm(CublasLt& lt, const DeviceWeight& w, const uint16_t* x, int64_t n_tokens, DType y_dtype,
            void* y, float beta, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (w.dtype == DType::kBF16) {
    return gemm_lowp(lt, DType::kBF16, w.data, w.ld, x, w.n_in, n_tokens, w.n_out, w.n_in, y_dtype,
                     y, beta, stream);
  }
  const size_t need = gemm_workspace_bytes(w);
  if (workspace == nullptr || workspace_bytes < need) {
    return invalid_argument("gemm: {} weight needs a {}-byte workspace, got {}",
                            dtype_name(w.dtype), need, workspace_bytes);
  }
  if (w.dtype == DType::kF8E4M3 && beta == 0.0f && n_tokens > 0) {
    // W8A8: x's rows to e4m3 with a scale each, in the workspace, then the FP8 GEMM (where this
    // cuBLASLt runs it; else the weights are dequantized below).
    const size_t codes = (static_cast<size_t>(n_tokens * w.n_in) + 255) / 256 * 256;
    RINFER_ASSIGN_OR_RETURN(const bool f8, gemm_f8_supported(lt));
    if (f8 && codes + static_cast<size_t>(n_tokens) * 4 <= workspace_bytes) {
      auto* q = static_cast<uint8_t*>(workspace);
      auto* sc = reinterpret_cast<float*>(q + codes);
      RINFER_RETURN_IF_ERROR(
          quantize_rows_f8(x, DType::kBF16, n_tokens, w.n_in, w.n_in, q, sc, stream));
      return gemm_f8(lt, w, q, sc, n_tokens, y_dtype, y, stream);
    }
  }
  const int64_t ld = (w.n_in + 7) / 8 * 8;
  auto* wb = static_cast<uint16_t*>(workspace);  // [n_out, ld] bf16
  RINFER_RETURN_IF_ERROR(dequantize_to_bf16(w, wb, ld, stream));
  return gemm_lowp(lt, DType::kBF16, wb, ld, x, w.n_in, n_tokens, w.n_out, w.n_in, y_dtype, y, beta,
                   stream);
}

}  // namespace rinfer::cuda
