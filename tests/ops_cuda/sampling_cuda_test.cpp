// Device sampling against a scalar reference of the same chain (ops/cpu/sampler.h's order after
// the penalties): argmax; top-k, top-p, min-p, temperature and the draw; ties by lowest id.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "cuda_test_util.h"
#include "ops/cpu/sampler.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer {
namespace {

struct RefDraw {
  std::vector<int32_t> order;  // candidate ids, best first
  std::vector<double> cum;     // inclusive prefix sums of their weights
  int n_keep = 0;
  double target = 0.0;
  int32_t id = -1;
};

RefDraw reference(const std::vector<float>& logits, const cuda::DeviceSampling& s, double u) {
  RefDraw r;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  };
  const size_t k = std::min<size_t>(static_cast<size_t>(s.top_k), logits.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), better);
  r.order.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
  const double l0 = logits[static_cast<size_t>(r.order[0])];
  std::vector<double> p(k);
  double c = 0.0;
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::exp((logits[static_cast<size_t>(r.order[i])] - l0) / s.temperature);
    c += p[i];
    r.cum.push_back(c);
  }
  int n_p = static_cast<int>(k), n_m = static_cast<int>(k);
  if (s.top_p < 1.0f) {
    const double t = s.top_p * r.cum.back();
    for (size_t i = 0; i < k; ++i) {
      if (r.cum[i] >= t) {
        n_p = static_cast<int>(i) + 1;
        break;
      }
    }
  }
  if (s.min_p > 0.0f) {
    n_m = 0;
    for (size_t i = 0; i < k && p[i] >= s.min_p; ++i) n_m = static_cast<int>(i) + 1;
  }
  r.n_keep = std::max(1, std::min(n_p, n_m));
  r.target = u * r.cum[static_cast<size_t>(r.n_keep - 1)];
  r.id = r.order[static_cast<size_t>(r.n_keep - 1)];
  for (int i = 0; i < r.n_keep; ++i) {
    if (r.target < r.cum[static_cast<size_t>(i)]) {
      r.id = r.order[static_cast<size_t>(i)];
      break;
    }
  }
  return r;
}

class CudaSampling : public test::CudaTest {
 protected:
  int32_t run_sample(const cuda::DeviceBuffer& logits, int64_t n, const cuda::DeviceSampling& s,
                     float u) {
    cuda::DeviceBuffer du = upload(std::vector<float>{u});
    cuda::DeviceBuffer out = upload(std::vector<int32_t>{-7});
    const Status st =
        cuda::sample(logits.as<float>(), n, s, du.as<float>(), out.as<int32_t>(), stream());
    EXPECT_TRUE(st.ok()) << st.to_string();
    return download<int32_t>(out, 1)[0];
  }
};

TEST_F(CudaSampling, ArgmaxTakesTheLowestIdOfTiesAndSkipsNaN) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{128256}}) {
    auto x = test::random_floats(static_cast<size_t>(n), static_cast<uint64_t>(n), -10.0f, 10.0f);
    x[static_cast<size_t>(n / 2)] = 50.0f;
    x[static_cast<size_t>(n - 1)] = 50.0f;  // a tie later on
    if (n > 3) x[1] = std::numeric_limits<float>::quiet_NaN();
    cuda::DeviceBuffer dx = upload(x);
    cuda::DeviceBuffer out = upload(std::vector<int32_t>{-7});
    CU_ASSERT_OK(cuda::argmax(dx.as<float>(), n, out.as<int32_t>(), stream()));
    EXPECT_EQ(download<int32_t>(out, 1)[0], n / 2) << n;
  }
  std::vector<float> neg(100, -std::numeric_limits<float>::infinity());
  cuda::DeviceBuffer dn = upload(neg);
  cuda::DeviceBuffer out = upload(std::vector<int32_t>{-7});
  CU_ASSERT_OK(cuda::argmax(dn.as<float>(), 100, out.as<int32_t>(), stream()));
  EXPECT_EQ(download<int32_t>(out, 1)[0], 0);
}

TEST_F(CudaSampling, TopKTopPMinPDrawsMatchTheReference) {
  int checked = 0, boundary = 0;
  for (int64_t n : {int64_t{7}, int64_t{1000}, int64_t{128256}}) {
    for (bool ties : {false, true}) {
      auto x =
          test::random_floats(static_cast<size_t>(n), static_cast<uint64_t>(n) + ties, -8.0f, 8.0f);
      if (ties) {
        for (float& v : x) v = std::round(v * 2.0f) / 2.0f;  // many equal logits
      }
      cuda::DeviceBuffer dx = upload(x);
      for (int k : {1, 5, 40, 1024}) {
        for (float temp : {0.5f, 1.0f, 1.7f}) {
          for (auto [top_p, min_p] :
               {std::pair<float, float>{1.0f, 0.0f}, {0.9f, 0.0f}, {0.5f, 0.05f}, {1.0f, 0.1f}}) {
            for (float u : {0.0f, 0.31f, 0.77f, 0.9999f}) {
              const cuda::DeviceSampling s{temp, k, top_p, min_p};
              const RefDraw r = reference(x, s, u);
              const int32_t got = run_sample(dx, n, s, u);
              ++checked;
              if (got == r.id) continue;
              // Only a draw that lands on a boundary of the cumulative sums may differ (f32 sums
              // on the device, double here).
              const auto it = std::find(r.order.begin(), r.order.end(), got);
              ASSERT_NE(it, r.order.end()) << "id " << got << " is not a top-k candidate";
              const size_t j = static_cast<size_t>(it - r.order.begin());
              const double total = r.cum[static_cast<size_t>(r.n_keep - 1)];
              const double lo = j == 0 ? 0.0 : r.cum[j - 1];
              const bool near = std::abs(r.target - lo) < 1e-5 * total ||
                                std::abs(r.target - r.cum[j]) < 1e-5 * total ||
                                std::abs(static_cast<double>(j) - (r.n_keep - 1)) <= 1.0;
              EXPECT_TRUE(near) << "n " << n << " k " << k << " T " << temp << " top_p " << top_p
                                << " min_p " << min_p << " u " << u << ": got " << got << " (rank "
                                << j << "), reference " << r.id;
              ++boundary;
            }
          }
        }
      }
    }
  }
  EXPECT_LT(boundary * 50, checked) << boundary << " of " << checked << " differ";
}

TEST_F(CudaSampling, GreedyAndUnsupportedSettings) {
  auto x = test::random_floats(5000, 5, -3.0f, 3.0f);
  x[1234] = 9.0f;
  cuda::DeviceBuffer dx = upload(x);
  EXPECT_EQ(run_sample(dx, 5000, {0.0f, 40, 0.9f, 0.05f}, 0.5f), 1234);  // temperature 0
  EXPECT_EQ(run_sample(dx, 5000, {1.0f, 1, 1.0f, 0.0f}, 0.99f), 1234);   // top-k 1
  cuda::DeviceBuffer du = upload(std::vector<float>{0.5f});
  cuda::DeviceBuffer out = upload(std::vector<int32_t>{0});
  EXPECT_EQ(cuda::sample(dx.as<float>(), 5000, {1.0f, 0, 0.9f, 0.0f}, du.as<float>(),
                         out.as<int32_t>(), stream())
                .code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(cuda::sample(dx.as<float>(), 5000, {1.0f, 2000, 0.9f, 0.0f}, du.as<float>(),
                         out.as<int32_t>(), stream())
                .code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(cuda::sample(dx.as<float>(), 5000, {1.0f, 40, 0.0f, 0.0f}, du.as<float>(),
                         out.as<int32_t>(), stream())
                .code(),
            StatusCode::kInvalidArgument);
}

// The device decode loop's sampler against the host Sampler (ops/cpu/sampler.h), step by step:
// penalties over the history ring (duplicates penalized once, ids joining as they are sampled),
// then argmax or the top-k chain with the host's uniform; and its bookkeeping (token, position,
// KV length, host ring).

// The two ends of a step queued ahead, each as its rule says, twice in a row: pull copies the
// staged words of the half the parity names (read again from pinned memory, which the host
// rewrote between the two), feed writes the id to the token, the history slot and the pinned
// half the parity names, then flips the parity; a negative slot writes no history.
TEST_F(CudaSampling, DecodePullAndFeedFollowTheParity) {
  const int64_t stride = 37, n = 29;  // odd sizes; the halves' words beyond n are not copied
  int32_t* pinned = nullptr;
  ASSERT_EQ(
      cudaHostAlloc(reinterpret_cast<void**>(&pinned), (2 * stride + 2) * 4, cudaHostAllocPortable),
      cudaSuccess);
  for (int64_t i = 0; i < 2 * stride + 2; ++i) pinned[i] = static_cast<int32_t>(1000 + i);
  std::vector<int32_t> hist(12, -7);
  cuda::DeviceBuffer dst = poisoned<int32_t>(static_cast<size_t>(n) + 1);
  cuda::DeviceBuffer dhist = upload(hist), parity = upload(std::vector<int32_t>{0});
  cuda::DeviceBuffer ids = upload(std::vector<int32_t>{4242});
  cuda::DeviceBuffer token = upload(std::vector<int32_t>{-1}), at = upload(std::vector<int32_t>{5});
  int32_t* out = pinned + 2 * stride;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    CU_ASSERT_OK(
        cuda::decode_pull(pinned, stride, n, dst.as<int32_t>(), parity.as<int32_t>(), stream()));
    std::vector<int32_t> got = download<int32_t>(dst, static_cast<size_t>(n) + 1);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(got[static_cast<size_t>(i)], pinned[round * stride + i]) << i;
    EXPECT_EQ(got[static_cast<size_t>(n)], -1);  // past n: untouched (0xff bytes)
    CU_ASSERT_OK(cuda::decode_feed(ids.as<int32_t>(), token.as<int32_t>(), dhist.as<int32_t>(),
                                   at.as<int32_t>(), out, parity.as<int32_t>(), stream()));
    EXPECT_EQ(download<int32_t>(token, 1)[0], 4242);
    EXPECT_EQ(out[round], 4242);
    EXPECT_EQ(out[1 - round], round == 0 ? static_cast<int32_t>(1000 + 2 * stride + 1) : 4242);
    EXPECT_EQ(download<int32_t>(parity, 1)[0], 1 - round);
    hist = download<int32_t>(dhist, hist.size());
    for (size_t i = 0; i < hist.size(); ++i) EXPECT_EQ(hist[i], i == 5 ? 4242 : -7) << i;
    // The host rewrites half 1 before the second pull; the second feed goes to half 1.
    for (int64_t i = 0; i < stride; ++i) pinned[stride + i] = static_cast<int32_t>(-3 * i);
  }
  // No history slot: only the token and the pinned id.
  const int32_t none = -1, id = 77;
  ASSERT_EQ(cudaMemcpyAsync(at.data(), &none, 4, cudaMemcpyHostToDevice, stream()), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(ids.data(), &id, 4, cudaMemcpyHostToDevice, stream()), cudaSuccess);
  CU_ASSERT_OK(cuda::decode_feed(ids.as<int32_t>(), token.as<int32_t>(), dhist.as<int32_t>(),
                                 at.as<int32_t>(), out, parity.as<int32_t>(), stream()));
  EXPECT_EQ(download<int32_t>(token, 1)[0], 77);
  EXPECT_EQ(out[0], 77);
  hist = download<int32_t>(dhist, hist.size());
  EXPECT_EQ(std::count(hist.begin(), hist.end(), 77), 0);
  EXPECT_FALSE(
      cuda::decode_pull(pinned, 4, 5, dst.as<int32_t>(), parity.as<int32_t>(), stream()).ok());
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

}  // namespace
}  // namespace rinfer
