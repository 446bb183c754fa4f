// `rinfer loadgen URL [--model M] [--requests N] [--input-len N] [--output-len N]
//  [--mix fixed | long-tail] [--concurrency N[,N...] | --rate R] [--duration S] [--json FILE]`
//
// A load generator for a running `rinfer serve` (or any OpenAI-compatible server) on this
// machine: streamed /v1/completions of random token ids with fixed or long-tailed lengths
// (end-of-text ignored), kept at each concurrency of a sweep or arriving at a Poisson rate,
// each run bounded by --requests and --duration. Every reply is checked: status 200, one id in
// every chunk, the usage's prompt and completion tokens equal to what was asked, finish_reason
// "length", and the closing [DONE]. Reports output and total tok/s, TTFT and time per output
// token percentiles and the errors, as a table and JSON. Loopback addresses only.
#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tools/bench_report.h"
#include "tools/output.h"
#include "tools/serve_load.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct LoadgenArgs {
  std::string url;
  std::string model;
  std::string api_key;
  LoadSpec spec;
  std::vector<int64_t> concurrency;  // the sweep (empty: 16, or the rate)
  double duration_s = 600;
  int timeout_s = 600;
  std::string json;
};

// An HTTP client failure as a sentence (httplib's names are single words: "Connection").
std::string client_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "could not connect: nothing listens there (is rinfer serve running on that port?)";
    case httplib::Error::ConnectionTimeout: return "the connection timed out";
    case httplib::Error::Read: return "the connection broke while reading the reply";
    case httplib::Error::Write: return "the connection broke while sending the request";
    default: return "HTTP client error: " + httplib::to_string(e);
  }
}

struct Reply {
  bool ok = false;
  std::string error;
  double submit_s = 0, first_s = 0, finish_s = 0;
  int64_t input = 0, output = 0;
};

// One streamed completion, checked as it arrives.
Reply run_one(httplib::Client& cli, const LoadgenArgs& a, const LoadJob& job,
              Clock::time_point t0) {
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  Reply r;
  r.input = static_cast<int64_t>(job.prompt.size());
  const json body = {{"model", a.model},
                     {"prompt", job.prompt},
                     {"max_tokens", job.output},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!a.api_key.empty()) req.set_header("Authorization", "Bearer " + a.api_key);
  std::string buf, id, finish;
  bool done = false, usage_ok = false;
  int64_t chunks = 0;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buf.append(data, len);
    size_t cut;
    while ((cut = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, cut);
      buf.erase(0, cut + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      const std::string payload = ev.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const json j = json::parse(payload, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        r.error = "a chunk that is not JSON";
        return false;
      }
      if (j.contains("error")) {
        r.error = "an error in the stream: " + j["error"].value("message", std::string());
        return false;
      }
      if (chunks++ == 0) {
        r.first_s = now();
        id = j.value("id", std::string());
      } else if (j.value("id", std::string()) != id) {
        r.error = "a chunk of another reply (its id differs)";
        return false;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        const json& u = j["usage"];
        r.output = u.value("completion_tokens", int64_t{-1});
        usage_ok = u.value("prompt_tokens", int64_t{-1}) == r.input && r.output == job.output;
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
          j["choices"][0]["finish_reason"].is_string()) {
        finish = j["choices"][0]["finish_reason"].get<std::string>();
      }
    }
    return true;
  };
  r.submit_s = now();
  httplib::Result res = cli.send(req);
  r.finish_s = now();
  if (!r.error.empty()) return r;
  if (!res) {
    r.error = client_error(res.error());
    return r;
  }
  if (res->status != 200) {
    r.error = fmt::format("status {}", res->status);
    return r;
  }
  if (!done) {
    r.error = "the stream ended without [DONE]";
  } else if (!usage_ok) {
    r.error = fmt::format("the usage says {} prompt and {} completion tokens, not {} and {}",
                          r.input, r.output, r.input, job.output);
  } else if (finish != "length") {
    r.error = fmt::format("finish_reason '{}', not 'length'", finish);
  } else {
    r.ok = true;
  }
  return r;
}

struct Run {
  int64_t concurrency = 0;
  double rate = 0;
  std::vector<Reply> replies;
  double wall_s = 0;
};

Run run_load(const LoadgenArgs& a, const std::string& host, int port,
             const std::vector<LoadJob>& jobs, int64_t concurrency) {
  Run run;
  run.concurrency = concurrency;
  run.rate = a.spec.rate;
  run.replies.resize(jobs.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> expired{false};
  const auto t0 = Clock::now();
  const int64_t workers =
      a.spec.rate > 0 ? std::min<int64_t>(1024, static_cast<int64_t>(jobs.size())) : concurrency;
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      httplib::Client cli(host, port);
      cli.set_read_timeout(a.timeout_s, 0);
      cli.set_write_timeout(a.timeout_s, 0);
      cli.set_keep_alive(true);
      for (;;) {
        const size_t i = next.fetch_add(1);
        if (i >= jobs.size()) return;
        if (a.spec.rate > 0) {
          const auto at = t0 + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(jobs[i].arrival_s));
          std::this_thread::sleep_until(at);
        }
        if (std::chrono::duration<double>(Clock::now() - t0).count() > a.duration_s) {
          expired.store(true);
          run.replies[i].error = "not sent: --duration passed";
          continue;
        }
        run.replies[i] = run_one(cli, a, jobs[i], t0);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  run.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return run;
}

ordered_json run_json(const Run& r, std::string* row) {
  int64_t ok = 0, out = 0, in = 0;
  std::vector<double> ttft, tpot;
  std::map<std::string, int64_t> errors;
  for (const Reply& p : r.replies) {
    if (!p.ok) {
      ++errors[p.error];
      continue;
    }
    ++ok;
    out += p.output;
    in += p.input;
    ttft.push_back(1e3 * (p.first_s - p.submit_s));
    if (p.output > 1)
      tpot.push_back(1e3 * (p.finish_s - p.first_s) / static_cast<double>(p.output - 1));
  }
  const double out_tps = static_cast<double>(out) / r.wall_s;
  const double total_tps = static_cast<double>(out + in) / r.wall_s;
  ordered_json j = {{"concurrency", r.concurrency},
                    {"rate", r.rate},
                    {"requests", r.replies.size()},
                    {"ok", ok},
                    {"failed", static_cast<int64_t>(r.replies.size()) - ok},
                    {"wall_s", r.wall_s},
                    {"output_tokens_per_s", out_tps},
                    {"total_tokens_per_s", total_tps},
                    {"ttft_ms_p50", percentile(ttft, 0.5)},
                    {"ttft_ms_p99", percentile(ttft, 0.99)},
                    {"tpot_ms_p50", percentile(tpot, 0.5)},
                    {"tpot_ms_p99", percentile(tpot, 0.99)},
                    {"errors", errors}};
  *row = fmt::format(
      "| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.2f} |\n",
      r.rate > 0 ? fmt::format("{} req/s", r.rate) : fmt::format("{}", r.concurrency), ok,
      static_cast<int64_t>(r.replies.size()) - ok, out_tps, total_tps, percentile(ttft, 0.5),
      percentile(ttft, 0.99), percentile(tpot, 0.5), percentile(tpot, 0.99), r.wall_s);
  return j;
}

int run_loadgen(LoadgenArgs& a) {
  static const std::regex kUrl(R"(^http://(127\.\d+\.\d+\.\d+|localhost|\[::1\]):(\d+)/?$)");
  std::smatch m;
  if (!std::regex_match(a.url, m, kUrl)) {
    return report_error(fmt::format(
        "loadgen: '{}' is not a loopback URL (http://127.0.0.1:PORT, http://localhost:PORT or "
        "http://[::1]:PORT): the load generator only loads this machine",
        a.url));
  }
  std::string host = m[1].str();
  if (host == "[::1]") host = "::1";
  const int port = std::stoi(m[2].str());
  httplib::Client probe(host, port);
  probe.set_read_timeout(10, 0);
  httplib::Headers auth;
  if (!a.api_key.empty()) auth.emplace("Authorization", "Bearer " + a.api_key);
  auto models = probe.Get("/v1/models", auth);
  if (!models || models->status != 200) {
    return report_error(fmt::format(
        "loadgen: GET {}/v1/models: {}", a.url,
        models ? fmt::format("status {}", models->status) : client_error(models.error())));
  }
  const json list = json::parse(models->body, nullptr, false);
  int64_t vocab = 0, n_ctx = 0;
  if (!list.is_discarded() && list.contains("data") && list["data"].is_array()) {
    for (const json& e : list["data"]) {
      if (a.model.empty() || e.value("id", std::string()) == a.model) {
        a.model = e.value("id", std::string());
        vocab = e.value("vocab_size", int64_t{0});
        n_ctx = e.value("context_length", int64_t{0});
        break;
      }
    }
  }
  if (a.model.empty() || vocab <= 0 || n_ctx <= 0) {
    return report_error(
        fmt::format("loadgen: {}/v1/models does not list {} with its vocab_size and context_length",
                    a.url, a.model.empty() ? "a model" : "'" + a.model + "'"));
  }
  if (a.concurrency.empty()) a.concurrency.push_back(a.spec.rate > 0 ? 0 : 16);
  if (a.spec.rate > 0) a.concurrency = {0};

  std::string machine;
  ordered_json report;
  report["benchmark"] = "rinfer loadgen";
  report["url"] = a.url;
  report["model"] = a.model;
  report["git_sha"] = bench::git_sha(".");
  report["date"] = bench::utc_date();
  report["machine"] = bench::machine_json(machine);
  report["settings"] = {{"requests", a.spec.requests},
                        {"input_len", a.spec.input_len},
                        {"output_len", a.spec.output_len},
                        {"mix", a.spec.mix},
                        {"rate", a.spec.rate},
                        {"duration_s", a.duration_s},
                        {"seed", a.spec.seed}};
  std::string table =
      "| concurrency | ok | failed | output tok/s | total tok/s | TTFT p50 (ms) | TTFT p99 (ms) | "
      "time per output token p50 (ms) | p99 (ms) | wall (s) |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  ordered_json runs = ordered_json::array();
  int64_t failed = 0;
  for (size_t k = 0; k < a.concurrency.size(); ++k) {
    const int64_t c = a.concurrency[k];
    // Each run its own prompts: a run must not find the last one's in the prefix cache.
    LoadSpec spec = a.spec;
    spec.seed = a.spec.seed + 7919 * k;
    const std::vector<LoadJob> jobs = make_load(spec, vocab, n_ctx);
    std::fprintf(stderr, "loadgen: %lld requests at %s...\n", static_cast<long long>(jobs.size()),
                 a.spec.rate > 0 ? fmt::format("{} requests/s", a.spec.rate).c_str()
                                 : fmt::format("concurrency {}", c).c_str());
    const Run r = run_load(a, host, port, jobs, c);
    std::string row;
    ordered_json j = run_json(r, &row);
    failed += j["failed"].get<int64_t>();
    table += row;
    runs.push_back(std::move(j));
  }
  report["runs"] = runs;
  table += fmt::format(
      "\n{} streamed /v1/completions per run to {} ({}), {} {}/{} tokens of random ids (other "
      "ones each run), end of text ignored; every reply checked (one id, usage, finish_reason, "
      "[DONE]).\n",
      a.spec.requests, a.url, a.model, a.spec.mix, a.spec.input_len, a.spec.output_len);
  if (!write_stdout(table)) return 1;
  if (!a.json.empty()) {
    if (const int rc = bench::write_json(a.json, report); rc != 0) return rc;
  }
  if (failed > 0) {
    for (const ordered_json& r : runs) {
      for (const auto& [what, n] : r["errors"].items()) {
        std::fprintf(stderr, "loadgen: %lld failed: %s\n", static_cast<long long>(n.get<int64_t>()),
                     what.c_str());
      }
    }
    return report_error(fmt::format("loadgen: {} replies failed their checks", failed));
  }
  return 0;
}

}  // namespace

void add_loadgen_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("loadgen",
                                 "Load a running server on this machine with streamed completions "
                                 "and check every reply");
  auto a = std::make_shared<LoadgenArgs>();
  cmd->add_option("url", a->url, "The server: http://127.0.0.1:PORT")->required();
  cmd->add_option("--model", a->model, "Model name (default: the first of /v1/models)");
  cmd->add_option("--api-key", a->api_key, "Sent as 'Authorization: Bearer KEY'");
  cmd->add_option("--requests", a->spec.requests, "Requests per run (default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--input-len", a->spec.input_len, "Prompt tokens (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--output-len", a->spec.output_len, "Output tokens (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--mix", a->spec.mix, "fixed or long-tail")
      ->check(CLI::IsMember({"fixed", "long-tail"}));
  cmd->add_option("--concurrency", a->concurrency,
                  "Requests in flight; several (1,8,64) make a sweep (default 16)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--rate", a->spec.rate, "Poisson arrivals, requests per second (instead)")
      ->check(CLI::Range(1e-6, 1e6))
      ->excludes("--concurrency");
  cmd->add_option("--duration", a->duration_s,
                  "Seconds per run at most: requests not sent by then fail (default 600)")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--timeout", a->timeout_s, "Seconds a reply may stall (default 600)")
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--seed", a->spec.seed, "Seed of the random workload (default 1)");
  cmd->add_option("--json", a->json, "Write the report as JSON");
  cmd->callback([&exit_code, a] { exit_code = run_loadgen(*a); });
}

}  // namespace rinfer
