// Internal to endor_kernels: the persistent worker pool every CPU backend kernel runs its
// parallel loops on (instead of one OpenMP region per call).
//
// Why not OpenMP: a decode step opens ~150 parallel regions per token on a small model, and what
// happens between them decides the speed on a laptop. libgomp's workers either spin (fast when the
// cores are free, and they starve other work, or each other, when they are not; the wait policy is
// read from the environment before main) or sleep (a futex wake per region). This pool
//   - hands out tasks dynamically from one atomic word, so a thread the OS has descheduled simply
//     claims nothing: the others, the caller included, take its share, and the caller waits only
//     for tasks actually claimed and still running, never for a thread to show up;
//   - notices when a worker was descheduled in the middle of a task (the caller waited for it far
//     longer than a task takes: another program wants the core) and, while such stalls take more
//     than (1 - 1/n) / 2 of its parallel time, runs on the caller alone for a back-off period (5 ms,
//     doubling to 1 s while it comes back soon after each), so a busy core costs a share of one core
//     instead of a timeslice per parallel region where the regions are short (decode at batch 1),
//     and long regions (a batched step) keep every thread;
//   - lets an idle worker spin for a bounded time (ENDOR_SPIN_US, default 200 µs: long enough to
//     catch the next region of a decode step, short enough that a paused generation costs nothing)
//     and then sleep on a condition variable; a waiting caller yields its core after a short spin.
//
// Contract: one run() at a time per pool (a mutex serialises callers from different threads);
// tasks of one run() may execute on any pool thread in any order; run() returns after all of them
// finished (their writes are visible to the caller). A task that throws does not stop the others
// (on one thread either); run() rethrows the first exception once every task is done, so nothing
// still runs on the caller's lambda when the exception leaves it. The caller is thread 0; workers are 1..size-1.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace endor::cpu::detail {

// How long a ThreadPool stays on the caller alone after contention: min_ns, doubling up to max_ns.
struct PoolBackoff {
  int64_t min_ns = 5'000'000, max_ns = 1'000'000'000;
};

class ThreadPool {
 public:
  using Backoff = PoolBackoff;
  // n_threads - 1 workers are started lazily, on the first parallel run().
  explicit ThreadPool(int n_threads, Backoff backoff = Backoff());
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Sends workers that are spinning for the next run() to sleep now: called before work that runs
  // on other threads (oneDNN's and OpenBLAS's OpenMP teams), which spinning workers would slow down
  // on a machine with no core to spare. The next run() wakes them as usual.
  void park() { parked_.store(true, std::memory_order_relaxed); }
  // Parallel runs that found the pool contended (see above), and runs made serial by the back-off.
  int64_t contended_runs() const { return contended_runs_; }
  int64_t serialised_runs() const { return serialised_runs_; }

  // f(task, thread) for every task in [0, n_tasks), on up to max_threads threads (1 = on the caller,
  // no synchronisation at all). thread is in [0, size()).
  template <class F>
  void run(int64_t n_tasks, int max_threads, F&& f) {
    if (n_tasks <= 0) return;
    if (max_threads <= 1 || n_threads_ <= 1 || n_tasks == 1) {
      std::exception_ptr first;
      for (int64_t i = 0; i < n_tasks; ++i) {
        try {
          f(i, 0);
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      }
      if (first) std::rethrow_exception(first);
      return;
    }
    run_erased(n_tasks, [](void* c, int64_t i, int t) { (*static_cast<F*>(c))(i, t); }, &f);
  }

 private:
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);
  // The claim word: generation (bits 32-63), task count (16-31) and next unclaimed task (0-15). A
  // worker claims with a compare-exchange of the whole word, so one that was descheduled between
  // reading it and claiming can never take a task of a later run(). Runs of more tasks are split.
  static constexpr int64_t kMaxTasks = 0xFFFF;

  void run_erased(int64_t n_tasks, TaskFn fn, void* ctx);
  void start_workers();
  void worker_main(int thread);
  // After a parallel run of ran_ns with a stall of stall_ns (0: none): counts it in the stalls'
  // share of parallel time and starts a back-off where the share is over the break-even.
  void note_parallel(int64_t ran_ns, int64_t stall_ns, int64_t now);
  // Claims and runs tasks of generation gen until none is left; returns how many it ran.
  int64_t drain(uint32_t gen, int thread);

  const int n_threads_;
  const int64_t spin_ns_;
  const Backoff backoff_;
  std::mutex run_mutex_;  // one run() at a time
  // Contention back-off (touched by the caller under run_mutex_ only).
  int64_t serial_until_ns_ = 0, backoff_ns_ = 0, clean_since_ns_ = 0;
  int64_t contended_runs_ = 0, serialised_runs_ = 0;
  int64_t parallel_ns_ = 0, stall_ns_ = 0;  // decayed sums: parallel run time, stalls within it

  // The current job (written by run_erased before the generation is published).
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t task_base_ = 0;  // task numbers of a split run continue from here
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int64_t> done_{0};  // tasks of the current generation finished
  alignas(64) std::atomic<int> sleepers_{0};
  std::mutex error_mutex_;
  std::exception_ptr error_;  // the first exception a task of the current run threw
  std::atomic<bool> stop_{false};
  std::atomic<bool> parked_{false};  // park() was called since the last run()
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
};

}  // namespace endor::cpu::detail
