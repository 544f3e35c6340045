// Every op of the table (runtime/ops.def) over every dtype kiln has, called through
// the op table as the IR interpreter and the tracer call it, and the nn functions over
// every dtype through their public names: eager either gives a result or a kiln::Error
// that names the op; the compiled function (fallback off) gives the same result bit for
// bit, NaN included, or the same Error.
// - Elementwise ops: every dtype pairing, fixed attributes per attribute type (an int 1,
//   a float 0.5, a number 2...); inputs hold negatives, zero, and for floats NaN and inf.
// - Reductions, views, scans and the other structured ops: one case each, with the dtypes
//   torch computes in (the others must raise), the result dtypes torch gives, and values
//   against a naive loop over the input's values; three layouts of the input.
// - nn functions: values against the same function run in float64 on the input converted
//   to float64 (tested against naive loops in nn_test and composite_*_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "graph_test_util.h"
#include "runtime/op_registry.h"

using namespace kiln;
using ewt::Layout;
using ewt::Shape;

namespace {

const DType kAll[] = {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};

// A [2, 4] input of `dt`; `salt` changes the values between operands.
Tensor input(DType dt, int salt) {
  static const double ints[] = {-3, -1, 0, 1, 2, 5, 100, -100};
  static const double floats[] = {-2.5, -1, 0, 0.75, NAN, INFINITY, -INFINITY, 3};
  return ewt::make({2, 4}, dt, [&](int64_t i) {
    const size_t k = size_t((i + salt * 3) % 8);
    if (dt == kBool) return double((i + salt) % 3 != 0);
    return is_floating(dt) ? floats[k] : ints[k];
  });
}

// One value per attribute type; none for optional ones (their defaults).
AttrValue attr_for(std::string_view type, std::string_view name) {
  if (type == "int") return name == "dim" ? AttrValue(-1) : AttrValue(1);
  if (type == "float") return AttrValue(0.5);
  if (type == "bool") return AttrValue(false);
  if (type == "Scalar") return AttrValue(2);
  if (type == "ScalarType") return AttrValue(kFloat32);
  if (type == "str") return AttrValue("none");
  return AttrValue(); // int?, float?, Scalar?, str?, ScalarType?
}

bool same_bits(const Tensor &a, const Tensor &b) {
  if (a.dtype() != b.dtype() || a.sizes().vec() != b.sizes().vec()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  if (is_floating(a.dtype())) {
    // NaN payloads may differ; any NaN matches any NaN.
    std::vector<double> u = ewt::values(x), v = ewt::values(y);
    for (size_t i = 0; i < u.size(); ++i)
      if (!(u[i] == v[i] || (std::isnan(u[i]) && std::isnan(v[i])))) return false;
    return true;
  }
  return std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * x.element_size()) == 0;
}

struct Outcome {
  std::vector<Tensor> values;
  std::string error; // kiln::Error's message, or empty
};

template <class F> Outcome outcome(F &&f) {
  Outcome o;
  try {
    o.values = f();
  } catch (const Error &e) {
    o.error = e.what();
  }
  return o;
}

// Runs `fn` on copies of `in` eagerly. An Error must name `op`, and then nothing is
// returned; a result must come back bit for bit from the compiled function too.
std::optional<std::vector<Tensor>> eager_equals_compiled(const TracedFunction &fn, const std::vector<Tensor> &in,
                                                         const std::string &op, const std::string &what) {
  const Outcome eager = outcome([&] { return fn(kiln::testing::copies(in)); });
  if (!eager.error.empty()) {
    EXPECT_NE(eager.error.find(op), std::string::npos) << what << ": the error does not name the op: " << eager.error;
    return std::nullopt;
  }
  CompileOptions o;
  o.fallback = Fallback::Off;
  const Outcome compiled = outcome([&] { return compile(fn, o)(kiln::testing::copies(in)); });
  EXPECT_TRUE(compiled.error.empty()) << what << ": compiled raised " << compiled.error;
  if (!compiled.error.empty()) return std::nullopt;
  EXPECT_EQ(compiled.values.size(), eager.values.size()) << what;
  for (size_t r = 0; r < eager.values.size() && r < compiled.values.size(); ++r)
    EXPECT_TRUE(same_bits(compiled.values[r], eager.values[r]))
        << what << " result " << r << ": compiled " << compiled.values[r] << " eager " << eager.values[r];
  return eager.values;
}

// Relative tolerance of a float result rounded once to `dt` (half an ulp, and a little);
// integers and bool are exact.
double rounding_of(DType dt) {
  switch (dt) {
  case kFloat16: return 1.0 / 1024;
  case kBFloat16: return 1.0 / 128;
  case kFloat32: return 2e-6;
  case kFloat64: return 1e-13;
  default: return 0;
  }
}

} // namespace

TEST(DTypeSweep, EveryElementwiseOpOverEveryDTypeCompiledEqualsEager) {
  int results = 0, errors = 0;
  for (int id = 0; id < kNumOps; ++id) {
    const OpInfo &info = op_info(OpId(id));
    const OpOperands arity = op_operands(OpId(id));
    if (info.kind != OpKind::Elementwise || arity.min != arity.max || arity.min > 3) continue;
    Attrs attrs;
    for (size_t a = 0; a < info.attr_types.size(); ++a) attrs.push_back(attr_for(info.attr_types[a], info.attr_names[a]));
    // Unary ops over each dtype; n-ary ops over each pair (later operands of the second dtype).
    for (DType d0 : kAll)
      for (DType d1 : kAll) {
        if (arity.min == 1 && d1 != d0) continue;
        std::vector<Tensor> in;
        for (size_t k = 0; k < arity.min; ++k) in.push_back(input(k == 0 ? d0 : d1, int(k)));
        const std::string what = std::string(info.mnemonic) + " " + std::string(name(d0)) + "," + std::string(name(d1));
        TracedFunction fn = [&](const std::vector<Tensor> &x) { return run_op(OpId(id), x, attrs); };
        if (eager_equals_compiled(fn, in, std::string(info.mnemonic), what)) ++results;
        else ++errors;
      }
  }
  // Most pairings compute; the refusals (bool arithmetic, integer-only ops on floats...) are fewer.
  EXPECT_GT(results, 1500);
  EXPECT_GT(errors, 50);
  std::printf("elementwise op x dtype pairings: %d computed, %d refused with an Error\n", results, errors);
}

namespace {

using Values = std::vector<double>;

// A [rows, n] row-major list of values, one row at a time.
Values per_row(const Values &v, size_t n, const std::function<double(const Values &)> &f) {
  Values out;
  for (size_t r = 0; r + n <= v.size(); r += n) out.push_back(f(Values(v.begin() + long(r), v.begin() + long(r + n))));
  return out;
}
Values per_row_scan(const Values &v, size_t n, const std::function<double(double, double)> &f) {
  Values out;
  for (size_t r = 0; r + n <= v.size(); r += n) {
    double acc = v[r];
    for (size_t j = 0; j < n; ++j) out.push_back(acc = j == 0 ? v[r] : f(acc, v[r + j]));
  }
  return out;
}
// Index of the first NaN, else of the first extreme value (torch's max(dim) on CPU).
double arg_extreme(const Values &r, bool largest) {
  size_t best = 0;
  for (size_t j = 0; j < r.size(); ++j) {
    if (std::isnan(r[j])) return double(j);
    if (largest ? r[j] > r[best] : r[j] < r[best]) best = j;
  }
  return double(best);
}
double extreme(const Values &r, bool largest) { return r[size_t(arg_extreme(r, largest))]; }
double sum_of(const Values &r) {
  double s = 0;
  for (double x : r) s += x;
  return s;
}
double variance(const Values &r) {
  const double m = sum_of(r) / double(r.size());
  double s = 0;
  for (double x : r) s += (x - m) * (x - m);
  return s / double(r.size() - 1);
}
// Ascending with NaN last (torch's sort), or the k largest first (topk).
Values sorted_row(Values r, bool descending) {
  std::stable_sort(r.begin(), r.end(), [&](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return descending ? std::isnan(a) && !std::isnan(b) : !std::isnan(a) && std::isnan(b);
    return descending ? a > b : a < b;
  });
  return r;
}
Values pick(const Values &v, const std::vector<size_t> &idx) {
  Values out;
  for (size_t i : idx) out.push_back(v[i]);
  return out;
}

bool all_dtypes(DType) { return true; }
bool floats_only(DType d) { return is_floating(d); }
bool not_bool(DType d) { return d != kBool; }
std::vector<DType> same(DType d) { return {d}; }
// sum, prod, cumsum, cumprod: integers and bool give int64.
std::vector<DType> widened(DType d) { return {is_floating(d) ? d : kInt64}; }
std::vector<DType> with_indices(DType d) { return {d, kInt64}; }
std::vector<DType> indices(DType) { return {kInt64}; }

struct StructuredCase {
  std::string op; // mnemonic in the table
  Attrs attrs;
  bool (*computes)(DType);                // the input dtypes torch computes in; the others raise
  std::vector<DType> (*result_dtypes)(DType);
  std::function<std::vector<Values>(const Values &)> ref; // expected values of the leading results
  bool strides_matter = false;            // as_strided reads storage: contiguous input only
};

// Every case's input is [2, 4]; reductions and scans run over dim 1 (its rows of 4).
std::vector<StructuredCase> structured_cases() {
  const std::optional<DType> no_dtype;
  const std::optional<int64_t> none;
  auto rows = [](std::function<double(const Values &)> f) {
    return [f](const Values &v) { return std::vector<Values>{per_row(v, 4, f)}; };
  };
  auto gather = [](std::vector<size_t> idx) {
    return [idx](const Values &v) { return std::vector<Values>{pick(v, idx)}; };
  };
  const std::vector<size_t> ident{0, 1, 2, 3, 4, 5, 6, 7};
  auto triangle = [](bool lower) {
    return [lower](const Values &v) {
      Values out(v);
      for (size_t i = 0; i < 2; ++i)
        for (size_t j = 0; j < 4; ++j)
          if (lower ? j > i : j < i) out[i * 4 + j] = 0;
      return std::vector<Values>{out};
    };
  };
  return {
      {"sum", {std::vector<int64_t>{1}, false, no_dtype}, all_dtypes, widened, rows(sum_of)},
      {"prod", {std::vector<int64_t>{1}, false, no_dtype}, all_dtypes, widened,
       rows([](const Values &r) { return r[0] * r[1] * r[2] * r[3]; })},
      {"mean", {std::vector<int64_t>{1}, false, no_dtype}, floats_only, same,
       rows([](const Values &r) { return sum_of(r) / 4; })},
      {"amax", {std::vector<int64_t>{-1}, false}, all_dtypes, same, rows([](const Values &r) { return extreme(r, true); })},
      {"amin", {std::vector<int64_t>{-1}, false}, all_dtypes, same, rows([](const Values &r) { return extreme(r, false); })},
      {"max", {1, false}, all_dtypes, with_indices,
       [](const Values &v) {
         return std::vector<Values>{per_row(v, 4, [](const Values &r) { return extreme(r, true); }),
                                    per_row(v, 4, [](const Values &r) { return arg_extreme(r, true); })};
       }},
      {"min", {-1, false}, all_dtypes, with_indices,
       [](const Values &v) {
         return std::vector<Values>{per_row(v, 4, [](const Values &r) { return extreme(r, false); }),
                                    per_row(v, 4, [](const Values &r) { return arg_extreme(r, false); })};
       }},
      {"argmax", {std::optional<int64_t>(1), false}, not_bool, indices,
       rows([](const Values &r) { return arg_extreme(r, true); })},
      {"argmin", {std::optional<int64_t>(1), false}, not_bool, indices,
       rows([](const Values &r) { return arg_extreme(r, false); })},
      {"norm", {2, std::vector<int64_t>{1}, false}, floats_only, same,
       rows([](const Values &r) { return std::sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + r[3] * r[3]); })},
      {"var", {std::vector<int64_t>{1}, std::optional<double>(), false}, floats_only, same, rows(variance)},
      {"std", {std::vector<int64_t>{1}, std::optional<double>(), false}, floats_only, same,
       rows([](const Values &r) { return std::sqrt(variance(r)); })},
      {"cumsum", {1, no_dtype}, all_dtypes, widened,
       [](const Values &v) { return std::vector<Values>{per_row_scan(v, 4, std::plus<double>())}; }},
      {"cumprod", {-1, no_dtype}, all_dtypes, widened,
       [](const Values &v) { return std::vector<Values>{per_row_scan(v, 4, std::multiplies<double>())}; }},
      {"logcumsumexp", {1}, floats_only, same,
       [](const Values &v) {
         return std::vector<Values>{
             per_row_scan(v, 4, [](double a, double b) { return std::log(std::exp(a) + std::exp(b)); })};
       }},
      {"sort", {1, false}, all_dtypes, with_indices,
       [](const Values &v) {
         Values out;
         for (size_t r = 0; r < 2; ++r)
           for (double x : sorted_row(Values(v.begin() + long(4 * r), v.begin() + long(4 * r + 4)), false)) out.push_back(x);
         return std::vector<Values>{out};
       }},
      {"topk", {2, 1, true, true}, all_dtypes, with_indices,
       [](const Values &v) {
         Values out;
         for (size_t r = 0; r < 2; ++r) {
           Values s = sorted_row(Values(v.begin() + long(4 * r), v.begin() + long(4 * r + 4)), true);
           out.insert(out.end(), s.begin(), s.begin() + 2);
         }
         return std::vector<Values>{out};
       }},
      {"view", {std::vector<int64_t>{4, 2}}, all_dtypes, same, gather(ident)},
      {"reshape", {std::vector<int64_t>{-1}}, all_dtypes, same, gather(ident)},
      {"transpose", {0, 1}, all_dtypes, same, gather({0, 4, 1, 5, 2, 6, 3, 7})},
      {"permute", {std::vector<int64_t>{1, 0}}, all_dtypes, same, gather({0, 4, 1, 5, 2, 6, 3, 7})},
      {"slice", {1, std::optional<int64_t>(1), none, 2}, all_dtypes, same, gather({1, 3, 5, 7})},
      {"select", {0, -1}, all_dtypes, same, gather({4, 5, 6, 7})},
      {"unsqueeze", {-1}, all_dtypes, same, gather(ident)},
      {"squeeze", {std::vector<int64_t>{0}}, all_dtypes, same, gather(ident)},
      {"expand", {std::vector<int64_t>{2, 2, 4}}, all_dtypes, same,
       gather({0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7})},
      {"as_strided", {std::vector<int64_t>{2, 2}, std::vector<int64_t>{1, 4}, std::optional<int64_t>(1)}, all_dtypes,
       same, gather({1, 5, 2, 6}), true},
      {"split", {std::vector<int64_t>{1, 3}, 1}, all_dtypes,
       [](DType d) { return std::vector<DType>{d, d}; },
       [](const Values &v) { return std::vector<Values>{pick(v, {0, 4}), pick(v, {1, 2, 3, 5, 6, 7})}; }},
      {"contiguous", {}, all_dtypes, same, gather(ident)},
      {"clone", {}, all_dtypes, same, gather(ident)},
      {"cat", {0}, all_dtypes, same, gather(ident)},
      {"stack", {1}, all_dtypes, same, gather({0, 1, 2, 3, 4, 5, 6, 7})},
      {"tril", {0}, all_dtypes, same, triangle(true)},
      {"triu", {0}, all_dtypes, same, triangle(false)},
  };
}

} // namespace

TEST(DTypeSweep, ReductionsViewsAndScansOverEveryDTypeMatchNaiveLoops) {
  int computed = 0;
  for (const StructuredCase &c : structured_cases()) {
    const OpInfo *info = find_op(c.op);
    ASSERT_NE(info, nullptr) << c.op;
    for (DType dt : kAll)
      for (Layout layout : ewt::layouts_for({2, 4})) {
        if (c.strides_matter && layout != Layout::Contiguous) continue;
        const std::string what = c.op + " " + std::string(name(dt)) + " " + ewt::layout_name(layout);
        const Tensor x = ewt::make_layout({2, 4}, dt, [&](int64_t i) { return ewt::values(input(dt, 0))[size_t(i)]; },
                                          layout);
        TracedFunction fn = [&](const std::vector<Tensor> &in) { return run_op(info->id, in, c.attrs); };
        const std::optional<std::vector<Tensor>> got = eager_equals_compiled(fn, {x}, c.op, what);
        EXPECT_EQ(got.has_value(), c.computes(dt)) << what << (got ? ": computes, torch raises" : ": raises, torch computes");
        if (!got) continue;
        ++computed;
        const std::vector<DType> dtypes = c.result_dtypes(dt);
        ASSERT_EQ(got->size(), dtypes.size()) << what;
        const std::vector<Values> want = c.ref(ewt::values(x));
        for (size_t r = 0; r < got->size(); ++r) {
          EXPECT_EQ((*got)[r].dtype(), dtypes[r]) << what << " result " << r;
          if (r < want.size())
            ewt::expect_values((*got)[r], want[r], rounding_of(dtypes[r]), 0, what + " result " + std::to_string(r));
        }
      }
  }
  std::printf("structured op x dtype x layout cases: %d computed\n", computed);
}

namespace {

struct NnCase {
  std::string name; // torch's name, which an Error must carry
  std::function<Tensor(const Tensor &)> f;
};

std::vector<NnCase> nn_cases() {
  return {
      {"softmax", [](const Tensor &x) { return softmax(x, -1); }},
      {"log_softmax", [](const Tensor &x) { return log_softmax(x, 1); }},
      {"logsumexp", [](const Tensor &x) { return logsumexp(x, {-1}); }},
      {"layer_norm", [](const Tensor &x) { return layer_norm(x, {4}); }},
      {"group_norm", [](const Tensor &x) { return group_norm(x, 2); }},
      {"instance_norm", [](const Tensor &x) { return instance_norm(x); }},
      {"rms_norm", [](const Tensor &x) { return rms_norm(x, {4}); }},
      {"local_response_norm", [](const Tensor &x) { return local_response_norm(x, 2); }},
      {"normalize", [](const Tensor &x) { return normalize(x); }},
      {"max_pool2d", [](const Tensor &x) { return max_pool2d(x, {2}); }},
      {"avg_pool2d", [](const Tensor &x) { return avg_pool2d(x, {2}); }},
      {"adaptive_avg_pool2d", [](const Tensor &x) { return adaptive_avg_pool2d(x, {3, 3}); }},
      {"adaptive_max_pool2d", [](const Tensor &x) { return std::get<0>(adaptive_max_pool2d(x, {3, 3})); }},
      {"max_pool1d", [](const Tensor &x) { return max_pool1d(x.reshape({2, 4, 4}), {2}); }},
      {"avg_pool1d", [](const Tensor &x) { return avg_pool1d(x.reshape({2, 4, 4}), {3}, {1}); }},
      {"pad", [](const Tensor &x) { return pad(x, {1, 2}); }},
      {"pad", [](const Tensor &x) { return pad(x, {1, 1, 2, 0}, "reflect"); }},
      {"pad", [](const Tensor &x) { return pad(x, {2, 1}, "replicate"); }},
      {"pad", [](const Tensor &x) { return pad(x, {1, 1, 1, 1}, "circular"); }},
      {"interpolate", [](const Tensor &x) { return interpolate(x, std::vector<int64_t>{6, 8}); }},
      {"interpolate", [](const Tensor &x) { return interpolate(x, std::vector<int64_t>{6, 6}, std::nullopt, "bilinear", false); }},
      {"interpolate", [](const Tensor &x) { return interpolate(x, std::vector<int64_t>{3, 5}, std::nullopt, "bilinear", true); }},
      {"pixel_shuffle", [](const Tensor &x) { return pixel_shuffle(x.reshape({1, 8, 2, 2}), 2); }},
      {"flip", [](const Tensor &x) { return flip(x, {-1, 1}); }},
      {"roll", [](const Tensor &x) { return roll(x, {1}, {-1}); }},
      {"repeat", [](const Tensor &x) { return repeat(x, {1, 2, 1, 1}); }},
      {"diff", [](const Tensor &x) { return diff(x); }},
      {"movedim", [](const Tensor &x) { return movedim(x, {1}, {3}); }},
      {"narrow", [](const Tensor &x) { return narrow(x, 2, 1, 2); }},
      {"flatten", [](const Tensor &x) { return flatten(x, 1); }},
  };
}

} // namespace

// Values finite (normalizations of a NaN are NaN everywhere, which tests little).
TEST(DTypeSweep, NnFunctionsOverEveryDTypeMatchFloat64) {
  int computed = 0, refused = 0;
  const Shape shape{1, 2, 4, 4};
  for (const NnCase &c : nn_cases())
    for (DType dt : kAll)
      for (Layout layout : ewt::layouts_for(shape)) {
        const std::string what = c.name + " " + std::string(name(dt)) + " " + ewt::layout_name(layout);
        const Tensor x = ewt::make_layout(shape, dt, [&](int64_t i) {
          static const double floats[] = {-2.5, -1, 0, 0.75, 1.5, 3, -0.5, 2};
          if (dt == kBool) return double(i % 3 != 0);
          const double base = is_floating(dt) ? floats[(i * 3) % 8] : double((i * 5) % 11) - 4;
          return base + double(i / 8) * (is_floating(dt) ? 0.25 : 1);
        }, layout);
        TracedFunction fn = [&](const std::vector<Tensor> &in) { return std::vector<Tensor>{c.f(in[0])}; };
        const std::optional<std::vector<Tensor>> got = eager_equals_compiled(fn, {x}, c.name, what);
        if (!got) {
          ++refused;
          continue;
        }
        ++computed;
        const Tensor want = c.f(x.to(kFloat64));
        const Tensor &result = got->at(0);
        if (!is_floating(result.dtype())) {
          ewt::expect_values(result, ewt::values(want.to(result.dtype())), 0, 0, what);
          continue;
        }
        // 16-bit eager ops round after each primitive of a composed op, as torch's do.
        const double tol = result.dtype() == kFloat64 ? 1e-12 : std::max(4 * rounding_of(result.dtype()), 1e-5);
        ewt::expect_values(result, ewt::values(want), tol, tol, what);
      }
  EXPECT_GT(computed, 300);
  std::printf("nn function x dtype x layout cases: %d computed, %d refused with an Error\n", computed, refused);
}
