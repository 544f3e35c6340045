// Element types and torch's type-promotion lattice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>
#include <utility>

#include "runtime/error.h"
#include "runtime/half.h"

namespace kiln {

// New dtypes are appended (the numbers are part of cache keys); promote_types, not the
// order, holds the lattice.
enum class DType : uint8_t { Bool, Int32, Int64, Float32, Float64, UInt8, Int8, Int16, Float16, BFloat16 };

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kByte = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kChar = DType::Int8;
inline constexpr DType kInt16 = DType::Int16;
inline constexpr DType kShort = DType::Int16;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kHalf = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;

inline constexpr int kNumDTypes = 10;

constexpr size_t itemsize(DType t) {
  switch (t) {
  case DType::Bool: return 1;
  case DType::Int32: return 4;
  case DType::Int64: return 8;
  case DType::Float32: return 4;
  case DType::Float64: return 8;
  case DType::UInt8: return 1;
  case DType::Int8: return 1;
  case DType::Int16: return 2;
  case DType::Float16: return 2;
  case DType::BFloat16: return 2;
  }
  return 0;
}

// Short names used by the printer ("f32") and long names used in messages ("float32").
constexpr std::string_view short_name(DType t) {
  switch (t) {
  case DType::Bool: return "i1";
  case DType::Int32: return "i32";
  case DType::Int64: return "i64";
  case DType::Float32: return "f32";
  case DType::Float64: return "f64";
  case DType::UInt8: return "u8";
  case DType::Int8: return "i8";
  case DType::Int16: return "i16";
  case DType::Float16: return "f16";
  case DType::BFloat16: return "bf16";
  }
  return "?";
}
constexpr std::string_view name(DType t) {
  switch (t) {
  case DType::Bool: return "bool";
  case DType::Int32: return "int32";
  case DType::Int64: return "int64";
  case DType::Float32: return "float32";
  case DType::Float64: return "float64";
  case DType::UInt8: return "uint8";
  case DType::Int8: return "int8";
  case DType::Int16: return "int16";
  case DType::Float16: return "float16";
  case DType::BFloat16: return "bfloat16";
  }
  return "?";
}
inline std::ostream &operator<<(std::ostream &os, DType t) { return os << name(t); }

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
// float16 and bfloat16: stored in 16 bits, computed in float32.
constexpr bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
constexpr bool is_integral(DType t, bool include_bool = false) {
  switch (t) {
  case DType::Bool: return include_bool;
  case DType::UInt8:
  case DType::Int8:
  case DType::Int16:
  case DType::Int32:
  case DType::Int64: return true;
  case DType::Float16:
  case DType::BFloat16:
  case DType::Float32:
  case DType::Float64: return false;
  }
  return false;
}

// torch.promote_types for the dtypes kiln has: bool below every number; integers by
// size, except that uint8 and int8 meet in int16 (the least that holds both); an
// integer and a float give the float; floats by size, except that float16 and
// bfloat16 meet in float32.
constexpr DType promote_types(DType a, DType b) {
  if (a == b || b == DType::Bool) return a;
  if (a == DType::Bool) return b;
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  if ((a == DType::UInt8 && b == DType::Int8) || (a == DType::Int8 && b == DType::UInt8)) return DType::Int16;
  if (is_reduced_float(a) && is_reduced_float(b)) return DType::Float32;
  return itemsize(a) >= itemsize(b) ? a : b;
}

// The category rank used when a dimensionless operand (a Scalar or 0-dim tensor)
// only participates by category: 0 bool, 1 integer, 2 floating.
constexpr int category(DType t) { return t == DType::Bool ? 0 : (is_floating(t) ? 2 : 1); }

template <class T> struct CppToDType;
template <> struct CppToDType<bool> { static constexpr DType value = DType::Bool; };
template <> struct CppToDType<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct CppToDType<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct CppToDType<float> { static constexpr DType value = DType::Float32; };
template <> struct CppToDType<double> { static constexpr DType value = DType::Float64; };
template <> struct CppToDType<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct CppToDType<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct CppToDType<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct CppToDType<Half> { static constexpr DType value = DType::Float16; };
template <> struct CppToDType<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <class T> inline constexpr DType dtype_of = CppToDType<T>::value;

// The unsigned type in which integer arithmetic on T wraps (two's complement, as torch's)
// without UB: T's unsigned form, or unsigned int for types narrower than int, whose
// unsigned forms promote to (signed) int, where 65535 * 65535 overflows.
template <class T>
using wrap_uint_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// Calls f.template operator()<T>() with T the C++ type of `t`, for the dtypes kernels
// compute in. float16 and bfloat16 never reach a kernel: ops compute them in float32
// (runtime/trace_hook.h); only the conversions see them (dispatch_storage_dtype).
// Usage: dispatch_dtype(t, [&]<class T>() { ... });
template <class F> decltype(auto) dispatch_dtype(DType t, F &&f) {
  switch (t) {
  case DType::Bool: return f.template operator()<bool>();
  case DType::Int32: return f.template operator()<int32_t>();
  case DType::Int64: return f.template operator()<int64_t>();
  case DType::Float32: return f.template operator()<float>();
  case DType::Float64: return f.template operator()<double>();
  case DType::UInt8: return f.template operator()<uint8_t>();
  case DType::Int8: return f.template operator()<int8_t>();
  case DType::Int16: return f.template operator()<int16_t>();
  case DType::Float16:
  case DType::BFloat16: break;
  }
  KILN_FAIL("internal: no kernel computes in ", name(t), " (ops compute it in float32)");
}

// dispatch_dtype with the storage-only types too: conversions, fills, element reads.
template <class F> decltype(auto) dispatch_storage_dtype(DType t, F &&f) {
  if (t == DType::Float16) return f.template operator()<Half>();
  if (t == DType::BFloat16) return f.template operator()<BFloat16>();
  return dispatch_dtype(t, std::forward<F>(f));
}

} // namespace kiln
