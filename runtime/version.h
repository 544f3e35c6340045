// Version counters of tensor memory (torch's Tensor._version): bumped by every
// in-place op that writes a storage, through any view of it. Compiled
// functions recompute what they derived from a captured tensor once its
// version moved (frontend/param_fold.h).
//
// data_ptr() counts as a write too: it hands out a writable pointer, and
// kiln promises that a weight written through it is seen by compiled
// functions (torch counts only ops).
//
// The counters live beside the storages, for the storages someone watches:
// an in-place op on an unwatched storage costs one relaxed load. (A counter
// inside Storage, as torch keeps it, would change runtime/tensor.h, which
// every file includes.) A storage's counter starts at 0 when it is first
// watched and is dropped with the storage.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace kiln {

// How many in-place ops have written t's memory since it was first watched
// (watching it from now on); 0 for an undefined or meta tensor.
int64_t tensor_version(const Tensor &t);

namespace detail {

using VersionCounter = std::shared_ptr<const std::atomic<uint64_t>>;

// t's counter (created at 0 if new); null for an undefined or meta tensor.
// Keeps counting while the storage lives, whoever holds the pointer.
VersionCounter watch_version(const Tensor &t);

// Called by every in-place op once it is about to write `t` (a real tensor).
void bump_version(const Tensor &t);

// Called when a storage is freed: its counter (if any) goes with it.
void forget_version(const Storage *s);

// Memory a from_blob tensor borrows can change without any op, so it has no
// meaningful version: compiled functions derive nothing from it once.
void note_borrowed(const Storage *s);
bool is_borrowed(const Tensor &t);

} // namespace detail
} // namespace kiln
