// The persistent worker pool (thread_pool.h): bounded spinning, then sleeping; dynamic claiming.
#include "thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ENDOR_CPU_RELAX() _mm_pause()
#else
#define ENDOR_CPU_RELAX() ((void)0)
#endif

namespace endor::cpu::detail {
namespace {

constexpr int64_t kDefaultSpinNs = 200'000;  // an idle worker's spin before it sleeps
constexpr int64_t kCallerSpinNs = 20'000;    // a waiting caller's spin before it yields its core
// A wait for the workers' last tasks longer than this, and than 4 of the caller's own tasks, means
// a worker lost its core mid-task.
constexpr int64_t kPreemptedWaitNs = 300'000;
// The back-off doubles only while contention comes back soon after each one ends: after a clean
// parallel stretch of max(kCleanResetNs, 2 x the last back-off) it starts small again. A busy core
// is seen again within a few runs; a one-off stall (a VM's stolen time, a page fault storm) is not,
// and with a fixed 2 s window a few of those escalated to seconds of one-thread decode
// (2026-11-25: 2569 of ~7000 runs of a 1 B decode made serial on a quiet machine by 10 stalls).
constexpr int64_t kCleanResetNs = 50'000'000;
// The back-off only pays where contention costs more than the workers bring: a parallel run loses
// its stalls (the caller waiting for a descheduled worker's task), a run on the caller alone loses
// the other threads' share, 1 - 1/n of it. The pool keeps the stalls' share of its parallel time
// (both halved every kShareWindowNs of parallel time, so the share follows the last ~0.1-0.2 s) and
// backs off only while that share is over half the break-even, (1 - 1/n) / 2. Small runs (a decode
// at batch 1: ~20 µs each, a stall the competing program's whole timeslice) cross it at once;
// a batched step's runs (8 tokens: ~10x longer, the same stalls) stay parallel on a core shared
// with a nice-10 program (bench/serve/README.md, --busy).
constexpr int64_t kShareWindowNs = 200'000'000;

int64_t spin_ns_from_env() {
  const char* s = std::getenv("ENDOR_SPIN_US");
  if (!s || !*s) return kDefaultSpinNs;
  char* end = nullptr;
  const long long us = std::strtoll(s, &end, 10);
  if (*end != '\0' || us < 0) return kDefaultSpinNs;
  return int64_t(std::min<long long>(us, 1'000'000)) * 1000;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr uint32_t gen_of(uint64_t c) { return uint32_t(c >> 32); }
constexpr uint32_t count_of(uint64_t c) { return uint32_t(c >> 16) & 0xFFFF; }
constexpr uint32_t next_of(uint64_t c) { return uint32_t(c) & 0xFFFF; }
constexpr uint64_t claim_word(uint32_t gen, uint32_t count, uint32_t next) {
  return (uint64_t(gen) << 32) | (uint64_t(count) << 16) | next;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, Backoff backoff)
    : n_threads_(std::max(1, n_threads)), spin_ns_(spin_ns_from_env()), backoff_(backoff) {}

ThreadPool::~ThreadPool() {
  if (std::getenv("ENDOR_POOL_STATS") && n_threads_ > 1)
    std::fprintf(stderr, "thread pool: %d threads, %lld contended runs, %lld runs on the caller alone (back-off)\n",
                 n_threads_, (long long)contended_runs_, (long long)serialised_runs_);
  {
    std::lock_guard<std::mutex> lk(sleep_mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::start_workers() {
  workers_.reserve(size_t(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

int64_t ThreadPool::drain(uint32_t gen, int thread) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (int64_t ran = 0;; ++ran) {
    if (gen_of(c) != gen || next_of(c) >= count_of(c)) return ran;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      --ran;
      continue;
    }
    // The claim succeeded in generation gen, whose run() cannot return before this task is done:
    // fn_, ctx_ and task_base_ are still that run's.
    try {
      fn_(ctx_, task_base_ + int64_t(next_of(c)), thread);
    } catch (...) {  // kept for the caller, who rethrows it once every claimed task is done
      std::lock_guard<std::mutex> lk(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    done_.fetch_add(1, std::memory_order_acq_rel);
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_main(int thread) {
  uint32_t seen = 0;
  for (;;) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    if (gen_of(c) == seen) {
      const int64_t give_up = now_ns() + spin_ns_;
      for (int i = 1; gen_of(c) == seen && !stop_.load(std::memory_order_relaxed); ++i) {
        ENDOR_CPU_RELAX();
        c = claim_.load(std::memory_order_acquire);
        if ((i & 255) == 0 && (now_ns() > give_up || parked_.load(std::memory_order_relaxed))) break;
      }
      if (gen_of(c) == seen) {
        std::unique_lock<std::mutex> lk(sleep_mutex_);
        sleepers_.fetch_add(1);  // seq_cst: pairs with run_erased's store of claim_, then load of sleepers_
        while (gen_of(c = claim_.load()) == seen && !stop_.load()) wake_.wait(lk);
        sleepers_.fetch_sub(1);
      }
    }
    if (stop_.load()) return;
    seen = gen_of(c);
    drain(seen, thread);
  }
}

void ThreadPool::note_parallel(int64_t ran_ns, int64_t stall_ns, int64_t now) {
  parallel_ns_ += ran_ns;
  stall_ns_ += stall_ns;
  if (parallel_ns_ > kShareWindowNs) parallel_ns_ /= 2, stall_ns_ /= 2;
  if (stall_ns == 0) return;
  ++contended_runs_;
  // stall share > (1 - 1/n) / 2, in integers: 2n·stall > (n - 1)·parallel.
  if (2 * int64_t(n_threads_) * stall_ns_ <= int64_t(n_threads_ - 1) * parallel_ns_) return;
  backoff_ns_ = backoff_ns_ == 0 ? backoff_.min_ns : std::min(2 * backoff_ns_, backoff_.max_ns);
  serial_until_ns_ = now + backoff_ns_;
  clean_since_ns_ = serial_until_ns_;
}

void ThreadPool::run_erased(int64_t n_tasks, TaskFn fn, void* ctx) {
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  parked_.store(false, std::memory_order_relaxed);
  int64_t t_start = now_ns();
  if (t_start < serial_until_ns_) {
    ++serialised_runs_;
    std::exception_ptr first;
    for (int64_t i = 0; i < n_tasks; ++i) {
      try {
        fn(ctx, i, 0);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    return;
  }
  if (workers_.empty()) start_workers();
  for (int64_t base = 0; base < n_tasks; base += kMaxTasks) {
    const int64_t t_begin = t_start;
    const uint32_t count = uint32_t(std::min(kMaxTasks, n_tasks - base));
    fn_ = fn;
    ctx_ = ctx;
    task_base_ = base;
    done_.store(0, std::memory_order_relaxed);
    const uint32_t gen = gen_of(claim_.load(std::memory_order_relaxed)) + 1;
    claim_.store(claim_word(gen, count, 0));  // seq_cst: publishes the job fields above
    if (sleepers_.load() > 0) {
      { std::lock_guard<std::mutex> lk(sleep_mutex_); }  // a worker between its check and its wait is now waiting
      wake_.notify_all();
    }
    const int64_t own = drain(gen, 0);
    // Every task is claimed; wait for those still running on workers.
    int64_t stall = 0;
    if (done_.load(std::memory_order_acquire) != int64_t(count)) {
      const int64_t t_drained = now_ns(), yield_at = t_drained + kCallerSpinNs;
      for (int i = 1; done_.load(std::memory_order_acquire) != int64_t(count); ++i) {
        ENDOR_CPU_RELAX();
        if ((i & 255) == 0 && now_ns() > yield_at) sched_yield();
      }
      const int64_t t_done = now_ns(), waited = t_done - t_drained;
      const int64_t per_task = own > 0 ? (t_drained - t_start) / own : 0;
      if (waited > kPreemptedWaitNs && waited > 4 * per_task) stall = waited;
      t_start = t_done;
    } else {
      t_start = now_ns();
    }
    note_parallel(t_start - t_begin, stall, t_start);
    if (backoff_ns_ != 0 && t_start - clean_since_ns_ > std::max(kCleanResetNs, 2 * backoff_ns_)) backoff_ns_ = 0;
    if (error_) {  // no task of this run is running any more: the first exception goes to the caller
      std::exception_ptr e;
      std::swap(e, error_);
      std::rethrow_exception(e);
    }
  }
}

}  // namespace endor::cpu::detail
