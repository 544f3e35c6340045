// kiln's JIT: compiles KernelDescs (codegen/kernel.h) to machine code for the
// host CPU with LLVM ORC LLJIT. No LLVM types here: everything LLVM lives in
// codegen/*.cpp.
//
//   auto kernel = Jit::global().compile(desc);          // throws kiln::Error on failure
//   void *bufs[] = {x, a, b, y};                         // inputs, then outputs
//   kernel->run(bufs);
//
// Pipeline per kernel: lower to IR (one module per kernel) -> new-pass-manager
// O3 with loop and SLP vectorization for the host CPU -> object code -> linked
// into the JIT. Kernels are cached in memory by KernelDesc::hash() (identical
// descriptions compile once per Jit), and optionally on disk as object files
// (JitOptions::cache_dir, from $KILN_CACHE_DIR for the global Jit), keyed by
// LLVM version + CPU name + CPU features + codegen version + kernel. A disk hit
// skips both the O3 pipeline and code generation.
//
// Compile failures (invalid description, LLVM errors) throw kiln::Error and leave
// the Jit usable, so a caller can fall back to eager execution.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "codegen/kernel.h"

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace kiln::codegen {

struct LowerTarget;

// Builds a module defining `symbol` for `target` (generators that are not
// KernelDescs, e.g. codegen/gemm's micro-kernels). Throws kiln::Error on failure.
using ModuleBuilder = std::function<std::unique_ptr<llvm::Module>(const std::string &symbol,
                                                                   const LowerTarget &target,
                                                                   llvm::LLVMContext &ctx)>;

struct JitOptions {
  // Keep each kernel's optimized LLVM IR / assembly text on the CompiledKernel.
  // Assembly is produced by a second code generation from the optimized IR, so
  // it costs a compile. With either set, kernels are optimized and compiled even
  // when their object is in the disk cache (which has no IR to show); the
  // objects are still written to it.
  bool capture_ir = false;
  bool capture_asm = false;
  // Also print captured text through the "kiln.dump" spdlog logger (KILN_DUMP).
  bool dump = false;
  // Print each compiled KernelDesc (KernelDesc::to_string) the same way.
  bool dump_kernels = false;
  // Directory of the on-disk object cache; empty = no disk cache. Created if
  // missing; an unusable directory logs a warning and the Jit runs without it.
  std::string cache_dir;

  // For the global Jit: KILN_CACHE_DIR=<dir>, KILN_DUMP=kernels|llvm|asm (comma list).
  static JitOptions from_env();
};

// Counters since the Jit was created (monotonic; read with Jit::stats()).
struct JitStats {
  int64_t requests = 0;        // compile() calls
  int64_t memory_hits = 0;     // served from the in-process kernel cache
  int64_t compiles = 0;        // kernels that went through O3 + code generation
  int64_t disk_hits = 0;       // objects loaded from the disk cache (no O3, no codegen)
  int64_t modules_built = 0;   // kernels whose LLVM IR was built: a disk hit links its object, builds none
  int64_t disk_writes = 0;     // objects stored to the disk cache
  int64_t disk_rejects = 0;    // corrupt/truncated/unreadable entries ignored
  int64_t failures = 0;        // compile() calls that threw
  double compile_ms = 0;       // wall time spent in compile() misses
};

namespace detail {
struct KernelAccess; // codegen/jit.cpp fills kernels in
}

class CompiledKernel {
public:
  using Fn = void (*)(void *const *buffers);

  // buffers: inputs then outputs, in KernelDesc order, each pointing at element 0;
  // then, for a kernel with KernelDesc::runtime_dim0, a pointer to dim 0's extent (int64_t).
  void run(void *const *buffers) const { fn_(buffers); }
  Fn fn() const { return fn_; }
  uint64_t hash() const { return hash_; }
  const std::string &symbol() const { return symbol_; }
  bool from_disk_cache() const { return from_disk_; }
  double compile_ms() const { return compile_ms_; }
  // Empty unless JitOptions::capture_ir / capture_asm.
  const std::string &llvm_ir() const { return llvm_ir_; }
  const std::string &assembly() const { return asm_; }

private:
  friend struct detail::KernelAccess;
  Fn fn_ = nullptr;
  uint64_t hash_ = 0;
  std::string symbol_, llvm_ir_, asm_;
  bool from_disk_ = false;
  double compile_ms_ = 0;
};

class Jit {
public:
  // Throws kiln::Error if LLVM cannot target the host.
  explicit Jit(JitOptions options = {});
  ~Jit();
  Jit(const Jit &) = delete;
  Jit &operator=(const Jit &) = delete;

  // Thread-safe. Returns the cached kernel when an identical description was
  // compiled before. Throws kiln::Error on failure (the Jit stays usable).
  std::shared_ptr<const CompiledKernel> compile(const KernelDesc &desc);
  // Same caches (memory and disk) for a module from another generator. `key`
  // must determine the module completely (it names the symbol and the disk
  // entry). The kernel's fn() is the symbol's address: callers cast it to the
  // function type they generated.
  std::shared_ptr<const CompiledKernel> compile_module(const std::string &key, const ModuleBuilder &build);

  JitStats stats() const;
  const JitOptions &options() const;
  const std::string &cpu_name() const;     // e.g. "znver5"
  const std::string &cpu_features() const; // "+avx512f,+fma,..."

  // The process-wide Jit, configured by JitOptions::from_env() on first use.
  static Jit &global();
  // The Jit plans built on this thread compile with: the innermost ScopedJit's,
  // else global().
  static Jit &current();

private:
  std::shared_ptr<const CompiledKernel> compile_keyed(std::string key, uint64_t hash, const ModuleBuilder &build,
                                                      const KernelDesc *desc);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// While alive, plans built on this thread compile their kernels with `jit`
// instead of the global one (e.g. a fresh Jit over the same disk cache, to time
// what a second process pays). `jit` must outlive every plan built meanwhile.
class ScopedJit {
public:
  explicit ScopedJit(Jit &jit);
  ~ScopedJit();
  ScopedJit(const ScopedJit &) = delete;
  ScopedJit &operator=(const ScopedJit &) = delete;

private:
  Jit *saved_;
};

} // namespace kiln::codegen
