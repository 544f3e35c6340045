// A packing derived from a weight tensor (GEMM B panels, conv A panels), kept
// while the weight's memory and version stay the same and rebuilt when they
// move: one mechanism for every packed-weight cache of codegen/.
//
//   VersionedPack<PackedB<float>> cache;                          // a member of the step
//   auto p = cache.get(w, [&](const Tensor &w) { return pack_b_strided<float>(...); });
//   use(*p);                                                       // valid while p lives
//
// A packing is current while the weight's data pointer and its version counter
// (runtime/version.h: every in-place op, and data_ptr(), moves it) equal what
// they were when it was packed; the entry keeps the weight's storage alive, so
// no other tensor can take its address meanwhile. A weight with no counter
// (from_blob memory, written without ops) is never current: packed on every get.
//
// Readers take no lock. The current entry is published through an
// std::atomic<const Entry *> (no std::atomic<std::shared_ptr>: TSan reported a
// race inside libstdc++'s implementation of it); a repack runs under a mutex,
// publishes the new entry and retires the old one. A retired entry is freed
// once no reader is between get() and the end of its Ref: readers_ counts
// them, and every operation on readers_ and on the published pointer is
// seq_cst, so a writer that reads readers_ == (itself) after publishing knows
// every reader that could hold the old pointer has released it (its release
// happens-before the free). Retired entries are freed by the repacking reader
// when it is alone, else by the last reader to leave, else with the cache: the
// memory held is the current packing plus those still in use.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/tensor.h"
#include "runtime/version.h"

namespace kiln::codegen::gemm {

template <class P> class VersionedPack {
  struct Entry {
    P pack;
    Tensor live; // the weight's storage, so that its address stays its own
    const void *src = nullptr;
    kiln::detail::VersionCounter counter; // null: no version (packed on every get)
    uint64_t version = 0;
    bool current(const Tensor &w) const {
      return counter && w.raw_data() == src && counter->load(std::memory_order_acquire) == version;
    }
  };

public:
  // The packing handed out by get(): valid while the Ref lives, whatever other
  // callers do meanwhile.
  class Ref {
  public:
    Ref(Ref &&o) noexcept : owner_(std::exchange(o.owner_, nullptr)), e_(o.e_) {}
    Ref(const Ref &) = delete;
    Ref &operator=(const Ref &) = delete;
    Ref &operator=(Ref &&) = delete;
    ~Ref() {
      if (owner_) owner_->release();
    }
    const P &operator*() const { return e_->pack; }
    const P *operator->() const { return &e_->pack; }

  private:
    friend class VersionedPack;
    Ref(const VersionedPack *owner, const Entry *e) : owner_(owner), e_(e) {}
    const VersionedPack *owner_;
    const Entry *e_;
  };

  VersionedPack() = default;
  VersionedPack(const VersionedPack &) = delete;
  VersionedPack &operator=(const VersionedPack &) = delete;
  ~VersionedPack() { delete cur_.load(std::memory_order_relaxed); }

  // The packing of `w` as it is now: the kept one when current, else
  // pack(w) -> P (run under the mutex; one packer at a time), kept from now on.
  // An exception from pack leaves the cache as it was.
  template <class Pack> Ref get(const Tensor &w, Pack &&pack) const {
    readers_.fetch_add(1, std::memory_order_seq_cst);
    const Entry *e = cur_.load(std::memory_order_seq_cst);
    if (e && e->current(w)) [[likely]]
      return Ref(this, e);
    try {
      return Ref(this, repack(w, pack));
    } catch (...) {
      release();
      throw;
    }
  }

  // How many packings were made (tests check that updates repack and calls do not).
  int64_t packs() const { return packs_.load(std::memory_order_relaxed); }
  // How many retired packings are still held (tests check they are freed).
  size_t retired() const {
    std::lock_guard<std::mutex> lock(mu_);
    return retired_.size();
  }

private:
  template <class Pack> const Entry *repack(const Tensor &w, Pack &pack) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry *e = cur_.load(std::memory_order_relaxed); // only written under mu_
    if (e && e->current(w)) return e;                      // another caller packed it meanwhile
    auto fresh = std::make_unique<Entry>();
    fresh->counter = kiln::detail::is_borrowed(w) ? nullptr : kiln::detail::watch_version(w);
    // Read before packing: a write while packing moves it past `version`, and
    // the next get() packs again.
    fresh->version = fresh->counter ? fresh->counter->load(std::memory_order_acquire) : 0;
    fresh->pack = pack(w);
    fresh->live = w;
    fresh->src = w.raw_data();
    if (e) retired_.emplace_back(e);
    e = fresh.release();
    cur_.store(e, std::memory_order_seq_cst);
    packs_.fetch_add(1, std::memory_order_relaxed);
    if (readers_.load(std::memory_order_seq_cst) == 1) retired_.clear(); // only this caller: none is in use
    have_retired_.store(!retired_.empty(), std::memory_order_relaxed);
    return e;
  }

  void release() const {
    if (readers_.fetch_sub(1, std::memory_order_seq_cst) != 1 || !have_retired_.load(std::memory_order_relaxed)) return;
    // Held only briefly here: a repacker holds mu_ while counted in readers_,
    // so the last reader to leave never waits for a packing.
    std::lock_guard<std::mutex> lock(mu_);
    if (readers_.load(std::memory_order_seq_cst) != 0) return; // a later reader frees them
    retired_.clear();
    have_retired_.store(false, std::memory_order_relaxed);
  }

  mutable std::atomic<const Entry *> cur_{nullptr}; // owned; written under mu_
  mutable std::atomic<int64_t> readers_{0};         // callers between get() and the end of their Ref
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<const Entry>> retired_; // under mu_
  mutable std::atomic<bool> have_retired_{false};
  mutable std::atomic<int64_t> packs_{0};
};

} // namespace kiln::codegen::gemm
