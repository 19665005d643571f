// RMSNorm in float32 for the bfloat16 backend: MLX's CPU rms_norm runs at ~0.8 ns an element, this
// loop (vectorized for the CPU's widest ISA, chosen at load) at a fraction of that.
#pragma once

#include <cstdint>

namespace decide {

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) · weight, for `rows` contiguous rows of `dim` floats.
void rms_norm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim, float* out);

}  // namespace decide
