#include "kernels.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace decide {
namespace {

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                         int);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

SgemmFn sgemm() {
    static const SgemmFn fn = reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
    return fn;
}

// Scores of one tile: up to 4 MiB (64 rows of each of 3 query heads at 5,000 keys). Fewer rows keep
// the tile in L2 but make the two products too thin for the BLAS: measured slower.
constexpr size_t kTileFloats = 1024 * 1024;
constexpr int kMaxTileRows = 64;

// exp(x) = p · 2ⁿ as decide/scoring/fast_kernels.py computes it (Cody-Waite reduction, degree-7
// Taylor polynomial, the exponent built from integer bits): branch-free, so the loops vectorize.
inline __attribute__((always_inline)) float exp_poly(float x) {
    constexpr float kLog2e = 1.4426950408889634f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f;
    constexpr float kRound = 12582912.0f;  // 1.5 * 2**23: adding it rounds to an integer in the low mantissa bits
    constexpr int32_t kExponentBits = 0x4B400000 - 127;
    x = std::min(std::max(x, -87.0f), 88.0f);
    const float y = x * kLog2e + kRound;
    const float n = y - kRound;
    const float f = x - n * kLn2Hi - n * kLn2Lo;
    const float p =
        1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720 + f * (1.0f / 5040)))))));
    int32_t bits;
    std::memcpy(&bits, &y, sizeof bits);
    bits = (bits - kExponentBits) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

// row[0, visible) ← exp(row + bias - max), row[visible, width) ← 0; returns the sum (0 if nothing is visible).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
float softmax_numerators(float* row, const float* bias, int visible, int width) {
    constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
    if (bias != nullptr) {
#pragma omp simd
        for (int j = 0; j < visible; ++j) row[j] += bias[j];
    }
    float top = kMinusInf;
#pragma omp simd reduction(max : top)
    for (int j = 0; j < visible; ++j) top = row[j] > top ? row[j] : top;  // (std::max does not vectorize)
    float total = 0.0f;
    if (top == kMinusInf) {
        visible = 0;
    } else {
#pragma omp simd reduction(+ : total)
        for (int j = 0; j < visible; ++j) {
            const float e = row[j] == kMinusInf ? 0.0f : exp_poly(row[j] - top);
            row[j] = e;
            total += e;
        }
    }
    std::fill(row + visible, row + width, 0.0f);
    return total;
}

struct Tile {
    int kv_head, first_row, rows, cols;
};

// One tile: `rows` query rows of every query head of one KV group, against the first `cols` keys.
void attend_tile(const AttentionInput& in, const Tile& t, float* queries, float* scores, float* values, float* out) {
    const int group = in.heads / in.kv_heads, d = in.dim, m = group * t.rows;
    for (int h = 0; h < group; ++h) {
        for (int i = 0; i < t.rows; ++i) {
            const float* src = in.q.data + (t.kv_head * group + h) * in.q.head_stride + (t.first_row + i) * in.q.row_stride;
            float* dst = queries + (h * t.rows + i) * d;
            for (int c = 0; c < d; ++c) dst[c] = src[c] * in.scale;
        }
    }
    const float* keys = in.k.data + t.kv_head * in.k.head_stride;
    const float* vals = in.v.data + t.kv_head * in.v.head_stride;
    sgemm()(kRowMajor, kNoTrans, kTrans, m, t.cols, d, 1.0f, queries, d, keys, static_cast<int>(in.k.row_stride), 0.0f,
            scores, t.cols);
    std::vector<float> inverse(m);
    auto softmax_rows = [&](int first, int end) {
        for (int r = first; r < end; ++r) {
            const int row = t.first_row + r % t.rows;
            const float* bias = in.bias ? in.bias + row * in.bias_row_stride : nullptr;
            const int64_t sees = in.bias ? t.cols : std::min<int64_t>(t.cols, row + in.causal_offset + 1);
            const float total = softmax_numerators(scores + static_cast<size_t>(r) * t.cols, bias,
                                                   static_cast<int>(std::max<int64_t>(sees, 0)), t.cols);
            inverse[r] = total > 0.0f ? 1.0f / total : 0.0f;
        }
    };
    // One thread: a second one would compete with the BLAS's own threads, which spin between calls (measured slower).
    softmax_rows(0, m);
    sgemm()(kRowMajor, kNoTrans, kNoTrans, m, d, t.cols, 1.0f, scores, t.cols, vals, static_cast<int>(in.v.row_stride),
            0.0f, values, d);
    for (int h = 0; h < group; ++h) {
        for (int i = 0; i < t.rows; ++i) {
            const float* src = values + (h * t.rows + i) * d;
            const float scale = inverse[h * t.rows + i];
            float* dst = out + ((static_cast<int64_t>(t.kv_head) * group + h) * in.length + t.first_row + i) * d;
            for (int c = 0; c < d; ++c) dst[c] = src[c] * scale;
        }
    }
}

}  // namespace

bool attention_available() { return sgemm() != nullptr; }

void attention(const AttentionInput& in, float* out) {
    const int group = in.heads / in.kv_heads;
    const int tile_rows = static_cast<int>(
        std::clamp<size_t>(kTileFloats / (static_cast<size_t>(group) * std::max(in.span, 1)), 1, kMaxTileRows));
    std::vector<float> queries(static_cast<size_t>(group) * tile_rows * in.dim);
    std::vector<float> scores(static_cast<size_t>(group) * tile_rows * in.span);
    std::vector<float> values(static_cast<size_t>(group) * tile_rows * in.dim);
    for (int g = 0; g < in.kv_heads; ++g) {
        for (int r0 = 0; r0 < in.length; r0 += tile_rows) {
            const int rows = std::min(tile_rows, in.length - r0);
            const int64_t last_sees = in.bias ? in.span : r0 + rows + in.causal_offset;
            const int cols = static_cast<int>(std::clamp<int64_t>(last_sees, 1, in.span));
            attend_tile(in, {g, r0, rows, cols}, queries.data(), scores.data(), values.data(), out);
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void silu_product(const float* gate, const float* up, float* out, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) out[i] = gate[i] * up[i] / (1.0f + exp_poly(-gate[i]));
}

}  // namespace decide
