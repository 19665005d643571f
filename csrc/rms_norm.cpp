#include "rms_norm.hpp"

#include <cmath>

namespace decide {

namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DECIDE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DECIDE_CLONES
#endif

constexpr int kLanes = 16;  // the squares summed in 16 lanes, then in a fixed order

DECIDE_CLONES float sum_of_squares(const float* x, int64_t n) {
    float lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) lanes[l] += x[i + l] * x[i + l];
    }
    for (int l = 0; i < n; ++i, ++l) lanes[l] += x[i] * x[i];
    float total = 0.0f;
    for (float lane : lanes) total += lane;
    return total;
}

DECIDE_CLONES void scale_by(const float* x, const float* weight, float factor, int64_t n, float* out) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor * weight[i];
}

}  // namespace

void rms_norm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * dim;
        const float factor = 1.0f / std::sqrt(sum_of_squares(row, dim) / static_cast<float>(dim) + eps);
        scale_by(row, weight, factor, dim, out + r * dim);
    }
}

}  // namespace decide
