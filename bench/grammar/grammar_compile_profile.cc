// grammar_compile_profile: compile time of JSON schemas without a vocabulary (front end + automata,
// i.e. build_grammar), for profiling the compile tail with perf.
//
//   grammar_compile_profile [--repeat N] schema.json...
// Prints one line per schema: path, best and first time (ms) over N compilations, the budget's
// states, and the error if it is refused. Process-wide automaton memos stay warm after the first
// compilation of a schema, so "first" is the cold time and "best" the warm one.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/error.h"
#include "grammar/compile.h"

using namespace deepinfer;
using namespace deepinfer::grammar;

int main(int argc, char** argv) {
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::stoi(argv[++i]);
      continue;
    }
    std::ifstream in(a);
    std::stringstream ss;
    ss << in.rdbuf();
    GrammarSpec spec;
    spec.kind = "json_schema";
    spec.text = ss.str();
    double first = 0, best = 1e18;
    CompileUsage usage;
    std::string error;
    for (int r = 0; r < repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      try {
        build_grammar(spec, &usage);
      } catch (const Error& e) {
        error = e.what();
      }
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r == 0) first = ms;
      best = std::min(best, ms);
    }
    std::printf("%s first %.2f best %.2f states %lld %s\n", a.c_str(), first, best,
                static_cast<long long>(usage.states), error.substr(0, 120).c_str());
  }
  return 0;
}
