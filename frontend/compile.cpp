#include "frontend/compile.h"

#include <algorithm>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include <spdlog/spdlog.h>

#include "codegen/executable.h"
#include "frontend/trace.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"
#include "runtime/log.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

Fallback fallback_from_env() {
  const char *v = std::getenv("KILN_FALLBACK");
  if (!v) return Fallback::Allow;
  std::string s(v);
  if (s == "off") return Fallback::Off;
  if (s == "force") return Fallback::Force;
  if (s != "allow" && !s.empty()) log()->warn("KILN_FALLBACK={} is not off|allow|force; using allow", s);
  return Fallback::Allow;
}

// The part of an input a specialization depends on.
struct InputGuard {
  DType dtype;
  Dims sizes, strides;
  bool matches(const Tensor &t) const {
    return t.defined() && t.dtype() == dtype && t.sizes() == IntArrayRef(sizes) && t.strides() == IntArrayRef(strides);
  }
};

// A captured tensor's metadata at compile time: the graph reads it live, so
// only its shape and dtype are guarded.
struct ParamGuard {
  Tensor live;
  DType dtype;
  Dims sizes;
  bool holds() const { return live.dtype() == dtype && live.sizes() == IntArrayRef(sizes); }
};

struct Specialization {
  std::vector<InputGuard> inputs;
  int threads = 1;
  std::vector<ParamGuard> params;
  std::shared_ptr<const ir::Graph> graph;  // null when this signature runs eagerly
  std::shared_ptr<codegen::Executable> executable; // null when eager
  std::string eager_reason;

  bool matches(const std::vector<Tensor> &in, int nthreads) const {
    if (in.size() != inputs.size() || threads != nthreads) return false;
    for (size_t i = 0; i < in.size(); ++i)
      if (!inputs[i].matches(in[i])) return false;
    for (const ParamGuard &p : params)
      if (!p.holds()) return false;
    return true;
  }
};

// Why `in` does not match `s`: the first difference, in the words users read,
// and how far the check got (a later stage means a closer specialization).
std::pair<std::string, int> mismatch(const Specialization &s, const std::vector<Tensor> &in, int nthreads) {
  std::ostringstream os;
  if (in.size() != s.inputs.size()) {
    os << "number of inputs " << in.size() << " != " << s.inputs.size();
    return {os.str(), 0};
  }
  for (int stage = 1; stage <= 3; ++stage)
    for (size_t i = 0; i < in.size(); ++i) {
      const InputGuard &g = s.inputs[i];
      const Tensor &t = in[i];
      if (stage == 1 && !t.defined()) os << "input " << i << " is undefined";
      else if (stage == 1 && t.dtype() != g.dtype) os << "input " << i << " dtype " << t.dtype() << " != " << g.dtype;
      else if (stage == 2 && t.sizes() != IntArrayRef(g.sizes))
        os << "input " << i << " shape " << shape_str(t.sizes()) << " != " << shape_str(g.sizes);
      else if (stage == 3 && t.strides() != IntArrayRef(g.strides))
        os << "input " << i << " strides " << shape_str(t.strides()) << " != " << shape_str(g.strides);
      if (os.tellp() > 0) return {os.str(), stage};
    }
  if (nthreads != s.threads) {
    os << "thread count " << nthreads << " != " << s.threads;
    return {os.str(), 4};
  }
  for (const ParamGuard &p : s.params)
    if (!p.holds()) {
      os << "a captured tensor changed from " << p.dtype << shape_str(p.sizes) << " to " << p.live.dtype()
         << shape_str(p.live.sizes());
      return {os.str(), 5};
    }
  return {"no specialization yet", 0};
}

} // namespace

struct CompiledFunction::Impl {
  ModelFn fn;
  CompileOptions options;
  Fallback fallback;

  mutable std::shared_mutex mu; // guards specs and stats strings
  std::vector<std::shared_ptr<Specialization>> specs;
  std::mutex compile_mu; // one compile at a time per function
  std::atomic<int64_t> calls{0}, compiles{0}, eager_calls{0};
  std::string last_fallback_reason, last_recompile_reason;
  bool warned_cache_limit = false;

  std::shared_ptr<Specialization> find(const std::vector<Tensor> &in, int threads) const {
    std::shared_lock lock(mu);
    for (const auto &s : specs)
      if (s->matches(in, threads)) return s;
    return nullptr;
  }

  std::vector<Tensor> run_eager(const std::vector<Tensor> &in) {
    eager_calls.fetch_add(1, std::memory_order_relaxed);
    return fn(in);
  }

  void note_fallback(const std::string &reason) {
    std::unique_lock lock(mu);
    if (last_fallback_reason != reason) log()->warn("compile @{}: running eagerly: {}", options.name, reason);
    last_fallback_reason = reason;
  }

  std::shared_ptr<Specialization> build(const std::vector<Tensor> &in, int threads) {
    auto spec = std::make_shared<Specialization>();
    spec->threads = threads;
    for (const Tensor &t : in) {
      KILN_CHECK(t.defined(), "compile @", options.name, ": an input is an undefined tensor");
      spec->inputs.push_back({t.dtype(), Dims(t.sizes()), Dims(t.strides())});
    }
    try {
      std::shared_ptr<ir::Graph> g = trace(fn, in, options.name);
      std::string pipeline = options.pipeline.empty() ? passes::default_pipeline() : options.pipeline;
      passes::run_pipeline(*g, pipeline, passes::PipelineOptions::from_env());
      for (const ir::Value *p : g->params())
        spec->params.push_back({p->tensor(), p->tensor().dtype(), Dims(p->tensor().sizes())});
      spec->executable = codegen::make_executable(g, in);
      spec->graph = g;
    } catch (const Error &e) {
      if (fallback == Fallback::Off) throw Error(detail::concat("compile @", options.name, ": ", e.what()));
      spec->eager_reason = e.what();
      spec->graph = nullptr;
      spec->executable = nullptr;
    }
    compiles.fetch_add(1, std::memory_order_relaxed);
    return spec;
  }

  // Finds or builds the specialization for `in`; null means "run eagerly".
  std::shared_ptr<Specialization> select(const std::vector<Tensor> &in) {
    int threads = get_num_threads();
    if (auto s = find(in, threads)) return s;
    std::lock_guard<std::mutex> one_compile(compile_mu);
    if (auto s = find(in, threads)) return s; // another thread built it meanwhile
    {
      std::unique_lock lock(mu);
      if (int(specs.size()) >= options.cache_limit) {
        if (!warned_cache_limit)
          log()->warn("compile @{}: cache limit {} reached; further signatures run eagerly", options.name,
                      options.cache_limit);
        warned_cache_limit = true;
        last_fallback_reason = "cache limit reached";
        return nullptr;
      }
      if (!specs.empty()) {
        // Report the difference from the closest specialization.
        std::pair<std::string, int> best{"", -1};
        for (const auto &sp : specs) {
          auto m = mismatch(*sp, in, threads);
          if (m.second >= best.second) best = m;
        }
        last_recompile_reason = best.first;
        log()->info("compile @{}: recompiling: {}", options.name, last_recompile_reason);
      }
    }
    auto spec = build(in, threads);
    if (!spec->executable) note_fallback(spec->eager_reason);
    std::unique_lock lock(mu);
    specs.push_back(spec);
    return spec;
  }
};

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor> &inputs) const {
  Impl &impl = *impl_;
  impl.calls.fetch_add(1, std::memory_order_relaxed);
  if (impl.fallback == Fallback::Force) return impl.run_eager(inputs);
  std::shared_ptr<Specialization> spec = impl.select(inputs);
  if (!spec || !spec->executable) return impl.run_eager(inputs);
  return spec->executable->run(inputs);
}

std::shared_ptr<const ir::Graph> CompiledFunction::graph_for(const std::vector<Tensor> &inputs) const {
  if (impl_->fallback == Fallback::Force) return nullptr;
  auto spec = impl_->select(inputs);
  return spec ? spec->graph : nullptr;
}

int64_t CompiledFunction::kernels_per_call(const std::vector<Tensor> &inputs) const {
  if (impl_->fallback == Fallback::Force) return -1;
  auto spec = impl_->select(inputs);
  return spec && spec->executable ? spec->executable->stats().kernels : -1;
}

CompileStats CompiledFunction::stats() const {
  const Impl &impl = *impl_;
  CompileStats s;
  s.calls = impl.calls.load();
  s.compiles = impl.compiles.load();
  s.eager_calls = impl.eager_calls.load();
  std::shared_lock lock(impl.mu);
  s.specializations = int64_t(impl.specs.size());
  for (const auto &spec : impl.specs)
    if (spec->executable) s.peak_arena_bytes = std::max(s.peak_arena_bytes, spec->executable->stats().arena_bytes);
  s.last_fallback_reason = impl.last_fallback_reason;
  s.last_recompile_reason = impl.last_recompile_reason;
  return s;
}

CompiledFunction compile(ModelFn fn, CompileOptions options) {
  KILN_CHECK(fn, "compile: the model function is empty");
  KILN_CHECK(options.cache_limit >= 1, "compile: cache_limit must be >= 1, got ", options.cache_limit);
  CompiledFunction f;
  f.impl_ = std::make_shared<CompiledFunction::Impl>();
  f.impl_->fn = std::move(fn);
  f.impl_->fallback = options.fallback.value_or(fallback_from_env());
  f.impl_->options = std::move(options);
  return f;
}

} // namespace kiln
