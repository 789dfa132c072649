// The signal handler and its async-signal-safe state (a fixed buffer, updated with the signals
// blocked so the handler never sees a half-written path).
#include "cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace endor::cli {

namespace {

// Process-wide by necessity: a signal handler can reach nothing else.
char g_temp_path[4096];
volatile sig_atomic_t g_has_path = 0;

void on_signal(int sig) {
  if (g_has_path) ::unlink(g_temp_path);
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

}  // namespace

void install_cleanup_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_mask = handled_signals();
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

void set_cleanup_path(const std::string& path) {
  const sigset_t block = handled_signals();
  sigset_t old;
  ::sigprocmask(SIG_BLOCK, &block, &old);
  g_has_path = 0;
  if (!path.empty() && path.size() < sizeof g_temp_path) {
    std::memcpy(g_temp_path, path.c_str(), path.size() + 1);
    g_has_path = 1;
  }
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace endor::cli
