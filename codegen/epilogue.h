// INTERNAL to codegen: runs a contraction with its elementwise epilogue as one
// plan step (a fusion group that passes/fuse.cpp made from a matmul, mm, bmm or
// conv2d and the ops elementwise over its output).
//
// matmul family: the output [batch..., M, N] is cut into tiles (whole rows x a
// column range; for conv2d, blocks of output rows of one image) spread over kiln's thread pool;
// per tile, a single-threaded BLAS call writes the tile (operand strides become
// leading dimensions and transpose flags, as in eager), then the JIT-compiled
// epilogue kernel, lowered for the tile's shape and called with per-tile base
// pointers, applies bias / activation / residual / scale while the tile is in
// cache. On kiln's GEMM (KILN_GEMM=jit) the epilogue instead runs inside the
// micro-kernels, on the accumulator tile of the last k block before the store
// (gemm::Epilogue; the same lowered expression), when its operands allow
// (see docs/performance.md); otherwise the per-tile kernel runs as above. conv2d: im2col + GEMM per block of output rows whose im2col buffer
// stays in cache, the epilogue run on each block right after its GEMM
// (detail::nn::conv2d_into).
//
// The contraction's output is written with the strides of its IR type when the
// layout pass chose them (W5's head merge), so later views cost no copy.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::ir {
class Node;
}

namespace kiln::codegen {

// Whether `group`'s body is one contraction followed by ops elementwise over
// its output (the shape passes/fuse.cpp gives GEMM and conv epilogues).
bool is_epilogue_group(const ir::Node &group);

class EpilogueStep {
public:
  // `operands`: the group's operands as META tensors with their plan-time
  // dtypes, shapes and strides (later calls must match them: the plan's guards).
  // Throws kiln::Error when the group cannot run this way; the caller then runs
  // it eagerly (ir::interpret).
  static std::shared_ptr<const EpilogueStep> build(const ir::Node &group, const std::vector<Tensor> &operands);
  // A lone matmul, mm, bmm or conv2d (no epilogue) as the same step, so that
  // it runs on the same kernels (and packed weights) as the fused ones;
  // `operands` as above, for op's operands.
  static std::shared_ptr<const EpilogueStep> build_lone(const ir::Node &op, const std::vector<Tensor> &operands);
  // The same for a graph with symbols (issue 17): `node` is an epilogue group
  // or a lone matmul or mm whose symbols size only the rows of the product
  // (M; not N, K or B: symbolic_contraction_misfit), `operands` are at the
  // traced sizes, contiguous where their type is symbolic. run_into then takes
  // contiguous results and operands of any M with the traced trailing sizes
  // (a conv2d: any batch, and any image size where image_size_misfit allows):
  // the micro-kernels cover every M % mr and the tiles are chosen per call, so
  // no size compiles anything. A lone matmul, mm or bmm that cannot (N, K or
  // its batches symbolic, batches B does not share) reads every size per call
  // instead (codegen/product_step.h). Throws kiln::Error when it cannot run so
  // (BLAS, an epilogue outside the micro-kernel's registers).
  static std::shared_ptr<const EpilogueStep> build_rows_per_call(const ir::Node &node,
                                                                 const std::vector<Tensor> &operands);
  virtual ~EpilogueStep() = default;

  // What computes the contraction: "gemm-jit" (kiln's GEMM, codegen/gemm),
  // "blas" (OpenBLAS, as eager), "conv-jit" (kiln's conv, codegen/gemm/conv.h)
  // or "conv" (detail::nn::conv2d_into).
  virtual std::string_view contraction_kind() const = 0;
  // Whether kiln's own micro-kernels (GEMM or conv) compute it, not BLAS or eager's conv.
  bool on_kilns_kernels() const { return contraction_kind() == "gemm-jit" || contraction_kind() == "conv-jit"; }
  // Whether a conv2d reads its image size (H, W) per call, not only its batch
  // (a graph with symbolic image sizes, on kiln's conv with the epilogue in registers).
  virtual bool reads_image_size_per_call() const = 0;
  // Whether a lone matmul, mm or bmm reads its batches, M, N and K per call
  // (codegen/product_step.h), not only M.
  virtual bool reads_every_size_per_call() const { return false; }
  // Bytes of a captured weight packed once for kiln's GEMM or conv, 0 if none.
  virtual int64_t packed_weight_bytes() const = 0;

  // META tensors of the group's results, with the strides run() gives them.
  virtual const std::vector<Tensor> &result_metas() const = 0;
  // JIT kernels compiled for the epilogue (one per distinct tile shape, or the
  // micro-kernel variants that apply it in registers).
  virtual int64_t num_kernels() const = 0;
  // Whether the epilogue runs on the accumulators in the GEMM micro-kernels'
  // registers (kiln's GEMM, matmul family) rather than as a second pass over
  // each stored C tile (a JIT kernel per tile shape); the reason it does not
  // is logged at debug level.
  virtual bool epilogue_in_registers() const = 0;
  // Computes the group's results into fresh tensors. Thread-safe.
  virtual std::vector<Tensor> run(const std::vector<Tensor> &operands) const = 0;
  // Bytes of per-call scratch the step needs (a conv2d output that is no group
  // result: the epilogue reads it block by block; a conv2d weight that is no
  // parameter, packed for the call); 0 when none.
  virtual size_t scratch_bytes() const = 0;
  // The same into caller-provided results (e.g. arena slices) with exactly the
  // dtypes, shapes and strides of result_metas(); throws kiln::Error otherwise.
  // `scratch`: scratch_bytes() bytes, 64-byte aligned, not shared with a
  // concurrent call (the plan's arena); null allocates it per call.
  virtual void run_into(const std::vector<Tensor> &operands, const std::vector<Tensor> &results,
                        void *scratch = nullptr) const = 0;
};

// Why contraction `c` of a graph with symbols cannot head an epilogue step
// that reads its M per call (build_rows_per_call), or "". What passes/fuse.cpp
// asks (registered with passes/lowering_check.h).
std::string symbolic_contraction_misfit(const ir::Node &c);

// How many steps were built to run on kiln's GEMM in this process (tests
// check that the path is taken).
int64_t gemm_jit_steps_built();
// How many of those run their epilogue in the micro-kernels' registers.
int64_t register_epilogues_built();
// How many of those read A in place (gemm::Config::a_in_place) instead of packing it.
int64_t a_in_place_steps_built();

// Whether steps built from now on may run their epilogue in registers (default
// true; KILN_GEMM_EPILOGUE=tile at startup sets false, =registers true): false keeps the second
// pass over each C tile, for comparisons in one process (tests, kiln bench).
void set_register_epilogues(bool enabled);
bool register_epilogues();

} // namespace kiln::codegen
