// Shared pieces of the command-line helpers in tests/tools (and the tests that read their files):
// token-id list files and the common main().
#pragma once

#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace deepinfer::tools {

// One token-id list per non-empty line, ids separated by commas and/or spaces.
inline std::vector<std::vector<int32_t>> read_token_lists(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line)) {
    for (char& ch : line) {
      if (ch == ',') ch = ' ';
    }
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    int64_t v;
    while (ss >> v) ids.push_back(static_cast<int32_t>(v));
    if (!ss.eof()) throw std::runtime_error(path + ": not a list of token ids: " + line);
    if (!ids.empty()) out.push_back(std::move(ids));
  }
  return out;
}

// main() of a tool: run(argc, argv), an exception becomes "<name>: <what>" and exit status 1.
inline int tool_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace deepinfer::tools
