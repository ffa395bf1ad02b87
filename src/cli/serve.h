// `deepinfer serve` (see serve_usage()).
#pragma once

namespace deepinfer {

void serve_usage();
int cmd_serve(int argc, char** argv);

}  // namespace deepinfer
