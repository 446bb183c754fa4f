#include "core/cuda/stream.h"

#include "core/cuda/cuda_check.h"

namespace rinfer::cuda {

Result<DeviceGuard> DeviceGuard::set(int device) {
  int prev = 0;
  RINFER_CUDA_RETURN(cudaGetDevice(&prev));
  DeviceGuard g;
  if (prev != device) {
    RINFER_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice")
                               .with_context(fmt::format("device {}", device)));
    g.prev_ = prev;
  }
  return g;
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) static_cast<void>(cudaSetDevice(prev_));
}

Result<Stream> Stream::create(int device) {
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
  Stream s;
  RINFER_CUDA_RETURN(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
  s.device_ = device;
  return s;
}

Status Stream::synchronize() const {
  return cuda_status(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
}

void Stream::reset() {
  if (s_ != nullptr) static_cast<void>(cudaStreamDestroy(s_));
  s_ = nullptr;
}

Result<Event> Event::create(int device) {
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
  Event e;
  RINFER_CUDA_RETURN(cudaEventCreate(&e.e_));
  return e;
}

Status Event::record(cudaStream_t stream) {
  return cuda_status(cudaEventRecord(e_, stream), "cudaEventRecord");
}

Status Event::synchronize() const {
  return cuda_status(cudaEventSynchronize(e_), "cudaEventSynchronize");
}

Status Event::wait_on(cudaStream_t stream) const {
  return cuda_status(cudaStreamWaitEvent(stream, e_, 0), "cudaStreamWaitEvent");
}

void Event::reset() {
  if (e_ != nullptr) static_cast<void>(cudaEventDestroy(e_));
  e_ = nullptr;
}

Result<float> elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  RINFER_CUDA_RETURN(cudaEventElapsedTime(&ms, start.get(), end.get()));
  return ms;
}

Status check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return ok_status();
  return cuda_status(err, what);
}

Result<cudaGraphExec_t> capture_graph(cudaStream_t stream, const std::function<Status()>& record) {
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
  RINFER_CUDA_RETURN(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status rs = record();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!rs.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return rs;
  }
  RINFER_CUDA_RETURN(end);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  RINFER_CUDA_RETURN(inst);
  return exec;
}

}  // namespace rinfer::cuda
