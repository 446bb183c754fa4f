#include "server/http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstring>
#include <exception>

#include "core/error.h"
#include "server/tcp_front.h"

namespace rinfer::server {

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

// libmicrohttpd's callbacks, with access to the exchange's state.
struct HttpExchange::Internal {
  static void attach(HttpExchange& ex, MHD_Connection* c, int fd, const std::string& cors) {
    std::lock_guard<std::mutex> lock(ex.mu_);
    ex.conn_ = c;
    ex.fd_ = fd;
    ex.cors_ = cors;
  }
  // After the handler returned: the response when there is one, else the connection waits.
  static MHD_Result after_handler(HttpExchange& ex, MHD_Connection* c);
  static ssize_t read_stream(HttpExchange& ex, char* buf, size_t max);
  static void closed(HttpExchange& ex);
  static int status(HttpExchange& ex) {
    std::lock_guard<std::mutex> lock(ex.mu_);
    return ex.queued_ ? ex.response_.status : 0;
  }
};

namespace {

// The resume half of suspend: called with ex.mu_ held.
void wake_locked(bool& suspended, MHD_Connection* conn) {
  if (suspended && conn != nullptr) {
    suspended = false;
    MHD_resume_connection(conn);
  }
}

// The CORS headers of a response when the server allows an origin (HttpLimits::cors_origin).
void add_cors(MHD_Response* r, const std::string& cors) {
  if (cors.empty()) return;
  MHD_add_response_header(r, "Access-Control-Allow-Origin", cors.c_str());
  if (cors != "*") MHD_add_response_header(r, "Vary", "Origin");
}

MHD_Result queue_plain(MHD_Connection* c, int status, std::string_view type, std::string_view body,
                       const std::vector<std::pair<std::string, std::string>>& headers,
                       const std::string& cors) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                    MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", std::string(type).c_str());
  for (const auto& [k, v] : headers) MHD_add_response_header(r, k.c_str(), v.c_str());
  add_cors(r, cors);
  const MHD_Result ok = MHD_queue_response(c, static_cast<unsigned>(status), r);
  MHD_destroy_response(r);
  return ok;
}

// An error answered before the handler sees the request, in OpenAI's error shape.
MHD_Result queue_error(MHD_Connection* c, int status, std::string_view message,
                       const std::string& cors) {
  std::string escaped;
  for (char ch : message) {
    if (ch == '"' || ch == '\\') escaped += '\\';
    escaped += ch;
  }
  const std::string body = fmt::format(
      R"({{"error":{{"message":"{}","type":"invalid_request_error","param":null,"code":null}}}})",
      escaped);
  return queue_plain(c, status, "application/json", body, {}, cors);
}

ssize_t stream_reader(void* cls, uint64_t /*pos*/, char* buf, size_t max) {
  return HttpExchange::Internal::read_stream(*static_cast<HttpExchange*>(cls), buf, max);
}

}  // namespace

MHD_Result HttpExchange::Internal::after_handler(HttpExchange& ex, MHD_Connection* c) {
  std::lock_guard<std::mutex> lock(ex.mu_);
  ex.in_handler_ = false;
  if (!ex.has_response_) {
    ex.suspended_ = true;
    MHD_suspend_connection(c);
    return MHD_YES;
  }
  if (ex.queued_) return MHD_YES;
  ex.queued_ = true;
  const HttpResponse& r = ex.response_;
  if (!r.stream) return queue_plain(c, r.status, r.content_type, r.body, r.headers, ex.cors_);
  MHD_Response* resp =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, &ex, nullptr);
  if (resp == nullptr) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", r.content_type.c_str());
  for (const auto& [k, v] : r.headers) MHD_add_response_header(resp, k.c_str(), v.c_str());
  add_cors(resp, ex.cors_);
  const MHD_Result ok = MHD_queue_response(c, static_cast<unsigned>(r.status), resp);
  MHD_destroy_response(resp);
  return ok;
}

ssize_t HttpExchange::Internal::read_stream(HttpExchange& ex, char* buf, size_t max) {
  std::lock_guard<std::mutex> lock(ex.mu_);
  if (!ex.pending_.empty()) {
    const size_t n = std::min(max, ex.pending_.size());
    std::memcpy(buf, ex.pending_.data(), n);
    ex.pending_.erase(0, n);
    return static_cast<ssize_t>(n);
  }
  if (ex.failed_) return MHD_CONTENT_READER_END_WITH_ERROR;
  if (ex.finished_) return MHD_CONTENT_READER_END_OF_STREAM;
  ex.suspended_ = true;  // push() or finish() resumes it
  MHD_suspend_connection(ex.conn_);
  return 0;
}

void HttpExchange::Internal::closed(HttpExchange& ex) {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(ex.mu_);
    ex.conn_ = nullptr;
    ex.fd_ = -1;
    ex.closed_ = true;
    ex.suspended_ = false;
    fn = std::move(ex.on_close_);
  }
  if (fn) fn();
}

void HttpExchange::respond(HttpResponse response) {
  std::lock_guard<std::mutex> lock(mu_);
  if (has_response_ || closed_) return;
  has_response_ = true;
  response_ = std::move(response);
  if (!in_handler_) wake_locked(suspended_, conn_);
}

void HttpExchange::push(std::string_view data) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || finished_ || failed_) return;
  pending_.append(data);
  if (queued_) wake_locked(suspended_, conn_);
}

void HttpExchange::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || finished_ || failed_) return;
  finished_ = true;
  if (queued_) wake_locked(suspended_, conn_);
}

void HttpExchange::fail() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || finished_ || failed_) return;
  failed_ = true;
  pending_.clear();
  if (queued_) wake_locked(suspended_, conn_);
}

bool HttpExchange::client_gone() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return true;
  if (fd_ < 0) return false;
  // The socket stays open while conn_ is set (libmicrohttpd closes it after the completion
  // callback, which takes this lock), so fd_ cannot be another connection's.
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

int HttpExchange::socket_fd() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_ ? -1 : fd_;
}

void HttpExchange::on_close(std::function<void()> fn) {
  bool run_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      run_now = true;
    } else {
      on_close_ = std::move(fn);
    }
  }
  if (run_now && fn) fn();
}

// The state of one request while libmicrohttpd reads it.
struct PendingRequest {
  HttpRequest req;
  bool too_large = false;
  int early_status = 0;              // refused before the handler
  std::shared_ptr<HttpExchange> ex;  // set when the handler has it
};

struct HttpServer::Internal {
  static MHD_Result access(void* cls, MHD_Connection* c, const char* url, const char* method,
                           const char* /*version*/, const char* upload, size_t* upload_size,
                           void** req_cls);
  static void completed(void* cls, MHD_Connection* c, void** req_cls,
                        MHD_RequestTerminationCode /*why*/);
  static void log(void* /*cls*/, const char* fmt, va_list ap) {
    char buf[512];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    std::string line(buf);
    while (!line.empty() && line.back() == '\n') line.pop_back();
    spdlog::debug("http: {}", line);
  }
};

namespace {

int fd_of(MHD_Connection* c) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  return info != nullptr ? info->connect_fd : -1;
}

}  // namespace

void HttpServer::Internal::completed(void* cls, MHD_Connection* c, void** req_cls,
                                     MHD_RequestTerminationCode /*why*/) {
  auto* server = static_cast<HttpServer*>(cls);
  if (server->front_) server->front_->request_done(fd_of(c));
  auto* p = static_cast<PendingRequest*>(*req_cls);
  if (p == nullptr) return;
  int status = p->early_status;
  std::string path = p->req.path;
  if (p->ex) {
    path = p->ex->request().path;
    status = HttpExchange::Internal::status(*p->ex);
    HttpExchange::Internal::closed(*p->ex);
  }
  if (server->observer_) server->observer_(path, status);
  delete p;
  *req_cls = nullptr;
}

namespace {

MHD_Result collect_header(void* cls, MHD_ValueKind /*kind*/, const char* key, const char* value) {
  auto* req = static_cast<HttpRequest*>(cls);
  std::string name = key != nullptr ? key : "";
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  req->headers.emplace_back(std::move(name), value != nullptr ? value : "");
  return MHD_YES;
}

std::string remote_of(MHD_Connection* c) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (info == nullptr || info->client_addr == nullptr) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  const sockaddr* sa = info->client_addr;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, ntohs(in6->sin6_port));
  }
  return "?";
}

}  // namespace

MHD_Result HttpServer::Internal::access(void* cls, MHD_Connection* c, const char* url,
                                        const char* method, const char* version, const char* upload,
                                        size_t* upload_size, void** req_cls) {
  auto* server = static_cast<HttpServer*>(cls);
  const HttpLimits& lim = server->limits_;
  auto* p = static_cast<PendingRequest*>(*req_cls);
  if (p == nullptr) {  // the headers are in
    p = new PendingRequest();
    *req_cls = p;
    p->req.method = method != nullptr ? method : "";
    p->req.path = url != nullptr ? url : "";
    MHD_get_connection_values(c, MHD_HEADER_KIND, collect_header, &p->req);
    if (p->req.headers.size() > lim.max_header_count) {
      p->early_status = 431;
      return queue_error(c, 431,
                         fmt::format("the request has {} header fields; at most {} are accepted",
                                     p->req.headers.size(), lim.max_header_count),
                         lim.cors_origin);
    }
    const std::string_view length = p->req.header("content-length");
    if (!length.empty()) {
      uint64_t n = 0;
      const auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
      if (ec == std::errc() && end == length.data() + length.size() && n > lim.max_body_bytes) {
        p->early_status = 413;
        return queue_error(
            c, 413,
            fmt::format("the body has {} bytes; at most {} are accepted", n, lim.max_body_bytes),
            lim.cors_origin);
      }
    }
    p->req.remote = remote_of(c);
    return MHD_YES;
  }
  if (p->ex) return HttpExchange::Internal::after_handler(*p->ex, c);  // woken
  if (*upload_size > 0) {                                              // a piece of the body
    if (!p->too_large && p->req.body.size() + *upload_size <= lim.max_body_bytes) {
      p->req.body.append(upload, *upload_size);
    } else {
      p->too_large = true;
      p->req.body.clear();
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (p->too_large) {
    p->early_status = 413;
    return queue_error(c, 413,
                       fmt::format("the body is over the limit of {} bytes", lim.max_body_bytes),
                       lim.cors_origin);
  }
  p->ex = std::make_shared<HttpExchange>(std::move(p->req));
  const int fd = fd_of(c);
  HttpExchange::Internal::attach(*p->ex, c, fd, lim.cors_origin);
  if (server->front_) {
    server->front_->request_begun(fd, version != nullptr && std::strcmp(version, "HTTP/1.1") == 0);
  }
  try {
    server->handler_(p->ex);
  } catch (const std::exception& e) {
    spdlog::error("http: the handler of {} {} threw: {}", p->ex->request().method,
                  p->ex->request().path, e.what());
    HttpResponse r;
    r.status = 500;
    r.body =
        R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})";
    p->ex->respond(std::move(r));
  }
  return HttpExchange::Internal::after_handler(*p->ex, c);
}

namespace {

// A listening socket on host:port, or the error naming them.
Result<int> listen_on(const std::string& host, int port) {
  if (port < 0 || port > 65535) return invalid_argument("--port {} is not in [0, 65535]", port);
  sockaddr_storage ss{};
  socklen_t len = 0;
  const std::string h = host == "localhost" ? "127.0.0.1" : host;
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, h.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, h.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return invalid_argument("--host '{}' is not an IPv4 or IPv6 address", host);
  }
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error("socket: {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 1024) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot listen on {}:{}: {}", host, port, std::strerror(err));
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& host, int port,
                                                      const HttpLimits& limits, HttpHandler handler,
                                                      HttpObserver observer) {
  if (limits.threads < 1 || limits.max_connections < 1 || limits.max_header_bytes < 1024) {
    return invalid_argument(
        "http limits: threads {} and connections {} must be >= 1, header bytes {} >= 1024",
        limits.threads, limits.max_connections, limits.max_header_bytes);
  }
  RINFER_ASSIGN_OR_RETURN(const int fd, listen_on(host, port));
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->limits_ = limits;
  s->handler_ = std::move(handler);
  s->observer_ = std::move(observer);
  s->port_ = bound_port(fd);
  // No listening socket: TcpFront accepts and hands each connection over (MHD_add_connection;
  // the inter-thread channel wakes the pool for it).
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                   MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
  s->daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Internal::access, s.get(), MHD_OPTION_THREAD_POOL_SIZE,
      limits.threads, MHD_OPTION_CONNECTION_TIMEOUT, limits.io_timeout_s,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, limits.max_header_bytes, MHD_OPTION_CONNECTION_LIMIT,
      limits.max_connections, MHD_OPTION_NOTIFY_COMPLETED, &Internal::completed, s.get(),
      MHD_OPTION_EXTERNAL_LOGGER, &Internal::log, nullptr, MHD_OPTION_END);
  if (s->daemon_ == nullptr) {
    ::close(fd);
    return io_error("cannot start the HTTP server on {}:{}", host, port);
  }
  MHD_Daemon* daemon = s->daemon_;
  auto front = TcpFront::start(fd, limits.io_timeout_s,
                               [daemon](int engine_fd, const sockaddr* addr, socklen_t len) {
                                 return MHD_add_connection(daemon, engine_fd, addr, len) == MHD_YES;
                               });
  if (!front.ok()) {
    ::close(fd);
    return front.status();
  }
  s->front_ = std::move(front).value();
  s->front_->run();
  return s;
}

void HttpServer::stop_accepting() {
  if (front_) front_->stop_accepting();
}

void HttpServer::stop() {
  if (daemon_ == nullptr) return;
  if (front_) front_->stop_accepting();
  MHD_stop_daemon(daemon_);  // closes its ends of the connections
  daemon_ = nullptr;
  if (front_) front_->stop();  // flushes what the clients have not taken yet
  front_.reset();
}

HttpServer::~HttpServer() { stop(); }

}  // namespace rinfer::server
