#include "fuzz/targets.h"

#include <exception>
#include <memory>
#include <string_view>

#include <kiln/kiln.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "util/random_graph.h"

namespace kiln::fuzz {

namespace {

std::string check_round_trip(const ir::Graph &g) {
  std::string once = ir::print(g);
  std::unique_ptr<ir::Graph> again;
  try {
    again = ir::parse(once, "<printed>");
  } catch (const Error &e) {
    return std::string("the printed graph does not parse: ") + e.what() + "\n" + once;
  }
  std::string twice = ir::print(*again);
  if (twice != once) return "printing is not stable:\n" + once + "\nthen:\n" + twice;
  return "";
}

std::string parse_and_verify(std::string_view text) {
  std::unique_ptr<ir::Graph> g;
  try {
    g = ir::parse(text, "<fuzz>");
  } catch (const Error &) {
    return ""; // rejected with a diagnostic: fine
  }
  if (std::string err = check_round_trip(*g); !err.empty()) return err;
  try {
    ir::verify(*g);
  } catch (const Error &) {
  }
  return "";
}

// The same graph on permuted, sliced and expanded inputs: compiled equals
// eager, values and output strides, and refuses what eager refuses (view() of
// a strided input).
std::string compile_matches_eager_on_strided_inputs(const testing::RandomGraph &rg, size_t seed,
                                                    const CompileOptions &copts) {
  std::vector<Tensor> inputs = rg.make_inputs(seed, true);
  std::vector<Tensor> want, got;
  std::string eager_error, compiled_error;
  try {
    want = rg.fn(inputs);
  } catch (const Error &e) {
    eager_error = e.what();
  }
  try {
    got = compile(rg.fn, copts)(inputs);
  } catch (const Error &e) {
    compiled_error = e.what();
  }
  if (eager_error.empty() != compiled_error.empty())
    return "on strided inputs, eager " + (eager_error.empty() ? std::string("ran") : "threw " + eager_error) +
           " but compiled " + (compiled_error.empty() ? std::string("ran") : "threw " + compiled_error) + "\n" +
           testing::describe(rg, *rg.trace());
  if (!eager_error.empty()) return "";
  std::string diff = testing::compare_outputs(got, want, 1e-4, 1e-5);
  for (size_t i = 0; diff.empty() && i < got.size() && i < want.size(); ++i)
    for (int64_t d = 0; d < want[i].dim(); ++d)
      if (want[i].size(d) > 1 && got[i].stride(d) != want[i].stride(d))
        diff = "output " + std::to_string(i) + " strides " + shape_str(got[i].strides()) + " != eager's " +
               shape_str(want[i].strides());
  if (diff.empty()) return "";
  return "compiled vs eager on strided inputs: " + diff + "\n" + testing::describe(rg, *rg.trace());
}

std::string compile_matches_interpreter(const uint8_t *data, size_t size) {
  // Small graphs keep each run fast (one JIT compile per input).
  testing::RandomGraphOptions opts;
  opts.max_ops = 8;
  opts.max_numel = 512;
  testing::RandomGraph rg = testing::random_graph_from_bytes(data, size, opts);
  std::unique_ptr<ir::Graph> g = rg.trace();
  std::vector<Tensor> inputs = rg.make_inputs(size);
  std::vector<Tensor> want = ir::interpret(*g, inputs);
  CompileOptions copts;
  copts.fallback = Fallback::Off;
  std::vector<Tensor> got = compile(rg.fn, copts)(inputs);
  std::string diff = testing::compare_outputs(got, want, 1e-4, 1e-5);
  if (!diff.empty()) return "compiled vs interpreter: " + diff + "\n" + testing::describe(rg, *g);
  return compile_matches_eager_on_strided_inputs(rg, size, copts);
}

} // namespace

std::string ir_parser(const uint8_t *data, size_t size) {
  try {
    return parse_and_verify(std::string_view(reinterpret_cast<const char *>(data), size));
  } catch (const std::exception &e) {
    return std::string("an exception other than a parse error escaped: ") + e.what();
  }
}

std::string random_graph(const uint8_t *data, size_t size) {
  try {
    return compile_matches_interpreter(data, size);
  } catch (const std::exception &e) {
    // Every generated graph is valid: nothing may throw, not even kiln::Error.
    return std::string("threw: ") + e.what();
  }
}

} // namespace kiln::fuzz
