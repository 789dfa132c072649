// Ctrl-C / SIGTERM safety for endor-pack: the temporary files being written (the output's temp,
// the calibration driver's temporary model, ...) are kept in fixed buffers the signal handler can
// read, and unlinked before the process dies.
#pragma once

#include <string>

namespace endor::cli {

// Installs SIGINT/SIGTERM/SIGHUP handlers that unlink every registered path, then rmdir them
// (a registered folder whose files were registered too ends empty and goes), then re-raise.
void install_cleanup_handlers();
// Registers (exists = true) or forgets (false) a temporary path to remove on a signal; the
// PackCallbacks::on_temp_file contract. Up to 64 paths at once; a path longer than the buffer, or
// a 65th, is not registered (the library still removes its files on ordinary errors).
void track_temp_file(const std::string& path, bool exists);

}  // namespace endor::cli
