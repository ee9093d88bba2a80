// Status: the result of every attnscore call. No exception crosses the API.
#ifndef ATTNSCORE_STATUS_H_
#define ATTNSCORE_STATUS_H_

#include <string>
#include <utility>

#include "attnscore/export.h"

namespace attnscore {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is malformed; nothing was written
  kUnsupported,      // valid input the engine or this CPU cannot serve
  kIoError,          // a file could not be read or written
  kInternal,         // a bug or a failure of a dependency (oneDNN, memory)
  kCancelled,        // stopped by a CancelToken (attnscore/cancel.h); outputs partly written
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status Unsupported(std::string message) {
    return Status(StatusCode::kUnsupported, std::move(message));
  }
  static Status IoError(std::string message) {
    return Status(StatusCode::kIoError, std::move(message));
  }
  static Status Internal(std::string message) {
    return Status(StatusCode::kInternal, std::move(message));
  }
  static Status Cancelled(std::string message) {
    return Status(StatusCode::kCancelled, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// "invalid argument", "unsupported", ...: for messages and logs.
ATTNSCORE_API const char* StatusCodeName(StatusCode code);

}  // namespace attnscore

// Returns from the enclosing function when `expr` yields a non-OK Status.
#define ATTNSCORE_RETURN_IF_ERROR(expr)                \
  do {                                                 \
    ::attnscore::Status attnscore_status_ = (expr);    \
    if (!attnscore_status_.ok()) return attnscore_status_; \
  } while (0)

#endif  // ATTNSCORE_STATUS_H_
