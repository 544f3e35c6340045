// kiln_bench_runtime_extent: what a kernel whose batch is read per call
// (codegen::KernelDesc::runtime_dim0, issue 17; or its whole layout,
// KernelDesc::runtime_layout) costs against the kernel
// specialized to the traced batch. For each example named, its input 0 dim 0
// is traced symbolic (frontend/symbolize.h; with --every-dim, every dim of it,
// as dynamic = On makes them, so that W2's row length is read per call too:
// KernelDesc::runtime_row), the passes that keep symbols run,
// and every fusion group that codegen::lower_symbolic_group accepts is
// compiled both ways and timed at the traced size: medians of `reps` calls
// each, in alternating rounds, with the STREAM-like triad of the same run.
//
//   kiln_bench_runtime_extent [reps] [--every-dim] [example...]   (default: w1 w2 w3, 200 reps)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "codegen/jit.h"
#include "codegen/op_lowering.h"
#include "example.h"
#include "frontend/bench.h"
#include "frontend/symbolize.h"
#include "ir/graph.h"
#include "ir/sym_infer.h"
#include "passes/pass_manager.h"
#include "runtime/ops.h"

namespace {

using namespace kiln;

// Medians of `reps` calls of each kernel, timed in alternating rounds of 10
// so that the machine's slow phases fall on both alike.
std::pair<double, double> median_us(const codegen::CompiledKernel &a, const std::vector<void *> &a_bufs,
                                    const codegen::CompiledKernel &b, const std::vector<void *> &b_bufs, int reps) {
  for (int i = 0; i < 5; ++i) {
    a.run(a_bufs.data());
    b.run(b_bufs.data());
  }
  std::vector<double> ta, tb;
  auto time = [](const codegen::CompiledKernel &k, const std::vector<void *> &bufs, std::vector<double> &t) {
    for (int i = 0; i < 10; ++i) {
      auto start = std::chrono::steady_clock::now();
      k.run(bufs.data());
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
  };
  for (int r = 0; r < std::max(1, reps / 10); ++r) {
    time(a, a_bufs, ta);
    time(b, b_bufs, tb);
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

// Buffers for the kernel's operands (the example's inputs and captured
// tensors; zeros for values another step computes) and its results.
std::vector<Tensor> buffers_for(const ir::Graph &at, const ir::Node &group, const std::vector<size_t> &operands,
                                const std::vector<Tensor> &inputs) {
  std::vector<Tensor> out;
  for (size_t i : operands) {
    const ir::Value *v = group.operand(i);
    auto in = std::find(at.inputs().begin(), at.inputs().end(), v);
    if (in != at.inputs().end()) out.push_back(inputs.at(size_t(in - at.inputs().begin())).contiguous());
    else if (v->kind() != ir::Value::Kind::Result) out.push_back(v->tensor().contiguous());
    else out.push_back(zeros(v->type().shape, v->type().dtype));
  }
  for (const ir::Value *r : group.results()) out.push_back(zeros(r->type().shape, r->type().dtype));
  return out;
}

void run_example(const std::string &name, int reps, bool every_dim) {
  const examples::Example *ex = examples::find_example(name);
  if (!ex) {
    std::printf("%-16s unknown example\n", name.c_str());
    return;
  }
  examples::Workload w = ex->make();
  std::vector<InputDim> dims = {InputDim{0, 0}};
  for (int64_t d = 1; every_dim && d < w.inputs.at(0).dim(); ++d) dims.push_back(InputDim{0, d});
  SymbolicTrace st = trace_symbolic(w.fn, w.inputs, dims);
  ir::Graph &g = *st.graph;
  if (g.symbol_hints().empty()) {
    std::printf("%-16s batch stays static: %s\n", name.c_str(),
                st.static_reasons.empty() ? "?" : st.static_reasons[0].c_str());
    return;
  }
  passes::run_pipeline(g, "upcast,decompose,canonicalize,cse,dce,fuse,fuse-horizontal,materialize-views");
  std::unique_ptr<ir::Graph> at = ir::instantiate(g, g.symbol_hints());
  const std::vector<ir::Node *> nodes = g.nodes(), at_nodes = at->nodes();
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n]->kind() != ir::Node::Kind::FusionGroup) continue;
    std::vector<size_t> ops, static_ops;
    codegen::KernelDesc dynamic;
    codegen::RuntimeExtents sizes;
    try {
      dynamic = codegen::lower_symbolic_group(g, *nodes[n], g.symbol_hints(), ops, nullptr, &sizes);
    } catch (const Error &e) {
      std::printf("%-16s %%%s: no runtime kernel: %s\n", name.c_str(), nodes[n]->result()->name().c_str(), e.what());
      continue;
    }
    std::vector<Tensor> metas;
    for (const ir::Value *v : at_nodes[n]->operands())
      metas.push_back(v->kind() == ir::Value::Kind::Result || v->kind() == ir::Value::Kind::Input
                          ? empty(v->type().shape, v->type().dtype)
                          : v->tensor());
    codegen::KernelDesc fixed = codegen::lower_group(*at_nodes[n], metas, static_ops);
    fixed.stream_stores = codegen::streaming_stores_pay_off(fixed);
    std::vector<Tensor> bufs = buffers_for(*at, *at_nodes[n], ops, w.inputs);
    std::vector<void *> ptrs;
    for (Tensor &t : bufs) ptrs.push_back(t.raw_data());
    std::vector<int64_t> extents(sizes.words()); // dim 0 and row, or a runtime layout's words
    sizes.fill(g.symbol_hints(), extents.data());
    auto kd = codegen::Jit::global().compile(dynamic), ks = codegen::Jit::global().compile(fixed);
    std::vector<void *> with_extent = ptrs;
    with_extent.push_back(extents.data());
    auto [us_s, us_d] = median_us(*ks, ptrs, *kd, with_extent, reps);
    double gbps = double(codegen::footprint_bytes(fixed)) / (us_d * 1e3);
    const std::string reads = !sizes.layout.empty() ? "layout " + shape_str(dynamic.shape)
                              : "dim 0 " + std::to_string(extents[0]) + " row " +
                                    (sizes.row ? std::to_string(extents[1]) : std::string("-"));
    std::printf("%-16s %%%-4s %-22s static %9.1f us%s  runtime %9.1f us  %5.2fx  %6.1f GB/s\n", name.c_str(),
                nodes[n]->result()->name().c_str(), reads.c_str(), us_s,
                fixed.stream_stores ? " (streamed)" : "           ", us_d, us_d / us_s, gbps);
  }
}

} // namespace

int main(int argc, char **argv) {
  int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  std::vector<std::string> names;
  bool every_dim = false; // --every-dim: every dim of input 0 symbolic (dynamic = On), not only the batch
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--every-dim") every_dim = true;
    else names.push_back(argv[i]);
  }
  if (names.empty()) names = {"w1-gelu-chain", "w2-softmax", "w3-layernorm"};
  int threads = kiln::get_num_threads();
  std::printf("threads %d, triad %.1f GB/s; times are medians of %d calls; runtime-batch / static\n", threads,
              kiln::stream_triad_gbps(threads), reps);
  for (const std::string &n : names) run_example(n, reps, every_dim);
  return 0;
}
