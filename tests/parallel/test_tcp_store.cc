// TcpStore: set / get between a server and clients (threads and a forked process), a get that
// waits for a later set, a client that starts before the server, and the timeouts (a key that
// never appears, a server that is not there) with their messages.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "base/error.h"
#include "parallel/tcp_store.h"

namespace deepinfer {
namespace {

using std::chrono::milliseconds;

TEST(TcpStore, SetGetBothWays) {
  TcpStore server("", 0, true, milliseconds(5000));
  ASSERT_GT(server.port(), 0);
  server.set("nccl_id", std::string("\x00\x01\xff binary", 10));
  std::thread other([&] {
    TcpStore client("127.0.0.1", server.port(), false, milliseconds(5000));
    EXPECT_EQ(client.get("nccl_id"), std::string("\x00\x01\xff binary", 10));
    client.set("rank1", "ready");
    client.set("empty", "");
    EXPECT_EQ(client.get("empty"), "");
  });
  EXPECT_EQ(server.get("rank1"), "ready");
  other.join();
}

TEST(TcpStore, GetWaitsForALaterSet) {
  TcpStore server("", 0, true, milliseconds(5000));
  std::thread waiter([&] {
    TcpStore client("localhost", server.port(), false, milliseconds(5000));
    EXPECT_EQ(client.get("late"), "value");
  });
  std::this_thread::sleep_for(milliseconds(200));
  TcpStore setter("127.0.0.1", server.port(), false, milliseconds(5000));
  setter.set("late", "value");
  waiter.join();
}

TEST(TcpStore, ClientBeforeServerAndForkedProcess) {
  int port = 0;
  {
    TcpStore probe("", 0, true, milliseconds(1000));  // find a free port
    port = probe.port();
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int status = 1;
    try {
      TcpStore client("127.0.0.1", port, false, milliseconds(10000));  // retries until up
      client.set("from_child", "hello");
      status = client.get("from_parent") == "bye" ? 0 : 2;
    } catch (...) {
      status = 3;
    }
    _exit(status);
  }
  std::this_thread::sleep_for(milliseconds(300));  // the child is already trying to connect
  TcpStore server("", port, true, milliseconds(10000));
  EXPECT_EQ(server.get("from_child"), "hello");
  server.set("from_parent", "bye");
  int status = -1;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(TcpStore, KeyThatNeverAppearsTimesOut) {
  TcpStore server("", 0, true, milliseconds(5000));
  TcpStore client("127.0.0.1", server.port(), false, milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    client.get("missing");
    FAIL() << "get of a missing key returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDevice);
    const std::string what = e.what();
    EXPECT_NE(what.find("key 'missing' did not appear on 127.0.0.1:"), std::string::npos) << what;
    EXPECT_NE(what.find("within 0.3 s"), std::string::npos) << what;
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 3.0);
  std::string v;
  EXPECT_FALSE(server.wait("missing", milliseconds(50), &v));
  client.set("missing", "now");  // the connection still works after a timed-out get
  EXPECT_EQ(client.get("missing"), "now");
}

TEST(TcpStore, NoServerTimesOut) {
  int port = 0;
  {
    TcpStore probe("", 0, true, milliseconds(1000));
    port = probe.port();
  }
  try {
    TcpStore client("127.0.0.1", port, false, milliseconds(300));
    FAIL() << "connected to a closed port";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDevice);
    const std::string what = e.what();
    EXPECT_NE(what.find("could not connect to 127.0.0.1:" + std::to_string(port) +
                        " within 0.3 s"),
              std::string::npos)
        << what;
  }
  EXPECT_THROW(TcpStore("", 0, false, milliseconds(100)), Error);       // no address
  EXPECT_THROW(TcpStore("x", 70000, false, milliseconds(100)), Error);  // not a port
}

}  // namespace
}  // namespace deepinfer
