// Build-time generator of the eager kernels of the vector math and of the
// composed pointwise functions.
//
//   kiln-vecmath-gen OUTPUT.o (native|x86-64)
//
// Emits one object file with, for each function F of runtime/kernels/vecmath_kernels.h,
//   extern "C" void kiln_vm_F_f32(const float *x, float *y, int64_t n);   // y[i] = F(x[i])
// whose loop body is built by the same IR builders the JIT inlines into its
// kernels (codegen/vecmath.cpp), and for each function F of
// the composed-op list (runtime/ops.def),
//   extern "C" void kiln_pw_F_f32(const float *x, float *y, int64_t n);
//   extern "C" void kiln_pw_F_f64(const double *x, double *y, int64_t n);
// whose loop body is the list's definition of F built into a kernel description
// (codegen::F(Expr), codegen/kernel.h) and lowered by the JIT's own expression
// lowering (codegen/lower_expr.cpp): the definition exists once, as the lowering
// rule of its op. All are optimized by the JIT's O3 pipeline
// (codegen/optimize_pipeline.cpp). The eager kernels
// (runtime/kernels/elementwise_unary.cpp) call these, so eager and
// compiled results agree bit for bit: both run the same IEEE operations
// (explicit llvm.fma, no fast-math flags, hence no contraction), whatever the
// vector width the loop vectorizer picks in either.
//
// Target: `native` is the host CPU (the library is built with -march=native by
// default, KILN_NATIVE=ON, so it runs where it is built, and the JIT targets the
// host too); `x86-64` the baseline ISA (KILN_NATIVE=OFF), where llvm.fma
// becomes a call to libm's fmaf: the same bits, only slower.
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <llvm/IR/BasicBlock.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include "codegen/kernel.h"
#include "codegen/lower.h"
#include "codegen/lower_common.h"
#include "codegen/optimize_pipeline.h"
#include "codegen/vecmath_ir.h"
#include "runtime/error.h"

namespace {

namespace vm = kiln::codegen::vecmath;
using Builder = llvm::Value *(*)(llvm::IRBuilderBase &, llvm::Value *);

// The functions of the vector-math list (runtime/ops.def).
struct Kernel {
  const char *name;
  Builder build;
};
#define KILN_KERNEL_OP(Id, fn, f64) {#fn, vm::fn},
constexpr Kernel kKernels[] = {KILN_VECMATH_OPS(KILN_KERNEL_OP)};
#undef KILN_KERNEL_OP

// The functions of the composed-op list (runtime/ops.def): codegen::fn(Expr), whose body is
// the list's definition.
struct Composed {
  const char *name;
  kiln::codegen::Expr (*define)(kiln::codegen::Expr);
};
#define KILN_COMPOSED(fn, def) {#fn, kiln::codegen::fn},
#define KILN_COMPOSED_OP(Id, fn, def) KILN_COMPOSED(fn, def)
constexpr Composed kComposed[] = {KILN_COMPOSED_OPS(KILN_COMPOSED_OP) KILN_COMPOSED_KERNELS(KILN_COMPOSED)};
#undef KILN_COMPOSED_OP
#undef KILN_COMPOSED

// y may equal x (softmax's rows, in-place ops): without this the loop
// vectorizer guards the vector loop with a runtime overlap check, and x == y
// "overlaps", so in-place calls ran the scalar loop, 10x slower. Iteration i
// reads x[i] before it writes y[i] and touches no other element, so the
// accesses carry no dependence across iterations: llvm.loop.parallel_accesses
// says so, and the vector loop runs for x == y too (a partial overlap is
// outside the header's contract).
void mark_parallel(llvm::LLVMContext &c, std::initializer_list<llvm::Instruction *> accesses,
                   llvm::BranchInst *latch) {
  llvm::MDNode *group = llvm::MDNode::getDistinct(c, {});
  for (llvm::Instruction *a : accesses) a->setMetadata(llvm::LLVMContext::MD_access_group, group);
  llvm::MDNode *parallel = llvm::MDNode::get(c, {llvm::MDString::get(c, "llvm.loop.parallel_accesses"), group});
  llvm::TempMDTuple self = llvm::MDNode::getTemporary(c, {});
  llvm::MDNode *id = llvm::MDNode::getDistinct(c, {self.get(), parallel});
  id->replaceOperandWith(0, id);
  latch->setMetadata(llvm::LLVMContext::MD_loop, id);
}

using Element = std::function<llvm::Value *(llvm::IRBuilder<> &, llvm::Value *)>;

// void <name>(const T *x, T *y, int64_t n): a counted loop over y[i] = f(x[i]) for
// the loop vectorizer to widen.
void emit_loop_kernel(llvm::Module &m, const std::string &name, llvm::Type *elem, const Element &f,
                      const std::string &cpu, const std::string &features) {
  llvm::LLVMContext &c = m.getContext();
  llvm::Type *ptr = llvm::PointerType::getUnqual(c);
  llvm::Type *i64 = llvm::Type::getInt64Ty(c);
  auto *fty = llvm::FunctionType::get(llvm::Type::getVoidTy(c), {ptr, ptr, i64}, false);
  auto *fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, m);
  fn->setDoesNotThrow();
  fn->addFnAttr("target-cpu", cpu);
  if (!features.empty()) fn->addFnAttr("target-features", features);
  fn->addParamAttr(0, llvm::Attribute::NoCapture);
  fn->addParamAttr(0, llvm::Attribute::ReadOnly);
  fn->addParamAttr(1, llvm::Attribute::NoCapture);
  llvm::Value *x = fn->getArg(0), *y = fn->getArg(1), *n = fn->getArg(2);

  auto *entry = llvm::BasicBlock::Create(c, "entry", fn);
  auto *loop = llvm::BasicBlock::Create(c, "loop", fn);
  auto *exit = llvm::BasicBlock::Create(c, "exit", fn);
  llvm::IRBuilder<> b(entry);
  b.CreateCondBr(b.CreateICmpSGT(n, b.getInt64(0)), loop, exit);
  b.SetInsertPoint(loop);
  llvm::PHINode *i = b.CreatePHI(i64, 2);
  i->addIncoming(b.getInt64(0), entry);
  llvm::LoadInst *v = b.CreateLoad(elem, b.CreateInBoundsGEP(elem, x, i));
  llvm::StoreInst *st = b.CreateStore(f(b, v), b.CreateInBoundsGEP(elem, y, i));
  llvm::Value *next = b.CreateAdd(i, b.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, loop);
  llvm::BranchInst *latch = b.CreateCondBr(b.CreateICmpSLT(next, n), loop, exit);
  mark_parallel(c, {v, st}, latch);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
}

// void kiln_vm_<name>_f32(const float *x, float *y, int64_t n).
void emit_kernel(llvm::Module &m, const Kernel &k, const std::string &cpu, const std::string &features) {
  std::string name = "kiln_vm_";
  name.append(k.name).append("_f32");
  Builder build = k.build;
  emit_loop_kernel(m, name, llvm::Type::getFloatTy(m.getContext()), [build](llvm::IRBuilder<> &b, llvm::Value *v) {
    return build(b, v);
  }, cpu, features);
}

// void kiln_pw_<name>_<f32|f64>(const T *x, T *y, int64_t n): the function's
// definition as a one-input kernel description, its nodes lowered one by one at
// the loaded element by the JIT's lowering (lower_impl::Lowering::emit_value), as
// the JIT lowers them inside a fused kernel.
void emit_composed(llvm::Module &m, const Composed &k, kiln::DType dt, const kiln::codegen::LowerTarget &target) {
  namespace cg = kiln::codegen;
  cg::KernelBuilder kb({1});
  kb.output(k.define(kb.input(dt)));
  auto desc = std::make_shared<cg::KernelDesc>(kb.build());
  auto lowering = std::make_shared<cg::lower_impl::Lowering>(*desc, m, target);
  std::string name = "kiln_pw_";
  name.append(k.name).append(dt == kiln::DType::Float32 ? "_f32" : "_f64");
  llvm::Type *elem = cg::lower_impl::value_type(m.getContext(), dt);
  emit_loop_kernel(m, name, elem, [desc, lowering](llvm::IRBuilder<> &b, llvm::Value *x) {
    std::vector<llvm::Value *> vals(desc->nodes.size(), nullptr);
    for (size_t i = 0; i < desc->nodes.size(); ++i)
      vals[i] = desc->nodes[i].op == cg::KOp::Load ? x : lowering->emit_value(b, i, vals);
    return vals.at(size_t(desc->outputs.at(0).value));
  }, target.cpu, target.features);
}

// The JIT resolves its float64 vector-math calls, kiln_libm_<fn>, to the list's
// float64 definitions kiln_vm_<fn>_f64 at run time (codegen/jit.cpp); here the
// linker does, by their real names.
void bind_float64_definitions(llvm::Module &m) {
  const std::string prefix = kiln::codegen::kLibmSymbolPrefix;
  for (llvm::Function &f : m.functions()) {
    std::string name = f.getName().str();
    if (!f.isDeclaration() || name.rfind(prefix, 0) != 0) continue;
    f.setName("kiln_vm_" + name.substr(prefix.size()) + "_f64");
  }
}

std::string host_features() {
  std::string out;
  for (const auto &f : llvm::sys::getHostCPUFeatures()) {
    if (!out.empty()) out.push_back(',');
    out.push_back(f.getValue() ? '+' : '-');
    out.append(f.getKey().data(), f.getKey().size());
  }
  return out;
}

int fail(const std::string &msg) {
  std::fprintf(stderr, "kiln-vecmath-gen: %s\n", msg.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) return fail("usage: kiln-vecmath-gen OUTPUT.o (native|x86-64)");
  const std::string out_path = argv[1], which = argv[2];
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  const bool native = which == "native";
  if (!native && which != "x86-64") return fail("target must be native or x86-64, got " + which);
  std::string cpu = native ? llvm::sys::getHostCPUName().str() : "x86-64";
  std::string features = native ? host_features() : "";
  std::string triple = llvm::sys::getDefaultTargetTriple();
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target) return fail(err);
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, cpu, features, llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm) return fail("cannot create a target machine for " + triple + " " + cpu);

  llvm::LLVMContext ctx;
  llvm::Module m("kiln_vecmath_kernels", ctx);
  m.setTargetTriple(triple);
  m.setDataLayout(tm->createDataLayout());
  for (const Kernel &k : kKernels) emit_kernel(m, k, cpu, features);
  const kiln::codegen::LowerTarget lower_target{triple, m.getDataLayoutStr(), cpu, features};
  try {
    for (const Composed &k : kComposed)
      for (kiln::DType dt : {kiln::DType::Float32, kiln::DType::Float64}) emit_composed(m, k, dt, lower_target);
  } catch (const kiln::Error &e) {
    return fail(e.what());
  }
  bind_float64_definitions(m);
  if (llvm::verifyModule(m, &llvm::errs())) return fail("invalid IR");
  kiln::codegen::optimize_module(m, *tm); // the JIT's pipeline

  std::error_code ec;
  llvm::raw_fd_ostream os(out_path, ec, llvm::sys::fs::OF_None);
  if (ec) return fail("cannot write " + out_path + ": " + ec.message());
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    return fail("the target cannot emit object files");
  pm.run(m);
  os.flush();
  std::printf("kiln-vecmath-gen: %zu kernels for %s (%s) -> %s\n", std::size(kKernels) + 2 * std::size(kComposed), cpu.c_str(),
              triple.c_str(), out_path.c_str());
  return 0;
}
