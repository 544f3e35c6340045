// The global random stream that manual_seed resets (runtime/kernels/factories.cpp),
// for kernels that draw elsewhere (training-mode dropout's Philox mask).
#pragma once

#include <cstdint>
#include <utility>

namespace kiln::detail {

// Reserves n draws of the stream: (seed, a first counter no other reservation
// since manual_seed returned). Element i of a draw is a pure function of
// (seed, counter, i), so results do not depend on the thread count.
std::pair<uint64_t, uint64_t> reserve_random_stream(int64_t n);

} // namespace kiln::detail
