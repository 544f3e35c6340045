// Uniform adapters of the view ops (runtime/tensor.cpp): run_op against the
// typed call, and what KILN_TRACE records replayed through the adapter.
#include "unit/shape_test_util.h"

#include "runtime/view_internal.h"

using namespace kiln;
using namespace shape_test;

namespace {

// Same view: shape, strides, offset, shared storage, values.
void expect_same_view(const Tensor &got, const Tensor &want, const Tensor &base) {
  EXPECT_EQ(got.sizes().vec(), want.sizes().vec());
  EXPECT_EQ(got.strides().vec(), want.strides().vec());
  EXPECT_EQ(got.storage_offset(), want.storage_offset());
  EXPECT_TRUE(got.is_alias_of(base));
  expect_same(got, want);
}

// Checks run_op(id, {x}, attrs) against want, and that tracing `typed` records
// (id, attrs) and replays to the same view.
template <class F> void check_view_op(OpId id, const Tensor &x, const Attrs &attrs, F typed) {
  Tensor want = typed();
  expect_same_view(run_op(id, {x}, attrs).at(0), want, x);
  Tensor t = traced(typed);
  EXPECT_EQ(recorded().id, id);
  EXPECT_EQ(recorded().calls, 1);
  EXPECT_EQ(recorded().attrs, attrs);
  expect_same_view(t, want, x);
}

} // namespace

TEST(ViewAdapters, View) {
  Tensor x = filled({2, 3, 4}, kFloat32);
  check_view_op(OpId::View, x, {Idx{6, 4}}, [&] { return x.view({6, 4}); });
  check_view_op(OpId::View, x, {Idx{2, 12}}, [&] { return x.view({2, -1}); }); // -1 recorded inferred
  Tensor s = x.slice(1, 0, 2); // [2, 2, 4], non-contiguous but viewable as [2, 8]
  check_view_op(OpId::View, s, {Idx{2, 8}}, [&] { return s.view({2, 8}); });
  Tensor e = filled({0, 3}, kInt64);
  check_view_op(OpId::View, e, {Idx{3, 0}}, [&] { return e.view({3, 0}); });
}

TEST(ViewAdapters, ViewErrorIsReportedWhileTracing) {
  Tensor x = filled({2, 3}, kFloat32).t();
  expect_error([&] { x.view({6}); }, {"view", "[6]", "[3, 2]"});
  expect_error([&] { traced([&] { return x.view({6}); }); }, {"view", "[6]", "[3, 2]"});
  EXPECT_EQ(recorded().calls, 0);
}

TEST(ViewAdapters, Reshape) {
  Tensor x = filled({2, 3, 4}, kInt32);
  check_view_op(OpId::Reshape, x, {Idx{4, 6}}, [&] { return x.reshape({4, -1}); });
  check_view_op(OpId::Reshape, x, {Idx{24}}, [&] { return x.flatten(); }); // flatten records reshape
  Tensor one = filled({1}, kFloat64);
  check_view_op(OpId::Reshape, one, {Idx{}}, [&] { return one.reshape({}); });
  // Not viewable: reshape copies; the adapter gives the same values.
  Tensor t = transposed({3, 4}, kInt64);
  Tensor r = run_op(OpId::Reshape, {t}, {Idx{12}}).at(0);
  expect_values(r, {12}, [&](const Idx &i) { return get(t, {i[0] / 4, i[0] % 4}); });
  expect_same(r, t.reshape({-1}));
}

TEST(ViewAdapters, TransposePermute) {
  Tensor x = filled({2, 3, 4}, kFloat64);
  check_view_op(OpId::Transpose, x, {int64_t(0), int64_t(2)}, [&] { return x.transpose(0, -1); });
  Tensor m = filled({3, 5}, kBool);
  check_view_op(OpId::Transpose, m, {int64_t(0), int64_t(1)}, [&] { return m.t(); });
  check_view_op(OpId::Permute, x, {Idx{2, 0, 1}}, [&] { return x.permute({-1, 0, 1}); });
  Tensor s = filled({}, kFloat32);
  check_view_op(OpId::Permute, s, {Idx{}}, [&] { return s.permute({}); });
}

TEST(ViewAdapters, SliceSelectNarrow) {
  Tensor x = filled({5, 6}, kInt64).t(); // [6, 5], non-contiguous
  check_view_op(OpId::Slice, x, {int64_t(0), int64_t(1), int64_t(5), int64_t(2)},
                [&] { return x.slice(0, 1, -1, 2); });
  check_view_op(OpId::Slice, x, {int64_t(1), int64_t(0), int64_t(5), int64_t(1)}, [&] { return x.slice(-1); });
  check_view_op(OpId::Slice, x, {int64_t(1), int64_t(5), int64_t(5), int64_t(1)},
                [&] { return x.slice(1, 10, 20); }); // clamped, empty
  check_view_op(OpId::Slice, x, {int64_t(0), int64_t(2), int64_t(5), int64_t(1)}, [&] { return x.narrow(0, 2, 3); });
  // none bounds are accepted by the adapter as the typed call's defaults.
  expect_same_view(run_op(OpId::Slice, {x}, {int64_t(0), AttrValue(), AttrValue(), int64_t(3)}).at(0),
                   x.slice(0, std::nullopt, std::nullopt, 3), x);
  check_view_op(OpId::Select, x, {int64_t(1), int64_t(4)}, [&] { return x.select(-1, -1); });
  check_view_op(OpId::Select, x, {int64_t(0), int64_t(2)}, [&] { return x[2]; });
}

TEST(ViewAdapters, UnsqueezeExpandAsStrided) {
  Tensor x = filled({3, 4}, kFloat32).slice(1, 1, 3); // [3, 2]
  check_view_op(OpId::Unsqueeze, x, {int64_t(2)}, [&] { return x.unsqueeze(-1); });
  check_view_op(OpId::Unsqueeze, x, {int64_t(0)}, [&] { return x.unsqueeze(0); });
  Tensor c = filled({3, 1}, kInt32);
  check_view_op(OpId::Expand, c, {Idx{2, 3, 5}}, [&] { return c.expand({2, -1, 5}); });
  check_view_op(OpId::Expand, c, {Idx{3, 0}}, [&] { return c.expand({3, 0}); });
  Tensor b = filled({12}, kFloat64);
  check_view_op(OpId::AsStrided, b, {Idx{3, 2}, Idx{1, 4}, int64_t(2)}, [&] { return b.as_strided({3, 2}, {1, 4}, 2); });
  Tensor off = b.slice(0, 3);
  check_view_op(OpId::AsStrided, off, {Idx{2, 2}, Idx{2, 1}, int64_t(3)},
                [&] { return off.as_strided({2, 2}, {2, 1}); }); // offset recorded resolved
  expect_same_view(run_op(OpId::AsStrided, {off}, {Idx{2}, Idx{1}, AttrValue()}).at(0), off.as_strided({2}, {1}), b);
}

TEST(ViewAdapters, SqueezeRecordsDimsList) {
  Tensor x = filled({1, 3, 1, 1}, kFloat32).transpose(1, 3); // [1, 1, 1, 3]
  check_view_op(OpId::Squeeze, x, {Idx{0, 1, 2}}, [&] { return x.squeeze(); });
  check_view_op(OpId::Squeeze, x, {Idx{2}}, [&] { return x.squeeze(-2); });
  check_view_op(OpId::Squeeze, x, {Idx{}}, [&] { return x.squeeze(3); }); // size 3: kept
  Tensor s = filled({}, kInt64);
  check_view_op(OpId::Squeeze, s, {Idx{}}, [&] { return s.squeeze(0); });
}

TEST(ViewAdapters, SqueezeDimsListForm) {
  Tensor x = filled({1, 3, 1, 2}, kInt32);
  // Listed dims of size 1 go, listed dims of other sizes stay, as torch.squeeze(x, dims).
  Tensor a = detail::squeeze_dims(x, {-2, 1, 0});
  expect_values(a, {3, 2}, [&](const Idx &i) { return get(x, {0, i[0], 0, i[1]}); });
  EXPECT_TRUE(a.is_alias_of(x));
  expect_same_view(run_op(OpId::Squeeze, {x}, {Idx{2, 1}}).at(0), x.squeeze(2), x);
  Tensor t = traced([&] { return detail::squeeze_dims(x, {3, 2, 0}); });
  EXPECT_EQ(recorded().attrs, (Attrs{Idx{0, 2}})); // only size-1 dims, wrapped and sorted
  expect_same_view(t, x.squeeze(0).squeeze(1), x);
  expect_error([&] { detail::squeeze_dims(x, {0, -4}); }, {"squeeze", "0", "more than once"});
  expect_error([&] { detail::squeeze_dims(x, {4}); }, {"squeeze", "dim", "4"});
  Tensor e = filled({0, 1}, kFloat32);
  EXPECT_EQ(detail::squeeze_dims(e, {0, 1}).sizes().vec(), (Idx{0}));
}

TEST(ViewAdapters, MetaInputsGiveMetaViews) {
  Tensor m = meta({2, 1, 6});
  EXPECT_TRUE(run_op(OpId::Squeeze, {m}, {Idx{1}}).at(0).is_meta());
  EXPECT_EQ(run_op(OpId::View, {m}, {Idx{3, 4}}).at(0).sizes().vec(), (Idx{3, 4}));
  EXPECT_EQ(run_op(OpId::Permute, {m}, {Idx{2, 1, 0}}).at(0).sizes().vec(), (Idx{6, 1, 2}));
  EXPECT_EQ(run_op(OpId::Expand, {m}, {Idx{5, 2, 3, 6}}).at(0).sizes().vec(), (Idx{5, 2, 3, 6}));
}
