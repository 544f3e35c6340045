// A lone matmul, mm or bmm of a graph with symbols that reads every size per
// call (issue 17): its batches, M, N and K come from each call's operands.
// The M-per-call step (EpilogueStep::build_rows_per_call) packs B once and
// keeps the traced N and K; this one serves the products where those change
// with the call, attention's q @ k^T and p @ v over a symbolic sequence, and
// batches that B does not share. Internal to codegen/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/epilogue.h"

namespace kiln::codegen {

// Why `op` cannot run as a product that reads every size per call, or "":
// kiln's GEMM path, a matmul, mm or bmm of two float operands of rank >= 2.
std::string product_per_call_misfit(const ir::Node &op);

// The step (an EpilogueStep without epilogue, always through run_into):
// `operands` are op's operands as META tensors at the traced sizes. run_into
// takes operands of any sizes and strides that the op accepts (read in place;
// negative strides are copied first) and a contiguous result of the call's
// sizes, so the executor passes views as they are. Throws kiln::Error when the
// micro-kernels cannot be compiled or product_per_call_misfit is not empty.
std::shared_ptr<const EpilogueStep> build_product_per_call(const ir::Node &op, const std::vector<Tensor> &operands);

} // namespace kiln::codegen
