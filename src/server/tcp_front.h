// The server's own accept loop in front of the HTTP engine (libmicrohttpd), so that a client that
// half-closes its socket still gets its reply.
//
// libmicrohttpd reads the client's socket itself and closes the connection when a read returns
// end of stream, in any state after the request: a client that shuts down its write side after a
// complete request (HTTP/1.0-style clients, some proxies) never gets an answer to a request the
// application answers later. So the front accepts every TCP connection itself and hands the
// engine one end of a socket pair, relaying bytes both ways on one event-driven thread. A
// client's end of stream goes on to the engine only when no request is under way on the
// connection (none begun since the last answered one); otherwise it is held until the request is
// answered, and then passed on, so that the engine closes the connection after the reply.
//
// A half-close cannot be told from a client that left until something is written to it (a gone
// client answers a write with a reset). When the end of stream comes while an HTTP/1.1 request is
// being answered and nothing of its reply has been written yet, the front writes an interim
// `HTTP/1.1 100 Continue` (a 1xx response every HTTP/1.1 client must accept and skip): a client
// that is gone answers it with a reset, the front closes the pair, and the engine sees the
// hang-up at once (HttpExchange::client_gone, the completion callback), as before. Replies to
// HTTP/1.0 requests find a gone client when the reply is written.
//
// A connection the engine has closed is flushed to the client, then closed gracefully: the
// front shuts its write side and reads what the client still sends until it closes (at most a
// couple of seconds), so a client that sent more than was read still gets the reply, not a reset.
#pragma once

#include <sys/socket.h>

#include <functional>
#include <memory>

#include "rinfer/status.h"

namespace rinfer::server {

class TcpFront {
 public:
  // Hands the engine its end of a new connection's socket pair, with the client's address. The
  // engine owns the socket from then on, and has closed it when it returns false (refused).
  using Attach = std::function<bool(int engine_fd, const sockaddr* addr, socklen_t len)>;

  // Takes `listen_fd` (a listening TCP socket; the front closes it); run() starts serving it. A
  // client that does not take its bytes for io_timeout_s once the engine is done is cut.
  static Result<std::unique_ptr<TcpFront>> start(int listen_fd, unsigned io_timeout_s,
                                                 Attach attach);
  void run();
  ~TcpFront();  // stop()

  // From the engine's threads, by the engine's end of a connection: a complete request is being
  // answered (`http11`: the request is HTTP/1.1, so it may take an interim response); the
  // connection is done with its request (answered, refused or failed).
  void request_begun(int engine_fd, bool http11);
  void request_done(int engine_fd);

  // New connections are refused at once; open ones are still relayed.
  void stop_accepting();
  // After the engine closed its ends: what is buffered for clients is flushed (for at most a
  // couple of seconds), every socket is closed and the thread ends.
  void stop();

  struct State;

 private:
  explicit TcpFront(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace rinfer::server
