// `deepinfer bench`'s overlap table: backend idle time between decode steps with overlap on
// and off, `concurrency` requests admitted at once; the window starts once every request has
// its first token (prefill done) and ends when they finish, so it covers decode steps only.
#pragma once

#include <cstdint>
#include <string>

namespace deepinfer {

struct EngineArgs;

// The markdown table (a heading line and one row per overlap setting).
std::string idle_table(const EngineArgs& base, int64_t concurrency, int64_t input_len, int64_t output_len,
                       uint64_t seed);

}  // namespace deepinfer
