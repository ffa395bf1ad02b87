// CORS: cross-origin access for browsers (`deepinfer serve --allowed-origins`), as vLLM's
// server does it (Starlette's CORS middleware with every method and header allowed, no
// credentials). Off when no origin is allowed: then no response carries CORS headers and
// OPTIONS is an ordinary (refused) method.
// On: a request whose Origin is allowed gets Access-Control-Allow-Origin (the origin itself,
// with Vary: Origin, or "*" when every origin is allowed); a preflight (OPTIONS with Origin and
// Access-Control-Request-Method) is answered 200 on any path without authentication, with the
// allowed methods (GET, POST, OPTIONS), the requested headers and a max age; a preflight from
// an origin not allowed, or for another method, is refused (400).
// Thread-safety: immutable after construction.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer::server {

// "--allowed-origins" text: a JSON list ('["*"]', '["http://a.example"]', vLLM's form) or
// comma-separated origins. Empty text: none. Throws Error on a malformed list or origin.
std::vector<std::string> parse_allowed_origins(const std::string& text);

class CorsPolicy {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  CorsPolicy() = default;
  explicit CorsPolicy(std::vector<std::string> origins);
  bool enabled() const { return !origins_.empty(); }
  bool allows(std::string_view origin) const;
  // The headers for a response to a request from `origin` ("": none sent). Empty when off or
  // not allowed.
  Headers response_headers(std::string_view origin) const;
  // A preflight's response headers; throws ApiError 400 when refused.
  Headers preflight(std::string_view origin, std::string_view method, std::string_view request_headers) const;

 private:
  std::vector<std::string> origins_;
  bool any_ = false;
};

}  // namespace deepinfer::server
