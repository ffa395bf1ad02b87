// Checks of an HTTP request's headers before its body is read as an API request.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "server/api_error.h"

namespace deepinfer::server {

// "Authorization: Bearer KEY": the scheme case-insensitive (RFC 7235), spaces after it
// tolerated; the key compared in time that does not depend on how much of it matched.
bool bearer_matches(std::string_view header, const std::string& key);

// 405 for `path`, with "Allow: <allow>".
ApiError method_not_allowed(const std::string& allow, const std::string& path);

// Request bodies are JSON: a body declared as anything else (text/plain, a form) is refused
// (415) rather than parsed as JSON. No Content-Type at all is read as JSON.
void check_content_type(std::string_view value);

}  // namespace deepinfer::server
