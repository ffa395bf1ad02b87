// ApiError: a request the server refuses, in the OpenAI error format
//   {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "..." | null}}
// with its HTTP status. Thrown by request parsing, caught by the HTTP session.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type, std::string param = "",
           std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)),
        param(std::move(param)), code(std::move(code)) {}

  int status;
  std::string type;   // "invalid_request_error", "authentication_error", ...
  std::string param;  // the offending field, "" for none
  std::string code;   // "" for none
  // Response headers that belong to the refusal (Allow for 405, WWW-Authenticate for 401).
  std::vector<std::pair<std::string, std::string>> headers;

  // The response body (JSON text).
  std::string body() const;
};

inline ApiError bad_request(std::string message, std::string param = "") {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param));
}

}  // namespace deepinfer::server
