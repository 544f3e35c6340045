// Every elementwise op of the table (runtime/ops.def) over every dtype pairing kiln
// has, called through the op table as the IR interpreter and the tracer call it: eager
// either gives a result or a kiln::Error that names the op; the compiled function
// (fallback off) gives the same result bit for bit, NaN included, or the same Error.
// The attributes are fixed per attribute type (an int 1, a float 0.5, a number 2...),
// inputs hold negatives, zero, and for floats NaN and inf.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "graph_test_util.h"
#include "runtime/op_registry.h"

using namespace kiln;

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
        const Outcome eager = outcome([&] { return fn(kiln::testing::copies(in)); });
        if (!eager.error.empty()) {
          ++errors;
          EXPECT_NE(eager.error.find(std::string(info.mnemonic)), std::string::npos)
              << what << ": the error does not name the op: " << eager.error;
          continue;
        }
        ++results;
        CompileOptions o;
        o.fallback = Fallback::Off;
        const Outcome compiled = outcome([&] { return compile(fn, o)(kiln::testing::copies(in)); });
        ASSERT_TRUE(compiled.error.empty()) << what << ": compiled raised " << compiled.error;
        ASSERT_EQ(compiled.values.size(), eager.values.size()) << what;
        for (size_t r = 0; r < eager.values.size(); ++r)
          EXPECT_TRUE(same_bits(compiled.values[r], eager.values[r]))
              << what << " result " << r << ": compiled " << compiled.values[r] << " eager " << eager.values[r];
      }
  }
  // Most pairings compute; the refusals (bool arithmetic, integer-only ops on floats...) are fewer.
  EXPECT_GT(results, 1500);
  EXPECT_GT(errors, 50);
  std::printf("elementwise op x dtype pairings: %d computed, %d refused with an Error\n", results, errors);
}
