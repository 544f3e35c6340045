// Your own compiled function in the `kiln bench` table, from C++ (docs/bench.md).
//
//   build/examples/bench-custom [--repeat N] [--json FILE] [--triad] [--weights FILE] [--save-weights FILE]
//
// Two model functions of a user (an RMSNorm and a SwiGLU MLP block, weights
// captured in the closures) go through kiln::bench_row, the function behind
// `kiln bench`, and are printed with kiln::print_bench_table (and, with --json,
// kiln::write_bench_json: the same JSON as `kiln bench --json`). --weights reads
// the weights ("norm", "w_gate", "w_up", "w_down") from a safetensors file (without
// it they are random); --save-weights writes the ones used to a safetensors file.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "frontend/bench.h"

using namespace kiln;

namespace {

constexpr int64_t kTokens = 256, kDim = 512, kHidden = 1376;

// RMSNorm: x / sqrt(mean(x^2) + eps) * weight.
Tensor rms_norm(const Tensor &x, const Tensor &weight) {
  return x * rsqrt(mean(x * x, {-1}, /*keepdim=*/true) + 1e-6) * weight;
}

std::map<std::string, Tensor> random_weights() {
  manual_seed(0);
  return {{"norm", ones({kDim})},
          {"w_gate", 0.02 * randn({kHidden, kDim})},
          {"w_up", 0.02 * randn({kHidden, kDim})},
          {"w_down", 0.02 * randn({kDim, kHidden})}};
}

struct Options {
  int repeat = 20;
  bool triad = false;
  std::string json, weights, save_weights;
};

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--repeat" && has_value) o.repeat = std::atoi(argv[++i]);
    else if (a == "--json" && has_value) o.json = argv[++i];
    else if (a == "--weights" && has_value) o.weights = argv[++i];
    else if (a == "--save-weights" && has_value) o.save_weights = argv[++i];
    else if (a == "--triad") o.triad = true;
    else
      throw Error("bench-custom: unknown argument '" + a +
                  "' (--repeat N, --json FILE, --triad, --weights FILE, --save-weights FILE)");
  }
  if (o.repeat < 1) throw Error("bench-custom: --repeat must be at least 1");
  return o;
}

int run(const Options &o) {
  std::map<std::string, Tensor> w = o.weights.empty() ? random_weights() : load_safetensors(o.weights);
  if (!o.save_weights.empty()) save_safetensors(o.save_weights, w, {{"model", "bench-custom swiglu"}});
  Tensor norm = w.at("norm"), gate = w.at("w_gate"), up = w.at("w_up"), down = w.at("w_down");

  ModelFn rmsnorm = [norm](const std::vector<Tensor> &in) { return std::vector<Tensor>{rms_norm(in[0], norm)}; };
  ModelFn swiglu = [=](const std::vector<Tensor> &in) {
    Tensor h = rms_norm(in[0], norm);
    Tensor y = linear(silu(linear(h, gate)) * linear(h, up), down);
    return std::vector<Tensor>{in[0] + y};
  };
  std::vector<Tensor> inputs{randn({kTokens, kDim})};

  BenchOptions bo;
  bo.iters = o.repeat;
  bo.warmup = std::min(3, o.repeat);
  // The triad costs about a second; without it the GB/s column is still filled, the triad % is 0.
  bo.stream_gbps = o.triad ? stream_triad_gbps(get_num_threads()) : 0;
  std::vector<BenchRow> rows{bench_row("my-rmsnorm", rmsnorm, inputs, bo), bench_row("my-swiglu", swiglu, inputs, bo)};
  print_bench_table(std::cout, get_num_threads(), bo.stream_gbps, rows);
  if (!o.json.empty()) {
    std::ofstream os(o.json);
    write_bench_json(os, get_num_threads(), bo.stream_gbps, rows);
    if (!os) throw Error("bench-custom: cannot write " + o.json);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception &e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
