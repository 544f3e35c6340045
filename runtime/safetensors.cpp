#include "runtime/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; kiln reads and writes it in native order");

using json = nlohmann::json;

// The file is untrusted input (weights from elsewhere); each limit is checked
// before anything of the claimed size is allocated:
// - the header: at most 100 MB (the reference implementation's cap), and no
//   more than the file holds, checked before it is read;
// - JSON nesting: at most kMaxJsonDepth levels (a valid header needs 3), so
//   that neither parsing nor printing an error recurses without bound;
// - rank: at most kMaxDims; elements: the product of the dims (zeros counted
//   as 1) at most 2^50, so that sizes and strides stay far from overflow;
// - bytes: dtype * shape must equal the tensor's data_offsets range, which lies
//   inside the data section, so all tensors together take at most the file's size.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int kMaxJsonDepth = 16;
constexpr uint64_t kMaxElements = uint64_t(1) << 50;

[[noreturn]] void fail(const std::string &path, const std::string &fault) {
  throw Error("safetensors: '" + path + "': " + fault);
}

std::string_view st_name(DType t) {
  switch (t) {
  case DType::Bool: return "BOOL";
  case DType::Int32: return "I32";
  case DType::Int64: return "I64";
  case DType::Float32: return "F32";
  case DType::Float64: return "F64";
  case DType::UInt8: return "U8";
  case DType::Int8: return "I8";
  case DType::Int16: return "I16";
  case DType::Float16: return "F16";
  case DType::BFloat16: return "BF16";
  }
  return "?";
}

std::optional<DType> dtype_of(std::string_view s) {
  for (DType t : {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (st_name(t) == s) return t;
  return std::nullopt;
}

// safetensors dtypes kiln has no tensor type for: a valid file, but not loadable.
bool known_elsewhere(std::string_view s) {
  for (std::string_view k : {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2",
                             "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"})
    if (k == s) return true;
  return false;
}

std::string shape_text(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Entry {
  std::string name;
  DType dtype = kFloat32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries; // sorted by data_offsets
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0; // file offset of the data section
};

// A JSON number that is an integer in [0, max]; nullopt otherwise.
std::optional<uint64_t> non_negative(const json &j, uint64_t max) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v <= max) return v;
  }
  return std::nullopt;
}

DType parse_dtype(const std::string &path, const std::string &name, const json &info) {
  auto it = info.find("dtype");
  if (it == info.end() || !it->is_string()) fail(path, "tensor '" + name + "' has no \"dtype\" string");
  std::string s = it->get<std::string>();
  if (auto t = dtype_of(s)) return *t;
  if (known_elsewhere(s))
    fail(path, "tensor '" + name + "' has dtype " + s + ", which kiln does not support (BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64)");
  fail(path, "tensor '" + name + "' has unknown dtype '" + s + "'");
}

std::vector<int64_t> parse_shape(const std::string &path, const std::string &name, const json &info) {
  auto it = info.find("shape");
  if (it == info.end() || !it->is_array()) fail(path, "tensor '" + name + "' has no \"shape\" array");
  if (it->size() > size_t(kMaxDims))
    fail(path, "tensor '" + name + "' has " + std::to_string(it->size()) + " dims; kiln allows " +
                   std::to_string(kMaxDims));
  std::vector<int64_t> shape;
  uint64_t elements = 1; // zero dims counted as 1: they bound the strides
  for (const json &d : *it) {
    auto v = non_negative(d, UINT64_MAX);
    if (!v) fail(path, "tensor '" + name + "' has shape entry " + d.dump() + ", not a non-negative integer");
    uint64_t factor = std::max<uint64_t>(*v, 1);
    if (factor > kMaxElements / elements)
      fail(path, "tensor '" + name + "' has shape " + it->dump() + ", more than the limit of 2^50 elements");
    elements *= factor;
    shape.push_back(int64_t(*v));
  }
  return shape;
}

// Bytes dtype * shape takes, or nullopt on overflow.
std::optional<uint64_t> byte_size(DType t, const std::vector<int64_t> &shape) {
  uint64_t n = itemsize(t);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) return std::nullopt;
  return n;
}

Entry parse_entry(const std::string &path, const std::string &name, const json &info, uint64_t data_size) {
  if (!info.is_object()) fail(path, "tensor '" + name + "' is described by " + info.dump() + ", not an object");
  Entry e{name, parse_dtype(path, name, info), parse_shape(path, name, info)};
  auto it = info.find("data_offsets");
  if (it == info.end() || !it->is_array() || it->size() != 2)
    fail(path, "tensor '" + name + "' has no \"data_offsets\" [begin, end]");
  auto b = non_negative((*it)[0], UINT64_MAX), en = non_negative((*it)[1], UINT64_MAX);
  if (!b || !en) fail(path, "tensor '" + name + "' has data_offsets " + it->dump() + ", not non-negative integers");
  e.begin = *b;
  e.end = *en;
  std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
  if (e.begin > e.end || e.end > data_size)
    fail(path, "tensor '" + name + "' has data_offsets " + range + " out of range (the data section has " +
                   std::to_string(data_size) + " bytes)");
  auto need = byte_size(e.dtype, e.shape);
  if (!need || *need != e.end - e.begin)
    fail(path, "tensor '" + name + "' has data_offsets " + range + " (" + std::to_string(e.end - e.begin) +
                   " bytes), but " + std::string(st_name(e.dtype)) + " " + shape_text(e.shape) + " takes " +
                   (need ? std::to_string(*need) : std::string("more than 2^64")) + " bytes");
  return e;
}

std::map<std::string, std::string> parse_metadata(const std::string &path, const json &j) {
  if (!j.is_object()) fail(path, "\"__metadata__\" is not an object of strings");
  std::map<std::string, std::string> m;
  for (const auto &[k, v] : j.items()) {
    if (!v.is_string()) fail(path, "\"__metadata__\" entry '" + k + "' is not a string");
    m[k] = v.get<std::string>();
  }
  return m;
}

// The tensors, sorted by offset, must tile the data section exactly: no
// overlap (two tensors sharing bytes) and no gap or trailing bytes.
void check_coverage(const std::string &path, std::vector<Entry> &entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry &a, const Entry &b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  const Entry *prev = nullptr;
  for (const Entry &e : entries) {
    if (e.begin < covered)
      fail(path, "tensors '" + prev->name + "' [" + std::to_string(prev->begin) + ", " + std::to_string(prev->end) +
                     ") and '" + e.name + "' [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     ") overlap");
    if (e.begin > covered)
      fail(path, "bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                     ") of the data section belong to no tensor (the data must be contiguous)");
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size)
    fail(path, "bytes [" + std::to_string(covered) + ", " + std::to_string(data_size) +
                   ") of the data section belong to no tensor (the data must be contiguous)");
}

uint64_t read_u64_le(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

Header read_header(std::ifstream &in, const std::string &path) {
  std::error_code ec;
  uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec || !in) fail(path, "cannot open for reading" + (ec ? ": " + ec.message() : std::string()));
  if (file_size < 8)
    fail(path, "truncated file: " + std::to_string(file_size) + " bytes, less than the 8-byte header length");
  unsigned char len[8];
  in.read(reinterpret_cast<char *>(len), 8);
  if (!in) fail(path, "truncated file: cannot read the 8-byte header length");
  uint64_t n = read_u64_le(len);
  if (n > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(n) + " exceeds the cap of " + std::to_string(kMaxHeaderBytes) +
                   " bytes");
  if (n > file_size - 8)
    fail(path, "header length " + std::to_string(n) + " is larger than the file (" + std::to_string(file_size - 8) +
                   " bytes after the length): truncated or not a safetensors file");
  std::string text(n, '\0');
  in.read(text.data(), std::streamsize(n));
  if (!in) fail(path, "truncated file: cannot read the " + std::to_string(n) + "-byte header");
  json j;
  // Depth is bounded while parsing (the callback sees each value's depth).
  auto bound_depth = [&](int depth, json::parse_event_t, json &) {
    if (depth > kMaxJsonDepth)
      fail(path, "the JSON header nests deeper than the limit of " + std::to_string(kMaxJsonDepth) + " levels");
    return true;
  };
  try {
    j = json::parse(text, bound_depth);
  } catch (const json::exception &e) {
    fail(path, std::string("invalid JSON header: ") + e.what());
  }
  if (!j.is_object()) fail(path, "the JSON header is not an object");
  Header h;
  h.data_start = 8 + n;
  uint64_t data_size = file_size - h.data_start;
  for (const auto &[name, info] : j.items()) {
    if (name == "__metadata__") h.metadata = parse_metadata(path, info);
    else h.entries.push_back(parse_entry(path, name, info, data_size));
  }
  check_coverage(path, h.entries, data_size);
  return h;
}

Tensor read_tensor(std::ifstream &in, const std::string &path, const Header &h, const Entry &e) {
  Tensor t = empty(e.shape, e.dtype);
  uint64_t nbytes = e.end - e.begin;
  if (nbytes == 0) return t;
  in.seekg(std::streamoff(h.data_start + e.begin));
  in.read(static_cast<char *>(t.raw_data()), std::streamsize(nbytes));
  if (!in) fail(path, "truncated file: cannot read the data of tensor '" + e.name + "'");
  // Any non-zero byte is true; kiln's bool kernels assume 0 or 1.
  if (e.dtype == kBool)
    for (unsigned char *p = static_cast<unsigned char *>(t.raw_data()), *q = p + nbytes; p != q; ++p) *p = *p != 0;
  return t;
}

std::ifstream open_in(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open for reading");
  return in;
}

// The reference writer's order: larger elements first (so every tensor stays
// aligned to its element size), then by name.
std::vector<std::pair<std::string, Tensor>> save_order(const std::map<std::string, Tensor> &tensors) {
  std::vector<std::pair<std::string, Tensor>> v(tensors.begin(), tensors.end());
  std::stable_sort(v.begin(), v.end(), [](const auto &a, const auto &b) {
    return a.second.element_size() > b.second.element_size();
  });
  return v;
}

void check_savable(const std::string &path, const std::string &name, const Tensor &t) {
  if (name == "__metadata__") fail(path, "'__metadata__' is reserved and cannot name a tensor");
  if (!t.defined()) fail(path, "tensor '" + name + "' is undefined");
  if (t.is_meta()) fail(path, "tensor '" + name + "' is a meta tensor (no data to save)");
}

} // namespace

void save_safetensors(const std::string &path, const std::map<std::string, Tensor> &tensors,
                      const std::map<std::string, std::string> &metadata) {
  for (const auto &[name, t] : tensors) check_savable(path, name, t);
  std::vector<std::pair<std::string, Tensor>> order = save_order(tensors);
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto &[name, t] : order) {
    t = t.contiguous();
    json info;
    info["dtype"] = st_name(t.dtype());
    info["shape"] = std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
    info["data_offsets"] = {offset, offset + t.nbytes()};
    header[name] = std::move(info);
    offset += t.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception &e) {
    fail(path, std::string("cannot write the header (names and metadata must be UTF-8): ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' '); // the data section starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot open for writing");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char *>(len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto &[name, t] : order)
    if (t.nbytes()) out.write(static_cast<const char *>(t.raw_data()), std::streamsize(t.nbytes()));
  out.close();
  if (!out) fail(path, "writing failed (disk full or not writable?)");
}

std::map<std::string, Tensor> load_safetensors(const std::string &path) {
  std::ifstream in = open_in(path);
  Header h = read_header(in, path);
  std::map<std::string, Tensor> out;
  for (const Entry &e : h.entries) out.emplace(e.name, read_tensor(in, path, h, e));
  return out;
}

std::map<std::string, std::string> load_safetensors_metadata(const std::string &path) {
  std::ifstream in = open_in(path);
  return read_header(in, path).metadata;
}

} // namespace kiln
