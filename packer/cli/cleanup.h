// Ctrl-C / SIGTERM safety for endor-pack: the one temporary output path being written is kept in
// a fixed buffer the signal handler can read, and unlinked before the process dies.
#pragma once

#include <string>

namespace endor::cli {

// Installs SIGINT/SIGTERM/SIGHUP handlers that unlink the registered path, then re-raise.
void install_cleanup_handlers();
// Registers the temporary path to remove on a signal ("" = none). Paths longer than the
// buffer are not registered (the library still removes them on ordinary errors).
void set_cleanup_path(const std::string& path);

}  // namespace endor::cli
