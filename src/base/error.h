// Errors and checks (DESIGN.md §4).
//
//   CHECK(cond) << "msg";   bad user or checkpoint input: throws deepinfer::Error (kInvalidInput)
//   ICHECK(cond) << "msg";  our own invariant: throws deepinfer::Error (kInternal)
//   DCHECK(cond) << "msg";  like ICHECK, compiled out with NDEBUG
//   THROW(kind) << "msg";   unconditional typed error
//
// Library code never exits the process: callers (server, CLI, tests) catch Error.
// what() never names a source location (it may reach clients, e.g. in an HTTP error body);
// internal and device errors keep theirs in where() ("file:line"), for logs.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace deepinfer {

enum class ErrorKind {
  kInvalidInput,   // a request, prompt, config or checkpoint is wrong: the caller's fault
  kNotFound,       // a file, tensor or key that should exist does not
  kUnsupported,    // well-formed input that uses a feature we do not implement
  kResourceExhausted,
  kInternal,       // a broken invariant of ours
  kDevice,         // CUDA / NCCL / cuBLAS failure
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what, std::string where = "")
      : std::runtime_error(what), kind_(kind), where_(std::move(where)) {}
  ErrorKind kind() const { return kind_; }
  // Source location of the check that threw ("file:line"), or "".
  const std::string& where() const { return where_; }

 private:
  ErrorKind kind_;
  std::string where_;
};

namespace detail {

// Collects a message with operator<< and throws when the full statement ends.
class ErrorBuilder {
 public:
  ErrorBuilder(ErrorKind kind, const char* file, int line, const char* cond);
  ErrorBuilder(const ErrorBuilder&) = delete;
  ErrorBuilder& operator=(const ErrorBuilder&) = delete;
  [[noreturn]] ~ErrorBuilder() noexcept(false);

  template <typename T>
  ErrorBuilder& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  ErrorKind kind_;
  const char* file_;
  int line_;
  const char* cond_;
  std::ostringstream stream_;
};

// Makes `if (...) ; else CHECK_BUILDER << x` a void expression statement.
struct Voidify {
  void operator&(const ErrorBuilder&) {}
};

}  // namespace detail
}  // namespace deepinfer

#define DEEPINFER_CHECK_IMPL(kind, cond)                  \
  (cond) ? (void)0                                        \
         : ::deepinfer::detail::Voidify() &               \
               ::deepinfer::detail::ErrorBuilder(kind, __FILE__, __LINE__, #cond)

#define CHECK(cond) DEEPINFER_CHECK_IMPL(::deepinfer::ErrorKind::kInvalidInput, cond)
#define CHECK_KIND(kind, cond) DEEPINFER_CHECK_IMPL(::deepinfer::ErrorKind::kind, cond)
#define ICHECK(cond) DEEPINFER_CHECK_IMPL(::deepinfer::ErrorKind::kInternal, cond)
#define THROW(kind) \
  ::deepinfer::detail::Voidify() &   \
      ::deepinfer::detail::ErrorBuilder(::deepinfer::ErrorKind::kind, __FILE__, __LINE__, nullptr)

#ifdef NDEBUG
#define DCHECK(cond) \
  while (false) ICHECK(cond)
#else
#define DCHECK(cond) ICHECK(cond)
#endif
