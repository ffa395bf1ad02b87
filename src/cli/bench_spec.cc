#include "cli/bench_spec.h"

#include <cstdio>
#include <sstream>

namespace deepinfer {

EngineStats spec_delta(const EngineStats& after, const EngineStats& before) {
  EngineStats d = after;
  d.n_verifications -= before.n_verifications;
  d.n_drafts_verified -= before.n_drafts_verified;
  d.n_drafts_accepted -= before.n_drafts_accepted;
  for (size_t i = 0; i < d.accepted_at.size() && i < before.accepted_at.size(); ++i) {
    d.accepted_at[i] -= before.accepted_at[i];
    d.verified_at[i] -= before.verified_at[i];
  }
  d.n_verify_steps -= before.n_verify_steps;
  d.n_verified_tokens -= before.n_verified_tokens;
  d.draft_seconds -= before.draft_seconds;
  d.busy_seconds -= before.busy_seconds;
  return d;
}

namespace {

void line(std::ostringstream& o, const char* label, double value, const char* fmt = "%.2f") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  char row[128];
  std::snprintf(row, sizeof(row), "%-41s%s\n", label, buf);
  o << row;
}

}  // namespace

std::string format_spec_summary(const EngineStats& s) {
  if (s.accepted_at.empty()) return "";
  std::ostringstream o;
  o << "---------------Speculative Decoding---------------\n";
  line(o, "Acceptance rate (%):",
       s.n_drafts_verified > 0 ? 100.0 * double(s.n_drafts_accepted) / double(s.n_drafts_verified) : 0.0);
  line(o, "Acceptance length:", s.mean_acceptance_length());
  line(o, "Drafts:", double(s.n_verifications), "%.0f");
  line(o, "Draft tokens:", double(s.n_drafts_verified), "%.0f");
  line(o, "Accepted tokens:", double(s.n_drafts_accepted), "%.0f");
  std::string per_pos;
  for (size_t i = 0; i < s.accepted_at.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.2f", i ? ", " : "", 100.0 * s.acceptance_at(i));
    per_pos += buf;
  }
  char row[512];
  std::snprintf(row, sizeof(row), "%-41s%s\n", "Per-position acceptance (%):", per_pos.c_str());
  o << row;
  line(o, "Verified tokens per step:", s.verified_tokens_per_step());
  line(o, "Draft time share (%):", 100.0 * s.draft_time_share());
  o << "==================================================\n";
  return o.str();
}

}  // namespace deepinfer
