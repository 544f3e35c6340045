// KILN_ARG(Self, T, name, init): one option of an options struct, as torch's
// TORCH_ARG: a chainable setter `Self &name(const T &)` and a getter `name()`
// (runtime/functional.h's *FuncOptions, runtime/optim.h's optimizer options).
#pragma once

#define KILN_ARG(Self, T, name, init)                                                                        \
public:                                                                                                      \
  Self &name(const T &v) {                                                                                   \
    name##_ = v;                                                                                             \
    return *this;                                                                                            \
  }                                                                                                          \
  const T &name() const { return name##_; }                                                                  \
                                                                                                             \
private:                                                                                                     \
  T name##_ = init;
