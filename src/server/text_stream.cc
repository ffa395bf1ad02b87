#include "server/text_stream.h"

#include <algorithm>

namespace deepinfer::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase(stops_, std::string());
}

std::string StopMatcher::feed(std::string_view text) {
  if (hit_) return "";
  pending_.append(text);
  // The stop string that completes first wins (ties: the longer one, which starts earlier),
  // as when the text is checked token by token; the result does not depend on the split.
  size_t first = std::string::npos, first_end = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < first_end || (end == first_end && pos < first)) {
      first = pos;
      first_end = end;
    }
  }
  if (first != std::string::npos) {
    hit_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > keep; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return hit_ ? std::string() : out;
}

size_t complete_utf8_prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t i = s.size();
  size_t n_cont = 0;
  while (i > 0 && n_cont < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++n_cont;
  }
  if (i == 0) return n_cont == 0 ? 0 : s.size();  // no lead byte: invalid, pass through
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  size_t need = 0;
  if (lead >= 0xF8) {
    return s.size();  // not a lead byte: invalid, pass through
  } else if (lead >= 0xF0) {
    need = 3;
  } else if (lead >= 0xE0) {
    need = 2;
  } else if (lead >= 0xC0) {
    need = 1;
  } else {
    return s.size();  // ASCII (or stray continuation bytes): complete
  }
  return n_cont >= need ? s.size() : i - 1;
}

std::string Utf8Holdback::push(std::string_view bytes) {
  pending_.append(bytes);
  const size_t n = complete_utf8_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string Utf8Holdback::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace deepinfer::server
