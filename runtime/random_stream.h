// The global random stream that manual_seed resets (runtime/kernels/factories.cpp),
// for kernels that draw elsewhere (training-mode dropout's Philox mask), and the
// per-call blocks through which compiled code draws exactly what eager draws.
#pragma once

#include <cstdint>
#include <utility>

namespace kiln::detail {

// Reserves n draws of the stream: (seed, a first counter no other reservation
// since manual_seed returned). Element i of a draw is a pure function of
// (seed, counter, i), so results do not depend on the thread count.
std::pair<uint64_t, uint64_t> reserve_random_stream(int64_t n);

// While tracing, a random op reserves nothing: it counts its n draws here and
// records the count before it (its offset in the call's block). The tracer
// takes the total (and resets it) when the trace ends.
int64_t count_traced_random_draws(int64_t n);
int64_t take_traced_random_draws();

// RAII, around one compiled call whose trace counted `draws`: reserves them at
// once, so that a random op at `offset` draws the counters eager would have
// reserved for it, whatever order the plan runs its steps in.
class RandomBlock {
public:
  explicit RandomBlock(int64_t draws);
  ~RandomBlock();
  RandomBlock(const RandomBlock &) = delete;
  RandomBlock &operator=(const RandomBlock &) = delete;

private:
  bool active_;
  uint64_t saved_seed_, saved_first_;
};

// The (seed, counter) of n draws at `offset` in the active block, or (no block,
// or offset < 0: an eager call) a fresh reservation of n.
std::pair<uint64_t, uint64_t> random_stream_at(int64_t offset, int64_t n);

} // namespace kiln::detail
