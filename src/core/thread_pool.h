// A fixed pool of worker threads with a blocking parallel-for. The calling thread takes part,
// so a pool of size 1 runs everything inline with no threads at all.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rinfer {

class ThreadPool {
 public:
  // `n_threads` counts the caller: n_threads - 1 workers are started. 0 means one per core.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(chunk_begin, chunk_end) over [begin, end) split into chunks of at least `grain`
  // items, spread over the pool, and returns when all are done. A call made from inside a pool
  // task runs inline (no deadlock). An exception thrown by fn is rethrown here (the first one).
  void parallel_for(int64_t begin, int64_t end, int64_t grain,
                    const std::function<void(int64_t, int64_t)>& fn);

  // Runs fn(task, thread) for task in [0, n_tasks); `thread` is in [0, size()).
  void run(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

  static int hardware_threads();

 private:
  void worker_loop(int thread_index);
  void work_on_job(int thread_index);

  int n_threads_;
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};  // bumped for each job
  std::atomic<bool> stopping_{false};

  // The current job (valid while a run() is in flight).
  const std::function<void(int64_t, int)>* job_ = nullptr;
  int64_t job_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> pending_workers_{0};  // workers that have not finished the current job
  std::exception_ptr error_;
  std::mutex run_mu_;  // one job at a time
};

}  // namespace rinfer
