// The CPU backend's worker pool (kernels/cpu/thread_pool.h): every task runs exactly once per
// run(), on a valid thread, its writes visible when run() returns; generations never mix (many
// short runs back to back, runs of more tasks than one claim word holds, callers on two threads);
// a worker that holds a task far longer than the caller's own tasks take sends the pool to the
// caller alone for a while (the busy-core back-off).
#include <doctest/doctest.h>

#include <time.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "thread_pool.h"

using endor::cpu::detail::ThreadPool;

namespace {

void check_each_task_once(ThreadPool& pool, int64_t n_tasks, int max_threads) {
  std::vector<std::atomic<int>> hits(size_t(n_tasks) + 1);
  std::atomic<int> bad_thread{0};
  pool.run(n_tasks, max_threads, [&](int64_t i, int thread) {
    hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
    if (thread < 0 || thread >= pool.size() || (max_threads <= 1 && thread != 0)) bad_thread.fetch_add(1);
  });
  int64_t wrong = 0;
  for (int64_t i = 0; i < n_tasks; ++i) wrong += hits[size_t(i)].load() != 1;
  CHECK_MESSAGE(wrong == 0, n_tasks << " tasks, " << max_threads << " threads: " << wrong << " ran other than once");
  CHECK(hits[size_t(n_tasks)].load() == 0);
  CHECK(bad_thread.load() == 0);
}

}  // namespace

TEST_CASE("thread pool: every task once, on a valid thread") {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 65535, 65536, 140001})
      for (int max_threads : {1, threads}) check_each_task_once(pool, n, max_threads);
  }
}

TEST_CASE("thread pool: results visible to the caller across many short runs") {
  ThreadPool pool(3);
  std::vector<int64_t> out(257);
  int64_t mismatches = 0;
  for (int run = 0; run < 20000; ++run) {
    const int64_t n = 1 + run % 257;
    pool.run(n, 3, [&](int64_t i, int) { out[size_t(i)] = int64_t(run) * 1000 + i; });
    for (int64_t i = 0; i < n; ++i) mismatches += out[size_t(i)] != int64_t(run) * 1000 + i;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("thread pool: callers on two threads are serialised") {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  auto caller = [&] {
    for (int r = 0; r < 2000; ++r) pool.run(16, 2, [&](int64_t i, int) { sum.fetch_add(i + 1); });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  CHECK(sum.load() == 2 * 2000 * (16 * 17 / 2));
}

TEST_CASE("thread pool: a worker stuck in a task sends the pool to the caller alone for a while") {
  // A back-off of exactly 300 ms, so the checks below do not depend on this machine's load.
  ThreadPool pool(2, ThreadPool::Backoff{300'000'000, 300'000'000});
  // The caller's first task waits until a worker holds one; that task takes 20 ms (as if its core
  // were taken away) while the caller's others take no time: the caller waits far longer than its
  // own tasks take, which is contention.
  std::atomic<bool> worker_in{false};
  pool.run(256, 2, [&](int64_t, int thread) {
    if (thread != 0) {
      if (!worker_in.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return;
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!worker_in.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  });
  REQUIRE(worker_in.load());
  REQUIRE(pool.contended_runs() == 1);
  // Within the back-off everything runs on the caller.
  std::atomic<int> on_workers{0};
  pool.run(64, 2, [&](int64_t, int thread) { on_workers.fetch_add(thread != 0); });
  CHECK(on_workers.load() == 0);
  CHECK(pool.serialised_runs() == 1);
  // After it, the workers are offered tasks again.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  pool.run(64, 2, [](int64_t, int) {});
  CHECK(pool.serialised_runs() == 1);
}

TEST_CASE("thread pool: a task that throws, on a worker or the caller: every other task still runs, run() rethrows") {
  ThreadPool pool(2);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::atomic<int>> hits(64);
    bool thrown = false;
    try {
      pool.run(64, 2, [&](int64_t i, int) {
        hits[size_t(i)].fetch_add(1);
        if (i == 5 || i == 40) throw std::runtime_error("task " + std::to_string(i));
      });
    } catch (const std::runtime_error& e) {
      thrown = std::string(e.what()) == "task 5" || std::string(e.what()) == "task 40";
    }
    REQUIRE(thrown);
    int once = 0;
    for (auto& h : hits) once += h.load() == 1;
    REQUIRE(once == 64);
  }
  // Still usable; a run on the caller alone also runs every task, then rethrows.
  std::atomic<int> n{0};
  pool.run(100, 2, [&](int64_t, int) { n.fetch_add(1); });
  CHECK(n.load() == 100);
  std::atomic<int> serial{0};
  CHECK_THROWS_AS(pool.run(3, 1,
                           [&](int64_t i, int) {
                             serial.fetch_add(1);
                             if (i == 1) throw std::runtime_error("x");
                           }),
                  std::runtime_error);
  CHECK(serial.load() == 3);
}

TEST_CASE("thread pool: park() sends a spinning worker to sleep until the next run") {
  // A spin long enough that, without park(), the worker would burn the whole window below.
  ::setenv("ENDOR_SPIN_US", "5000000", 1);
  ThreadPool pool(2);
  ::unsetenv("ENDOR_SPIN_US");
  check_each_task_once(pool, 64, 2);  // starts the worker, which then spins for the next run
  pool.park();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // lets it see the flag
  timespec t0{}, t1{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  const double cpu_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  MESSAGE("CPU time over 300 ms after park(): " << cpu_ms << " ms");
  CHECK(cpu_ms < 100.0);
  check_each_task_once(pool, 64, 2);  // and the next run wakes it as usual
  check_each_task_once(pool, 1000, 2);
}
