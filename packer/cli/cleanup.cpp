// The signal handler and its async-signal-safe state (fixed buffers, updated with the signals
// blocked so the handler never sees a half-written path).
#include "cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace endor::cli {

namespace {

constexpr int kSlots = 64;  // export registers its temporary folder and every file in it
constexpr size_t kPathBytes = 4096;

// Process-wide by necessity: a signal handler can reach nothing else.
char g_paths[kSlots][kPathBytes];
volatile sig_atomic_t g_used[kSlots] = {};

void on_signal(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_used[i]) ::unlink(g_paths[i]);
  for (int i = 0; i < kSlots; ++i)  // then folders (export's temporary one), emptied above
    if (g_used[i]) ::rmdir(g_paths[i]);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

sigset_t handled_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGHUP);
  return s;
}

int find_slot(const std::string& path) {
  for (int i = 0; i < kSlots; ++i)
    if (g_used[i] && path == g_paths[i]) return i;
  return -1;
}

}  // namespace

void install_cleanup_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_mask = handled_signals();
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

void track_temp_file(const std::string& path, bool exists) {
  if (path.empty() || path.size() >= kPathBytes) return;
  const sigset_t block = handled_signals();
  sigset_t old;
  ::sigprocmask(SIG_BLOCK, &block, &old);
  const int slot = find_slot(path);
  if (!exists && slot >= 0) g_used[slot] = 0;
  if (exists && slot < 0)
    for (int i = 0; i < kSlots; ++i)
      if (!g_used[i]) {
        std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
        g_used[i] = 1;
        break;
      }
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace endor::cli
