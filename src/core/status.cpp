#include "rinfer/status.h"

#include <string>

namespace rinfer {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kDataLoss: return "malformed data";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kDeviceError: return "device error";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(status_code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace rinfer
