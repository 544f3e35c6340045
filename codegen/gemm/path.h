// Which code runs a compiled function's contractions: kiln's JIT GEMM
// (codegen/gemm/gemm.h) or OpenBLAS (eager's kernels, the reference).
//
//   KILN_GEMM=jit|blas     (unset: jit), read once, at the first path() call
//   kiln::gemm::set_path(kiln::gemm::Path::Blas);   // kiln bench --gemm blas
//
// The path is read when a specialization is built: a compiled function keeps
// the path it was built with, so one process can compare both.
#pragma once

#include <optional>
#include <string_view>

namespace kiln::codegen::gemm {

enum class Path { Jit, Blas };

Path path();
void set_path(Path p);
std::string_view path_name(Path p);
// "jit" or "blas"; nothing for any other text.
std::optional<Path> parse_path(std::string_view s);

} // namespace kiln::codegen::gemm

namespace kiln {
namespace gemm = codegen::gemm;
}
