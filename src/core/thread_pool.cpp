#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace rinfer {

namespace {
thread_local bool t_in_pool_task = false;
}

int ThreadPool::hardware_threads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : hardware_threads()) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stopping_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work_on_job(int thread_index) {
  const bool was_in_task = t_in_pool_task;
  t_in_pool_task = true;
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= job_tasks_) break;
    try {
      (*job_)(task, thread_index);
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = std::current_exception();
      next_task_.store(job_tasks_, std::memory_order_relaxed);  // stop handing out work
    }
  }
  t_in_pool_task = was_in_task;
}

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until pred() holds or kSpin has passed; true when pred() held. Waking a sleeping thread
// costs tens of microseconds on an idle VM, more than a whole decode-step matmul, so workers and
// the caller spin briefly before falling back to the condition variables.
template <typename Pred>
bool spin_until(Pred pred) {
  constexpr auto kSpin = std::chrono::microseconds(100);
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

}  // namespace

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    auto has_news = [&] {
      return stopping_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(has_news)) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, has_news);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    work_on_job(thread_index);
    if (pending_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);  // pairs with the caller's predicate check under mu_
      done_.notify_all();
    }
  }
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1 || t_in_pool_task) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  std::lock_guard run_lock(run_mu_);
  {
    // The job is published by the release increment of generation_: a spinning worker that
    // sees the new generation also sees job_, job_tasks_ and next_task_.
    std::lock_guard lock(mu_);
    job_ = &fn;
    job_tasks_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    pending_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  work_on_job(0);
  // Every worker takes part in every job (even if only to find no task left), so no worker
  // can still be inside this job when the next one starts.
  auto all_done = [&] { return pending_workers_.load(std::memory_order_acquire) == 0; };
  std::exception_ptr error;
  {
    std::unique_lock lock(mu_);
    if (!all_done()) {
      lock.unlock();
      if (!spin_until(all_done)) {
        lock.lock();
        done_.wait(lock, all_done);
      } else {
        lock.lock();
      }
    }
    job_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  // Up to 4 chunks per thread for load balance, none smaller than the grain.
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  const int64_t chunks = std::min<int64_t>(max_chunks, int64_t{4} * n_threads_);
  const int64_t base = n / chunks, extra = n % chunks;
  run(chunks, [&](int64_t c, int) {
    const int64_t lo = begin + c * base + std::min(c, extra);
    const int64_t hi = lo + base + (c < extra ? 1 : 0);
    fn(lo, hi);
  });
}

}  // namespace rinfer
