// Each `rinfer` subcommand registers itself on the CLI11 app; the callback runs it and stores
// the process exit code in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace rinfer {

void add_info_command(CLI::App& app, int& exit_code);
void add_devices_command(CLI::App& app, int& exit_code);
void add_tokenize_commands(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
void add_perplexity_command(CLI::App& app, int& exit_code);
void add_parity_command(CLI::App& app, int& exit_code);
void add_diff_command(CLI::App& app, int& exit_code);
void add_eval_command(CLI::App& app, int& exit_code);
void add_calibrate_command(CLI::App& app, int& exit_code);
void add_profile_command(CLI::App& app, int& exit_code);
void add_tune_command(CLI::App& app, int& exit_code);
void add_strategies_command(CLI::App& app, int& exit_code);
void add_quantize_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_bench_serve_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);
void add_loadgen_command(CLI::App& app, int& exit_code);
void add_embed_command(CLI::App& app, int& exit_code);
void add_classify_command(CLI::App& app, int& exit_code);
void add_index_commands(CLI::App& app, int& exit_code);
void add_bench_search_command(CLI::App& app, int& exit_code);

// Prints "rinfer: error: <message>" on stderr (one line) and returns the exit code 1.
int report_error(const std::string& message);

}  // namespace rinfer
