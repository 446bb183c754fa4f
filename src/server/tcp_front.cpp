#include "server/tcp_front.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace rinfer::server {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr size_t kBuffer = size_t{64} << 10;  // bytes held per direction before reading stops
constexpr auto kLinger = 2s;                  // reading a client's leftovers after our side is shut
constexpr auto kFlushAtStop = 2s;             // flushing replies once the engine has stopped
constexpr std::string_view kProbe = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

struct TcpFront::State {
  // One side of a connection, the epoll tag of its socket.
  struct Conn;
  struct End {
    Conn* conn;
    bool inner;  // the front's end of the pair (else the client's TCP socket)
  };
  struct Conn {
    int client = -1;  // the TCP socket
    int inner = -1;   // the front's end of the pair
    int engine = -1;  // the engine's end: a number, the key of the engine's calls
    End ends[2] = {{this, false}, {this, true}};
    std::string up, down;     // bytes for the engine, for the client
    bool client_eof = false;  // the client shut its write side
    bool engine_eof = false;  // the engine closed its end (inner is closed then)
    bool eof_passed = false;  // the client's end of stream went on to the engine
    bool lingering = false;   // all sent and our side shut: reading leftovers until it closes
    bool dead = false;
    Clock::time_point deadline = Clock::time_point::max();  // cut then (lingering, flushing)
    // The request under way, as the engine tells it.
    bool handling = false, http11 = false, probed = false;
    size_t down_since_begun = 0;  // reply bytes since the request was begun
    size_t fed = 0;               // bytes to the engine since the last request was done
  };

  int listen = -1, ep = -1, wake = -1;
  unsigned io_timeout_s = 30;
  Attach attach;
  std::thread thread;

  std::mutex mu;  // everything below, and every Conn
  std::unordered_map<Conn*, std::unique_ptr<Conn>> conns;
  std::unordered_map<int, Conn*> by_engine;
  std::vector<std::unique_ptr<Conn>> graveyard;  // closed this round, freed after it
  std::vector<int> todo;                         // engine fds whose request the engine finished
  bool stop_accept = false, listen_closed = false, stopping = false;
  Clock::time_point stop_by = Clock::time_point::max();
  Clock::time_point accept_again = Clock::time_point::max();  // after running out of fds
  int listen_tag = 0, wake_tag = 0;                           // epoll tags

  void poke() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake, &one, sizeof one);
  }

  void interest(int fd, void* tag, uint32_t events, int op = EPOLL_CTL_MOD) {
    epoll_event ev{};
    ev.events = events;
    ev.data.ptr = tag;
    ::epoll_ctl(ep, op, fd, &ev);
  }

  // The events each socket of `c` waits for, from its state.
  void update(Conn& c) {
    if (c.dead) return;
    uint32_t ce = 0;
    if (c.lingering || (!c.client_eof && !c.engine_eof && c.up.size() < kBuffer)) ce |= EPOLLIN;
    if (!c.down.empty()) ce |= EPOLLOUT;
    interest(c.client, &c.ends[0], ce);
    if (c.inner >= 0) {
      uint32_t ie = 0;
      if (c.down.size() < kBuffer) ie |= EPOLLIN;
      if (!c.up.empty()) ie |= EPOLLOUT;
      interest(c.inner, &c.ends[1], ie);
    }
  }

  void close_conn(Conn& c) {
    if (c.dead) return;
    c.dead = true;
    ::epoll_ctl(ep, EPOLL_CTL_DEL, c.client, nullptr);
    ::close(c.client);
    if (c.inner >= 0) {
      ::epoll_ctl(ep, EPOLL_CTL_DEL, c.inner, nullptr);
      ::close(c.inner);  // a request under way sees its client hang up
    }
    auto it = by_engine.find(c.engine);
    if (it != by_engine.end() && it->second == &c) by_engine.erase(it);
    auto own = conns.find(&c);
    graveyard.push_back(std::move(own->second));
    conns.erase(own);
  }

  // Everything is sent: shut our side and read what the client still sends until it closes.
  void linger(Conn& c) {
    if (c.client_eof) return close_conn(c);
    ::shutdown(c.client, SHUT_WR);
    c.lingering = true;
    c.deadline = Clock::now() + kLinger;
  }

  void engine_closed(Conn& c) {
    c.engine_eof = true;
    ::epoll_ctl(ep, EPOLL_CTL_DEL, c.inner, nullptr);
    ::close(c.inner);
    c.inner = -1;
    c.up.clear();
    if (c.down.empty()) return linger(c);
    c.deadline = Clock::now() + std::chrono::seconds(io_timeout_s);
  }

  void pass_eof(Conn& c) {
    if (c.eof_passed || c.inner < 0) return;
    c.eof_passed = true;
    ::shutdown(c.inner, SHUT_WR);
  }

  // The client shut its write side: pass it on when no request is under way; probe a client
  // whose request waits for a reply (a gone one answers with a reset).
  void client_ended(Conn& c) {
    c.client_eof = true;
    if (c.lingering) return close_conn(c);
    if (c.engine_eof) return;
    if (!c.handling && c.fed == 0 && c.up.empty()) return pass_eof(c);
    probe(c);
  }

  void probe(Conn& c) {
    if (!c.client_eof || !c.handling || !c.http11 || c.probed || c.down_since_begun > 0) return;
    c.probed = true;
    c.down.append(kProbe);
  }

  void on_client(Conn& c, uint32_t events) {
    if ((events & EPOLLERR) != 0) return close_conn(c);
    if ((events & EPOLLIN) != 0) {
      char buf[16384];
      for (;;) {
        const bool room = c.lingering || c.up.size() < kBuffer;
        if (!room || c.client_eof) break;
        const ssize_t n = ::recv(c.client, buf, sizeof buf, 0);
        if (n > 0) {
          if (!c.lingering && !c.engine_eof) c.up.append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0) {
          client_ended(c);
          if (c.dead) return;
          break;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return close_conn(c);
        break;
      }
    }
    if ((events & EPOLLHUP) != 0 && (events & EPOLLIN) == 0) return close_conn(c);
    if (c.inner >= 0 && !c.up.empty()) flush_up(c);
    flush_down(c);
  }

  void flush_down(Conn& c) {
    while (!c.dead && !c.down.empty()) {
      const ssize_t n = ::send(c.client, c.down.data(), c.down.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.down.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      return close_conn(c);  // the client is gone (a reset, a broken pipe)
    }
    if (!c.dead && c.engine_eof && c.down.empty() && !c.lingering) linger(c);
  }

  void on_inner(Conn& c, uint32_t events) {
    const bool hup = (events & (EPOLLHUP | EPOLLERR)) != 0;  // read it all: it fires until then
    if (hup || (events & EPOLLIN) != 0) {
      char buf[16384];
      while (hup || c.down.size() < kBuffer) {
        const ssize_t n = ::recv(c.inner, buf, sizeof buf, 0);
        if (n > 0) {
          c.down.append(buf, static_cast<size_t>(n));
          c.down_since_begun += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        engine_closed(c);  // the end of stream, or an error: the engine is done with it
        break;
      }
    }
    if (!c.dead && c.inner >= 0 && !c.up.empty() && (events & EPOLLOUT) != 0) flush_up(c);
    flush_down(c);
  }

  void flush_up(Conn& c) {
    while (!c.up.empty()) {
      const ssize_t n = ::send(c.inner, c.up.data(), c.up.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.up.erase(0, static_cast<size_t>(n));
        c.fed += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.up.clear();  // the engine is closing; its end of stream comes with the next read
      return;
    }
  }

  void accept_all(std::unique_lock<std::mutex>& lock) {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd =
          ::accept4(listen, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          spdlog::warn("http: cannot accept a connection: {}", std::strerror(errno));
          interest(listen, &listen_tag, 0);
          accept_again = Clock::now() + 100ms;
        }
        return;
      }
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
        spdlog::warn("http: cannot relay a connection: socketpair: {}", std::strerror(errno));
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto own = std::make_unique<Conn>();
      Conn& c = *own;
      c.client = fd;
      c.inner = pair[0];
      c.engine = pair[1];
      conns.emplace(&c, std::move(own));
      by_engine[c.engine] = &c;
      interest(c.client, &c.ends[0], 0, EPOLL_CTL_ADD);
      interest(c.inner, &c.ends[1], 0, EPOLL_CTL_ADD);
      update(c);
      lock.unlock();  // the engine may call back on its own threads
      const bool ok = attach(pair[1], reinterpret_cast<const sockaddr*>(&ss), len);
      lock.lock();
      if (!ok) close_conn(c);
    }
  }

  // Engine-side events queued by request_done and request_begun.
  void run_todo() {
    std::vector<int> fds;
    fds.swap(todo);
    for (int fd : fds) {
      auto it = by_engine.find(fd);
      if (it == by_engine.end()) continue;
      Conn& c = *it->second;
      if (c.dead || c.engine_eof) continue;
      if (!c.handling && c.client_eof && c.fed == 0 && c.up.empty()) pass_eof(c);
      probe(c);
      flush_down(c);
      update(c);
    }
  }

  void expire(Clock::time_point now) {
    std::vector<Conn*> late;
    for (auto& [p, c] : conns) {
      if (now >= c->deadline) late.push_back(p);
    }
    for (Conn* c : late) close_conn(*c);
    if (now >= accept_again && !listen_closed) {
      accept_again = Clock::time_point::max();
      interest(listen, &listen_tag, EPOLLIN);
    }
  }

  void loop() {
    std::vector<epoll_event> evs(128);
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      lock.unlock();
      const int n = ::epoll_wait(ep, evs.data(), static_cast<int>(evs.size()), 200);
      lock.lock();
      for (int i = 0; i < n; ++i) {
        void* tag = evs[static_cast<size_t>(i)].data.ptr;
        const uint32_t events = evs[static_cast<size_t>(i)].events;
        if (tag == &wake_tag) {
          uint64_t v = 0;
          [[maybe_unused]] const ssize_t r = ::read(wake, &v, sizeof v);
          continue;
        }
        if (tag == &listen_tag) {
          if (!stop_accept) accept_all(lock);
          continue;
        }
        End* end = static_cast<End*>(tag);
        Conn& c = *end->conn;
        if (c.dead) continue;
        if (end->inner) {
          if (c.inner >= 0) on_inner(c, events);
        } else {
          on_client(c, events);
        }
        update(c);
      }
      if (stop_accept && !listen_closed) {
        ::epoll_ctl(ep, EPOLL_CTL_DEL, listen, nullptr);
        ::close(listen);
        listen_closed = true;
      }
      run_todo();
      const Clock::time_point now = Clock::now();
      if (stopping) {  // the engine is gone: a client's leftovers are not waited for
        std::vector<Conn*> done;
        for (auto& [p, c] : conns) {
          if (c->lingering) done.push_back(p);
        }
        for (Conn* c : done) close_conn(*c);
      }
      expire(now);
      graveyard.clear();
      if (stopping && (conns.empty() || now >= stop_by)) break;
    }
    while (!conns.empty()) close_conn(*conns.begin()->second);
    graveyard.clear();
  }
};

Result<std::unique_ptr<TcpFront>> TcpFront::start(int listen_fd, unsigned io_timeout_s,
                                                  Attach attach) {
  auto s = std::make_unique<State>();
  s->listen = listen_fd;
  s->io_timeout_s = io_timeout_s;
  s->attach = std::move(attach);
  s->ep = ::epoll_create1(EPOLL_CLOEXEC);
  s->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const int flags = ::fcntl(listen_fd, F_GETFL);
  if (s->ep < 0 || s->wake < 0 || flags < 0 ||
      ::fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    const int err = errno;
    if (s->ep >= 0) ::close(s->ep);
    if (s->wake >= 0) ::close(s->wake);
    return io_error("cannot start the HTTP accept loop: {}", std::strerror(err));
  }
  s->interest(s->wake, &s->wake_tag, EPOLLIN, EPOLL_CTL_ADD);
  s->interest(listen_fd, &s->listen_tag, EPOLLIN, EPOLL_CTL_ADD);
  return std::unique_ptr<TcpFront>(new TcpFront(std::move(s)));
}

void TcpFront::run() {
  if (s_->thread.joinable()) return;
  State* raw = s_.get();
  s_->thread = std::thread([raw] { raw->loop(); });
}

TcpFront::TcpFront(std::unique_ptr<State> s) : s_(std::move(s)) {}

TcpFront::~TcpFront() { stop(); }

void TcpFront::request_begun(int engine_fd, bool http11) {
  std::lock_guard<std::mutex> lock(s_->mu);
  auto it = s_->by_engine.find(engine_fd);
  if (it == s_->by_engine.end()) return;
  State::Conn& c = *it->second;
  c.handling = true;
  c.http11 = http11;
  c.probed = false;
  c.down_since_begun = 0;
  if (c.client_eof) {  // the client half-closed with its request: probe it
    s_->todo.push_back(engine_fd);
    s_->poke();
  }
}

void TcpFront::request_done(int engine_fd) {
  std::lock_guard<std::mutex> lock(s_->mu);
  auto it = s_->by_engine.find(engine_fd);
  if (it == s_->by_engine.end()) return;
  State::Conn& c = *it->second;
  c.handling = false;
  c.fed = 0;
  if (c.client_eof) {
    s_->todo.push_back(engine_fd);
    s_->poke();
  }
}

void TcpFront::stop_accepting() {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (s_->stop_accept) return;
  s_->stop_accept = true;
  ::shutdown(s_->listen, SHUT_RDWR);  // refused at once; closed by the loop
  s_->poke();
}

void TcpFront::stop() {
  if (!s_ || s_->ep < 0) return;
  stop_accepting();
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stopping = true;
    s_->stop_by = Clock::now() + kFlushAtStop;
    s_->poke();
  }
  if (s_->thread.joinable()) s_->thread.join();
  if (!s_->listen_closed) ::close(s_->listen);
  ::close(s_->ep);
  ::close(s_->wake);
  s_->ep = -1;
}

}  // namespace rinfer::server
