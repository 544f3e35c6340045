// The caching allocator behind every owning Storage.
//
// A fresh mapping per large result page-faults on every touch (PyTorch 1.13's
// eager W1 ran ~16x slower with plain malloc here), so freed blocks are kept by
// size class and handed out again. Small blocks are cached per thread without
// locking, large ones in one shared pool. All blocks are 64-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

// Throws kiln::Error (never std::bad_alloc) when memory cannot be had.
void *cached_alloc(size_t nbytes);
void cached_free(void *p, size_t nbytes);

struct AllocatorStats {
  uint64_t system_allocs = 0; // blocks the cache had to get from the system allocator
  size_t cached_bytes = 0;    // bytes held in the shared pool now
  // Since the last reset_peak_memory_stats() (zeros before the first): bytes
  // handed out minus bytes given back (may dip below zero: blocks allocated
  // before the reset are freed after it), and the highest that reached.
  int64_t allocated_bytes = 0;
  int64_t peak_allocated_bytes = 0;
};
AllocatorStats allocator_stats();
// Starts (or restarts) counting allocated bytes and their peak from zero, as
// torch.cuda.reset_peak_memory_stats does; counting stays on from then (one
// relaxed atomic add per allocation and free), off before the first call.
void reset_peak_memory_stats();
// Returns every cached block of the shared pool and this thread's cache (and
// its scratch buffers) to the system.
void empty_cache();

// Per-thread scratch for kernels that need a temporary per chunk of work (an
// im2col block, a GEMM tile): a 64-byte aligned buffer of at least nbytes that
// is grown on demand and then reused by every later request on this thread, so
// a steady-state compiled call allocates none. The contents are undefined, and
// a slot has one user at a time on a thread (each slot is its own buffer, so a
// conv block's columns and a GEMM tile can be live together). The buffers live
// until the thread exits or calls empty_cache().
enum class ScratchSlot { ConvColumns, GemmTile, ConvWeight, ConvInput, Count };
void *thread_scratch(ScratchSlot slot, size_t nbytes);

} // namespace kiln
