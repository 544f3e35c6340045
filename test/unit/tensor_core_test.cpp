// Tensor core: metadata, views without copies, promotion and broadcasting rules.
#include <gtest/gtest.h>

#include <kiln/kiln.h>

using namespace kiln;

namespace {
// Fills a contiguous float tensor with 0, 1, 2, ... (no op under test involved).
Tensor iota_f32(IntArrayRef shape) {
  Tensor t = detail::make_tensor(shape, kFloat32);
  float *p = static_cast<float *>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(i);
  return t;
}
// Element at multi-index `idx` read through sizes/strides by hand.
float at(const Tensor &t, std::initializer_list<int64_t> idx) {
  const float *base = static_cast<const float *>(t.impl().storage->data());
  int64_t off = t.storage_offset(), d = 0;
  for (int64_t i : idx) off += i * t.strides()[d++];
  return base[off];
}
} // namespace

TEST(TensorCore, ContiguousMetadata) {
  Tensor t = iota_f32({2, 3, 4});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
}

TEST(TensorCore, TransposeIsAView) {
  Tensor t = iota_f32({2, 3});
  Tensor u = t.transpose(0, 1);
  EXPECT_TRUE(u.is_alias_of(t));
  EXPECT_EQ(u.sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_FALSE(u.is_contiguous());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(u, {j, i}), float(i * 3 + j));
}

TEST(TensorCore, PermuteSliceSelectNarrow) {
  Tensor t = iota_f32({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.sizes().vec(), (std::vector<int64_t>{4, 2, 3}));
  EXPECT_EQ(at(p, {3, 1, 2}), float(1 * 12 + 2 * 4 + 3));
  Tensor s = t.slice(2, 1, 4, 2); // columns 1, 3
  EXPECT_EQ(s.sizes().vec(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(at(s, {1, 2, 1}), float(12 + 8 + 3));
  Tensor sel = t.select(1, -1);
  EXPECT_EQ(sel.sizes().vec(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(at(sel, {1, 0}), float(12 + 8));
  Tensor n = t.narrow(0, 1, 1);
  EXPECT_EQ(at(n, {0, 0, 0}), 12.f);
  EXPECT_EQ(t[1][2].sizes().vec(), (std::vector<int64_t>{4}));
  EXPECT_EQ(at(t[1][2], {3}), float(12 + 8 + 3));
}

TEST(TensorCore, UnsqueezeSqueezeExpandFlatten) {
  Tensor t = iota_f32({3});
  Tensor u = t.unsqueeze(0);
  EXPECT_EQ(u.sizes().vec(), (std::vector<int64_t>{1, 3}));
  Tensor e = u.expand({4, 3});
  EXPECT_EQ(e.strides().vec(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(at(e, {3, 2}), 2.f);
  EXPECT_EQ(u.squeeze().sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(u.squeeze(1).sizes().vec(), (std::vector<int64_t>{1, 3})); // size 3: no-op
  Tensor f = iota_f32({2, 3, 4}).flatten(1);
  EXPECT_EQ(f.sizes().vec(), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(iota_f32({}).flatten().sizes().vec(), (std::vector<int64_t>{1}));
}

TEST(TensorCore, ViewAndReshapeInference) {
  Tensor t = iota_f32({2, 6});
  Tensor v = t.view({3, -1});
  EXPECT_EQ(v.sizes().vec(), (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(v.is_alias_of(t));
  // A transposed tensor cannot be viewed as flat; view throws, reshape would copy.
  EXPECT_THROW(t.t().view({12}), Error);
  EXPECT_THROW(t.view({5, -1}), Error);
}

TEST(TensorCore, AsStridedChecksBounds) {
  Tensor t = iota_f32({6});
  Tensor w = t.as_strided({2, 2}, {1, 2}, 1);
  EXPECT_EQ(at(w, {1, 1}), 4.f);
  EXPECT_THROW(t.as_strided({4, 2}, {2, 1}), Error); // reaches element 7 of 6
}

TEST(TensorCore, ErrorsNameOpAndArgument) {
  Tensor t = iota_f32({2, 3});
  try {
    t.transpose(0, 5);
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("transpose: dim1 5 is out of range"), std::string::npos) << e.what();
  }
  try {
    t.expand({4, 4});
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("expand"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.permute({0, 0}), Error);
  EXPECT_THROW(t.select(0, 2), Error);
  EXPECT_THROW(Tensor().dim(), Error);
  EXPECT_THROW(t.data_ptr<double>(), Error);
  EXPECT_THROW(t.item(), Error);
}

TEST(TensorCore, BroadcastShapes) {
  EXPECT_EQ(detail::broadcast_shapes({2, 1, 4}, {3, 1}, "add").vec(), (std::vector<int64_t>{2, 3, 4}));
  try {
    detail::broadcast_shapes({2, 3}, {4}, "add");
    FAIL();
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "add: shapes [2, 3] and [4] are not broadcastable");
  }
}

TEST(TensorCore, ResultTypeFollowsTorch) {
  Tensor i32 = detail::make_tensor({2}, kInt32), f32 = detail::make_tensor({2}, kFloat32);
  Tensor f64_0d = detail::make_tensor({}, kFloat64), i64_0d = detail::make_tensor({}, kInt64);
  Tensor b = detail::make_tensor({2}, kBool);
  Tensor wf = detail::wrap_scalar(2.5), wi = detail::wrap_scalar(int64_t(3));
  EXPECT_EQ(detail::result_type({&i32, &f32}), kFloat32);
  EXPECT_EQ(detail::result_type({&i32, &wf}), kFloat32);  // int tensor + python float -> default float
  EXPECT_EQ(detail::result_type({&i32, &wi}), kInt32);    // same category: tensor wins
  EXPECT_EQ(detail::result_type({&f32, &f64_0d}), kFloat32);
  EXPECT_EQ(detail::result_type({&i32, &f64_0d}), kFloat64); // higher category 0-dim counts
  EXPECT_EQ(detail::result_type({&i32, &i64_0d}), kInt32);
  EXPECT_EQ(detail::result_type({&b, &wi}), kInt64);
  EXPECT_EQ(detail::result_type({&f64_0d, &wf}), kFloat64);
}

TEST(TensorCore, StorageSharedAndFreed) {
  Tensor t = iota_f32({4});
  Tensor v = t.view({2, 2});
  EXPECT_EQ(t.impl().storage->use_count(), 2);
  v = Tensor();
  EXPECT_EQ(t.impl().storage->use_count(), 1);
}

TEST(TensorCore, ParallelForCoversRangeOnce) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(10007);
    parallel_for(0, 10007, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (auto &h : hits) ASSERT_EQ(h.load(), 1);
  }
  set_num_threads(2);
}

// parallel_for_chunks: chunks of exactly `chunk` elements (the last shorter),
// every element once, at 1, 2 and 3 threads; serial inside a parallel region.
TEST(TensorCore, ParallelForChunksCoversRangeOnceInExactChunks) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (int64_t chunk : {1, 7, 100, 20000}) {
      std::vector<std::atomic<int>> hits(10007);
      std::atomic<int> bad{0};
      parallel_for_chunks(3, 10007, chunk, [&](int64_t b, int64_t e) {
        // One call per chunk on a pool; the whole range at once when it runs serially.
        const bool whole = b == 3 && e == 10007;
        if (!whole && (b - 3) % chunk != 0) ++bad;
        if (!whole && e - b != chunk && e != 10007) ++bad;
        for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
      });
      EXPECT_EQ(bad.load(), 0) << "threads " << threads << " chunk " << chunk;
      for (int64_t i = 0; i < 10007; ++i) ASSERT_EQ(hits[size_t(i)].load(), i >= 3 ? 1 : 0) << i;
    }
  }
  set_num_threads(2);
  std::atomic<int> calls{0};
  parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    parallel_for_chunks(0, 100, 10, [&](int64_t b, int64_t e) {
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, 100);
      ++calls;
    });
  });
  EXPECT_EQ(calls.load(), 2);
  EXPECT_THROW(parallel_for_chunks(0, 1000, 10, [](int64_t b, int64_t e) {
                 if (b <= 500 && 500 < e) throw Error("boom");
               }),
               Error);
}

// Many short jobs back to back (the pool's workers often arrive after the job
// they were woken for is over): each job's chunks run once, with its own
// context, never a chunk of another job.
TEST(TensorCore, ParallelForManyShortJobsRunOwnChunksOnce) {
  set_num_threads(2);
  std::vector<int> seen(4);
  for (int job = 0; job < 20000; ++job) {
    std::fill(seen.begin(), seen.end(), 0);
    const int tag = job;
    std::atomic<int> wrong{0};
    parallel_for_chunks(0, 4, 1, [&, tag](int64_t b, int64_t e) {
      if (tag != job) ++wrong;
      for (int64_t i = b; i < e; ++i) ++seen[size_t(i)];
    });
    ASSERT_EQ(wrong.load(), 0) << "job " << job;
    for (int i = 0; i < 4; ++i) ASSERT_EQ(seen[size_t(i)], 1) << "job " << job << " chunk " << i;
  }
}

TEST(TensorCore, ParallelForPropagatesExceptions) {
  set_num_threads(2);
  EXPECT_THROW(parallel_for(0, 1000, 1, [](int64_t b, int64_t e) {
                 if (b <= 500 && 500 < e) throw Error("boom");
               }),
               Error);
}
