#include "tools/cli.h"

int main(int argc, char** argv) { return rinfer::run_cli(argc, argv); }
