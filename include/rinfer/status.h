// Errors are values: every fallible function returns Status or Result<T>. Exceptions never
// cross the public API.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace rinfer {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from the caller (CLI flag, recipe value, prompt)
  kNotFound,         // a file, model name, tensor or key that does not exist
  kIoError,          // open/read/mmap failures
  kDataLoss,         // a malformed or truncated file
  kUnsupported,      // valid input we do not handle (yet): a dtype, a version
  kOutOfRange,       // an index or size past its limit (context length, tensor bounds)
  kOutOfMemory,      // host or device allocation failed
  kDeviceError,      // CUDA / cuBLAS / driver errors, no device present
  kCancelled,        // stopped by the user (Ctrl-C)
  kInternal,         // a bug in recipes-infer
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "data loss: model.gguf: tensor 'x' ends past the end of the file"
  std::string to_string() const;

  // Prefixes the message with context ("while loading 'a.gguf'"): "context: message".
  Status with_context(std::string_view context) const;

  // Marks a Status as deliberately ignored.
  void ignore() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

template <typename T>
class [[nodiscard]] Result {
 public:
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> is not allowed");

  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}        // NOLINT(implicit)
  Result(Status status) : v_(std::in_place_index<1>, std::move(status)) {  // NOLINT(implicit)
    assert(!std::get<1>(v_).ok() && "Result constructed from an OK Status");
  }

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace rinfer

#define RINFER_CONCAT_INNER(a, b) a##b
#define RINFER_CONCAT(a, b) RINFER_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define RINFER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::rinfer::Status rinfer_status_ = (expr);        \
    if (!rinfer_status_.ok()) return rinfer_status_; \
  } while (0)

// `RINFER_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its Status.
#define RINFER_ASSIGN_OR_RETURN(lhs, expr) \
  RINFER_ASSIGN_OR_RETURN_IMPL(RINFER_CONCAT(rinfer_result_, __LINE__), lhs, expr)
#define RINFER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
