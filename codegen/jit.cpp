// The LLJIT wrapper (in the spirit of KaleidoscopeJIT) behind codegen/jit.h.
// Every LLVM ORC include of kiln lives in this file, and the PassBuilder one in
// codegen/optimize_pipeline.cpp (they cost ~35 s of compile time per translation unit).
#include "codegen/jit.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/IRCompileLayer.h>
#include <llvm/ExecutionEngine/Orc/IRTransformLayer.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "codegen/lower.h"
#include "codegen/module_flags.h"
#include "codegen/object_cache.h"
#include "codegen/optimize_pipeline.h"
#include "runtime/error.h"
#include "runtime/kernels/vecmath_kernels.h"
#include "runtime/log.h"
#include "runtime/parallel.h"

namespace kiln::codegen {
namespace {

namespace orc = llvm::orc;
using Clock = std::chrono::steady_clock;

// Bump whenever lowering or vecmath changes the code generated for a given
// description: it is part of the disk cache key, so stale objects are never reused.
constexpr const char *kCodegenVersion = "kiln-codegen-15"; // 15: element-wise kernels over a runtime dim 0 may stream their stores to the call's extent; 14: runtime rows that run down columns go in tiles; 13: runtime rows walk every pass in blocks, prefetch 8 lines a step; 12: rows whose length is read per call (KernelDesc::runtime_row); 11: float64 sigmoid calls its list definition; 4: tiles of column rows (lower.cpp); 5: streaming stores, reciprocal of row statistics; 6: exp by exponent add, tanh without a NaN select; 7: row blocks; 8: row max/min fold with maxnum + a NaN flag; 9: float sums in double / blocks, tiles over several outer dims, nests kept rolled; 10: exp(NaN) and expm1(-0) kept (vecmath), relu(-0) and sign(NaN/-0) as eager

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void init_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

std::string take_message(llvm::Error err) { return llvm::toString(std::move(err)); }

spdlog::logger &dump_log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("kiln.dump")) return existing;
    auto l = spdlog::stderr_logger_mt("kiln.dump");
    l->set_pattern("%v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *logger;
}

std::string sorted_features(const std::string &features) {
  std::vector<std::string> parts;
  std::stringstream ss(features);
  for (std::string f; std::getline(ss, f, ',');)
    if (!f.empty()) parts.push_back(f);
  std::sort(parts.begin(), parts.end());
  std::string out;
  for (const auto &p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The state the ORC layers call back into. All of it is used under
// State::compile_mu: LLJIT runs without compile threads, so materialization
// happens on the thread that calls lookup() inside Jit::compile().
struct State {
  JitOptions opts;
  std::unique_ptr<orc::LLJIT> lljit;
  std::unique_ptr<llvm::TargetMachine> opt_tm; // cost model for the O3 pipeline
  LowerTarget target;
  std::string cpu, features;
  std::unique_ptr<DiskObjectCache> disk;

  std::mutex compile_mu;
  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledKernel> kernel;
  };
  std::unordered_map<uint64_t, Entry> kernels;
  JitStats stats;
  std::atomic<int64_t> compiles{0};

  // Scratch of the compile in progress.
  struct Capture {
    std::string ir, assembly;
    bool from_disk = false;
    double opt_ms = 0, codegen_ms = 0;
  } capture;

  void optimize(llvm::Module &m) { optimize_module(m, *opt_tm); }

  // A kernel whose IR or assembly is wanted (KILN_DUMP=llvm|asm) is compiled
  // even when its object is on disk: a dump must show the code, warm cache or not.
  bool use_disk() const { return disk && !opts.capture_ir && !opts.capture_asm; }

  void transform(llvm::Module &m) {
    // An object on disk makes O3 wasted work: skip it (the compiler loads the object).
    if (use_disk() && disk->prefetch(m)) return;
    auto t0 = Clock::now();
    // Generators that emit finished loops (codegen/gemm) flag their modules:
    // O3 finds nothing to improve there and costs ~40% of their compile time.
    if (!m.getModuleFlag(kSkipOptimizerFlag)) optimize(m);
    mark_streamed_stores(m);
    capture.opt_ms = ms_since(t0);
    if (!opts.capture_ir) return;
    llvm::raw_string_ostream os(capture.ir);
    m.print(os, nullptr);
  }
};

std::string emit_assembly(llvm::TargetMachine &tm, const llvm::Module &m) {
  // Code generation rewrites IR (CodeGenPrepare...): print from a clone so that
  // the module compiled for execution is untouched.
  std::unique_ptr<llvm::Module> clone = llvm::CloneModule(m);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    return "; the target cannot emit assembly\n";
  pm.run(*clone);
  return std::string(text.str());
}

// Compiles optimized IR to an object, through the disk cache when there is one.
class KilnCompiler final : public orc::IRCompileLayer::IRCompiler {
public:
  KilnCompiler(std::unique_ptr<llvm::TargetMachine> tm, State *st)
      : IRCompiler(orc::irManglingOptionsFromTargetOptions(tm->Options)), tm_(std::move(tm)), st_(st) {}

  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> operator()(llvm::Module &m) override {
    if (st_->use_disk()) {
      if (auto obj = st_->disk->getObject(&m)) {
        st_->capture.from_disk = true;
        return obj;
      }
    }
    auto t0 = Clock::now();
    if (st_->opts.capture_asm) st_->capture.assembly = emit_assembly(*tm_, m);
    orc::SimpleCompiler compile(*tm_);
    auto obj = compile(m);
    if (!obj) return obj.takeError();
    ++st_->compiles;
    st_->capture.codegen_ms = ms_since(t0);
    if (st_->disk) st_->disk->notifyObjectCompiled(&m, (*obj)->getMemBufferRef());
    return obj;
  }

private:
  std::unique_ptr<llvm::TargetMachine> tm_;
  State *st_;
};

void define_host_symbols(orc::LLJIT &j) {
  orc::SymbolMap syms;
  auto add = [&](const std::string &name, auto *fn) {
    syms[j.mangleAndIntern(name)] = {orc::ExecutorAddr::fromPtr(fn),
                                     llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  };
  add(kParallelForSymbol, &kiln_parallel_for);
  std::string p = kLibmSymbolPrefix;
  // float64 transcendentals: the list's float64 definitions (the vector-math list, runtime/ops.def).
#define X(Id, fn, f64) add(p + #fn, &kiln_vm_##fn##_f64);
  KILN_VECMATH_OPS(X)
#undef X
  // The libm list's functions, both precisions (runtime/kernels/libm_kernels.cpp).
#define X(Id, fn, def)                                                                                     \
  add(p + "lm_" #fn "_f32", &kiln_lm_##fn##_f32);                                                          \
  add(p + "lm_" #fn "_f64", &kiln_lm_##fn##_f64);
  KILN_LIBM_OPS(X)
#undef X
#define X(Id, fn, def)                                                                                     \
  add(p + "lm2_" #fn "_f32", &kiln_lm2_##fn##_f32);                                                        \
  add(p + "lm2_" #fn "_f64", &kiln_lm2_##fn##_f64);
  KILN_LIBM2_OPS(X)
#undef X
  // The optimizer may turn loops into these calls.
  add("memcpy", &std::memcpy);
  add("memmove", &std::memmove);
  add("memset", &std::memset);
  if (auto err = j.getMainJITDylib().define(orc::absoluteSymbols(std::move(syms))))
    KILN_FAIL("jit: cannot define host symbols: ", take_message(std::move(err)));
}

} // namespace

struct Jit::Impl : State {};

namespace {
// The disk cache every process uses unless told otherwise, so that only the
// first process compiles a kernel (library users too, not only the CLI's):
// $KILN_CACHE_DIR when set (set and empty: "" = no disk cache), else
// $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
std::string default_cache_dir() {
  if (const char *dir = std::getenv("KILN_CACHE_DIR")) return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln";
  if (const char *home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/kiln";
  return "";
}
} // namespace

JitOptions JitOptions::from_env() {
  JitOptions o;
  o.cache_dir = default_cache_dir();
  if (const char *dump = std::getenv("KILN_DUMP")) {
    std::stringstream ss(dump);
    for (std::string what; std::getline(ss, what, ',');) {
      if (what == "llvm") o.capture_ir = o.dump = true;
      if (what == "asm") o.capture_asm = o.dump = true;
      if (what == "kernels") o.dump_kernels = true;
    }
  }
  return o;
}

Jit::Jit(JitOptions options) : impl_(std::make_unique<Impl>()) {
  init_llvm_once();
  State &st = *impl_;
  st.opts = std::move(options);
  auto jtmb = orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) KILN_FAIL("jit: cannot target the host: ", take_message(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  st.cpu = jtmb->getCPU();
  st.features = sorted_features(jtmb->getFeatures().getString());
  auto tm = jtmb->createTargetMachine();
  if (!tm) KILN_FAIL("jit: cannot create a target machine: ", take_message(tm.takeError()));
  st.opt_tm = std::move(*tm);
  st.target = {st.opt_tm->getTargetTriple().str(), st.opt_tm->createDataLayout().getStringRepresentation(),
               st.cpu, jtmb->getFeatures().getString()};

  if (!st.opts.cache_dir.empty()) {
    st.disk = std::make_unique<DiskObjectCache>(st.opts.cache_dir);
    if (!st.disk->enabled()) st.disk.reset();
  }

  State *sp = &st;
  auto j = orc::LLJITBuilder()
               .setJITTargetMachineBuilder(*jtmb)
               .setCompileFunctionCreator(
                   [sp](orc::JITTargetMachineBuilder b)
                       -> llvm::Expected<std::unique_ptr<orc::IRCompileLayer::IRCompiler>> {
                     auto ctm = b.createTargetMachine();
                     if (!ctm) return ctm.takeError();
                     return std::make_unique<KilnCompiler>(std::move(*ctm), sp);
                   })
               .create();
  if (!j) KILN_FAIL("jit: cannot create LLJIT: ", take_message(j.takeError()));
  st.lljit = std::move(*j);
  // Failed lookups only say "Failed to materialize symbols"; the cause arrives here.
  st.lljit->getExecutionSession().setErrorReporter(
      [](llvm::Error err) { kiln::log()->error("kiln jit: {}", take_message(std::move(err))); });
  st.lljit->getIRTransformLayer().setTransform(
      [sp](orc::ThreadSafeModule tsm, const orc::MaterializationResponsibility &)
          -> llvm::Expected<orc::ThreadSafeModule> {
        tsm.withModuleDo([sp](llvm::Module &m) { sp->transform(m); });
        return tsm;
      });
  define_host_symbols(*st.lljit);
  if (st.disk && !st.use_disk())
    kiln::log()->debug("kiln jit: KILN_DUMP asks for IR/assembly: kernels are compiled, not loaded from the disk cache");
  kiln::log()->debug("kiln jit: LLVM {} for {} ({}), disk cache {}", LLVM_VERSION_STRING, st.cpu,
                    st.target.triple, st.disk ? st.opts.cache_dir : "off");
}

Jit::~Jit() = default;

const JitOptions &Jit::options() const { return impl_->opts; }
const std::string &Jit::cpu_name() const { return impl_->cpu; }
const std::string &Jit::cpu_features() const { return impl_->features; }

JitStats Jit::stats() const {
  std::lock_guard<std::mutex> lock(impl_->compile_mu);
  JitStats s = impl_->stats;
  s.compiles = impl_->compiles.load();
  if (impl_->disk) {
    s.disk_hits = impl_->disk->hits.load();
    s.disk_writes = impl_->disk->writes.load();
    s.disk_rejects = impl_->disk->rejects.load();
  }
  return s;
}

namespace detail {
struct KernelAccess {
  static void fill(CompiledKernel &k, CompiledKernel::Fn fn, uint64_t hash, std::string symbol,
                   bool from_disk, std::string ir, std::string assembly) {
    k.fn_ = fn;
    k.hash_ = hash;
    k.symbol_ = std::move(symbol);
    k.from_disk_ = from_disk;
    k.llvm_ir_ = std::move(ir);
    k.asm_ = std::move(assembly);
  }
  static void set_compile_ms(CompiledKernel &k, double ms) { k.compile_ms_ = ms; }
};
} // namespace detail

namespace {

std::shared_ptr<CompiledKernel> make_kernel(State &st, const ModuleBuilder &build, uint64_t hash,
                                            const std::string &key, const std::string &symbol) {
  // Everything that decides the machine code, so that a cached object is only
  // reused by an identical compiler, CPU and kernel.
  std::string disk_key = std::string("llvm=") + LLVM_VERSION_STRING + ";cpu=" + st.cpu +
                         ";features=" + st.features + ";codegen=" + kCodegenVersion +
                         ";symbol=" + symbol + ";kernel=" + key;
  st.capture = {};
  orc::JITDylib &jd = st.lljit->getMainJITDylib();
  orc::ResourceTrackerSP rt = jd.createResourceTracker();
  auto fail = [&](const char *what, llvm::Error err) {
    std::string msg = take_message(std::move(err));
    if (auto e = rt->remove()) llvm::consumeError(std::move(e)); // free the failed kernel's symbols
    KILN_FAIL("jit: ", what, " ", symbol, ": ", msg);
  };
  // A warm disk cache: the object is linked as it is, without building the
  // kernel's IR first (that was most of a cached kernel's load time).
  if (auto obj = st.use_disk() ? st.disk->lookup(disk_key) : nullptr) {
    st.capture.from_disk = true;
    if (auto err = st.lljit->addObjectFile(rt, std::move(obj))) fail("cannot add", std::move(err));
  } else {
    auto ctx = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> m = build(symbol, st.target, *ctx);
    ++st.stats.modules_built;
    DiskObjectCache::set_key(*m, disk_key);
    if (auto err = st.lljit->addIRModule(rt, orc::ThreadSafeModule(std::move(m), std::move(ctx))))
      fail("cannot add", std::move(err));
  }
  auto addr = st.lljit->lookup(symbol);
  if (!addr) fail("cannot compile", addr.takeError());

  auto k = std::make_shared<CompiledKernel>();
  detail::KernelAccess::fill(*k, addr->toPtr<CompiledKernel::Fn>(), hash, symbol, st.capture.from_disk,
                             std::move(st.capture.ir), std::move(st.capture.assembly));
  return k;
}

void dump_kernel(const CompiledKernel &k) {
  if (!k.llvm_ir().empty()) dump_log().info("; ---- LLVM IR of {}\n{}", k.symbol(), k.llvm_ir());
  if (!k.assembly().empty()) dump_log().info("# ---- assembly of {}\n{}", k.symbol(), k.assembly());
}

// FNV-1a with a murmur finaliser, for the keys of compile_module().
uint64_t hash_key(const std::string &key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

} // namespace

std::shared_ptr<const CompiledKernel> Jit::compile(const KernelDesc &desc) {
  ModuleBuilder build = [&desc](const std::string &symbol, const LowerTarget &target, llvm::LLVMContext &ctx) {
    return lower_kernel(desc, symbol, target, ctx);
  };
  return compile_keyed(desc.key(), desc.hash(), build, &desc);
}

std::shared_ptr<const CompiledKernel> Jit::compile_module(const std::string &key, const ModuleBuilder &build) {
  return compile_keyed("module:" + key, hash_key("module:" + key), build, nullptr);
}

std::shared_ptr<const CompiledKernel> Jit::compile_keyed(std::string key, uint64_t hash, const ModuleBuilder &build,
                                                         const KernelDesc *desc) {
  State &st = *impl_;
  auto t0 = Clock::now();
  std::lock_guard<std::mutex> lock(st.compile_mu);
  ++st.stats.requests;
  std::string symbol = "kiln_k_" + hex16(hash);
  auto it = st.kernels.find(hash);
  if (it != st.kernels.end()) {
    if (it->second.key == key) {
      ++st.stats.memory_hits;
      return it->second.kernel;
    }
    // Two different kernels with one 64-bit hash: compile under a distinct name, uncached.
    kiln::log()->warn("kiln jit: kernel hash collision on {}", hex16(hash));
    symbol += "_c" + std::to_string(st.stats.requests);
  }
  std::shared_ptr<CompiledKernel> k;
  try {
    k = make_kernel(st, build, hash, key, symbol);
  } catch (const std::exception &e) {
    ++st.stats.failures;
    kiln::log()->warn("kiln jit: {}", e.what());
    throw;
  }
  detail::KernelAccess::set_compile_ms(*k, ms_since(t0));
  st.stats.compile_ms += k->compile_ms();
  kiln::log()->debug("kiln jit: {} {} in {:.2f} ms (O3 {:.2f} ms, codegen {:.2f} ms)", symbol,
                    k->from_disk_cache() ? "loaded from disk cache" : "compiled", k->compile_ms(),
                    st.capture.opt_ms, st.capture.codegen_ms);
  if (st.opts.dump_kernels && desc) dump_log().info("# ---- {}\n{}", symbol, desc->to_string());
  if (st.opts.dump) dump_kernel(*k);
  if (it == st.kernels.end()) st.kernels.emplace(hash, State::Entry{std::move(key), k});
  return k;
}

namespace {
thread_local Jit *t_current_jit = nullptr;
}

Jit &Jit::current() { return t_current_jit ? *t_current_jit : global(); }

ScopedJit::ScopedJit(Jit &jit) : saved_(t_current_jit) { t_current_jit = &jit; }
ScopedJit::~ScopedJit() { t_current_jit = saved_; }

Jit &Jit::global() {
  // Never destroyed: kernels may be running on pool threads during static destruction.
  static Jit *jit = new Jit(JitOptions::from_env());
  return *jit;
}

} // namespace kiln::codegen
