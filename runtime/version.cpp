#include "runtime/version.h"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

namespace kiln {
namespace detail {
namespace {

struct Counters {
  std::shared_mutex mu;
  std::unordered_map<const Storage *, std::shared_ptr<std::atomic<uint64_t>>> by_storage;
  std::atomic<size_t> size{0}; // by_storage.size(), read without the lock
  std::unordered_set<const Storage *> borrowed;
  std::atomic<size_t> borrowed_size{0};
};

Counters &counters() {
  static Counters *c = new Counters; // never destroyed: storages are freed during static destruction too
  return *c;
}

const Storage *storage_of(const Tensor &t) {
  return t.defined() && !t.is_meta() ? t.impl().storage.get() : nullptr;
}

} // namespace

VersionCounter watch_version(const Tensor &t) {
  const Storage *s = storage_of(t);
  if (!s) return nullptr;
  Counters &c = counters();
  std::unique_lock lock(c.mu);
  auto &slot = c.by_storage[s];
  if (!slot) slot = std::make_shared<std::atomic<uint64_t>>(0);
  c.size.store(c.by_storage.size(), std::memory_order_release);
  return slot;
}

void bump_version(const Tensor &t) {
  Counters &c = counters();
  if (c.size.load(std::memory_order_acquire) == 0) return;
  const Storage *s = storage_of(t);
  std::shared_lock lock(c.mu);
  auto it = c.by_storage.find(s);
  if (it != c.by_storage.end()) it->second->fetch_add(1, std::memory_order_acq_rel);
}

void forget_version(const Storage *s) {
  Counters &c = counters();
  if (c.size.load(std::memory_order_acquire) == 0 && c.borrowed_size.load(std::memory_order_acquire) == 0) return;
  std::unique_lock lock(c.mu);
  if (c.by_storage.erase(s)) c.size.store(c.by_storage.size(), std::memory_order_release);
  if (c.borrowed.erase(s)) c.borrowed_size.store(c.borrowed.size(), std::memory_order_release);
}

void note_borrowed(const Storage *s) {
  Counters &c = counters();
  std::unique_lock lock(c.mu);
  c.borrowed.insert(s);
  c.borrowed_size.store(c.borrowed.size(), std::memory_order_release);
}

bool is_borrowed(const Tensor &t) {
  const Storage *s = storage_of(t);
  Counters &c = counters();
  if (!s || c.borrowed_size.load(std::memory_order_acquire) == 0) return false;
  std::shared_lock lock(c.mu);
  return c.borrowed.count(s) > 0;
}

} // namespace detail

int64_t tensor_version(const Tensor &t) {
  detail::VersionCounter v = detail::watch_version(t);
  return v ? int64_t(v->load(std::memory_order_acquire)) : 0;
}

} // namespace kiln
