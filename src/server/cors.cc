#include "server/cors.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "server/api_error.h"

namespace deepinfer::server {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::vector<std::string> parse_allowed_origins(const std::string& text) {
  std::vector<std::string> origins;
  const std::string t = trim(text);
  if (t.empty()) return origins;
  if (t.front() == '[') {
    nlohmann::json list;
    try {
      list = nlohmann::json::parse(t);
    } catch (const nlohmann::json::exception& e) {
      THROW(kInvalidInput) << "--allowed-origins: malformed JSON list: " << e.what();
    }
    CHECK(list.is_array()) << "--allowed-origins must be a JSON list of strings";
    for (const auto& o : list) {
      CHECK(o.is_string()) << "--allowed-origins must be a JSON list of strings, got " << o.dump();
      origins.push_back(o.get<std::string>());
    }
  } else {
    size_t start = 0;
    while (start <= t.size()) {
      const size_t comma = std::min(t.find(',', start), t.size());
      origins.push_back(trim(std::string_view(t).substr(start, comma - start)));
      start = comma + 1;
    }
  }
  for (const std::string& o : origins) {
    const bool ok = o == "*" || ((o.rfind("http://", 0) == 0 || o.rfind("https://", 0) == 0) &&
                                 o.find_first_of(" \t\r\n/", o.find("//") + 2) == std::string::npos &&
                                 o.size() > o.find("//") + 2);
    CHECK(ok) << "--allowed-origins: '" << o << "' is not an origin (scheme://host[:port], or *)";
  }
  return origins;
}

CorsPolicy::CorsPolicy(std::vector<std::string> origins) : origins_(std::move(origins)) {
  any_ = std::find(origins_.begin(), origins_.end(), "*") != origins_.end();
}

bool CorsPolicy::allows(std::string_view origin) const {
  if (origin.empty() || !enabled()) return false;
  return any_ || std::find(origins_.begin(), origins_.end(), origin) != origins_.end();
}

CorsPolicy::Headers CorsPolicy::response_headers(std::string_view origin) const {
  if (!allows(origin)) return {};
  if (any_) return {{"Access-Control-Allow-Origin", "*"}};
  return {{"Access-Control-Allow-Origin", std::string(origin)}, {"Vary", "Origin"}};
}

CorsPolicy::Headers CorsPolicy::preflight(std::string_view origin, std::string_view method,
                                          std::string_view request_headers) const {
  if (!allows(origin)) {
    throw ApiError(400, "Disallowed CORS origin '" + std::string(origin) + "'", "invalid_request_error", "Origin",
                   "cors_origin_not_allowed");
  }
  if (method != "GET" && method != "POST" && method != "OPTIONS") {
    throw ApiError(400, "Disallowed CORS method '" + std::string(method) + "'", "invalid_request_error",
                   "Access-Control-Request-Method", "cors_method_not_allowed");
  }
  Headers h = response_headers(origin);
  if (any_) h.emplace_back("Vary", "Origin");
  h.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  if (!request_headers.empty()) h.emplace_back("Access-Control-Allow-Headers", std::string(request_headers));
  h.emplace_back("Access-Control-Max-Age", "600");
  return h;
}

}  // namespace deepinfer::server
