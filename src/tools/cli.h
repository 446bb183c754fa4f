// The `rinfer` command line: one subcommand per tool (info, ...).
#pragma once

namespace rinfer {

// Parses argv and runs the chosen subcommand; returns the process exit code. Errors are printed
// to stderr as one line ("rinfer: error: ...").
int run_cli(int argc, char** argv);

}  // namespace rinfer
