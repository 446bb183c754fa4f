// `rinfer serve RECIPE... [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--max-queue N] ...`
//
// The OpenAI-compatible HTTP server (server/server.h) over one or more recipes, each chosen by
// the request's `model` field. It listens on loopback unless told otherwise, prints the URL
// once the port is open, loads the recipes behind it, and serves until SIGINT or SIGTERM; then
// it stops accepting, lets the requests in flight finish up to --drain-timeout, aborts the
// rest and exits 0.
#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "recipe/recipe.h"
#include "server/server.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

struct ServeCliArgs {
  std::vector<std::string> recipes;
  server::ServerOptions opts;
  int64_t ctx = 0;
  int64_t threads = -1;
  unsigned drain_s = 30;
};

int run_serve(ServeCliArgs& a) {
  std::vector<RecipeConfig> recipes;
  for (const std::string& path : a.recipes) {
    auto r = load_recipe(path);
    if (!r.ok()) return report_error(r.status().to_string());
    if (a.ctx > 0) r->context_length = a.ctx;
    if (a.threads >= 0) r->strategies.threads = static_cast<int>(a.threads);
    recipes.push_back(std::move(r).value());
  }
  a.opts.drain = std::chrono::seconds(a.drain_s);
  // SIGINT and SIGTERM are taken by sigwait below, in this thread only: blocked here before any
  // thread starts, so every thread the server makes inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto srv = server::Server::start(std::move(recipes), a.opts);
  if (!srv.ok()) return report_error(srv.status().to_string());
  const bool v6 = a.opts.host.find(':') != std::string::npos;
  std::fprintf(stderr, "rinfer serve: listening on http://%s%s%s:%d (loading the models)\n",
               v6 ? "[" : "", a.opts.host.c_str(), v6 ? "]" : "", (*srv)->port());
  std::fflush(stderr);

  // Loading runs beside the signal wait: a signal during it stops the server too.
  std::atomic<bool> load_failed{false};
  std::string load_error;
  std::thread watcher([&] {
    const Status st = (*srv)->wait_loaded();
    if (!st.ok()) {
      load_error = st.to_string();
      load_failed.store(true);
      kill(getpid(), SIGTERM);  // wakes the sigwait
      return;
    }
    std::fprintf(stderr, "rinfer serve: ready\n");
    std::fflush(stderr);
  });
  int sig = 0;
  sigwait(&stop_signals, &sig);
  watcher.join();
  if (load_failed.load()) {
    (*srv)->shutdown();
    return report_error(load_error);
  }
  std::fprintf(stderr, "rinfer serve: %s: finishing the requests in flight (up to %u s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", a.drain_s);
  std::fflush(stderr);
  const size_t aborted = (*srv)->shutdown();
  std::fprintf(stderr, "rinfer serve: stopped (%zu requests aborted at the deadline)\n", aborted);
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "serve", "Serve recipes over an OpenAI-compatible HTTP API (and a chat page at /)");
  auto a = std::make_shared<ServeCliArgs>();
  server::ServerOptions& o = a->opts;
  cmd->add_option("recipes", a->recipes, "Recipe YAMLs; a request picks one by its model name")
      ->required();
  cmd->add_option("--host", o.host, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o.port, "Port (default 8080; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/ routes (default: none)");
  cmd->add_option("--cors-origin", o.http.cors_origin,
                  "Let a browser page of this origin call the API (CORS: e.g. "
                  "https://app.example.com, or *; default: none)")
      ->check([](const std::string& v) {
        if (v == "*" || v.starts_with("http://") || v.starts_with("https://")) {
          return v.find_first_of(" \r\n,") == std::string::npos
                     ? std::string()
                     : std::string("one origin, without spaces or commas");
        }
        return std::string("an origin (http://host[:port] or https://...) or *");
      });
  cmd->add_option("--max-queue", o.serve.max_queue,
                  "Requests waiting beyond the engine's seats before 429 (default 1024)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--max-body-bytes", o.http.max_body_bytes,
                  "Largest request body; larger is 413 (default 4 MiB)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  cmd->add_option("--max-header-bytes", o.http.max_header_bytes,
                  "Request line and headers together; more is 431 (default 32 KiB)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 24));
  cmd->add_option("--max-headers", o.http.max_header_count,
                  "Header fields per request; more is 431 (default 100)")
      ->check(CLI::Range(1u, 100000u));
  cmd->add_option("--timeout", o.http.io_timeout_s,
                  "Seconds a client may stay silent while sending or reading (default 30)")
      ->check(CLI::Range(1u, 86400u));
  cmd->add_option("--max-connections", o.http.max_connections,
                  "Open connections at most (default 4096)")
      ->check(CLI::Range(1u, 1000000u));
  cmd->add_option("--http-threads", o.http.threads, "Threads serving connections (default 2)")
      ->check(CLI::Range(1u, 256u));
  cmd->add_option("--drain-timeout", a->drain_s,
                  "At SIGINT/SIGTERM: seconds the requests in flight may finish (default 30)")
      ->check(CLI::Range(0u, 86400u));
  cmd->add_option("--ctx", a->ctx, "Context length (overrides the recipes' context_length)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  cmd->add_option("--threads", a->threads, "CPU threads (0: all cores; overrides the recipes)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  cmd->callback([&exit_code, a] { exit_code = run_serve(*a); });
}

}  // namespace rinfer
