#include "base/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace deepinfer {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("DEEPINFER_LOG_LEVEL");
  if (env == nullptr) return LogLevel::INFO;
  if (std::strcmp(env, "debug") == 0) return LogLevel::DEBUG;
  if (std::strcmp(env, "warning") == 0) return LogLevel::WARNING;
  if (std::strcmp(env, "error") == 0) return LogLevel::ERROR;
  return LogLevel::INFO;
}

std::atomic<int> g_level{static_cast<int>(level_from_env())};
std::mutex g_mutex;

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

namespace detail {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  static const char* kNames[] = {"D", "I", "W", "E"};
  const char* base = std::strrchr(file, '/');
  stream_ << kNames[static_cast<int>(level)] << " " << (base ? base + 1 : file) << ":" << line
          << "] ";
}

LogLine::~LogLine() {
  stream_ << "\n";
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fputs(stream_.str().c_str(), stderr);
}

}  // namespace detail
}  // namespace deepinfer
