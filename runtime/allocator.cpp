#include "runtime/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "runtime/error.h"

namespace kiln {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kSmallMax = 32 * 1024;     // per-thread cache up to this size
constexpr size_t kSmallPerClass = 64;       // blocks kept per small class per thread
constexpr size_t kPoolLimit = size_t(4) << 30; // bytes the shared pool may hold

// Size classes: powers of two up to kSmallMax; above that, multiples of 1/8 of
// the power of two below (at most 12.5% waste).
size_t size_class(size_t n) {
  if (n <= kAlign) return kAlign;
  size_t p = size_t(1) << (63 - __builtin_clzll(n - 1) + 1); // next power of two >= n
  if (p <= kSmallMax) return p;
  size_t step = (p / 2) / 8;
  return (n + step - 1) / step * step;
}

void *system_alloc(size_t bytes) {
  void *p = nullptr;
  if (posix_memalign(&p, kAlign, bytes) != 0 || !p)
    KILN_FAIL("out of memory: could not allocate ", bytes, " bytes");
  return p;
}

std::atomic<uint64_t> g_system_allocs{0};

struct SharedPool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void *>> free;
  size_t bytes = 0;

  void *take(size_t cls) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = free.find(cls);
    if (it == free.end() || it->second.empty()) return nullptr;
    void *p = it->second.back();
    it->second.pop_back();
    bytes -= cls;
    return p;
  }
  bool give(void *p, size_t cls) {
    std::lock_guard<std::mutex> lock(mu);
    if (bytes + cls > kPoolLimit) return false;
    free[cls].push_back(p);
    bytes += cls;
    return true;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto &[cls, v] : free)
      for (void *p : v) std::free(p);
    free.clear();
    bytes = 0;
  }
};

SharedPool &pool() {
  static SharedPool *p = new SharedPool; // never destroyed: threads may free after exit handlers
  return *p;
}

// Fixed arrays and a trivially destructible state flag: a tensor freed during
// static destruction (after this thread's cache is gone) goes to the system.
struct ThreadCache {
  static constexpr int kClasses = 10; // 64 B .. kSmallMax
  void *slots[kClasses][kSmallPerClass];
  uint32_t count[kClasses];
  static int index(size_t cls) { return __builtin_ctzll(cls) - 6; }
  void clear() {
    for (int c = 0; c < kClasses; ++c) {
      for (uint32_t i = 0; i < count[c]; ++i) std::free(slots[c][i]);
      count[c] = 0;
    }
  }
};
// initial-exec: these are read on every tensor allocation, and the general TLS
// model of a shared library costs a __tls_get_addr call per access.
#define KILN_FAST_TLS __attribute__((tls_model("initial-exec")))
KILN_FAST_TLS thread_local ThreadCache t_cache; // zero-initialized, trivially destructible
KILN_FAST_TLS thread_local bool t_cache_dead = false;
KILN_FAST_TLS thread_local bool t_reaper_registered = false;
struct ThreadCacheReaper {
  ~ThreadCacheReaper() {
    t_cache.clear();
    t_cache_dead = true;
  }
};
thread_local ThreadCacheReaper t_reaper;

// Touching t_reaper runs its TLS initializer (which registers its destructor);
// do it once per thread, not on every allocation.
inline void register_reaper() {
  if (t_reaper_registered) [[likely]]
    return;
  (void)&t_reaper;
  t_reaper_registered = true;
}

// The thread_scratch() buffers: from the system, freed at thread exit.
struct ThreadScratch {
  void *data[size_t(ScratchSlot::Count)] = {};
  size_t bytes[size_t(ScratchSlot::Count)] = {};
  void clear() {
    for (size_t i = 0; i < size_t(ScratchSlot::Count); ++i) {
      std::free(data[i]);
      data[i] = nullptr;
      bytes[i] = 0;
    }
  }
  ~ThreadScratch() { clear(); }
};
thread_local ThreadScratch t_scratch;

} // namespace

void *thread_scratch(ScratchSlot slot, size_t nbytes) {
  const size_t i = size_t(slot);
  nbytes = std::max<size_t>(nbytes, 1);
  KILN_CHECK(i < size_t(ScratchSlot::Count), "thread_scratch: bad slot ", i);
  if (nbytes <= t_scratch.bytes[i]) [[likely]]
    return t_scratch.data[i];
  // Round up so that a few slightly larger requests do not regrow each time.
  const size_t want = std::max(size_class(nbytes), kAlign);
  void *p = system_alloc(want);
  std::free(t_scratch.data[i]);
  t_scratch.data[i] = p;
  t_scratch.bytes[i] = want;
  return p;
}

namespace {
std::atomic<bool> g_count_bytes{false};
std::atomic<int64_t> g_allocated{0}, g_peak{0};

void count_alloc(size_t cls) {
  const int64_t now = g_allocated.fetch_add(int64_t(cls), std::memory_order_relaxed) + int64_t(cls);
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
} // namespace

void *cached_alloc(size_t nbytes) {
  size_t cls = size_class(nbytes ? nbytes : 1);
  if (g_count_bytes.load(std::memory_order_relaxed)) [[unlikely]]
    count_alloc(cls);
  if (cls <= kSmallMax) {
    if (!t_cache_dead) {
      register_reaper();
      int c = ThreadCache::index(cls);
      if (t_cache.count[c] > 0) return t_cache.slots[c][--t_cache.count[c]];
    }
  } else if (void *p = pool().take(cls)) {
    return p;
  }
  g_system_allocs.fetch_add(1, std::memory_order_relaxed);
  return system_alloc(cls);
}

void cached_free(void *p, size_t nbytes) {
  if (!p) return;
  size_t cls = size_class(nbytes ? nbytes : 1);
  if (g_count_bytes.load(std::memory_order_relaxed)) [[unlikely]]
    g_allocated.fetch_sub(int64_t(cls), std::memory_order_relaxed);
  if (cls <= kSmallMax) {
    int c = ThreadCache::index(cls);
    if (!t_cache_dead && t_cache.count[c] < kSmallPerClass) {
      register_reaper();
      t_cache.slots[c][t_cache.count[c]++] = p;
      return;
    }
    std::free(p);
    return;
  }
  if (!pool().give(p, cls)) std::free(p);
}

AllocatorStats allocator_stats() {
  AllocatorStats s;
  s.system_allocs = g_system_allocs.load();
  s.allocated_bytes = g_allocated.load();
  s.peak_allocated_bytes = g_peak.load();
  std::lock_guard<std::mutex> lock(pool().mu);
  s.cached_bytes = pool().bytes;
  return s;
}

void reset_peak_memory_stats() {
  g_allocated.store(0);
  g_peak.store(0);
  g_count_bytes.store(true);
}

void empty_cache() {
  pool().clear();
  if (!t_cache_dead) t_cache.clear();
  t_scratch.clear();
}

} // namespace kiln
