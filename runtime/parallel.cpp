#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

__attribute__((tls_model("initial-exec"))) thread_local bool t_in_region = false;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until `ready()` holds or the spinning is over (then returns ready()):
// first on the CPU with pause for up to kPauseSpin, then with yields. A compiled
// call's parallel steps come microseconds apart; on a virtual machine each
// sched_yield is a system call that traps to the hypervisor (perf of train-mlp's
// compiled step on this 2-vCPU VM: a quarter of the samples in pvm_irq_enable
// under sched_yield), so a thread that only yielded saw the next job, or the
// end of the last chunk, microseconds late, and the caller often ran both
// halves of a small job itself. With the pause phase train-mlp's compiled step
// went from 154-163 us to 145-155 us (kiln bench train-mlp, the two builds
// alternating). Yielding after it still gives a loaded machine's other
// processes the CPU.
template <class Ready> bool spin_until(Ready ready, int yields) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kPauseSpin = std::chrono::microseconds(50);
  const Clock::time_point until = Clock::now() + kPauseSpin;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if (i % 64 == 0 && Clock::now() >= until) break;
  }
  for (int i = 0; i < yields; ++i) {
    if (ready()) return true;
    std::this_thread::yield();
  }
  return ready();
}

// One job at a time. A worker copies the job under the lock; it claims chunks
// from next_, which carries the job's generation beside the chunk index, so a
// late worker (one the OS kept off a core until the job was over) finds the
// generation moved and claims nothing: it can never run a chunk of the next
// job with stale data, and the next job need not wait for it to wake up (it
// used to: on a loaded machine that stalled the caller for milliseconds while
// the idle worker waited for a core).
class ThreadPool {
public:
  explicit ThreadPool(int threads) { start(threads); }
  ~ThreadPool() { stop(); }

  int size() const { return int(workers_.size()) + 1; }

  void resize(int threads) {
    std::lock_guard<std::mutex> one_job(job_mu_);
    stop();
    start(threads);
  }

  void run(int64_t begin, int64_t end, int64_t chunk, void (*fn)(void *, int64_t, int64_t), void *ctx) {
    std::lock_guard<std::mutex> one_job(job_mu_); // callers from several threads take turns
    // Chunk indices live in next_'s low 32 bits.
    chunk = std::max(chunk, (end - begin) / kMaxChunks + 1);
    Job job{begin, end, chunk, (end - begin + chunk - 1) / chunk, fn, ctx, 0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      job.gen = uint32_t(generation_.load() + 1);
      job_ = job;
      done_.store(0);
      error_ = nullptr;
      next_.store(uint64_t(job.gen) << 32);
      generation_.fetch_add(1);
    }
    cv_.notify_all();
    execute(job);
    if (!spin_until([&] { return done_.load(std::memory_order_acquire) >= job.nchunks; }, 2000)) {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [&] { return done_.load() >= job.nchunks; });
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

private:
  static constexpr int64_t kMaxChunks = int64_t(1) << 31;

  struct Job {
    int64_t begin = 0, end = 0, chunk = 1, nchunks = 0;
    void (*fn)(void *, int64_t, int64_t) = nullptr;
    void *ctx = nullptr;
    uint32_t gen = 0; // the low 32 bits of generation_ that published it
  };

  // The next chunk index of `job`, or -1 when its chunks are all claimed or a
  // later job has replaced it.
  int64_t claim(const Job &job) {
    uint64_t v = next_.load(std::memory_order_acquire);
    for (;;) {
      if (uint32_t(v >> 32) != job.gen) return -1;
      const int64_t i = int64_t(v & 0xffffffffu);
      if (i >= job.nchunks) return -1;
      if (next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return i;
    }
  }

  void execute(const Job &job) {
    bool saved = t_in_region;
    t_in_region = true;
    for (;;) {
      const int64_t i = claim(job);
      if (i < 0) break;
      int64_t b = job.begin + i * job.chunk;
      int64_t e = std::min(job.end, b + job.chunk);
      try {
        job.fn(job.ctx, b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == job.nchunks) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
    t_in_region = saved;
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; }, 1000);
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });
        if (stopping_) return;
        seen = generation_.load();
        job = job_;
      }
      execute(job);
    }
  }

  // All or nothing: when the system refuses a thread (ulimit, memory), the
  // workers started so far are stopped and a kiln::Error says why.
  void start(int threads) {
    stopping_ = false;
    try {
      for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::system_error &e) {
      size_t started = workers_.size();
      stop();
      KILN_FAIL("set_num_threads: could only start ", started + 1, " of ", threads, " threads: ", e.what());
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto &t : workers_) t.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex job_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  Job job_;
  std::atomic<uint64_t> next_{0}; // (job generation << 32) | next chunk index
  std::atomic<int64_t> done_{0};
  std::atomic<uint64_t> generation_{0};
  std::exception_ptr error_;
  bool stopping_ = false;
};

int default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

constexpr int kMaxThreads = 1024;

std::mutex g_pool_mu;
// Read on every parallel_for (each JIT kernel launch): atomic, so reads take no lock.
std::atomic<int> g_num_threads{default_threads()};
ThreadPool *g_pool = nullptr; // created on first use, never destroyed (workers may outlive statics)

ThreadPool &pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) g_pool = new ThreadPool(g_num_threads.load());
  return *g_pool;
}

} // namespace

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: n must be >= 1, got ", n);
  // Far above any core count kiln could use; a typo like 100000 would
  // otherwise try to start that many threads.
  KILN_CHECK(n <= kMaxThreads, "set_num_threads: n must be <= ", kMaxThreads, ", got ", n);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (g_pool && g_pool->size() != n) {
    try {
      g_pool->resize(n);
    } catch (const Error &) {
      // The pool runs on the calling thread alone now.
      g_num_threads.store(g_pool->size(), std::memory_order_relaxed);
      throw;
    }
  }
  g_num_threads.store(n, std::memory_order_relaxed);
}

int get_num_threads() { return g_num_threads.load(std::memory_order_relaxed); }

bool in_parallel_region() { return t_in_region; }

SerialRegion::SerialRegion() : saved_(t_in_region) { t_in_region = true; }
SerialRegion::~SerialRegion() { t_in_region = saved_; }

extern "C" void kiln_parallel_for(int64_t begin, int64_t end, int64_t grain,
                                  void (*fn)(void *, int64_t, int64_t), void *ctx) {
  if (end <= begin) return;
  int threads = get_num_threads();
  int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  if (threads <= 1 || n <= grain || t_in_region) {
    fn(ctx, begin, end);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  int64_t chunk = (n + chunks - 1) / chunks;
  pool().run(begin, end, chunk, fn, ctx);
}

extern "C" void kiln_parallel_for_chunks(int64_t begin, int64_t end, int64_t chunk,
                                         void (*fn)(void *, int64_t, int64_t), void *ctx) {
  if (end <= begin) return;
  chunk = std::max<int64_t>(chunk, 1);
  if (get_num_threads() <= 1 || end - begin <= chunk || t_in_region) {
    fn(ctx, begin, end);
    return;
  }
  pool().run(begin, end, chunk, fn, ctx);
}

} // namespace kiln
