// INTERNAL to codegen: a compiled specialization as data, a fixed sequence of
// steps. program_builder.cpp builds it once from an optimized graph (kernels,
// eager steps, arena placement); executor.cpp runs it for each call
// (codegen/executable.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codegen/epilogue.h"
#include "codegen/executable.h"
#include "codegen/jit.h"
#include "ir/graph.h"
#include "runtime/tensor.h"

namespace kiln::codegen {

// What every call reads, fixed when the program is built. The member names
// end in _ as in the classes built on it: ProgramBuilder fills them, the
// executor reads them.
struct Program {
  struct Step {
    // Skip: a view that only kernels read; they address its base directly.
    // Epilogue: a contraction with its fused epilogue (codegen/epilogue.h).
    enum class Kind { Eager, Kernel, EagerGroup, Skip, Epilogue } kind;
    const ir::Node *node = nullptr;
    std::vector<int> in;  // env slots; -1 = absent optional operand
    std::vector<int> out; // env slots
    std::shared_ptr<const CompiledKernel> kernel;
    std::shared_ptr<const EpilogueStep> epilogue; // Epilogue
    std::vector<size_t> buffer_operands; // Kernel: which of `in` are input buffers
    // Kernel: per buffer (inputs, then outputs), the env slot it lies in and the
    // byte offset from that slot's element 0 (a view resolved to its base).
    std::vector<std::pair<int, int64_t>> buffer_refs;
    // Kernel: each result's shape, contiguous strides and element count, checked
    // once here so that a call allocates its outputs without deriving them.
    // The few fields a call reads come first, next to each other.
    struct OutShape {
      bool allocate; // no arena slot: a fresh tensor per call (set by use_memory_plan)
      int slot;
      int64_t numel;
      DType dtype;
      Dims sizes, strides;
    };
    std::vector<OutShape> out_shapes;
    CompiledKernel::Fn fn = nullptr; // Kernel: kernel->fn(), one indirection less per call
    bool stream_stores = false;             // Kernel: compiled with KernelDesc::stream_stores
    // Eager: the arena slots its results are placed in (those that have one).
    struct Place {
      int64_t offset, bytes;
      DType dtype;
    };
    std::vector<Place> places;
    // Epilogue: bytes of per-call scratch, at scratch_offset in the arena
    // (reserve_step_scratch: bytes no planned value uses while it runs).
    int64_t scratch_bytes = 0, scratch_offset = 0;
    // Write-backs (target slot, value slot) that run right after this step
    // (ir::write_back_points); the others run after the last step.
    std::vector<std::pair<int, int>> write_backs;
    // Kernel and Epilogue: (result slot, target slot) of results computed
    // straight into their write-back target (ir::write_backs_in_place): the
    // call binds the result to the target's tensor before the step runs, and
    // the write-back's copy finds nothing to do.
    std::vector<std::pair<int, int>> into_targets;
    // Its name in a trace (StepEvent::name): the IR value it computes, as the
    // dump prints it, then the kernel symbol or what runs ("%86 kiln_k_...").
    std::string label;
  };

  struct Expected {
    DType dtype;
    Dims sizes, strides;
  };

  static constexpr size_t kMaxPlaced = 4; // results of one eager op placed in the arena

  std::shared_ptr<const ir::Graph> g_;
  std::vector<Expected> expected_;
  std::unordered_map<const ir::Value *, int> slot_;
  std::unordered_map<int, std::pair<int, int64_t>> view_of_; // view slot -> (base slot, byte offset)
  std::vector<Step> steps_;
  std::vector<int> outputs_;
  std::vector<std::pair<int, int>> write_backs_; // after the last step
  size_t num_fixed_ = 0, num_slots_ = 0, num_inputs_ = 0, max_operands_ = 0;
  size_t first_const_slot_ = 0; // slots [num_inputs_, first_const_slot_) are params, then constants
  int64_t arena_bytes_ = 0;
  std::vector<ir::TensorType> slot_types_;
  std::vector<uint8_t> arena_slot_;                    // per slot: a kernel writes it in the arena
  std::vector<std::pair<int, int64_t>> arena_slots_;   // (slot, offset) of those
  std::vector<int> transient_slots_;                   // slots a call binds and clear() drops
  std::vector<uint8_t> output_owned_;                  // per output: see find_owned_outputs
  ExecutableStats stats_;
  std::vector<uint8_t> tensor_needed_; // per slot: some eager step, output or write-back reads its Tensor
  bool serial_ = false; // every call runs its steps on the calling thread (choose_serial)
};

// The program for `g` (already through the pass pipeline) specialised to the
// example inputs' dtypes, shapes and strides (program_builder.cpp).
Program build_program(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &example);

// A meta tensor of type t, with its strides when it has them.
Tensor meta_like(const ir::TensorType &t);

} // namespace kiln::codegen
