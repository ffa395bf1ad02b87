// Minimal leveled logging to stderr: LOG(INFO) << "loaded " << n << " tensors";
// Level from DEEPINFER_LOG_LEVEL (debug|info|warning|error), default info. Thread-safe
// per line.
#pragma once

#include <sstream>

namespace deepinfer {

enum class LogLevel { DEBUG = 0, INFO = 1, WARNING = 2, ERROR = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);

namespace detail {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace detail
}  // namespace deepinfer

#define LOG(level)                                                         \
  if (::deepinfer::LogLevel::level < ::deepinfer::log_level()) {          \
  } else                                                                   \
    ::deepinfer::detail::LogLine(::deepinfer::LogLevel::level, __FILE__, __LINE__)
