// The fuzz targets' entry functions, shared by the libFuzzer executables
// (fuzz_ir_parser, fuzz_random_graph, fuzz_safetensors_reader,
// fuzz_cache_entry: clang, -fsanitize=fuzzer) and by
// fuzz_regression_test, which replays every committed input under
// test/fuzz-regressions/<target>/ in the normal test suite (any compiler).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::fuzz {

// Each returns "" when the input upholds the target's property, else what went
// wrong. Inputs the target rejects (kiln::Error) are fine; a crash, a leak, a
// hang or any other exception is a bug.

// Parses the bytes as IR text and verifies it: kiln::Error or success. A graph
// that parses prints, and its printed text parses back and prints the same.
std::string ir_parser(const uint8_t *data, size_t size);

// The bytes choose a random graph (test/util/random_graph.h); kiln::compile
// (no eager fallback) must equal the interpreter on the traced graph, and on
// permuted, sliced and expanded inputs it must equal eager (values, output
// strides, and an error where eager throws one). Inputs whose last byte is a
// multiple of 4 also drive a contraction-heavy graph (contraction_graph_options:
// kiln's GEMM and conv kernels), with atol growing with the longest contraction.
std::string random_graph(const uint8_t *data, size_t size);

// The bytes as a safetensors file (in a memfd, read through /proc/self/fd):
// kiln::Error or tensors that together take no more bytes than the file. A
// header claiming huge sizes must be refused before allocating (libFuzzer's
// -rss_limit_mb / -malloc_limit_mb in scripts/fuzz.sh turn such an allocation
// into a failure).
std::string safetensors_reader(const uint8_t *data, size_t size);

// The bytes as a disk cache entry (codegen/cache_trust.h): read from a file
// (only as many bytes as the file has), opened for a fixed key and secret (an
// entry opens only if it is exactly what seal_entry makes); and split into a
// key and an object, sealed, which must open again, and only with that secret
// and key.
std::string cache_entry(const uint8_t *data, size_t size);

} // namespace kiln::fuzz
