// Argument checks shared by msdet's `ops.Custom(func_type="aot")` kernels: MindSpore hands
// each kernel its inputs and outputs with their dtypes as strings ("float32", ...).
#pragma once

#include <cstring>

// True when every one of the nparam inputs and outputs is float32.
inline bool all_float32(int nparam, const char **dtypes) {
  for (int i = 0; i < nparam; ++i) {
    if (std::strcmp(dtypes[i], "float32") != 0) return false;
  }
  return true;
}
