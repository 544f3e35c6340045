// The kernel description codegen compiles: an elementwise expression DAG over
// an iteration space of rank 0..4. No LLVM here; codegen/jit.h compiles it.
//
//   KernelBuilder k({4096, 1024});                  // iteration space [rows, cols]
//   Expr x = k.input(kFloat32);                     // contiguous [4096, 1024]
//   Expr a = k.input(kFloat32, {0, 1});             // a row vector broadcast over rows
//   Expr b = k.input(kFloat32, {0, 1});
//   k.output(gelu_tanh(x * a + b));                 // stored contiguous, float32
//   KernelDesc desc = k.build();
//
// Semantics the layers above can rely on:
// - Buffers: inputs first, then outputs, in declaration order; the compiled
//   kernel takes `void* const* buffers` in that order. A buffer's strides are in
//   ELEMENTS, one per iteration dimension (0 = broadcast along that dim, any
//   sign); element (i0..ik) lives at buffer[sum i_d * stride_d]. bool is 1 byte.
// - Shape and strides are compile-time constants of the kernel (kiln's compiled programs are
//   specialised per shape; constant trip counts and strides give the best code), except
//   dim 0's extent when KernelDesc::runtime_dim0 is set: then it is read per call from
//   buffers[num_buffers()] (a pointer to an int64_t), after the inputs and outputs; and
//   with KernelDesc::runtime_row, the row's length too (the int64_t after it).
// - Types are explicit: binary ops need equal dtypes; promotion is the caller's
//   job (insert cast()). Comparisons give bool. Integer Div truncates toward zero
//   and a zero divisor gives 0 (never traps). Float Min/Max propagate NaN (torch).
//   Round is half-to-even (torch.round). Float->int casts of out-of-range values
//   are unspecified (as in C++).
// - Transcendentals are float-only. float32 ones are inline polynomials that
//   vectorize (their measured errors: test/unit/vecmath_test.cpp); float64 ones call
//   their float64 definition (libm) per element.
// - The outermost dims are split across kiln's thread pool; the innermost dim is
//   the vectorized loop. Put the contiguous dim last.
//
// Row-wise reductions (KernelBuilder::reduce) fold a value over the LAST
// iteration dim ("the row"); the result is one value per row that later
// expressions use broadcast over that row. A kernel built with a row rank R > 1
// (KernelBuilder(shape, R)) has rows of the last R dims instead: batch-norm
// statistics over N, H, W of an NCHW x iterate [C, N, H, W] with R = 3 (the
// caller permutes strides so that the kept dims come first). Below, "the last
// dim" of a row reads "the last R dims". softmax over the last dim:
//
//   KernelBuilder k({4096, 1024});
//   Expr x = k.input(kFloat32);
//   Expr e = exp(x - k.reduce(KOp::Max, x));
//   k.output(e / k.reduce(KOp::Add, e));
//
// - Combines: Add, Mul, Max, Min on int32/int64/float32/float64 (not bool).
//   The result has the value's dtype, in an unspecified order (the compiled
//   code keeps several vector partial sums). Float sums do not lose digits
//   with the row's length (codegen/lower_common.h, "float sums"): a float32 sum of
//   loaded values, and every float32 sum of rows that run down columns,
//   accumulates in double; other float sums keep partial sums in their type
//   over blocks of 1024 elements, each block's total added in double. A sum
//   times a constant (reduce_mean) is scaled before rounding, so the mean of
//   a constant row is that constant. Float products accumulate in the element
//   type. Integer combines wrap and are exact. Float Max
//   and Min propagate NaN (torch.amax / amin); a zero result may be -0 or +0
//   when the row holds both (torch's vectorized CPU reductions do not order
//   them either).
// - An empty row (last dim 0) gives the identity: 0 (Add, +0.0 for floats),
//   1 (Mul), the dtype's lowest value or -inf (Max), highest or +inf (Min).
//   Mean is the caller's job: reduce(Add, v) * (1.0 / L).
// - Reductions nest (layer_norm's variance reduces (x - mean)^2); a kernel with
//   reductions needs rank >= 1, and its row dims are never merged with others.
// - A value is PER-ROW when it does not vary along the last dim: reductions,
//   constants, loads whose last-dim stride is 0, and ops on per-row values only.
//   An output whose last-dim stride is 0 and whose value is per-row is stored
//   once per row (also for empty rows): that is how a kernel returns row
//   statistics (output_per_row). Any other output is stored at every element.
// - Compiled code evaluates a row in passes (one per nesting level of
//   reductions, plus a final one for the outputs), all over the same row while
//   it sits in cache, so x is read from memory once; transcendentals needed by
//   several passes are computed once into a per-row scratch buffer. Rows that
//   run down columns (strided row, neighbouring rows adjacent in memory: the
//   statistics of an [N, C] batch norm) advance 64 at a time instead, the loop
//   over those rows innermost (codegen/lower_tile.cpp), also when the
//   rows' neighbours are along the innermost of several outer dims.
//
// In-place outputs (KernelDesc::output_aliases_input, KernelBuilder::alias_output):
// an output may overwrite an input when both address the same element at every
// iteration point: same element size, equal strides on every dim of size > 1,
// and no dim of size > 1 with stride 0 (each element is stored once). The
// compiled kernel then uses the input's pointer for both and ignores the
// output's slot in `buffers`: with one pointer, the loads and stores of element
// j are known to touch the same address, so LLVM needs no runtime alias check
// and the loops vectorize (two distinct pointers to the same memory fail that
// check and run the scalar loop). In a kernel with reductions, the output must
// be stored in a pass after which no pass loads the input again (softmax's y
// over x: stored in the last pass); otherwise validation fails. Without an
// alias, inputs and outputs must not overlap.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/op_lists.h"

namespace kiln::codegen {

inline constexpr int kMaxKernelRank = 4;
// The dim-0 extent that validation and codegen's choices assume for a kernel
// whose dim 0 is read per call (KernelDesc::runtime_dim0).
inline constexpr int64_t kRuntimeExtentAssumed = 4096;
// The row length that validation and codegen's choices assume for a kernel
// whose row length is read per call (KernelDesc::runtime_row).
inline constexpr int64_t kRuntimeRowAssumed = 1024;

// X(name, arity, traits): the kernel ops other than vector math. Their order is
// free (KernelDesc::key names the ops). Traits (KOpTrait): Lane = its lowering
// (emit_node) is the same IRBuilder arithmetic or vector-taking intrinsic on a
// float32 vector as on a scalar (row blocks use it); None.
#define KILN_KERNEL_OPS(X)                                                                       \
  X(Const, 0, None)                                                                              \
  X(Load, 0, None)                                                                               \
  X(Add, 2, Lane)                                                                                \
  X(Sub, 2, Lane)                                                                                \
  X(Mul, 2, Lane)                                                                                \
  X(Div, 2, Lane)                                                                                \
  X(Min, 2, Lane)                                                                                \
  X(Max, 2, Lane)                                                                                \
  X(Eq, 2, None)                                                                                 \
  X(Ne, 2, None)                                                                                 \
  X(Lt, 2, None)                                                                                 \
  X(Le, 2, None)                                                                                 \
  X(Gt, 2, None)                                                                                 \
  X(Ge, 2, None)                                                                                 \
  X(And, 2, None)                                                                                \
  X(Or, 2, None)                                                                                 \
  X(Xor, 2, None)                                                                                \
  X(Neg, 1, Lane)                                                                                \
  X(Abs, 1, Lane)                                                                                \
  X(Not, 1, None)                                                                                \
  X(Cast, 1, None)                                                                               \
  X(Sqrt, 1, Lane)                                                                               \
  X(Rsqrt, 1, Lane)                                                                              \
  X(Floor, 1, None)                                                                              \
  X(Ceil, 1, None)                                                                               \
  X(Round, 1, None)                                                                              \
  X(Fma, 3, Lane)                                                                                \
  X(Select, 3, None)                                                                             \
  X(Reduce, 1, None)

// After those, one unary kernel op per vector-math function of
// the vector-math list (runtime/ops.def) (KOp::Exp, KOp::Tanh...), trait Transcendental:
// float-only, codegen::vecmath's polynomial for float32 and the list's float64
// definition (kiln_vm_<fn>_f64, called per element) for float64, compute-bound (no
// streaming stores, row scratch). Not Lane: vecmath on vectors is untested in row blocks.
// Then one per function of the libm list (KOp::Sin, ...), trait Libm: float-only, a call
// of the list's definition (kiln_lm_<fn>_f32 / _f64) per element in both dtypes, and
// compute-bound like the transcendentals (is_transcendental holds for both traits).
// Last, the binary ones of the binary libm list (KOp::Atan2, ...: kiln_lm2_<fn>_*), the
// same trait with two operands.
enum class KOp : uint8_t {
#define X(name, arity, traits) name,
  KILN_KERNEL_OPS(X)
#undef X
#define X(Id, fn, f64) Id,
  KILN_VECMATH_OPS(X) KILN_LIBM_OPS(X) KILN_LIBM2_OPS(X)
#undef X
};
inline constexpr size_t kNumKOps = 0
#define X(...) +1
    KILN_KERNEL_OPS(X) KILN_VECMATH_OPS(X) KILN_LIBM_OPS(X) KILN_LIBM2_OPS(X)
#undef X
    ;

enum class KOpTrait : uint8_t { None, Transcendental, Libm, Lane };
inline constexpr KOpTrait kKOpTraits[] = {
#define X(name, arity, traits) KOpTrait::traits,
    KILN_KERNEL_OPS(X)
#undef X
#define X(Id, fn, f64) KOpTrait::Transcendental,
    KILN_VECMATH_OPS(X)
#undef X
#define X(Id, fn, def) KOpTrait::Libm,
    KILN_LIBM_OPS(X) KILN_LIBM2_OPS(X)
#undef X
};
constexpr bool is_libm(KOp op) { return kKOpTraits[size_t(op)] == KOpTrait::Libm; }
constexpr bool is_transcendental(KOp op) {
  return kKOpTraits[size_t(op)] == KOpTrait::Transcendental || is_libm(op);
}
constexpr bool is_lane_op(KOp op) { return kKOpTraits[size_t(op)] == KOpTrait::Lane; }

const char *op_name(KOp op);
int op_arity(KOp op);

// One SSA value of the expression. Operands always precede their users.
struct Node {
  KOp op = KOp::Const;
  DType dtype = DType::Float32;  // result type
  std::array<int32_t, 3> args{-1, -1, -1};
  int32_t input = -1;           // Load: index into KernelDesc::inputs
  double fvalue = 0;            // Const of a floating type
  int64_t ivalue = 0;           // Const of an integer or bool type
  KOp combine = KOp::Const;     // Reduce: Add, Mul, Max or Min; Const otherwise
  // Const: fvalue is 1 / the row length (reduce_mean's scale), which a
  // runtime row (KernelDesc::runtime_row) computes from the call's length.
  bool inverse_row_length = false;
};

// True for the combines KernelBuilder::reduce accepts.
bool is_reduce_combine(KOp op);

struct BufferSpec {
  DType dtype = DType::Float32;
  std::vector<int64_t> strides; // elements, one per iteration dim
};

struct OutputSpec {
  int32_t value = -1; // node stored (its dtype is the buffer's dtype)
  BufferSpec buffer;
};

struct KernelDesc {
  std::vector<int64_t> shape; // iteration space, rank 0..kMaxKernelRank
  std::vector<BufferSpec> inputs;
  std::vector<Node> nodes;
  std::vector<OutputSpec> outputs;
  int64_t grain = 0; // elements per parallel chunk, at least; 0 = codegen's default
  // Write the outputs with non-temporal (streaming) stores, which skip reading
  // each written line into the cache first. Only worth it when the outputs are
  // too large to be re-read from cache (streaming_stores_pay_off). The caller
  // promises that every output's element 0 is 64-byte aligned (kiln's allocator
  // and arena slots are); codegen streams only the outputs whose rows keep that
  // alignment (contiguous last dim, outer strides multiples of 64 bytes).
  bool stream_stores = false;
  // Reductions fold over the last row_rank dims (1 <= row_rank <= rank, or 1
  // for rank 0). Part of key() only when it is not 1, so that the keys (and
  // disk-cache entries) of last-dim kernels stay what they were.
  int32_t row_rank = 1;
  // In place: empty, or per output the input whose memory it overwrites (-1 =
  // its own buffer). See "In-place outputs" in the file comment.
  std::vector<int32_t> output_aliases_input;
  // Dim 0's extent is read per call (dynamic shapes, issue 17): the compiled
  // kernel reads it from buffers[num_buffers()], which points at an int64_t
  // >= 0, so that one kernel serves every batch size. shape[0] is then only
  // the size it was traced at: key() leaves it out and codegen chooses its
  // loops as if dim 0 were large (kRuntimeExtentAssumed). Dim 0 must be an
  // outer dim (rank >= 1, and row_rank < rank when the kernel reduces), and
  // the strides must hold at every extent: a row-major buffer's dim-0 stride
  // is the product of the other dims, which do not change. Such a kernel
  // streams its stores (stream_stores) only when it is element-wise and its
  // dims fold into one; the caller picks it per call, above
  // streaming_threshold_bytes (else stream_stores is ignored).
  bool runtime_dim0 = false;
  // The row's length is read per call too (a softmax over [s0, s1], issue 17):
  // buffers[num_buffers()] then points at two int64_t, dim 0's extent and the
  // row length. It needs runtime_dim0, reductions, rank >= 2 and a row of one
  // dim (the last). shape.back() is the length it was traced at, which key()
  // leaves out. A buffer's row_strided entry (inputs, then outputs) is a mask
  // of the outer dims it steps by a constant multiple of the row length (bit
  // d: dim d): 1 for a row-major [s0, s1] buffer, which steps dim 0 by it; 3
  // for an NCHW image read as [s0, C, s1*s2] (dims 0 and 1, by C and 1 times
  // it); 1 for [s0, s1, D] read as [s0, D, s1] by a mean over s1 (its dim 1
  // steps by 1; such strided rows go in tiles, wants_row_tiles in
  // codegen/lower.h, or lower_symbolic_group refuses them: a runtime row
  // reads them element by element, slower than eager). Its strides in those
  // dims hold those multiples of the traced length; every other stride holds
  // at every length. These kernels
  // take no row blocks, and keep scratch rows only for rows that fit
  // the scratch budget: codegen chooses its loops as if the row were
  // kRuntimeRowAssumed long, with runtime trip counts.
  bool runtime_row = false;
  std::vector<uint8_t> row_strided;
  // Every dim's extent and every stride but the last dim's are read per call
  // (issue 17): an element-wise kernel over [s0, C, s1*s1] whose per-channel
  // operand ([C, 1, 1], strides [0, 1, 0]) walks the outer dims otherwise
  // than the others, so they cannot fold into one runtime dim 0.
  // buffers[num_buffers()] then points at layout_words() int64_t: the rank
  // extents, then per buffer (inputs, then outputs) rank strides; the last
  // dim's strides there must equal the kernel's, which are compiled in (they
  // keep the inner loop vectorizable). shape and the other strides hold the
  // traced values; key() leaves them out. Element-wise kernels of rank 2 or
  // more only, without runtime_dim0, aliases or streamed stores.
  bool runtime_layout = false;
  size_t layout_words() const { return shape.size() * (1 + num_buffers()); }

  int64_t numel() const;
  // Elements in one row: the product of the last row_rank dims (1 for rank 0).
  int64_t row_length() const;
  // Whether `strides` (one per dim) are 0 along every row dim.
  bool constant_along_row(const std::vector<int64_t> &strides) const;
  size_t num_buffers() const { return inputs.size() + outputs.size(); }
  // Buffer b of the kernel's argument list: the inputs, then the outputs.
  BufferSpec &buffer(size_t b) { return b < inputs.size() ? inputs[b] : outputs.at(b - inputs.size()).buffer; }
  const BufferSpec &buffer(size_t b) const {
    return b < inputs.size() ? inputs[b] : outputs.at(b - inputs.size()).buffer;
  }
  bool has_reductions() const;
  // Per node: 1 if its value is the same for every element of a row (see the
  // file comment: reductions, constants, loads with last-dim stride 0...).
  std::vector<uint8_t> per_row_nodes() const;
  // The input output o overwrites in place, or -1.
  int32_t aliased_input(size_t o) const {
    return o < output_aliases_input.size() ? output_aliases_input[o] : -1;
  }

  // Canonical bytes of everything that affects the generated code; equal keys
  // <=> identical kernels. hash() is a 64-bit hash of key().
  std::string key() const;
  uint64_t hash() const;

  // Throws kiln::Error naming the first problem (bad operand, type mismatch...).
  void validate() const;
  // This kernel at one row length (runtime_row off): the outer strides row_strided marks follow it.
  KernelDesc at_row_length(int64_t length) const;
  // This kernel at one call's layout (runtime_layout off): `words` as the
  // compiled code reads them (layout_words()).
  KernelDesc at_layout(const int64_t *words) const;

  // Human-readable listing for logs and KILN_DUMP=kernels.
  std::string to_string() const;
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t> &shape);

// Bytes the kernel's outputs write per run (per-row outputs count once per row).
int64_t output_bytes(const KernelDesc &desc);

// Bytes a run touches: output_bytes plus each input's distinct elements.
int64_t footprint_bytes(const KernelDesc &desc);

// Whether non-temporal stores pay off for `desc`: it touches more than 1.25x
// the last-level cache (sysfs; 32 MiB if unknown), so that written lines are
// evicted before anyone re-reads them (below that, repeated calls find their
// inputs and outputs in cache, which streaming would give up), and it is
// memory-bound (no per-element transcendentals: those kernels measured slower
// with them). KILN_STREAM_STORES=0 / 1 forces the answer (for measurements).
bool streaming_stores_pay_off(const KernelDesc &desc);
// The footprint in bytes above which they pay off for desc's ops (the same
// rule, for a kernel whose footprint is known only per call: a runtime dim 0),
// or -1 when they never do.
int64_t streaming_threshold_bytes(const KernelDesc &desc);

class KernelBuilder;

// A handle on a node being built. Cheap to copy; valid while its builder lives.
struct Expr {
  KernelBuilder *builder = nullptr;
  int32_t id = -1;
  DType dtype() const;
};

class KernelBuilder {
public:
  // `row_rank`: how many trailing dims a reduction folds (see the file comment).
  explicit KernelBuilder(std::vector<int64_t> shape, int32_t row_rank = 1);

  // Declares the next input buffer and returns its element at the current
  // iteration point. Empty strides = contiguous over the iteration space.
  Expr input(DType dtype, std::vector<int64_t> strides = {});
  // A constant of `dtype`; integer dtypes truncate toward zero and saturate.
  Expr constant(double value, DType dtype);
  // 1 / the row length, in a floating dtype (Node::inverse_row_length).
  Expr inverse_row_length(DType dtype);
  // An exact integer constant (int64 values beyond 2^53 need this), wrapped to dtype.
  Expr constant_int(int64_t value, DType dtype);

  Expr unary(KOp op, Expr a);
  Expr binary(KOp op, Expr a, Expr b);
  Expr fma(Expr a, Expr b, Expr c); // a*b+c, one rounding for floats
  Expr select(Expr cond, Expr a, Expr b);
  Expr cast(Expr a, DType to);
  // Folds `value` over the last iteration dim with `combine` (Add, Mul, Max,
  // Min): one value per row, broadcast over the row where used. Throws
  // kiln::Error for rank 0, bool values or another combine. See the file comment.
  Expr reduce(KOp combine, Expr value);

  // Declares the next output buffer: stores `value` there (in its dtype).
  void output(Expr value, std::vector<int64_t> strides = {});
  // An output of one element per row: `value` must be per-row; `outer_strides`
  // has one stride per dim outside the row (empty = contiguous over them, i.e.
  // a [d0, ..., d(k-1-R)] tensor). Same as output(value, outer_strides + R zeros).
  void output_per_row(Expr value, std::vector<int64_t> outer_strides = {});
  void set_grain(int64_t elements) { desc_.grain = elements; }
  void set_stream_stores(bool on) { desc_.stream_stores = on; }
  void set_runtime_dim0(bool on) { desc_.runtime_dim0 = on; } // see KernelDesc::runtime_dim0
  // Output `output` overwrites input `input` in place (see the file comment).
  void alias_output(size_t output, int32_t input);

  // Validates and returns the description. The builder stays usable.
  KernelDesc build() const;

  const Node &node(int32_t id) const;
  const std::vector<int64_t> &shape() const { return desc_.shape; }
  int32_t row_rank() const { return desc_.row_rank; }
  int64_t row_length() const { return desc_.row_length(); }

private:
  Expr add_node(Node n);
  KernelDesc desc_;
};

// Sugar for writing expressions (tests, lowering rules). Constants take the
// dtype of the other operand (x * 0.5 on an int32 x multiplies by 0).
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);
Expr operator-(Expr a);
Expr operator+(Expr a, double b);
Expr operator*(Expr a, double b);
Expr operator+(double a, Expr b);
Expr operator*(double a, Expr b);
Expr operator-(double a, Expr b);
Expr operator-(Expr a, double b);
Expr operator/(Expr a, double b);
// Float Min/Max propagate NaN (llvm.minimum/maximum, torch's semantics).
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
Expr min(Expr a, double b);
Expr max(Expr a, double b);
Expr abs(Expr a);
Expr sqrt(Expr a);
Expr rsqrt(Expr a);
// One per vector-math function: exp(a) = unary(KOp::Exp, a), tanh, sigmoid...
#define X(Id, fn, f64) Expr fn(Expr a);
KILN_VECMATH_OPS(X)
#undef X
// Row reductions (KernelBuilder::reduce) and the mean over the last dim.
Expr reduce_sum(Expr a);
Expr reduce_max(Expr a);
Expr reduce_min(Expr a);
Expr reduce_prod(Expr a);
Expr reduce_mean(Expr a); // float only: sum * (1 / L), L = the row length
// One per composed pointwise function (the composed-op list (runtime/ops.def), which holds
// their definitions): silu(x), gelu_erf(x), gelu_tanh(x) (torch's gelu(x, "tanh")), ...
#define X(fn, def) Expr fn(Expr x);
#define X_OP(Id, fn, def) X(fn, def)
KILN_COMPOSED_OPS(X_OP)
KILN_COMPOSED_KERNELS(X)
#undef X_OP
#undef X

} // namespace kiln::codegen
