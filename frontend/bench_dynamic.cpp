// `kiln bench NAME --dynamic` (issue 17): a sequence of calls whose batch size
// changes on every call, compiled once with dynamic shapes (CompileOptions::
// dynamic = Auto) against static specializations compiled beforehand for each
// size, and the model at its own sizes with dynamic = On against static.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <map>
#include <random>

#include "frontend/bench.h"
#include "runtime/ops.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The inputs with dim 0 of input 0 (and of each input of the same size there)
// resized to n, rows taken cyclically from the original so that indices stay valid.
std::vector<Tensor> with_batch(const std::vector<Tensor> &in, int64_t n) {
  const int64_t from = in[0].size(0);
  std::vector<Tensor> out;
  for (const Tensor &t : in) {
    if (t.dim() == 0 || t.size(0) != from) {
      out.push_back(t);
      continue;
    }
    out.push_back(index_select(t, 0, remainder(arange(n, TensorOptions(kInt64)), from)).contiguous());
  }
  return out;
}

// Microseconds of one pass over `sequence`, calling fn_for(size) on each.
template <typename Fn>
double pass_us(const std::vector<int64_t> &sequence, const std::map<int64_t, std::vector<Tensor>> &inputs, Fn fn_for) {
  const auto t0 = Clock::now();
  for (int64_t n : sequence) fn_for(n)(inputs.at(n));
  return ms_since(t0) * 1000;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The static specialization against dynamic = On at the workload's own sizes:
// median microseconds per call of each, timed in alternating rounds.
void at_workload_size(const ModelFn &fn, const std::vector<Tensor> &inputs, const DynamicBenchOptions &o,
                      DynamicBenchRow &row) {
  CompileOptions on_opts, off_opts;
  on_opts.dynamic = Dynamic::On;
  off_opts.dynamic = Dynamic::Off;
  CompiledFunction on = compile(fn, on_opts), off = compile(fn, off_opts);
  on(inputs);
  off(inputs);
  row.on_symbolic = on.stats().dynamic_specializations > 0;
  std::vector<double> on_us, off_us;
  for (int p = 0; p < o.passes * 4; ++p) {
    auto t0 = Clock::now();
    on(inputs);
    on_us.push_back(ms_since(t0) * 1000);
    t0 = Clock::now();
    off(inputs);
    off_us.push_back(ms_since(t0) * 1000);
  }
  row.on_us = median(on_us);
  row.static_at_size_us = median(off_us);
  row.on_ratio = row.on_us / row.static_at_size_us;
}

} // namespace

DynamicBenchRow bench_dynamic(const std::string &name, const ModelFn &fn, const std::vector<Tensor> &inputs,
                              const DynamicBenchOptions &o) {
  KILN_CHECK(!inputs.empty() && inputs[0].dim() > 0, "bench --dynamic ", name, ": input 0 has no batch dim");
  KILN_CHECK(o.min_size >= 1 && o.max_size >= o.min_size, "bench --dynamic: sizes ", o.min_size, "..", o.max_size,
             " are not a range of positive sizes");
  DynamicBenchRow row;
  row.name = name;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> draw(o.min_size, o.max_size);
  std::vector<int64_t> sequence;
  std::map<int64_t, std::vector<Tensor>> sized;
  for (int i = 0; i < o.calls; ++i) sequence.push_back(draw(rng));
  for (int64_t n : sequence)
    if (!sized.count(n)) sized[n] = with_batch(inputs, n);
  row.calls = int64_t(sequence.size());
  row.distinct_sizes = int64_t(sized.size());
  row.min_size = sized.begin()->first;
  row.max_size = sized.rbegin()->first;
  try {
    fn(sized.begin()->second);
  } catch (const Error &e) {
    row.skipped = std::string("the model takes no other batch: ") + e.what();
    return row;
  }

  // Dynamic (Auto): the first pass compiles; later passes are warm. Its first
  // call compiles the static graph; the call that compiles again turns dims symbolic.
  CompiledFunction dynamic = compile(fn);
  const auto first = Clock::now();
  for (int64_t n : sequence) {
    const int64_t before = dynamic.stats().compiles;
    const auto t0 = Clock::now();
    dynamic(sized.at(n));
    const double ms = ms_since(t0);
    const int64_t after = dynamic.stats().compiles;
    if (before == 0 && after == 1) row.first_call_ms = ms;
    if (before == 1 && after == 2) row.turn_dynamic_ms = ms;
  }
  row.first_pass_ms = ms_since(first);
  row.compiles = dynamic.stats().compiles;
  row.dynamic_specializations = dynamic.stats().dynamic_specializations;

  // One static specialization per size, compiled (and called once) beforehand.
  CompileOptions off;
  off.dynamic = Dynamic::Off;
  std::map<int64_t, CompiledFunction> fixed;
  for (const auto &[n, in] : sized) {
    fixed.emplace(n, compile(fn, off));
    fixed.at(n)(in);
  }
  std::vector<double> dyn, stat, eager;
  for (int p = 0; p < o.passes; ++p) {
    dyn.push_back(pass_us(sequence, sized, [&](int64_t) -> const CompiledFunction & { return dynamic; }));
    stat.push_back(pass_us(sequence, sized, [&](int64_t n) -> const CompiledFunction & { return fixed.at(n); }));
    eager.push_back(pass_us(sequence, sized, [&](int64_t) -> const ModelFn & { return fn; }));
  }
  row.dynamic_us = median(dyn) / double(row.calls);
  row.static_us = median(stat) / double(row.calls);
  row.eager_us = median(eager) / double(row.calls);
  row.ratio = row.dynamic_us / row.static_us;
  row.compiles_after_first_pass = dynamic.stats().compiles - row.compiles;
  at_workload_size(fn, inputs, o, row);
  return row;
}

void print_dynamic_bench_table(std::ostream &os, int threads, const std::vector<DynamicBenchRow> &rows) {
  os << "dynamic shapes (" << threads << " threads): per call, a sequence of batch sizes vs a static "
     << "specialization per size (compiled beforehand); at the workload's size, dynamic = On vs static\n"
     << "1st ms: the first pass, compiles included; call1 ms: its first call (the static compile); turn ms: "
     << "the call that compiled the dims symbolic\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-18s %6s %7s %9s %9s %9s %9s %11s %11s %11s %8s %11s %11s %8s\n", "name",
                "calls", "sizes", "compiles", "1st ms", "call1 ms", "turn ms", "dynamic us", "static us", "eager us",
                "dyn/st", "On us", "static us", "On/st");
  os << line;
  for (const DynamicBenchRow &r : rows) {
    if (!r.skipped.empty()) {
      os << std::left << std::setw(18) << r.name << " skipped: " << r.skipped << "\n";
      continue;
    }
    std::string sizes = std::to_string(r.min_size) + ".." + std::to_string(r.max_size);
    std::snprintf(line, sizeof line,
                  "%-18s %6lld %7s %9lld %9.1f %9.1f %9.1f %11.1f %11.1f %11.1f %7.2fx %11.1f %11.1f %7.2fx%s\n",
                  r.name.c_str(), (long long)r.calls, sizes.c_str(), (long long)r.compiles, r.first_pass_ms,
                  r.first_call_ms, r.turn_dynamic_ms, r.dynamic_us, r.static_us, r.eager_us, r.ratio, r.on_us, r.static_at_size_us, r.on_ratio,
                  r.on_symbolic ? "" : " (On kept no symbol)");
    os << line;
  }
}

} // namespace kiln
