// (being written) peak host RSS of the streaming loader on a synthetic full-size checkpoint.
#include <gtest/gtest.h>
