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
TEST_F(CudaSampling, DecodeSamplerMatchesTheHostSampler) {
  const int64_t n = 5003;
  CU_ASSIGN_OR_FAIL(cuda::DecodeSampler ds, cuda::DecodeSampler::create(0, stream()));
  for (bool sampled : {false, true}) {
    for (int last_n : {0, 8, 64, 1024}) {
      SamplingParams sp;
      sp.temperature = sampled ? 0.9f : 0.0f;
      sp.top_k = 50;
      sp.top_p = 0.9f;
      sp.min_p = 0.02f;
      sp.repeat_penalty = 1.4f;
      sp.presence_penalty = 0.7f;
      sp.repeat_last_n = last_n;
      sp.seed = 11;
      const cuda::DecodeSampling dsp{.chain = {sp.temperature, sp.top_k, sp.top_p, sp.min_p},
                                     .repeat_penalty = sp.repeat_penalty,
                                     .presence_penalty = sp.presence_penalty,
                                     .last_n = sp.repeat_last_n};
      CU_ASSERT_OK(cuda::decode_sampling_supported(dsp, n));
      Sampler host(sp, n), rng(sp, n);
      // A history with repeats and an out-of-vocabulary id (never penalized).
      std::vector<int32_t> hist;
      for (int i = 0; i < 700; ++i) hist.push_back(static_cast<int32_t>((i * 37) % 300));
      hist.push_back(static_cast<int32_t>(n + 5));
      CU_ASSERT_OK(ds.start(dsp, n, hist, stream()));
      cuda::DeviceBuffer io = upload(std::vector<int32_t>{-1, 100, 101});  // token, pos, n_kv
      int32_t* tok = io.as<int32_t>();
      int mismatches = 0;
      const int steps = 24;
      for (int step = 0; step < steps; ++step) {
        // Logits where the history's ids lead, so the penalties decide the pick.
        auto x = test::random_floats(static_cast<size_t>(n), 1000u * last_n + step + sampled, -2.0f,
                                     2.0f);
        for (int32_t id = 0; id < 300; ++id) x[static_cast<size_t>(id)] += 3.0f;
        cuda::DeviceBuffer dx = upload(x);
        const double u = rng.next_uniform();
        ds.set_uniform(step, static_cast<float>(u));
        CU_ASSERT_OK(ds.launch(dx.as<float>(), tok, tok + 1, tok + 2, stream()));
        ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
        const int32_t got = ds.result(step);
        const auto want_r = host.sample_with_uniform(x, hist, u);
        ASSERT_TRUE(want_r.ok()) << want_r.status().to_string();
        const int32_t want = *want_r;
        if (sampled) {
          mismatches += got != want;  // a draw on a boundary of the sums (f32 against double)
        } else {
          ASSERT_EQ(got, want) << "last_n " << last_n << " step " << step;
        }
        EXPECT_EQ(download<int32_t>(io, 1)[0], got);
        hist.push_back(want);
        if (got != want) {  // follow the device's history from here
          hist.back() = got;
        }
      }
      EXPECT_LE(mismatches, 1) << "last_n " << last_n;
      const auto st = download<int32_t>(io, 3);
      EXPECT_EQ(st[1], 100 + steps);
      EXPECT_EQ(st[2], 101 + steps);
    }
  }
  // Settings the device does not take.
  EXPECT_EQ(cuda::decode_sampling_supported(
                {.chain = {1.0f, 0, 1.0f, 0.0f}, .repeat_penalty = 1.0f, .last_n = 0}, n)
                .code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(cuda::decode_sampling_supported(
                {.chain = {0.0f, 0, 1.0f, 0.0f}, .repeat_penalty = 1.1f, .last_n = 2000}, n)
                .code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(cuda::decode_sampling_supported(
                {.chain = {0.0f, 0, 1.0f, 0.0f}, .frequency_penalty = 0.5f, .last_n = 8}, n)
                .code(),
            StatusCode::kUnsupported);
  EXPECT_TRUE(cuda::decode_sampling_supported(
                  {.chain = {0.0f, 0, 1.0f, 0.0f}, .repeat_penalty = 1.1f, .last_n = 64}, n)
                  .ok());
}

// Guards device decoding on broken numbers: a step whose logits hold NaN or +inf (or only -inf)
// hands the host id -1 (the model turns it into kDataLoss) and feeds id 0 so a step queued
// behind stays in bounds, greedy and sampled; a lone -inf is a masked token, never chosen.
TEST_F(CudaSampling, DecodeSamplerFlagsNonFiniteLogits) {
  const int64_t n = 3001;
  CU_ASSIGN_OR_FAIL(cuda::DecodeSampler ds, cuda::DecodeSampler::create(0, stream()));
  for (bool sampled : {false, true}) {
    const cuda::DecodeSampling dsp{.chain = {sampled ? 0.8f : 0.0f, 40, 0.95f, 0.0f},
                                   .repeat_penalty = 1.2f,
                                   .presence_penalty = 0.0f,
                                   .last_n = 8};
    CU_ASSERT_OK(ds.start(dsp, n, std::vector<int32_t>{5, 6, 7}, stream()));
    cuda::DeviceBuffer io = upload(std::vector<int32_t>{-1, 10, 11});  // token, pos, n_kv
    int32_t* tok = io.as<int32_t>();
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<std::pair<float, bool>> cases = {
        {std::numeric_limits<float>::quiet_NaN(), true}, {inf, true}, {-inf, false}};
    int step = 0;
    for (auto [bad, flagged] : cases) {
      for (int64_t at : {int64_t{0}, int64_t{1234}, n - 1}) {
        auto x = test::random_floats(static_cast<size_t>(n), 77u + step, -2.0f, 2.0f);
        x[static_cast<size_t>(at)] = bad;
        cuda::DeviceBuffer dx = upload(x);
        ds.set_uniform(step, 0.5f);
        CU_ASSERT_OK(ds.launch(dx.as<float>(), tok, tok + 1, tok + 2, stream()));
        ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
        const int32_t got = ds.result(step);
        if (flagged) {
          EXPECT_EQ(got, -1) << "bad " << bad << " at " << at << " sampled " << sampled;
          EXPECT_EQ(download<int32_t>(io, 1)[0], 0);  // the fed token stays in the vocabulary
        } else {
          EXPECT_TRUE(got >= 0 && got < n && got != at) << got;
        }
        ++step;
      }
    }
    // Every logit -inf: no token can be chosen.
    std::vector<float> masked(static_cast<size_t>(n), -inf);
    cuda::DeviceBuffer dm = upload(masked);
    ds.set_uniform(step, 0.5f);
    CU_ASSERT_OK(ds.launch(dm.as<float>(), tok, tok + 1, tok + 2, stream()));
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    EXPECT_EQ(ds.result(step), -1);
    EXPECT_EQ(download<int32_t>(io, 3)[1], 10 + step + 1);  // the bookkeeping still advanced
  }
}

}  // namespace
}  // namespace rinfer
