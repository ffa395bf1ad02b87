#include "base/error.h"

namespace deepinfer {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidInput: return "invalid input";
    case ErrorKind::kNotFound: return "not found";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kResourceExhausted: return "resource exhausted";
    case ErrorKind::kInternal: return "internal error";
    case ErrorKind::kDevice: return "device error";
  }
  return "error";
}

namespace detail {

ErrorBuilder::ErrorBuilder(ErrorKind kind, const char* file, int line, const char* cond)
    : kind_(kind), file_(file), line_(line), cond_(cond) {}

ErrorBuilder::~ErrorBuilder() noexcept(false) {
  std::string msg = stream_.str();
  // Internal errors carry the failed condition; input errors carry only the message, which
  // must name the culprit on its own. The location goes to where(), never into the message.
  if (kind_ == ErrorKind::kInternal || msg.empty()) {
    std::ostringstream full;
    full << error_kind_name(kind_);
    if (cond_ != nullptr) full << " (" << cond_ << ")";
    if (!msg.empty()) full << ": " << msg;
    msg = full.str();
  }
  throw Error(kind_, msg, std::string(file_) + ":" + std::to_string(line_));
}

}  // namespace detail
}  // namespace deepinfer
