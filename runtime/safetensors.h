// Saving and loading named tensors in the safetensors format (the format of
// Hugging Face's `safetensors` library, readable by torch, numpy and others):
//
//   u64 (little-endian) N | N bytes of JSON header | data section
//
// The header maps each tensor name to {"dtype": "F32", "shape": [2, 3],
// "data_offsets": [begin, end]} (byte offsets into the data section, end
// exclusive) and may hold "__metadata__": a map of strings to strings. The data
// section holds each tensor's values, row-major, little-endian, back to back.
// kiln reads and writes the dtypes it has: BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64.
//
//   kiln::save_safetensors("w.safetensors", {{"fc.weight", w}, {"fc.bias", b}});
//   std::map<std::string, kiln::Tensor> params = kiln::load_safetensors("w.safetensors");
#pragma once

#include <map>
#include <string>

#include "runtime/tensor.h"

namespace kiln {

// Writes `tensors` (defined, non-meta; a non-contiguous tensor is saved by its
// values) and `metadata` to `path`, replacing it. kiln::Error naming the file
// (and the tensor) when a tensor cannot be saved or the file cannot be written.
void save_safetensors(const std::string &path, const std::map<std::string, Tensor> &tensors,
                      const std::map<std::string, std::string> &metadata = {});

// Reads every tensor of `path` into a fresh contiguous tensor. A malformed file
// (truncated, header length past the file or over 100 MB, invalid JSON, unknown
// or unsupported dtype, offsets out of range or not matching dtype * shape,
// overlapping ranges or gaps in the data section) is a kiln::Error naming the
// file and the fault.
std::map<std::string, Tensor> load_safetensors(const std::string &path);

// The "__metadata__" map of `path` (empty when absent); the same checks as
// load_safetensors, without reading the tensors' data.
std::map<std::string, std::string> load_safetensors_metadata(const std::string &path);

} // namespace kiln
