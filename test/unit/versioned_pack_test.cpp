// codegen/gemm/versioned_pack.h, the packed-weight cache of kiln's GEMM and
// conv steps: a packing is kept while the weight's address and version stay
// the same and made again when either moves (in-place ops, data_ptr(), a
// rebinding, from_blob memory every time); a packing handed out stays valid
// while other callers repack; retired packings are freed once no caller uses
// them; concurrent callers on weights that keep replacing each other each get
// the packing of the weight they passed (the TSan stage runs this).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "codegen/gemm/versioned_pack.h"
#include "runtime/ops.h"

#include "concurrency_test_util.h"

using namespace kiln;
using kiln::codegen::gemm::VersionedPack;

namespace {

// The "packing": a copy of the weight's values (shared, so a test can watch it die).
using Pack = std::shared_ptr<const std::vector<float>>;

Pack copy_of(const Tensor &w) {
  const float *p = static_cast<const float *>(w.raw_data());
  return std::make_shared<const std::vector<float>>(p, p + w.numel());
}

} // namespace

TEST(VersionedPack, RepacksExactlyWhenTheWeightMoves) {
  VersionedPack<Pack> cache;
  Tensor w = full({8}, 1.0f);
  auto get = [&](const Tensor &t) { return (*cache.get(t, copy_of))->at(0); };
  EXPECT_EQ(get(w), 1.f);
  EXPECT_EQ(get(w), 1.f);
  EXPECT_EQ(cache.packs(), 1) << "an unchanged weight is packed once";
  w.add_(2.0);
  EXPECT_EQ(get(w), 3.f);
  EXPECT_EQ(cache.packs(), 2) << "an in-place op moves the version";
  static_cast<float *>(w.data_ptr())[0] = 7.f;
  EXPECT_EQ(get(w), 7.f);
  EXPECT_EQ(cache.packs(), 3) << "data_ptr() counts as a write";
  Tensor other = full({8}, 5.0f); // the captured tensor rebound: another address
  EXPECT_EQ(get(other), 5.f);
  EXPECT_EQ(get(w), 7.f);
  EXPECT_EQ(cache.packs(), 5);
  std::vector<float> user(8, 4.f); // from_blob memory has no version: packed every time
  Tensor blob = from_blob(user.data(), {8});
  EXPECT_EQ(get(blob), 4.f);
  user[0] = 6.f;
  EXPECT_EQ(get(blob), 6.f);
  EXPECT_EQ(cache.packs(), 7);
}

TEST(VersionedPack, AHeldPackingOutlivesARepackAndIsFreedAfter) {
  VersionedPack<Pack> cache;
  Tensor w = full({4}, 1.0f);
  std::weak_ptr<const std::vector<float>> old;
  {
    auto held = cache.get(w, copy_of);
    old = *held;
    w.add_(1.0);
    {
      auto now = cache.get(w, copy_of); // repacks while `held` is in use
      EXPECT_EQ((*now)->at(0), 2.f);
      EXPECT_EQ((*held)->at(0), 1.f) << "the held packing changed under its holder";
      EXPECT_EQ(cache.retired(), 1u);
    }
    EXPECT_FALSE(old.expired());
  }
  EXPECT_EQ(cache.retired(), 0u) << "the last caller to leave frees the retired packing";
  EXPECT_TRUE(old.expired());
  // A caller alone frees the previous packing at once when it repacks.
  auto first = cache.get(w, copy_of);
  std::weak_ptr<const std::vector<float>> before = *first;
  { auto drop = std::move(first); }
  w.add_(1.0);
  auto again = cache.get(w, copy_of);
  EXPECT_TRUE(before.expired());
  EXPECT_EQ(cache.retired(), 0u);
}

TEST(VersionedPack, AThrowingPackLeavesTheCacheAsItWas) {
  VersionedPack<Pack> cache;
  Tensor w = full({4}, 1.0f);
  EXPECT_EQ((*cache.get(w, copy_of))->at(0), 1.f);
  w.add_(1.0);
  EXPECT_THROW(cache.get(w, [](const Tensor &) -> Pack { throw Error("no memory"); }), Error);
  EXPECT_EQ((*cache.get(w, copy_of))->at(0), 2.f);
  EXPECT_EQ(cache.packs(), 2);
  EXPECT_EQ(cache.retired(), 0u);
}

// Four callers on three weights that keep replacing each other: nearly every
// call repacks and retires the packing another caller may be reading. Each
// must read the packing of the weight it passed, whole.
TEST(VersionedPack, ConcurrentCallersOnAlternatingWeights) {
  VersionedPack<Pack> cache;
  std::vector<Tensor> ws;
  for (int i = 0; i < 3; ++i) ws.push_back(full({256}, float(i)));
  const int bad = kiln::test::concurrent_failures(4, 300, [&](int t, int i) {
    const int which = (t + i) % 3;
    auto p = cache.get(ws[size_t(which)], copy_of);
    for (float v : **p)
      if (v != float(which)) return false;
    return true;
  });
  EXPECT_EQ(bad, 0);
  EXPECT_GT(cache.packs(), 3);
  EXPECT_EQ(cache.retired(), 0u) << "retired packings outlived every caller";
}
