// RAII wrappers for CUDA streams, events and the current device (CUDA builds only). Every CUDA
// call's error becomes a Status; destructors never throw and ignore teardown errors.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <utility>

#include "rinfer/status.h"

namespace rinfer::cuda {

// Makes `device` current for the guard's scope and restores the previous one.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  static Result<DeviceGuard> set(int device);
  ~DeviceGuard();
  DeviceGuard(DeviceGuard&& o) noexcept : prev_(std::exchange(o.prev_, -1)) {}
  DeviceGuard& operator=(DeviceGuard&&) = delete;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;  // -1: nothing to restore
};

// A non-blocking stream on one device (it does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream() = default;
  static Result<Stream> create(int device);
  ~Stream() { reset(); }
  Stream(Stream&& o) noexcept { *this = std::move(o); }
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(s_, o.s_);
      std::swap(device_, o.device_);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return s_; }
  int device() const { return device_; }
  // Waits for all work queued so far; reports any asynchronous error as a Status.
  Status synchronize() const;
  void reset();

 private:
  cudaStream_t s_ = nullptr;
  int device_ = 0;
};

// An event with timing enabled.
class Event {
 public:
  Event() = default;
  static Result<Event> create(int device);
  ~Event() { reset(); }
  Event(Event&& o) noexcept { *this = std::move(o); }
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(e_, o.e_);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return e_; }
  Status record(cudaStream_t stream);
  Status synchronize() const;
  // Makes `stream` wait for this event (no host blocking).
  Status wait_on(cudaStream_t stream) const;
  void reset();

 private:
  cudaEvent_t e_ = nullptr;
};

// Milliseconds between two recorded events (the second must have completed).
Result<float> elapsed_ms(const Event& start, const Event& end);

// Checks the last launch error (cudaGetLastError) for a kernel called `what`.
Status check_launch(const char* what);

// What `record` queues on `stream` captured into an executable graph (thread-local capture
// mode). The stream is synchronized first: capture records, it does not run, so the work queued
// before must be done. A failing `record` ends the capture and is returned as it is.
Result<cudaGraphExec_t> capture_graph(cudaStream_t stream, const std::function<Status()>& record);

}  // namespace rinfer::cuda
