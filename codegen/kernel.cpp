#include "codegen/kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "codegen/row_schedule.h"
#include "runtime/error.h"

namespace kiln::codegen {

const char *op_name(KOp op) {
  switch (op) {
#define X(name, arity, traits)                                                                         \
  case KOp::name: return #name;
    KILN_KERNEL_OPS(X)
#undef X
#define X(Id, fn, f64)                                                                                 \
  case KOp::Id: return #Id;
    KILN_VECMATH_OPS(X) KILN_LIBM_OPS(X) KILN_LIBM2_OPS(X)
#undef X
  }
  return "?";
}

int op_arity(KOp op) {
  switch (op) {
#define X(name, arity, traits)                                                                         \
  case KOp::name: return arity;
    KILN_KERNEL_OPS(X)
#undef X
#define X(Id, fn, f64)                                                                                 \
  case KOp::Id: return 1;
    KILN_VECMATH_OPS(X) KILN_LIBM_OPS(X)
#undef X
#define X(Id, fn, def)                                                                                 \
  case KOp::Id: return 2;
    KILN_LIBM2_OPS(X)
#undef X
  }
  return 0;
}

bool is_reduce_combine(KOp op) {
  return op == KOp::Add || op == KOp::Mul || op == KOp::Max || op == KOp::Min;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

int64_t output_bytes(const KernelDesc &desc) {
  int64_t rows = desc.shape.empty() ? 1 : desc.numel() / std::max<int64_t>(1, desc.shape.back());
  int64_t bytes = 0;
  for (const OutputSpec &o : desc.outputs) {
    bool per_row = !o.buffer.strides.empty() && o.buffer.strides.back() == 0;
    bytes += (per_row ? rows : desc.numel()) * int64_t(itemsize(o.buffer.dtype));
  }
  return bytes;
}

namespace {

// "32768K" -> bytes; 0 when unreadable.
int64_t parse_cache_size(const std::string &text) {
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (v <= 0 || end == text.c_str()) return 0;
  if (*end == 'K') return v << 10;
  if (*end == 'M') return v << 20;
  return v;
}

std::string read_line(const std::string &path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The largest cache of cpu0 (the last level), from sysfs.
int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    int64_t best = 0;
    for (int i = 0; i < 8; ++i) {
      std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      best = std::max(best, parse_cache_size(read_line(dir + "size")));
    }
    return best > 0 ? best : int64_t(32) << 20;
  }();
  return bytes;
}

} // namespace

bool streaming_stores_pay_off(const KernelDesc &desc) {
  const int64_t above = streaming_threshold_bytes(desc);
  return above >= 0 && footprint_bytes(desc) > above;
}

int64_t streaming_threshold_bytes(const KernelDesc &desc) {
  static const int forced = [] {
    const char *v = std::getenv("KILN_STREAM_STORES");
    if (!v || !*v) return -1;
    return std::string(v) == "0" ? 0 : 1;
  }();
  if (forced >= 0) return forced == 1 ? 0 : -1;
  // Measured on the 2-core EPYC (32 MiB L3), 2 threads, kiln bench: x + y over
  // 4M floats (48 MiB touched) 940-990 -> 610-670 us per call; layer_norm of
  // 4096x1024 (32 MiB touched) 480-520 -> 600-640 us: its input and output
  // stay in the L3 from call to call, which streaming gives up. Kernels bound
  // by per-element transcendentals lost 5-10% (gelu_tanh, softmax's exp).
  for (const Node &n : desc.nodes)
    if (is_transcendental(n.op)) return -1;
  return last_level_cache_bytes() + last_level_cache_bytes() / 4;
}

int64_t footprint_bytes(const KernelDesc &desc) {
  int64_t bytes = output_bytes(desc);
  for (const BufferSpec &in : desc.inputs) {
    int64_t n = 1; // distinct elements: broadcast dims (stride 0) read the same ones
    for (size_t d = 0; d < desc.shape.size(); ++d)
      if (in.strides[d] != 0) n *= desc.shape[d];
    bytes += n * int64_t(itemsize(in.dtype));
  }
  return bytes;
}

int64_t KernelDesc::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t KernelDesc::row_length() const {
  int64_t n = 1;
  for (size_t d = shape.size() - std::min(shape.size(), size_t(row_rank)); d < shape.size(); ++d) n *= shape[d];
  return n;
}

bool KernelDesc::constant_along_row(const std::vector<int64_t> &strides) const {
  for (size_t d = strides.size() - std::min(strides.size(), size_t(row_rank)); d < strides.size(); ++d)
    if (strides[d] != 0) return false;
  return true;
}

bool KernelDesc::has_reductions() const {
  for (const Node &n : nodes)
    if (n.op == KOp::Reduce) return true;
  return false;
}

std::vector<uint8_t> KernelDesc::per_row_nodes() const {
  std::vector<uint8_t> per_row(nodes.size(), 1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node &n = nodes[i];
    if (n.op == KOp::Reduce) continue; // one value per row by definition
    if (n.op == KOp::Load) {
      per_row[i] = shape.empty() || constant_along_row(inputs[n.input].strides);
      continue;
    }
    for (int a = 0; a < op_arity(n.op); ++a) per_row[i] &= per_row[n.args[a]];
  }
  return per_row;
}

namespace {

// Appends raw bytes of trivially copyable values: the key is compared byte-wise.
class KeyWriter {
public:
  template <class T> void put(const T &v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    out_.append(bytes, sizeof(T));
  }
  void put_vec(const std::vector<int64_t> &v) {
    put<uint64_t>(v.size());
    for (int64_t x : v) put(x);
  }
  void put_name(std::string_view name) {
    put<uint8_t>(uint8_t(name.size()));
    out_.append(name);
  }
  std::string take() { return std::move(out_); }

private:
  std::string out_;
};

bool is_compare(KOp op) { return op >= KOp::Eq && op <= KOp::Ge; }
bool is_float_only(KOp op) {
  return is_transcendental(op) || op == KOp::Sqrt || op == KOp::Rsqrt || op == KOp::Floor || op == KOp::Ceil ||
         op == KOp::Round;
}

void check_buffer(const BufferSpec &b, size_t rank, const char *what, size_t i) {
  KILN_CHECK(b.strides.size() == rank, "kernel: ", what, " ", i, " has ", b.strides.size(),
             " strides for an iteration space of rank ", rank);
}

void check_reduce(const KernelDesc &k, size_t i) {
  const Node &n = k.nodes[i];
  KILN_CHECK(is_reduce_combine(n.combine), "kernel: node ", i, " reduces with ", op_name(n.combine),
             "; use Add, Mul, Max or Min");
  KILN_CHECK(!k.shape.empty(), "kernel: node ", i, " reduces over the last dim of a rank-0 kernel");
}

void check_node(const KernelDesc &k, size_t i) {
  const Node &n = k.nodes[i];
  int arity = op_arity(n.op);
  if (n.op == KOp::Reduce) check_reduce(k, i);
  else KILN_CHECK(n.combine == KOp::Const, "kernel: node ", i, " (", op_name(n.op), ") has a combine op");
  KILN_CHECK(!n.inverse_row_length || (n.op == KOp::Const && is_floating(n.dtype)), "kernel: node ", i, " (",
             op_name(n.op), ".", n.dtype, ") is marked 1 / the row length; only a floating constant can be");
  for (int a = 0; a < 3; ++a) {
    bool used = a < arity;
    int32_t arg = n.args[a];
    KILN_CHECK(!used || (arg >= 0 && size_t(arg) < i), "kernel: node ", i, " (", op_name(n.op),
               ") operand ", a, " = ", arg, " does not refer to an earlier node");
    KILN_CHECK(used || arg == -1, "kernel: node ", i, " (", op_name(n.op), ") has extra operand ", a);
  }
  if (n.op == KOp::Load) {
    KILN_CHECK(n.input >= 0 && size_t(n.input) < k.inputs.size(), "kernel: node ", i,
               " loads missing input ", n.input);
    KILN_CHECK(k.inputs[n.input].dtype == n.dtype, "kernel: node ", i, " loads ", n.dtype,
               " from input ", n.input, " of dtype ", k.inputs[n.input].dtype);
  }
  auto arg_type = [&](int a) { return k.nodes[n.args[a]].dtype; };
  if (arity == 2) {
    KILN_CHECK(arg_type(0) == arg_type(1), "kernel: node ", i, " (", op_name(n.op), ") mixes ",
               arg_type(0), " and ", arg_type(1), "; insert a cast");
    KILN_CHECK(n.dtype == (is_compare(n.op) ? DType::Bool : arg_type(0)), "kernel: node ", i, " (",
               op_name(n.op), ") has result type ", n.dtype);
  }
  if (n.op == KOp::Select) {
    KILN_CHECK(arg_type(0) == DType::Bool, "kernel: node ", i, " select condition must be bool");
    KILN_CHECK(arg_type(1) == arg_type(2) && n.dtype == arg_type(1), "kernel: node ", i,
               " select branches must share the result type");
  }
  if (n.op == KOp::Fma)
    KILN_CHECK(arg_type(0) == n.dtype && arg_type(1) == n.dtype && arg_type(2) == n.dtype,
               "kernel: node ", i, " fma operands must share the result type");
  if (arity == 1 && n.op != KOp::Cast)
    KILN_CHECK(arg_type(0) == n.dtype, "kernel: node ", i, " (", op_name(n.op),
               ") must keep its operand type");
  if (is_float_only(n.op))
    KILN_CHECK(is_floating(n.dtype), "kernel: node ", i, " (", op_name(n.op),
               ") needs a floating operand, got ", n.dtype);
  bool arith = (n.op >= KOp::Add && n.op <= KOp::Max) || n.op == KOp::Neg || n.op == KOp::Abs ||
               n.op == KOp::Fma || n.op == KOp::Reduce;
  KILN_CHECK(!arith || n.dtype != DType::Bool, "kernel: node ", i, " (", op_name(n.op),
             ") is not defined on bool; cast first");
  // float16 / bfloat16 are storage types: loaded, converted, converted back and stored.
  KILN_CHECK(!is_reduced_float(n.dtype) || n.op == KOp::Load || n.op == KOp::Cast, "kernel: node ", i, " (",
             op_name(n.op), ") computes in ", n.dtype, "; cast to float32 first");
  bool bitwise = n.op == KOp::And || n.op == KOp::Or || n.op == KOp::Xor || n.op == KOp::Not;
  KILN_CHECK(!bitwise || !is_floating(n.dtype), "kernel: node ", i, " (", op_name(n.op),
             ") needs bool or integer operands");
}

// Whether evaluating `root` element by element loads `input` (per-row values
// come from the row's stages, computed before any pass stores).
bool loads_per_element(const KernelDesc &k, const std::vector<uint8_t> &per_row, int32_t root, int32_t input) {
  std::vector<int32_t> stack{root};
  std::vector<uint8_t> seen(k.nodes.size(), 0);
  while (!stack.empty()) {
    int32_t n = stack.back();
    stack.pop_back();
    if (seen[n] || per_row[n]) continue;
    seen[n] = 1;
    const Node &node = k.nodes[n];
    if (node.op == KOp::Load && node.input == input) return true;
    for (int a = 0; a < op_arity(node.op); ++a) stack.push_back(node.args[a]);
  }
  return false;
}

// A kernel with reductions evaluates each row in passes: an output that
// overwrites its input in pass p is safe only if no later pass loads that input.
void check_row_alias(const KernelDesc &k, size_t o, int32_t input) {
  const std::vector<uint8_t> per_row = k.per_row_nodes();
  const OutputSpec &out = k.outputs[o];
  KILN_CHECK(!per_row[out.value] || !k.constant_along_row(out.buffer.strides), "kernel: output ", o,
             " is stored once per row and cannot overwrite input ", input, " in place");
  const std::vector<int> level = node_levels(k);
  const int pass = level[out.value];
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const Node &n = k.nodes[i];
    if (n.op == KOp::Reduce && level[n.args[0]] > pass && loads_per_element(k, per_row, n.args[0], input))
      KILN_FAIL("kernel: output ", o, " overwrites input ", input, " in pass ", pass, ", but pass ", level[n.args[0]],
                " reads that input again (node ", i, ")");
  }
  for (size_t p = 0; p < k.outputs.size(); ++p) {
    int32_t v = k.outputs[p].value;
    bool later = level[v] > pass && !(per_row[v] && k.constant_along_row(k.outputs[p].buffer.strides));
    if (later && loads_per_element(k, per_row, v, input))
      KILN_FAIL("kernel: output ", o, " overwrites input ", input, " in pass ", pass, ", but output ", p,
                " reads that input again in pass ", level[v]);
  }
}

// Output o may overwrite input `input`: see "In-place outputs" in kernel.h.
void check_alias(const KernelDesc &k, size_t o, int32_t input) {
  KILN_CHECK(input >= 0 && size_t(input) < k.inputs.size(), "kernel: output ", o, " aliases missing input ", input);
  const BufferSpec &in = k.inputs[size_t(input)], &out = k.outputs[o].buffer;
  KILN_CHECK(itemsize(in.dtype) == itemsize(out.dtype), "kernel: output ", o, " (", out.dtype,
             ") cannot overwrite input ", input, " (", in.dtype, "): element sizes differ");
  for (size_t d = 0; d < k.shape.size(); ++d) {
    if (k.shape[d] <= 1) continue;
    KILN_CHECK(in.strides[d] == out.strides[d], "kernel: output ", o, " cannot overwrite input ", input,
               ": strides differ in dim ", d, " (", out.strides[d], " vs ", in.strides[d], ")");
    KILN_CHECK(out.strides[d] != 0, "kernel: output ", o,
               " stores dim ", d, " with stride 0 and cannot overwrite input ", input, " in place");
  }
  for (size_t p = 0; p < o; ++p)
    KILN_CHECK(k.aliased_input(p) != input, "kernel: outputs ", p, " and ", o, " both overwrite input ", input);
  if (k.has_reductions()) check_row_alias(k, o, input);
}

} // namespace

KernelDesc KernelDesc::at_row_length(int64_t length) const {
  KernelDesc at = *this;
  at.runtime_row = false;
  at.row_strided.clear();
  const int64_t traced = shape.back();
  at.shape.back() = length;
  for (Node &n : at.nodes)
    if (n.inverse_row_length) n.fvalue = n.dtype == DType::Float32 ? double(float(1.0 / double(length))) : 1.0 / double(length);
  for (size_t b = 0; b < at.num_buffers(); ++b) {
    if (!row_strided.at(b) || traced <= 0) continue; // (validate refuses a traced length of 0)
    std::vector<int64_t> &st = at.buffer(b).strides;
    for (size_t d = 0; d + 1 < st.size(); ++d)
      if (row_strided[b] >> d & 1) st[d] = st[d] / traced * length;
  }
  return at;
}

KernelDesc KernelDesc::at_layout(const int64_t *words) const {
  KernelDesc at = *this;
  at.runtime_layout = false;
  const size_t rank = shape.size();
  for (size_t d = 0; d < rank; ++d) at.shape[d] = words[d];
  for (size_t b = 0; b < num_buffers(); ++b)
    for (size_t d = 0; d + 1 < rank; ++d) at.buffer(b).strides.at(d) = words[rank * (1 + b) + d];
  return at;
}

void KernelDesc::validate() const {
  if (runtime_layout) {
    KILN_CHECK(!has_reductions() && !runtime_dim0 && !runtime_row && !stream_stores && shape.size() >= 2,
               "kernel: a runtime layout needs an element-wise kernel of rank >= 2 (rank ", shape.size(),
               has_reductions() ? ", with reductions" : "", runtime_dim0 ? ", with a runtime dim 0" : "",
               stream_stores ? ", streamed" : "", ")");
    for (int32_t a : output_aliases_input) KILN_CHECK(a < 0, "kernel: a runtime layout computes nothing in place");
    KernelDesc traced = *this;
    traced.runtime_layout = false;
    traced.validate();
    return;
  }
  if (runtime_row) {
    KILN_CHECK(runtime_dim0 && shape.size() >= 2 && row_rank == 1 && has_reductions(), "kernel: a runtime row needs ",
               "a runtime dim 0, rank >= 2, a row of one dim and reductions (rank ", shape.size(), ", row rank ", row_rank,
               runtime_dim0 ? ")" : ", dim 0 static)");
    KILN_CHECK(row_strided.size() == num_buffers(), "kernel: ", row_strided.size(), " row_strided flags for ",
               num_buffers(), " buffers");
    KILN_CHECK(shape.back() > 0, "kernel: a runtime row traced at length ", shape.back());
    for (size_t b = 0; b < num_buffers(); ++b) {
      const std::vector<int64_t> &st = buffer(b).strides;
      KILN_CHECK(row_strided[b] >> (shape.size() - 1) == 0, "kernel: buffer ", b, "'s row_strided mask ",
                 int(row_strided[b]), " marks dims beyond the ", shape.size() - 1, " outer ones");
      for (size_t d = 0; d + 1 < st.size(); ++d)
        KILN_CHECK(!(row_strided[b] >> d & 1) || st[d] % shape.back() == 0, "kernel: buffer ", b,
                   " steps dim ", d, " by a multiple of the row length, but its stride ", st[d],
                   " is no multiple of the traced ", shape.back());
    }
    at_row_length(kRuntimeRowAssumed).validate(); // strides and aliases must hold at every length
    return;
  }
  if (runtime_dim0) {
    KILN_CHECK(!shape.empty(), "kernel: a runtime dim 0 needs rank >= 1");
    KILN_CHECK(!has_reductions() || size_t(row_rank) < shape.size(), "kernel: a runtime dim 0 must be an outer dim, ",
               "not in the reduced row (rank ", shape.size(), ", row rank ", row_rank, ")");
    KernelDesc assumed = *this; // strides and aliases must hold at every extent: check at a large one
    assumed.runtime_dim0 = false;
    assumed.shape[0] = kRuntimeExtentAssumed;
    assumed.validate();
    return;
  }
  KILN_CHECK(shape.size() <= size_t(kMaxKernelRank), "kernel: rank ", shape.size(), " > ",
             kMaxKernelRank);
  for (int64_t s : shape) KILN_CHECK(s >= 0, "kernel: negative size ", s);
  KILN_CHECK(row_rank >= 1 && size_t(row_rank) <= std::max<size_t>(shape.size(), 1), "kernel: row rank ", row_rank,
             " for an iteration space of rank ", shape.size());
  KILN_CHECK(!outputs.empty(), "kernel: no outputs");
  for (size_t i = 0; i < inputs.size(); ++i) check_buffer(inputs[i], shape.size(), "input", i);
  for (size_t i = 0; i < nodes.size(); ++i) check_node(*this, i);
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_buffer(outputs[i].buffer, shape.size(), "output", i);
    int32_t v = outputs[i].value;
    KILN_CHECK(v >= 0 && size_t(v) < nodes.size(), "kernel: output ", i, " stores missing node ", v);
    KILN_CHECK(nodes[v].dtype == outputs[i].buffer.dtype, "kernel: output ", i, " stores ",
               nodes[v].dtype, " into a ", outputs[i].buffer.dtype, " buffer");
  }
  KILN_CHECK(output_aliases_input.size() <= outputs.size(), "kernel: ", output_aliases_input.size(),
             " output aliases for ", outputs.size(), " outputs");
  for (size_t o = 0; o < output_aliases_input.size(); ++o)
    if (output_aliases_input[o] >= 0) check_alias(*this, o, output_aliases_input[o]);
}

std::string KernelDesc::key() const {
  if (runtime_layout) { // the traced sizes and outer strides pick no code
    KernelDesc any = *this;
    any.runtime_layout = false;
    std::fill(any.shape.begin(), any.shape.end(), -1);
    for (size_t b = 0; b < num_buffers(); ++b)
      std::fill(any.buffer(b).strides.begin(), any.buffer(b).strides.end() - 1, -1);
    return "runtime-layout:" + any.key();
  }
  if (runtime_row) { // the traced length picks no code
    std::string flags;
    for (uint8_t f : row_strided) flags += std::to_string(f) + ","; // (1 or 0 in the old rank-2 keys)
    return "runtime-row:" + flags + ":" + at_row_length(-1).key();
  }
  KeyWriter w;
  // key format version (2: Reduce nodes and their combine; 3: stream_stores; 4: ops by name,
  // so that the KOp enumeration may grow anywhere: vector-math ops follow KILN_KERNEL_OPS;
  // 5: Node::inverse_row_length)
  w.put<uint32_t>(5);
  if (runtime_dim0) { // the traced extent picks no code
    std::vector<int64_t> dims = shape;
    dims[0] = -1;
    w.put_vec(dims);
  } else {
    w.put_vec(shape);
  }
  w.put(grain);
  w.put(stream_stores);
  w.put<uint64_t>(inputs.size());
  for (const auto &b : inputs) {
    w.put(b.dtype);
    w.put_vec(b.strides);
  }
  w.put<uint64_t>(nodes.size());
  for (const auto &n : nodes) {
    w.put_name(op_name(n.op));
    w.put(n.dtype);
    w.put(n.args);
    w.put(n.input);
    w.put(n.fvalue);
    w.put(n.ivalue);
    w.put_name(op_name(n.combine));
    w.put(n.inverse_row_length);
  }
  w.put<uint64_t>(outputs.size());
  for (const auto &o : outputs) {
    w.put(o.value);
    w.put(o.buffer.dtype);
    w.put_vec(o.buffer.strides);
  }
  // Optional sections, each with its own marker, present only when they differ
  // from the default: the keys (and disk cache entries) of other kernels stay
  // as they were.
  if (row_rank != 1) {
    w.put<uint32_t>(0x52574f52); // "ROWR"
    w.put(row_rank);
  }
  bool aliased = false;
  for (int32_t a : output_aliases_input) aliased |= a >= 0;
  if (aliased) {
    w.put<uint32_t>(0x414c4941); // "ALIA"
    for (size_t o = 0; o < outputs.size(); ++o) w.put(aliased_input(o));
  }
  return w.take();
}

uint64_t KernelDesc::hash() const {
  // FNV-1a, then a murmur-style finaliser so that nearby keys spread over all bits.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key()) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

std::string KernelDesc::to_string() const {
  std::ostringstream os;
  auto vec = [&](const std::vector<int64_t> &v) {
    os << '[';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << ']';
  };
  os << "kernel shape=";
  vec(shape);
  os << " grain=" << grain;
  if (row_rank != 1) os << " row_rank=" << row_rank;
  if (stream_stores) os << " stream_stores";
  if (runtime_dim0) os << " runtime_dim0";
  if (runtime_row) os << " runtime_row";
  if (runtime_layout) os << " runtime_layout";
  os << '\n';
  for (size_t i = 0; i < inputs.size(); ++i) {
    os << "  in" << i << ": " << short_name(inputs[i].dtype) << " strides=";
    vec(inputs[i].strides);
    os << '\n';
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node &n = nodes[i];
    os << "  %" << i << " = " << op_name(n.op) << '.' << short_name(n.dtype);
    if (n.op == KOp::Load) os << " in" << n.input;
    if (n.op == KOp::Reduce) os << ' ' << op_name(n.combine);
    if (n.op == KOp::Const) {
      if (is_floating(n.dtype)) os << ' ' << n.fvalue << (n.inverse_row_length ? " (1/L)" : "");
      else os << ' ' << n.ivalue;
    }
    for (int a = 0; a < op_arity(n.op); ++a) os << (a ? ", %" : " %") << n.args[a];
    os << '\n';
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    os << "  out" << i << " <- %" << outputs[i].value << " strides=";
    vec(outputs[i].buffer.strides);
    if (aliased_input(i) >= 0) os << " in place of in" << aliased_input(i);
    os << '\n';
  }
  return os.str();
}

// ---- builder

DType Expr::dtype() const {
  KILN_CHECK(builder, "kernel: use of an empty Expr");
  return builder->node(id).dtype;
}

KernelBuilder::KernelBuilder(std::vector<int64_t> shape, int32_t row_rank) {
  KILN_CHECK(shape.size() <= size_t(kMaxKernelRank), "kernel: rank ", shape.size(), " > ",
             kMaxKernelRank);
  KILN_CHECK(row_rank >= 1 && size_t(row_rank) <= std::max<size_t>(shape.size(), 1), "kernel: row rank ", row_rank,
             " for an iteration space of rank ", shape.size());
  desc_.shape = std::move(shape);
  desc_.row_rank = row_rank;
}

const Node &KernelBuilder::node(int32_t id) const {
  KILN_CHECK(id >= 0 && size_t(id) < desc_.nodes.size(), "kernel: no node ", id);
  return desc_.nodes[id];
}

Expr KernelBuilder::add_node(Node n) {
  desc_.nodes.push_back(n);
  size_t i = desc_.nodes.size() - 1;
  try {
    check_node(desc_, i); // report a bad expression where it is written
  } catch (...) {
    desc_.nodes.pop_back();
    throw;
  }
  return Expr{this, int32_t(i)};
}

namespace {
int32_t own(const KernelBuilder *b, Expr e) {
  KILN_CHECK(e.builder == b, "kernel: expression from another builder");
  return e.id;
}
} // namespace

Expr KernelBuilder::input(DType dtype, std::vector<int64_t> strides) {
  if (strides.empty() && !desc_.shape.empty()) strides = contiguous_strides(desc_.shape);
  check_buffer(BufferSpec{dtype, strides}, desc_.shape.size(), "input", desc_.inputs.size());
  desc_.inputs.push_back(BufferSpec{dtype, std::move(strides)});
  Node n;
  n.op = KOp::Load;
  n.dtype = dtype;
  n.input = int32_t(desc_.inputs.size() - 1);
  return add_node(n);
}

Expr KernelBuilder::constant(double value, DType dtype) {
  Node n;
  n.op = KOp::Const;
  n.dtype = dtype;
  if (is_floating(dtype)) {
    n.fvalue = dtype == DType::Float32 ? double(float(value)) : value;
    return add_node(n);
  }
  if (dtype == DType::Bool) {
    n.ivalue = value != 0;
    return add_node(n);
  }
  // Integers: truncate toward zero, saturating at the type's limits (an
  // out-of-range double -> int conversion would be undefined behaviour).
  double lo = dtype == DType::Int32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = dtype == DType::Int32 ? 2147483647.0 : 9223372036854775807.0;
  KILN_CHECK(!std::isnan(value), "kernel: NaN constant for an integer dtype");
  if (value <= lo) n.ivalue = dtype == DType::Int32 ? INT32_MIN : INT64_MIN;
  else if (value >= hi) n.ivalue = dtype == DType::Int32 ? INT32_MAX : INT64_MAX;
  else n.ivalue = int64_t(value);
  return add_node(n);
}

Expr KernelBuilder::inverse_row_length(DType dtype) {
  Node n;
  n.op = KOp::Const;
  n.dtype = dtype;
  n.fvalue = dtype == DType::Float32 ? double(float(1.0 / double(row_length()))) : 1.0 / double(row_length());
  n.inverse_row_length = true;
  return add_node(n);
}

Expr KernelBuilder::constant_int(int64_t value, DType dtype) {
  if (is_floating(dtype)) return constant(double(value), dtype);
  Node n;
  n.op = KOp::Const;
  n.dtype = dtype;
  if (dtype == DType::Bool) n.ivalue = value != 0;
  else n.ivalue = dtype == DType::Int32 ? int64_t(int32_t(uint32_t(uint64_t(value)))) : value;
  return add_node(n);
}

Expr KernelBuilder::unary(KOp op, Expr a) {
  KILN_CHECK(op_arity(op) == 1 && op != KOp::Cast, "kernel: ", op_name(op), " is not a unary op");
  Node n;
  n.op = op;
  n.dtype = node(own(this, a)).dtype;
  n.args[0] = a.id;
  return add_node(n);
}

Expr KernelBuilder::binary(KOp op, Expr a, Expr b) {
  KILN_CHECK(op_arity(op) == 2, "kernel: ", op_name(op), " is not a binary op");
  Node n;
  n.op = op;
  n.dtype = is_compare(op) ? DType::Bool : node(own(this, a)).dtype;
  n.args = {own(this, a), own(this, b), -1};
  return add_node(n);
}

Expr KernelBuilder::fma(Expr a, Expr b, Expr c) {
  Node n;
  n.op = KOp::Fma;
  n.dtype = node(own(this, a)).dtype;
  n.args = {a.id, own(this, b), own(this, c)};
  return add_node(n);
}

Expr KernelBuilder::select(Expr cond, Expr a, Expr b) {
  Node n;
  n.op = KOp::Select;
  n.dtype = node(own(this, a)).dtype;
  n.args = {own(this, cond), a.id, own(this, b)};
  return add_node(n);
}

Expr KernelBuilder::cast(Expr a, DType to) {
  Node n;
  n.op = KOp::Cast;
  n.dtype = to;
  n.args[0] = own(this, a);
  return add_node(n);
}

Expr KernelBuilder::reduce(KOp combine, Expr value) {
  KILN_CHECK(is_reduce_combine(combine), "kernel: cannot reduce with ", op_name(combine),
             "; use Add, Mul, Max or Min");
  Node n;
  n.op = KOp::Reduce;
  n.combine = combine;
  n.dtype = node(own(this, value)).dtype;
  n.args[0] = value.id;
  return add_node(n);
}

void KernelBuilder::output_per_row(Expr value, std::vector<int64_t> outer_strides) {
  KILN_CHECK(!desc_.shape.empty(), "kernel: output_per_row needs rank >= 1");
  std::vector<int64_t> outer(desc_.shape.begin(), desc_.shape.end() - desc_.row_rank);
  if (outer_strides.empty()) outer_strides = contiguous_strides(outer);
  KILN_CHECK(outer_strides.size() == outer.size(), "kernel: output_per_row takes ", outer.size(),
             " strides (all dims but the ", desc_.row_rank, " row dims), got ", outer_strides.size());
  KILN_CHECK(desc_.per_row_nodes()[own(this, value)], "kernel: output_per_row of node ", value.id,
             ", which varies along the row");
  outer_strides.resize(desc_.shape.size(), 0);
  output(value, std::move(outer_strides));
}

void KernelBuilder::output(Expr value, std::vector<int64_t> strides) {
  if (strides.empty() && !desc_.shape.empty()) strides = contiguous_strides(desc_.shape);
  DType t = node(own(this, value)).dtype;
  check_buffer(BufferSpec{t, strides}, desc_.shape.size(), "output", desc_.outputs.size());
  desc_.outputs.push_back(OutputSpec{value.id, BufferSpec{t, std::move(strides)}});
}

void KernelBuilder::alias_output(size_t output, int32_t input) {
  KILN_CHECK(output < desc_.outputs.size(), "kernel: alias_output of missing output ", output);
  desc_.output_aliases_input.resize(desc_.outputs.size(), -1);
  desc_.output_aliases_input[output] = input;
}

KernelDesc KernelBuilder::build() const {
  desc_.validate();
  return desc_;
}

// ---- sugar

namespace {
KernelBuilder &builder_of(Expr a) {
  KILN_CHECK(a.builder, "kernel: use of an empty Expr");
  return *a.builder;
}
Expr like(Expr a, double v) { return builder_of(a).constant(v, a.dtype()); }
} // namespace

Expr operator+(Expr a, Expr b) { return builder_of(a).binary(KOp::Add, a, b); }
Expr operator-(Expr a, Expr b) { return builder_of(a).binary(KOp::Sub, a, b); }
Expr operator*(Expr a, Expr b) { return builder_of(a).binary(KOp::Mul, a, b); }
Expr operator/(Expr a, Expr b) { return builder_of(a).binary(KOp::Div, a, b); }
Expr operator-(Expr a) { return builder_of(a).unary(KOp::Neg, a); }
Expr operator+(Expr a, double b) { return a + like(a, b); }
Expr operator*(Expr a, double b) { return a * like(a, b); }
Expr operator+(double a, Expr b) { return like(b, a) + b; }
Expr operator*(double a, Expr b) { return like(b, a) * b; }
Expr operator-(double a, Expr b) { return like(b, a) - b; }
Expr operator-(Expr a, double b) { return a - like(a, b); }
Expr operator/(Expr a, double b) { return a / like(a, b); }
Expr min(Expr a, Expr b) { return builder_of(a).binary(KOp::Min, a, b); }
Expr max(Expr a, Expr b) { return builder_of(a).binary(KOp::Max, a, b); }
Expr min(Expr a, double b) { return min(a, like(a, b)); }
Expr max(Expr a, double b) { return max(a, like(a, b)); }
Expr abs(Expr a) { return builder_of(a).unary(KOp::Abs, a); }
Expr sqrt(Expr a) { return builder_of(a).unary(KOp::Sqrt, a); }
Expr rsqrt(Expr a) { return builder_of(a).unary(KOp::Rsqrt, a); }
#define X(Id, fn, f64)                                                                                 \
  Expr fn(Expr a) { return builder_of(a).unary(KOp::Id, a); }
KILN_VECMATH_OPS(X)
#undef X
Expr reduce_sum(Expr a) { return builder_of(a).reduce(KOp::Add, a); }
Expr reduce_max(Expr a) { return builder_of(a).reduce(KOp::Max, a); }
Expr reduce_min(Expr a) { return builder_of(a).reduce(KOp::Min, a); }
Expr reduce_prod(Expr a) { return builder_of(a).reduce(KOp::Mul, a); }

Expr reduce_mean(Expr a) {
  KernelBuilder &k = builder_of(a);
  KILN_CHECK(is_floating(a.dtype()), "kernel: reduce_mean of ", a.dtype(), "; cast to a float first");
  KILN_CHECK(!k.shape().empty(), "kernel: reduce_mean needs rank >= 1");
  // An empty row gives 0 * inf = NaN, as torch.mean of nothing.
  return reduce_sum(a) * k.inverse_row_length(a.dtype());
}

// The composed pointwise functions: their definitions are the list's last column.
#define X(fn, def)                                                                                     \
  Expr fn(Expr x) { return def; }
#define X_OP(Id, fn, def) X(fn, def)
KILN_COMPOSED_OPS(X_OP)
KILN_COMPOSED_KERNELS(X)
#undef X_OP
#undef X

} // namespace kiln::codegen
