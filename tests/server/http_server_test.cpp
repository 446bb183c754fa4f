// The HTTP layer over libmicrohttpd, with raw sockets: answers given before and after the
// handler returns, streamed bodies, the limits answered before the handler, a hung-up client
// seen while its exchange waits, half-closed clients answered, and a server that stops
// accepting.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace rinfer::server {
namespace {

using namespace std::chrono_literals;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close early (413): what it sent is still read
    off += static_cast<size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// One request on its own connection (Connection: close): the whole response.
std::string exchange(int port, const std::string& raw) {
  const int fd = connect_to(port);
  if (fd < 0) return "(connect failed)";
  send_all(fd, raw);
  std::string r = read_all(fd);
  ::close(fd);
  return r;
}

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: " +
         "application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return -1;
  return std::stoi(response.substr(9, 3));
}

struct Fixture {
  std::unique_ptr<HttpServer> server;
  std::atomic<int> observed{0};
  std::vector<int> statuses;
  std::mutex mu;
};

std::unique_ptr<HttpServer> start(HttpHandler h, HttpLimits lim = {}, Fixture* f = nullptr) {
  lim.io_timeout_s = lim.io_timeout_s == 30 ? 2 : lim.io_timeout_s;
  auto s = HttpServer::start("127.0.0.1", 0, lim, std::move(h), [f](const std::string&, int st) {
    if (f == nullptr) return;
    std::lock_guard<std::mutex> lock(f->mu);
    f->statuses.push_back(st);
    f->observed.fetch_add(1);
  });
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(HttpServerTest, AnswersInTheHandlerAndLaterFromAnotherThread) {
  std::vector<std::thread> later;
  std::mutex mu;
  auto s = start([&](const std::shared_ptr<HttpExchange>& ex) {
    const HttpRequest& r = ex->request();
    if (r.path == "/now") {
      ex->respond(
          {200, "text/plain", "now:" + r.body + ":" + std::string(r.header("x-tag")), {}, false});
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    later.emplace_back([ex] {
      std::this_thread::sleep_for(50ms);
      ex->respond({201, "application/json", "{\"later\":true}", {{"X-Extra", "1"}}, false});
    });
  });
  ASSERT_NE(s, nullptr);
  std::string r = exchange(s->port(),
                           "POST /now HTTP/1.1\r\nHost: x\r\nX-Tag: t1\r\nConnection: "
                           "close\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("now:abc:t1"), std::string::npos) << r;
  r = exchange(s->port(), post("/later", "{}"));
  EXPECT_EQ(status_of(r), 201) << r;
  EXPECT_NE(r.find("X-Extra: 1"), std::string::npos) << r;
  EXPECT_NE(r.find("{\"later\":true}"), std::string::npos) << r;
  for (std::thread& t : later) t.join();
}

TEST(HttpServerTest, StreamsPiecesPushedFromAnotherThread) {
  std::vector<std::thread> producers;
  auto s = start([&](const std::shared_ptr<HttpExchange>& ex) {
    ex->respond({200, "text/event-stream", {}, {}, true});
    producers.emplace_back([ex] {
      for (int i = 0; i < 5; ++i) {
        ex->push("data: " + std::to_string(i) + "\n\n");
        std::this_thread::sleep_for(10ms);
      }
      ex->finish();
    });
  });
  ASSERT_NE(s, nullptr);
  const std::string r =
      exchange(s->port(), "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  size_t at = 0;
  for (int i = 0; i < 5; ++i) {
    at = r.find("data: " + std::to_string(i), at);
    ASSERT_NE(at, std::string::npos) << i << ": " << r;
  }
  EXPECT_NE(r.find("\r\n0\r\n\r\n"), std::string::npos) << "the final chunk: " << r;
  for (std::thread& t : producers) t.join();
}

TEST(HttpServerTest, AFailedStreamEndsWithoutTheFinalChunk) {
  std::vector<std::thread> producers;
  auto s = start([&](const std::shared_ptr<HttpExchange>& ex) {
    ex->respond({200, "text/event-stream", {}, {}, true});
    producers.emplace_back([ex] {
      ex->push("data: part\n\n");
      std::this_thread::sleep_for(20ms);
      ex->fail();
    });
  });
  ASSERT_NE(s, nullptr);
  const std::string r = exchange(s->port(), "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(r.find("data: part"), std::string::npos) << r;
  EXPECT_EQ(r.find("\r\n0\r\n\r\n"), std::string::npos) << r;
  for (std::thread& t : producers) t.join();
}

TEST(HttpServerTest, LimitsAreAnsweredBeforeTheHandler) {
  Fixture f;
  std::atomic<int> handled{0};
  HttpLimits lim;
  lim.max_body_bytes = 1000;
  lim.max_header_count = 10;
  lim.max_header_bytes = 4096;
  auto s = start(
      [&](const std::shared_ptr<HttpExchange>& ex) {
        handled.fetch_add(1);
        ex->respond({200, "text/plain", "ok", {}, false});
      },
      lim, &f);
  ASSERT_NE(s, nullptr);
  // A declared length over the limit: 413 at once, the body never read.
  std::string r =
      exchange(s->port(), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
  EXPECT_EQ(status_of(r), 413) << r;
  EXPECT_NE(r.find("\"error\""), std::string::npos) << r;
  // A chunked body that grows over the limit.
  std::string chunked =
      "POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) chunked += "1f4\r\n" + std::string(500, 'a') + "\r\n";
  chunked += "0\r\n\r\n";
  r = exchange(s->port(), chunked);
  EXPECT_EQ(status_of(r), 413) << r;
  // Too many header fields, and too many header bytes.
  std::string many = "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  for (int i = 0; i < 20; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  r = exchange(s->port(), many + "\r\n");
  EXPECT_EQ(status_of(r), 431) << r;
  r = exchange(s->port(), "GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'b') +
                              "\r\nConnection: close\r\n\r\n");
  EXPECT_GE(status_of(r), 400) << r;
  EXPECT_LT(status_of(r), 500) << r;
  // A malformed header line, an unparsable Content-Length, an unknown HTTP version.
  r = exchange(s->port(), "GET /x HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n");
  EXPECT_EQ(status_of(r), 400) << r;
  r = exchange(s->port(), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n");
  EXPECT_EQ(status_of(r), 400) << r;
  r = exchange(s->port(), "GET /x HTTP/9.9\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(r), 505) << r;
  EXPECT_EQ(handled.load(), 0);
  // And the server still serves.
  r = exchange(s->port(), "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(handled.load(), 1);
}

TEST(HttpServerTest, AStalledClientIsDisconnectedAndOthersAreServed) {
  auto s = start([](const std::shared_ptr<HttpExchange>& ex) {
    ex->respond({200, "text/plain", "ok", {}, false});
  });
  ASSERT_NE(s, nullptr);
  const int stalled = connect_to(s->port());
  send_all(stalled, "POST /x HTTP/1.1\r\nHost: x\r\nContent-");  // and nothing more
  const std::string r =
      exchange(s->port(), "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r;
  const auto t0 = std::chrono::steady_clock::now();
  read_all(stalled);  // returns when the server closes it (io_timeout_s 2)
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 8.0);
  ::close(stalled);
}

TEST(HttpServerTest, AHungUpClientIsSeenWhileItsExchangeWaits) {
  std::shared_ptr<HttpExchange> held;
  std::atomic<bool> got{false}, closed{false};
  auto s = start([&](const std::shared_ptr<HttpExchange>& ex) {
    held = ex;
    ex->on_close([&] { closed.store(true); });
    got.store(true);
  });
  ASSERT_NE(s, nullptr);
  const int fd = connect_to(s->port());
  send_all(fd, post("/wait", "{}"));
  for (int i = 0; i < 200 && !got.load(); ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(got.load());
  EXPECT_FALSE(held->client_gone());
  ::close(fd);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = held->client_gone();
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(gone);
  held->respond({200, "text/plain", "too late", {}, false});
  for (int i = 0; i < 400 && !closed.load(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(closed.load()) << "on_close runs once the connection is done";
}

// A handler that answers each request 150 ms later from another thread, whole or streamed in
// three pieces (path /stream).
struct LateAnswers {
  std::vector<std::thread> threads;
  std::mutex mu;
  HttpHandler handler() {
    return [this](const std::shared_ptr<HttpExchange>& ex) {
      std::lock_guard<std::mutex> lock(mu);
      threads.emplace_back([ex] {
        std::this_thread::sleep_for(150ms);
        if (ex->request().path != "/stream") {
          ex->respond(
              {200, "application/json", "{\"late\":\"" + ex->request().body + "\"}", {}, false});
          return;
        }
        ex->respond({200, "text/event-stream", {}, {}, true});
        for (int i = 0; i < 3; ++i) {
          std::this_thread::sleep_for(20ms);
          ex->push("data: " + std::to_string(i) + "\n\n");
        }
        ex->finish();
      });
    };
  }
  ~LateAnswers() {
    for (std::thread& t : threads) t.join();
  }
};

// Sends `raw`, shuts the write side down, and reads until the server closes: the bytes and the
// seconds it took.
std::pair<std::string, double> half_closed(int port, const std::string& raw) {
  const int fd = connect_to(port);
  if (fd < 0) return {"(connect failed)", 0};
  const auto t0 = std::chrono::steady_clock::now();
  send_all(fd, raw);
  ::shutdown(fd, SHUT_WR);
  std::string r = read_all(fd);
  ::close(fd);
  return {r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

TEST(HttpServerTest, AHalfClosedClientGetsTheReplyGivenLater) {
  LateAnswers late;
  auto s = start(late.handler());
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 20; ++i) {
    // HTTP/1.1 keep-alive: the interim 100 (the probe for a gone client) comes first, then the
    // reply, and the connection closes after it, not after the idle timeout.
    const std::string body = "b" + std::to_string(i);
    auto [r, secs] = half_closed(s->port(), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                                std::to_string(body.size()) + "\r\n\r\n" + body);
    EXPECT_EQ(r.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ", 0), 0u) << i << ": " << r;
    EXPECT_NE(r.find("{\"late\":\"" + body + "\"}"), std::string::npos) << i << ": " << r;
    EXPECT_LT(secs, 1.5) << i;
  }
  // HTTP/1.0 takes no interim response: only the reply.
  auto [r10, secs10] =
      half_closed(s->port(), "POST /x HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\n\r\nzz");
  EXPECT_NE(r10.find(" 200 OK\r\n"), std::string::npos) << r10;
  EXPECT_EQ(r10.find("100 Continue"), std::string::npos) << r10;
  EXPECT_NE(r10.find("{\"late\":\"zz\"}"), std::string::npos) << r10;
  EXPECT_LT(secs10, 1.5);
  // A streamed reply arrives whole, with its final chunk.
  auto [rs, secss] = half_closed(s->port(), "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(rs.find("HTTP/1.1 200 "), std::string::npos) << rs;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(rs.find("data: " + std::to_string(i)), std::string::npos) << i << ": " << rs;
  }
  EXPECT_NE(rs.find("\r\n0\r\n\r\n"), std::string::npos) << "the final chunk: " << rs;
  EXPECT_LT(secss, 1.5);
}

TEST(HttpServerTest, AHalfClosedIdleConnectionIsClosedAtOnce) {
  LateAnswers late;
  auto s = start(late.handler());
  ASSERT_NE(s, nullptr);
  // Nothing sent: closed at once, not after the idle timeout (2 s here).
  auto [r, secs] = half_closed(s->port(), "");
  EXPECT_EQ(r, "");
  EXPECT_LT(secs, 1.0);
  // A request answered at once on a kept-alive connection, then a half-close: the connection
  // ends at once after the reply.
  const int fd = connect_to(s->port());
  ASSERT_GE(fd, 0);
  send_all(fd, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nq");
  std::string got;
  char buf[4096];
  while (got.find("{\"late\":\"q\"}") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  const auto t0 = std::chrono::steady_clock::now();
  ::shutdown(fd, SHUT_WR);
  EXPECT_EQ(read_all(fd), "");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  ::close(fd);
}

TEST(HttpServerTest, ObservesEveryStatusAndStopsAccepting) {
  Fixture f;
  auto s = start(
      [](const std::shared_ptr<HttpExchange>& ex) {
        ex->respond({ex->request().path == "/missing" ? 404 : 200, "text/plain", "x", {}, false});
      },
      {}, &f);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(
      status_of(exchange(s->port(), "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
      200);
  EXPECT_EQ(status_of(exchange(s->port(),
                               "GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
            404);
  for (int i = 0; i < 200 && f.observed.load() < 2; ++i) std::this_thread::sleep_for(5ms);
  {
    std::lock_guard<std::mutex> lock(f.mu);
    std::vector<int> got = f.statuses;
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, (std::vector<int>{200, 404}));
  }
  s->stop_accepting();
  EXPECT_EQ(connect_to(s->port()), -1);
  s->stop();
}

TEST(HttpServerTest, BadHostOrBusyPortIsAnError) {
  auto h = [](const std::shared_ptr<HttpExchange>&) {};
  auto bad = HttpServer::start("not-an-address", 0, {}, h);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'not-an-address' is not an IPv4 or IPv6"),
            std::string::npos);
  auto a = HttpServer::start("127.0.0.1", 0, {}, h);
  ASSERT_TRUE(a.ok());
  auto b = HttpServer::start("127.0.0.1", (*a)->port(), {}, h);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("cannot listen on 127.0.0.1:"), std::string::npos)
      << b.status().message();
}

}  // namespace
}  // namespace rinfer::server
