// fmt-style constructors for error Status values: `return data_loss("{}: bad magic", path);`
#pragma once

#include <fmt/format.h>

#include "rinfer/status.h"

namespace rinfer {

#define RINFER_DEFINE_ERROR(fn, code)                                             \
  template <typename... Args>                                                     \
  Status fn(fmt::format_string<Args...> f, Args&&... args) {                      \
    return Status(StatusCode::code, fmt::format(f, std::forward<Args>(args)...)); \
  }

RINFER_DEFINE_ERROR(invalid_argument, kInvalidArgument)
RINFER_DEFINE_ERROR(not_found, kNotFound)
RINFER_DEFINE_ERROR(io_error, kIoError)
RINFER_DEFINE_ERROR(data_loss, kDataLoss)
RINFER_DEFINE_ERROR(unsupported, kUnsupported)
RINFER_DEFINE_ERROR(out_of_range, kOutOfRange)
RINFER_DEFINE_ERROR(out_of_memory, kOutOfMemory)
RINFER_DEFINE_ERROR(device_error, kDeviceError)
RINFER_DEFINE_ERROR(cancelled_error, kCancelled)
RINFER_DEFINE_ERROR(internal_error, kInternal)

#undef RINFER_DEFINE_ERROR

}  // namespace rinfer
