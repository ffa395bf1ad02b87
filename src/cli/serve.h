// `deepinfer serve`: the OpenAI-compatible HTTP server over the batched Engine.
#pragma once

#include <string>

namespace deepinfer {

// The help text (`deepinfer serve --help`): every flag with its default.
std::string serve_usage();
int cmd_serve(int argc, char** argv);

}  // namespace deepinfer
