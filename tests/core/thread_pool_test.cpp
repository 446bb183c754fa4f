#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace rinfer {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 7, 100, 1001}) {
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
          ASSERT_LT(lo, hi);
          for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1);
      }
    }
  }
}

TEST(ThreadPool, ManyJobsBackToBack) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  for (int j = 0; j < 2000; ++j) {
    pool.parallel_for(10, 74, 1, [&](int64_t lo, int64_t hi) {
      int64_t s = 0;
      for (int64_t i = lo; i < hi; ++i) s += i;
      sum += s;
    });
  }
  EXPECT_EQ(sum.load(), 2000 * ((73 * 74) / 2 - (9 * 10) / 2));
}

TEST(ThreadPool, RunGivesThreadIndices) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> per_thread(3);
  pool.run(300, [&](int64_t, int thread) {
    ASSERT_GE(thread, 0);
    ASSERT_LT(thread, 3);
    per_thread[static_cast<size_t>(thread)]++;
  });
  int total = 0;
  for (auto& c : per_thread) total += c.load();
  EXPECT_EQ(total, 300);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  pool.parallel_for(0, 8, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      pool.parallel_for(0, 10, 1, [&](int64_t a, int64_t b) { count += static_cast<int>(b - a); });
    }
  });
  EXPECT_EQ(count.load(), 80);
}

TEST(ThreadPool, ExceptionIsRethrownAndPoolStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(0, 100, 1,
                                 [](int64_t lo, int64_t) {
                                   if (lo >= 50) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.parallel_for(0, 10, 1, [&](int64_t lo, int64_t hi) { n += static_cast<int>(hi - lo); });
  EXPECT_EQ(n.load(), 10);
}

}  // namespace
}  // namespace rinfer
