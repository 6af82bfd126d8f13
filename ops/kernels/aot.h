// Argument checks shared by msdet's `ops.Custom(func_type="aot")` kernels: MindSpore hands
// each kernel its inputs and outputs with their dtypes as strings ("float32", ...).
#pragma once

#include <cstdint>
#include <cstring>

// True when `dtype` (MindSpore's name for an input's or output's type) is `want`.
inline bool dtype_is(const char *dtype, const char *want) { return std::strcmp(dtype, want) == 0; }

// The number of elements of a tensor of `ndim` dimensions `shape`.
inline int64_t elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

// True when every one of the nparam inputs and outputs is float32.
inline bool all_float32(int nparam, const char **dtypes) {
  for (int i = 0; i < nparam; ++i) {
    if (!dtype_is(dtypes[i], "float32")) return false;
  }
  return true;
}
