// The endor-pack subcommands. Each parses its own options (cxxopts, --help on each) and returns
// the process exit code: 0 ok, 1 error, 2 usage error. Errors are printed as one line.
#pragma once

namespace endor::cli {

int run_convert(int argc, char** argv);
int run_prune(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_compare(int argc, char** argv);
int run_export(int argc, char** argv);

}  // namespace endor::cli
