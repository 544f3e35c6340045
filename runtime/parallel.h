// The runtime thread pool: kiln::set_num_threads(n) sizes it; parallel_for
// splits [begin, end) into chunks of at least `grain` and runs them on the pool
// and the calling thread. Workers spin briefly and then block, so an idle pool
// costs nothing and a busy machine is not made busier (see shared/notes).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kiln {

// The C entry point JIT-compiled kernels call: fn(ctx, chunk_begin, chunk_end).
extern "C" void kiln_parallel_for(int64_t begin, int64_t end, int64_t grain,
                                  void (*fn)(void *ctx, int64_t b, int64_t e), void *ctx);

// [begin, end) in chunks of exactly `chunk` elements (the last may be
// shorter), which the pool's threads and the caller claim one at a time: when
// another tenant delays a thread, the running ones take its chunks instead of
// waiting for it (parallel_for gives each thread one fixed share).
extern "C" void kiln_parallel_for_chunks(int64_t begin, int64_t end, int64_t chunk,
                                         void (*fn)(void *ctx, int64_t b, int64_t e), void *ctx);

// True on a pool worker (nested parallel_for calls run serially), or inside a
// SerialRegion.
bool in_parallel_region();

// While alive, this thread's parallel_for calls and kiln's GEMM run serially on
// it, as on a pool worker. For a compiled call whose steps are all too small to
// gain from a split: each split step leaves half its output in the other core's
// cache, and the next step reads it from there (codegen's Program::serial_).
class SerialRegion {
public:
  SerialRegion();
  ~SerialRegion();
  SerialRegion(const SerialRegion &) = delete;
  SerialRegion &operator=(const SerialRegion &) = delete;

private:
  bool saved_;
};

template <class F> void parallel_for(int64_t begin, int64_t end, int64_t grain, F &&f) {
  if (end <= begin) return;
  if (end - begin <= grain || in_parallel_region()) {
    f(begin, end);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  kiln_parallel_for(
      begin, end, grain, [](void *ctx, int64_t b, int64_t e) { (*static_cast<Fn *>(ctx))(b, e); },
      const_cast<void *>(static_cast<const void *>(&f)));
}

template <class F> void parallel_for_chunks(int64_t begin, int64_t end, int64_t chunk, F &&f) {
  if (end <= begin) return;
  if (in_parallel_region()) {
    f(begin, end);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  kiln_parallel_for_chunks(
      begin, end, chunk, [](void *ctx, int64_t b, int64_t e) { (*static_cast<Fn *>(ctx))(b, e); },
      const_cast<void *>(static_cast<const void *>(&f)));
}

} // namespace kiln
