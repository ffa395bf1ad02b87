#include "server/request_checks.h"

#include <cctype>

namespace deepinfer::server {
namespace {

// Compares without an early exit, so the time taken does not tell how much of a key matched.
bool same_secret(std::string_view given, std::string_view expected) {
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(expected[i % expected.size()]);
  }
  return diff == 0;
}

}  // namespace

bool bearer_matches(std::string_view header, const std::string& key) {
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size() || header[kScheme.size()] != ' ') return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  }
  std::string_view given = header.substr(kScheme.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  return same_secret(given, key);
}

ApiError method_not_allowed(const std::string& allow, const std::string& path) {
  ApiError e(405, "use " + allow + " " + path, "invalid_request_error", "", "method_not_allowed");
  e.headers.emplace_back("Allow", allow);
  return e;
}

void check_content_type(std::string_view value) {
  const std::string_view media = value.substr(0, value.find(';'));
  std::string type;
  for (char c : media) {
    if (c != ' ' && c != '\t') type += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const bool json = type.empty() || type == "application/json" ||
                    (type.rfind("application/", 0) == 0 && type.size() > 5 && type.ends_with("+json"));
  if (!json) {
    throw ApiError(415, "Content-Type must be application/json, got '" + std::string(value) + "'",
                   "invalid_request_error", "Content-Type", "unsupported_media_type");
  }
}

}  // namespace deepinfer::server
