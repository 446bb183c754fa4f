// The HTTP layer of `rinfer serve`: a small C++ face on GNU libmicrohttpd (a Debian package),
// which parses HTTP/1.1, keeps connections alive and answers malformed requests itself.
//
// One HttpExchange per request. The handler gets it once the whole body has arrived and answers
// with respond(), either before it returns or later from any thread (the connection is suspended
// meanwhile, holding no thread); a streamed body (server-sent events) is pushed piece by piece,
// from any thread, and the connection wakes to send each piece. Connections are served by a few
// event-driven threads, so thousands of slow readers cost no threads.
//
// Connections are accepted by the server's own loop (TcpFront), which relays each to
// libmicrohttpd over a socket pair, so that a client that half-closes its socket after its
// request still gets the reply.
//
// Limits, each answered with a status before the handler sees the request: headers over
// max_header_bytes (431, by libmicrohttpd), more than max_header_count header fields (431), a body
// over max_body_bytes (413, as soon as Content-Length says so); a client silent for io_timeout_s
// while sending its request or reading the reply is disconnected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rinfer/status.h"

struct MHD_Connection;
struct MHD_Daemon;

namespace rinfer::server {

struct HttpLimits {
  size_t max_body_bytes = size_t{4} << 20;
  size_t max_header_bytes = size_t{32} << 10;  // request line and headers together
  unsigned max_header_count = 100;
  unsigned io_timeout_s = 30;  // a client silent this long is disconnected
  unsigned max_connections = 4096;
  unsigned threads = 2;  // event loops serving the connections
  // Non-empty: every response lets this origin read it (Access-Control-Allow-Origin; "*" for
  // any), for a browser front-end served from elsewhere. Empty: no CORS header.
  std::string cors_origin;
};

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // without the query
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;
  std::string remote;  // "127.0.0.1:51234"
  // The value of a header (name in lower case), or empty.
  std::string_view header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool stream = false;  // the body follows through HttpExchange::push (chunked)
};

class HttpExchange {
 public:
  const HttpRequest& request() const { return req_; }

  // The answer, once (later calls are ignored); from any thread. With response.stream the body
  // comes from push() and ends with finish().
  void respond(HttpResponse response);
  // A piece of a streamed body; ignored once the connection is gone.
  void push(std::string_view data);
  // The end of a streamed body (the final chunk). fail(): the connection is cut without it
  // (the client sees a truncated reply, not a complete one).
  void finish();
  void fail();

  // Whether the client is gone: the connection was closed (an error, a timeout, the end), or
  // the client hung up (its end of the socket is closed; checked with a zero-timeout poll, so a
  // waiting or suspended connection notices too). Thread-safe.
  bool client_gone();
  // The connection's socket while it is open (-1 after): for polling many at once. Once the
  // connection is done the number may be reused, but then on_close has run.
  int socket_fd();
  // Called once, on libmicrohttpd's thread, when the connection is done with this request for
  // any reason (answered, failed, timed out, the client gone). Set it before respond().
  void on_close(std::function<void()> fn);

  // Internal (http_server.cpp).
  struct Internal;
  explicit HttpExchange(HttpRequest req) : req_(std::move(req)) {}

 private:
  friend struct Internal;
  HttpRequest req_;
  std::string cors_;  // HttpLimits::cors_origin
  std::mutex mu_;
  MHD_Connection* conn_ = nullptr;  // null once the connection is done with the request
  int fd_ = -1;
  bool in_handler_ = true;  // the access handler is still running: respond() needs no wake-up
  bool suspended_ = false;
  bool has_response_ = false;  // respond() was called
  bool queued_ = false;        // the response went to libmicrohttpd
  HttpResponse response_;
  std::string pending_;  // streamed bytes not yet taken by the connection
  bool finished_ = false, failed_ = false;
  bool closed_ = false;
  std::function<void()> on_close_;
};

using HttpHandler = std::function<void(const std::shared_ptr<HttpExchange>&)>;
// Told of every request the connection is done with: its path and the status it was answered
// with (431 or 413 refused before the handler, 0 when none was sent).
using HttpObserver = std::function<void(const std::string& path, int status)>;

class TcpFront;

class HttpServer {
 public:
  // Binds host:port (port 0: any free one, see port()) and starts serving with `handler`.
  // A host that is not an IPv4 or IPv6 address, or a port in use, is an error naming it.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& host, int port,
                                                   const HttpLimits& limits, HttpHandler handler,
                                                   HttpObserver observer = {});
  ~HttpServer();  // stop()
  int port() const { return port_; }
  const HttpLimits& limits() const { return limits_; }
  // Stops accepting connections (the listening socket is shut down, and closed by stop());
  // connections open keep being served.
  void stop_accepting();
  // Closes everything. Every exchange must have its response finished (or failed) first.
  void stop();

  struct Internal;

 private:
  HttpServer() = default;
  MHD_Daemon* daemon_ = nullptr;
  std::unique_ptr<TcpFront> front_;  // accepts the connections and relays them to daemon_
  int port_ = 0;
  HttpLimits limits_;
  HttpHandler handler_;
  HttpObserver observer_;
};

}  // namespace rinfer::server
