// Speculative decoding in `deepinfer bench` (in process): the engine's counters over one run
// and the block printed after vLLM's result block while speculative decoding is on.
#pragma once

#include <string>

#include "engine/engine.h"

namespace deepinfer {

// The speculative counters of `after` less those of `before` (the warm-up), per position too;
// busy_seconds likewise (draft_time_share() of the run).
EngineStats spec_delta(const EngineStats& after, const EngineStats& before);

// The block (vLLM's "Speculative Decoding" section of bench serve, plus deepinfer's own lines):
// acceptance rate, mean acceptance length (tokens committed per verification), drafts, draft
// and accepted tokens, per-position acceptance, verified tokens per step, draft time share.
// Empty while off (no drafts per verification).
std::string format_spec_summary(const EngineStats& run);

}  // namespace deepinfer
