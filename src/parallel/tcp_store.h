// TcpStore: a minimal key-value rendezvous over TCP for launches without MPI (torchrun-style
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT): rank 0 serves the store on MASTER_PORT, the
// other ranks connect to MASTER_ADDR:MASTER_PORT. Used to hand NCCL's unique id from rank 0 to
// the others (parallel/nccl_communicator.h); usable by anything else that needs to meet.
//
// Every operation has a deadline (the store's timeout): connecting retries until it, get()
// waits for the key until it; on expiry Error(kDevice) names the address, the key and the
// timeout. POSIX sockets only. The server keeps its data in memory and serves each client on its
// own thread; it stops when the server-side TcpStore is destroyed, so rank 0 must keep it alive
// until the others have what they need.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace deepinfer {

class TcpStore {
 public:
  // is_server: listen on `port` of all interfaces (port 0: an ephemeral port, see port());
  // else connect to host:port.
  TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits up to timeout() for the key to be set, then returns its value.
  std::string get(const std::string& key);
  // Like get() but with its own timeout; false when the key did not appear in time.
  bool wait(const std::string& key, std::chrono::milliseconds timeout, std::string* value);

  int port() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Server;
  std::string address() const;

  std::string host_;
  int port_ = 0;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;  // rank 0
  int fd_ = -1;                     // the others: connection to the server
};

}  // namespace deepinfer
