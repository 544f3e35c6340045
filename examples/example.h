// The reference workloads (shared/workloads.md) as model functions, written as a
// libtorch user would write them. Each example file registers itself for the CLI
// and the benchmarks, and also builds alone as a sample program.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

namespace kiln::examples {

using ModelFn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

// A model function with its inputs; the weights it captured live in the closure.
// A training step (zero_grad, forward, loss, backward, optimizer step) also
// names the parameters it updates, the epoch's batches and an accuracy: its
// calls change state, so `kiln bench` and the sample program compare eager and
// compiled training from two copies made alike (bench_training_row).
struct Workload {
  ModelFn fn;
  std::vector<Tensor> inputs;                // one batch of a training step
  std::vector<Tensor> params;                // non-empty: fn is a training step
  std::vector<std::vector<Tensor>> batches;  // an epoch (training steps)
  std::function<double()> accuracy;          // on the whole dataset, with params as they are
};

struct Example {
  std::string name;        // e.g. "w5-gpt2-block"
  std::string description; // one line
  std::function<Workload()> make;
};

// Registered examples, in registration order sorted by name.
const std::vector<Example> &all_examples();
// nullptr when unknown.
const Example *find_example(const std::string &name);

struct Registrar {
  Registrar(std::string name, std::string description, std::function<Workload()> make);
};

// Sum of all output elements in double precision: a checksum users can compare.
double checksum(const std::vector<Tensor> &outputs);

// Median microseconds per call of fn(inputs) after `warmup` calls.
double time_us(const ModelFn &fn, const std::vector<Tensor> &inputs, int warmup = 3, int iters = 20);

// The sample-program main: runs the example eagerly, prints output shapes, the
// checksum and the time per call.
int example_main(const std::string &name, int argc, char **argv);

} // namespace kiln::examples

// Defines an example: KILN_EXAMPLE(w1_gelu_chain, "w1-gelu-chain", "description") { ... return Workload; }
#ifdef KILN_EXAMPLE_MAIN
#define KILN_EXAMPLE_MAIN_FOR(NAME)                                                                        \
  int main(int argc, char **argv) { return kiln::examples::example_main(NAME, argc, argv); }
#else
#define KILN_EXAMPLE_MAIN_FOR(NAME)
#endif
#define KILN_EXAMPLE(ID, NAME, DESCRIPTION)                                                                \
  static kiln::examples::Workload make_##ID();                                                             \
  static kiln::examples::Registrar registrar_##ID(NAME, DESCRIPTION, make_##ID);                           \
  KILN_EXAMPLE_MAIN_FOR(NAME)                                                                              \
  static kiln::examples::Workload make_##ID()
