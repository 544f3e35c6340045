#include "example.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <iostream>

namespace kiln::examples {
namespace {
std::vector<Example> &registry() {
  static std::vector<Example> r;
  return r;
}
} // namespace

Registrar::Registrar(std::string name, std::string description, std::function<Workload()> make) {
  auto &r = registry();
  r.push_back({std::move(name), std::move(description), std::move(make)});
  std::sort(r.begin(), r.end(), [](const Example &a, const Example &b) { return a.name < b.name; });
}

const std::vector<Example> &all_examples() { return registry(); }

const Example *find_example(const std::string &name) {
  for (const Example &e : registry())
    if (e.name == name) return &e;
  return nullptr;
}

double checksum(const std::vector<Tensor> &outputs) {
  double s = 0;
  for (const Tensor &t : outputs) s += sum(t.to(kFloat64)).item<double>();
  return s;
}

double time_us(const ModelFn &fn, const std::vector<Tensor> &inputs, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn(inputs);
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn(inputs);
    auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

namespace {
double max_param_diff(const std::vector<Tensor> &a, const std::vector<Tensor> &b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, amax(abs(a[i].detach().to(kFloat64) - b[i].detach().to(kFloat64))).item<double>());
  return d;
}

// A training example: two copies made alike train side by side, one eagerly
// and one compiled, over the same batches; each epoch prints both mean losses.
int train_main(const Example &ex, int epochs) {
  Workload e = ex.make(), c = ex.make();
  CompiledFunction step = compile(c.fn, CompileOptions{.name = ex.name});
  std::cout << ex.name << ": " << ex.description << "\n";
  std::printf("  accuracy before training: %.3f\n", e.accuracy());
  int64_t steps = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    double le = 0, lc = 0;
    for (const std::vector<Tensor> &batch : e.batches) {
      le += e.fn(batch).at(0).item<double>();
      lc += step(batch).at(0).item<double>();
      ++steps;
    }
    const double n = double(e.batches.size());
    if (epoch == 1 || epoch % 5 == 0 || epoch == epochs)
      std::printf("  epoch %3d  loss eager %.5f  compiled %.5f\n", epoch, le / n, lc / n);
  }
  std::printf("  accuracy after %d epochs: eager %.3f, compiled %.3f\n", epochs, e.accuracy(), c.accuracy());
  std::printf("  max |eager - compiled| over the parameters after %lld steps: %.3g\n", (long long)steps,
              max_param_diff(e.params, c.params));
  const double te = time_us(e.fn, e.inputs);
  const double tc = time_us([&](const std::vector<Tensor> &in) { return step(in); }, c.inputs);
  std::printf("  step: eager %.1f us, compiled %.1f us (%.2fx, %d threads); compiled calls that ran eagerly: %lld\n", te,
              tc, te / tc, get_num_threads(), (long long)step.stats().eager_calls);
  return 0;
}
} // namespace

int example_main(const std::string &name, int argc, char **argv) {
  try {
    const Example *ex = find_example(name);
    if (!ex) {
      std::cerr << "unknown example " << name << "\n";
      return 2;
    }
    Workload w = ex->make();
    if (!w.params.empty()) return train_main(*ex, argc > 1 ? std::atoi(argv[1]) : 30);
    std::vector<Tensor> out = w.fn(w.inputs);
    std::cout << name << ": " << ex->description << "\n";
    for (size_t i = 0; i < out.size(); ++i)
      std::cout << "  output " << i << ": " << out[i].dtype() << shape_str(out[i].sizes()) << "\n";
    std::printf("  checksum: %.6f\n", checksum(out));
    double eager = time_us(w.fn, w.inputs);
    std::printf("  eager:    %10.1f us/call (median of 20 after 3 warm-up, %d threads)\n", eager, get_num_threads());
    CompiledFunction f = compile(w.fn);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> compiled_out = f(w.inputs);
    double first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double diff = 0;
    for (size_t i = 0; i < out.size(); ++i)
      diff = std::max(diff, amax(abs(compiled_out[i].to(kFloat64) - out[i].to(kFloat64))).item<double>());
    double compiled = time_us([&](const std::vector<Tensor> &in) { return f(in); }, w.inputs);
    std::printf("  compiled: %10.1f us/call (first call, with compilation: %.1f ms)\n", compiled, first_ms);
    std::printf("  speedup (eager/compiled): %.2fx, max abs difference: %.3g\n", eager / compiled, diff);
    return 0;
  } catch (const std::exception &e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
}

} // namespace kiln::examples
