// Element types and torch's type-promotion lattice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "runtime/error.h"

namespace kiln {

enum class DType : uint8_t { Bool, Int32, Int64, Float32, Float64 };

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kDouble = DType::Float64;

inline constexpr int kNumDTypes = 5;

constexpr size_t itemsize(DType t) {
  switch (t) {
  case DType::Bool: return 1;
  case DType::Int32: return 4;
  case DType::Int64: return 8;
  case DType::Float32: return 4;
  case DType::Float64: return 8;
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
  }
  return "?";
}
inline std::ostream &operator<<(std::ostream &os, DType t) { return os << name(t); }

constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::Int32 || t == DType::Int64 || (include_bool && t == DType::Bool);
}

// torch.promote_types for the dtypes kiln has: bool < int32 < int64 < float32 < float64.
constexpr DType promote_types(DType a, DType b) {
  return static_cast<uint8_t>(a) > static_cast<uint8_t>(b) ? a : b;
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
template <class T> inline constexpr DType dtype_of = CppToDType<T>::value;

// Calls f.template operator()<T>() with T the C++ type of `t`.
// Usage: dispatch_dtype(t, [&]<class T>() { ... });
template <class F> decltype(auto) dispatch_dtype(DType t, F &&f) {
  switch (t) {
  case DType::Bool: return f.template operator()<bool>();
  case DType::Int32: return f.template operator()<int32_t>();
  case DType::Int64: return f.template operator()<int64_t>();
  case DType::Float32: return f.template operator()<float>();
  case DType::Float64: return f.template operator()<double>();
  }
  KILN_FAIL("internal: bad dtype ", static_cast<int>(t));
}

} // namespace kiln
