// Shared helpers of the endor-serve end-to-end tests: the server as a child process on a free
// loopback port (read from its "listening on" line), and raw HTTP exchanges over a socket for
// requests a well-behaved client would not send.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "../infer/infer_test_util.h"

namespace endor::test {

inline std::string endor_serve() { return std::string(ENDOR_BINARY_DIR) + "/runtime/server/endor-serve"; }

// endor-serve MODEL ARGS --port 0, its stderr in dir/<name>.err; start() waits for "ready".
class ServerProcess {
 public:
  ServerProcess(const TempDir& dir, const std::string& name) : err_path_(dir.file(name + ".err")) {}
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Returns false (and the stderr so far in `log`) when the server exits or is not ready in time.
  bool start(const std::string& model, const std::string& args, int timeout_s = 60) {
    const std::string cmd = "exec " + endor_serve() + " " + model + " --port 0 " + args + " 2>" + err_path_;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no server left behind when the test dies
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      log = file_exists(err_path_) ? read_text(err_path_) : "";
      std::smatch m;
      if (port == 0 && std::regex_search(log, m, std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)")))
        port = std::stoi(m[1]);
      if (port && log.find("endor-serve: ready") != std::string::npos) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // SIGTERM, then the exit status (-1: did not exit within timeout_s, or by a signal).
  int terminate(int timeout_s = 30) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        log = read_text(err_path_);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  bool alive() {
    int status = 0;
    return pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == 0;
  }
  int port = 0;
  std::string log;

 private:
  std::string err_path_;
  pid_t pid_ = -1;
};

// Sends `bytes` on a fresh connection to 127.0.0.1:port and reads until the server closes or
// `timeout_s` passes (send_all false: shuts down writing only after the bytes; the reply comes
// anyway). Returns the raw response ("" when none).
inline std::string raw_exchange(int port, const std::string& bytes, int timeout_s = 10) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += size_t(n);
    }
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      reply.append(buf, size_t(n));
      // One response is enough: stop at the end of its body (Content-Length).
      const size_t head_end = reply.find("\r\n\r\n");
      if (head_end == std::string::npos) continue;
      std::smatch m;
      const std::string head = reply.substr(0, head_end);
      if (std::regex_search(head, m, std::regex("Content-Length: ([0-9]+)", std::regex::icase)) &&
          reply.size() >= head_end + 4 + std::stoul(m[1]))
        break;
    }
  }
  ::close(fd);
  return reply;
}

inline int status_of(const std::string& raw) {
  std::smatch m;
  if (!std::regex_search(raw, m, std::regex("^HTTP/1\\.[01] ([0-9]{3})"))) return 0;
  return std::stoi(m[1]);
}

inline std::string body_of(const std::string& raw) {
  const size_t at = raw.find("\r\n\r\n");
  return at == std::string::npos ? "" : raw.substr(at + 4);
}

inline std::string post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace endor::test
