#include "kernels.hpp"

#include <dlfcn.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
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

// in.operands' GEMM if set, else the BLAS: C = A · B (or A · Bᵀ) + beta · C, row-major.
void product(const AttentionInput& in, bool trans_b, int m, int n, int k, const void* a, int lda, const void* b,
             int ldb, float beta, float* c, int ldc) {
    if (in.operands) {
        in.operands->gemm(trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
    } else {
        sgemm()(kRowMajor, kNoTrans, trans_b ? kTrans : kNoTrans, m, n, k, 1.0f, static_cast<const float*>(a), lda,
                static_cast<const float*>(b), ldb, beta, c, ldc);
    }
}

// Rows of products' operands: `stride` elements apart, `bytes` each.
struct OperandRows {
    const unsigned char* data;
    int64_t stride;
    size_t bytes;
    const void* row(int64_t r) const { return data + static_cast<size_t>(r * stride) * bytes; }
};

// One KV head's keys and values as the products take them, and its values in float32 (a forest's own
// keys' weighted sums are added up here, in float32).
struct HeadOperands {
    OperandRows keys, values;
    const float* float_values;
    int64_t float_value_stride;
};

// k or v [kv_heads, span, dim] as operands. Without in.operands, the float32 rows as they are. Else
// converted once per call: in one piece, strides kept, where the heads fill their memory without gaps
// (MLX's heads of one sequence do), else row by row into [kv_heads, span, dim].
std::vector<OperandRows> head_operands(const AttentionInput& in, const StridedHeads& x, std::vector<unsigned char>& store) {
    std::vector<OperandRows> heads;
    const auto at = [&](int g, int r) { return x.data + g * x.head_stride + r * x.row_stride; };
    if (!in.operands) {
        for (int g = 0; g < in.kv_heads; ++g) heads.push_back({reinterpret_cast<const unsigned char*>(at(g, 0)), x.row_stride, sizeof(float)});
        return heads;
    }
    const size_t bytes = in.operands->bytes, count = static_cast<size_t>(in.kv_heads) * in.span * in.dim;
    const int64_t last = (in.kv_heads - 1) * x.head_stride + (in.span - 1) * x.row_stride + in.dim - 1;
    const bool gapless = x.head_stride > 0 && x.row_stride > 0 && static_cast<size_t>(last) + 1 == count;
    store.resize(count * bytes);
    if (gapless) {
        in.operands->convert(x.data, store.data(), count);
        for (int g = 0; g < in.kv_heads; ++g) heads.push_back({store.data() + g * x.head_stride * bytes, x.row_stride, bytes});
        return heads;
    }
    for (int g = 0; g < in.kv_heads; ++g) {
        unsigned char* head = store.data() + static_cast<size_t>(g) * in.span * in.dim * bytes;
        for (int r = 0; r < in.span; ++r) in.operands->convert(at(g, r), head + static_cast<size_t>(r) * in.dim * bytes, in.dim);
        heads.push_back({head, in.dim, bytes});
    }
    return heads;
}

// A tile is 64 query rows of each query head of a KV group; its dense keys are taken 512 at a time:
// the block's scores (384 KiB for 3 heads) stay in L2 between the two products, which stay wide.
constexpr int kTileRows = 64;
constexpr int kBlockCols = 512;

// exp(x) = p · 2ⁿ as decide/scoring/adapter/kernels.py computes it (Cody-Waite reduction, degree-7
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

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DECIDE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DECIDE_CLONES
#endif

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr int kLanes = 16;  // sums are kept in 16 lanes, added up in a fixed order: a row's result
                            // does not depend on where it sits in memory or in the tile

// A softmax numerator: 0 for a masked score.
inline __attribute__((always_inline)) float numerator(float x, float top) {
    return x == kMinusInf ? 0.0f : exp_poly(x - top);
}

DECIDE_CLONES float row_max(const float* row, int n) {
    float top = kMinusInf;
#pragma omp simd reduction(max : top)
    for (int j = 0; j < n; ++j) top = row[j] > top ? row[j] : top;  // (std::max does not vectorize)
    return top;
}

// row[j] ← exp(row[j] - top) (0 where row[j] is -inf); returns their sum.
DECIDE_CLONES float exp_and_sum(float* row, int n, float top) {
    float lanes[kLanes] = {};
    int j = 0;
    for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) {  // through a pointer: `row[j + l]` vectorized as a gather and scatter
            float* chunk = row + j;
            const float e = numerator(chunk[l], top);
            chunk[l] = e;
            lanes[l] += e;
        }
    }
    for (int l = 0; j < n; ++j, ++l) {
        const float e = numerator(row[j], top);
        row[j] = e;
        lanes[l] += e;
    }
    float total = 0.0f;
    for (float lane : lanes) total += lane;
    return total;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DECIDE_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 min/max/shift intrinsics (a false alarm)

// numerator() on 16 lanes: exp_poly's operations in its order (and so its results), written out so that two
// vectors' chains of dependent FMAs interleave (the compiled loop ran one chain at a time, latency-bound).
DECIDE_AVX512_BF16 inline __attribute__((always_inline)) __m512 numerators16(__m512 x, __m512 top) {
    const __m512 round = _mm512_set1_ps(12582912.0f);
    const __m512 t = _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(x, top), _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 y = _mm512_fmadd_ps(t, _mm512_set1_ps(1.4426950408889634f), round);
    const __m512 n = _mm512_sub_ps(y, round);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), t);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), f);
    __m512 p = _mm512_fmadd_ps(f, _mm512_set1_ps(1.0f / 5040), _mm512_set1_ps(1.0f / 720));
    for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(c));
    const __m512i bits = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_castps_si512(y), _mm512_set1_epi32(0x4B400000 - 127)), 23);
    const __mmask16 seen = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kMinusInf), _CMP_NEQ_OQ);
    return _mm512_maskz_mul_ps(seen, p, _mm512_castsi512_ps(bits));
}

// exp_and_sum whose numerators go straight to bf16 (VCVTNEPS2BF16, round to nearest even, as to_bf16 rounds
// all but denormals, which it flushes to 0): no float32 numerators written, no second pass to convert them.
// The lanes' sums are exp_and_sum's, added in its order.
DECIDE_AVX512_BF16 float exp_sum_bf16(const float* row, int n, float top, void* out, int width) {
    auto* dst = static_cast<uint16_t*>(out);
    const __m512 tops = _mm512_set1_ps(top);
    __m512 lanes = _mm512_setzero_ps();
    int j = 0;
    for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
        const __m512 a = numerators16(_mm512_loadu_ps(row + j), tops);
        const __m512 b = numerators16(_mm512_loadu_ps(row + j + kLanes), tops);
        lanes = _mm512_add_ps(_mm512_add_ps(lanes, a), b);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(a)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j + kLanes), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(b)));
    }
    for (; j < n; j += kLanes) {
        const auto valid = static_cast<__mmask16>(n - j >= kLanes ? 0xffffu : (1u << (n - j)) - 1u);
        const __m512 a = _mm512_maskz_mov_ps(valid, numerators16(_mm512_maskz_loadu_ps(valid, row + j), tops));
        lanes = _mm512_add_ps(lanes, a);
        _mm256_mask_storeu_epi16(dst + j, valid, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(a)));
    }
    std::fill(dst + n, dst + width, uint16_t{0});
    alignas(64) float sums[kLanes];
    _mm512_store_ps(sums, lanes);
    float total = 0.0f;
    for (float lane : sums) total += lane;
    return total;
}
#pragma GCC diagnostic pop
#endif

// (The loops of the kernel's own code, out of its body: these get the CPU's vector width.)

// out[j] = in[j] * factor
DECIDE_CLONES void scaled_copy(float* out, const float* in, int n, float factor) {
#pragma omp simd
    for (int j = 0; j < n; ++j) out[j] = in[j] * factor;
}

// out[e] = scored[position[cols[e]]] + bias[cols[e]]: a row's own columns' scores, from the tile's union of them.
DECIDE_CLONES void gather_scores(float* out, const float* scored, const int* position, const int* cols,
                                 const float* bias, int n) {
#pragma omp simd
    for (int e = 0; e < n; ++e) out[e] = scored[position[cols[e]]] + bias[cols[e]];
}

// acc[0, D) += Σ_e weights[e] · values[cols[e]], in order, for a head size known when compiled: the row's sums
// stay in registers from one column to the next (through memory, each column's update waited for the last
// one's stores).
template <int D>
inline __attribute__((always_inline)) void add_sparse_fixed(float* acc, const float* values, int64_t value_stride,
                                                            const int* cols, const float* weights, int n) {
    typedef float Lanes __attribute__((vector_size(32)));  // (the compiler kept `float sums[D]` scalar)
    constexpr int kVectors = D / 8;
    Lanes sums[kVectors];
    std::memcpy(sums, acc, sizeof sums);
    for (int e = 0; e < n; ++e) {
        const float* v = values + cols[e] * value_stride;
        const float w = weights[e];
        for (int k = 0; k < kVectors; ++k) {
            Lanes part;
            std::memcpy(&part, v + 8 * k, sizeof part);
            sums[k] += w * part;
        }
    }
    std::memcpy(acc, sums, sizeof sums);
}

// acc += Σ_e weights[e] · values[cols[e]], in order.
DECIDE_CLONES void add_sparse_values(float* acc, const float* values, int64_t value_stride, const int* cols,
                                     const float* weights, int n, int d) {
    if (d == 64) return add_sparse_fixed<64>(acc, values, value_stride, cols, weights, n);
    if (d == 128) return add_sparse_fixed<128>(acc, values, value_stride, cols, weights, n);
    for (int e = 0; e < n; ++e) {
        const float* v = values + cols[e] * value_stride;
        const float w = weights[e];
#pragma omp simd
        for (int j = 0; j < d; ++j) acc[j] += w * v[j];
    }
}

// Under a bias: per row, the visible key columns after the `shared` ones, in order (CSR).
struct SparseColumns {
    std::vector<int> offsets{0};
    std::vector<int> columns;

    SparseColumns(const AttentionInput& in) {
        for (int i = 0; i < in.length; ++i) {
            const float* bias = in.bias + i * in.bias_row_stride;
            for (int j = in.shared; j < in.span; ++j) {
                if (bias[j] != kMinusInf) columns.push_back(j);
            }
            offsets.push_back(static_cast<int>(columns.size()));
        }
    }
    int count(int row) const { return offsets[row + 1] - offsets[row]; }
    const int* of(int row) const { return columns.data() + offsets[row]; }
};

struct Tile {
    int kv_head, first_row;
    int rows;  // rows of the tile, padding included (under a bias every tile has the same shape)
    int real;  // the rows that exist
    int cols;  // dense key columns [0, cols): all under a causal mask, the shared ones under a bias
};

struct Buffers {
    std::vector<float> queries, scores, sparse, values;
    std::vector<unsigned char> query_operands, score_operands;  // with in.operands: queries and scores converted
    int score_stride = 0;
    std::vector<float> top, total;          // per tile row: running max, softmax sum
    std::vector<float> union_scores;        // the tile's rows against the union of their sparse columns
    std::vector<int> columns, position;     // that union, and each column's place in it
};

// The union of the sparse columns of rows [first, end), in order; position[c] = its place there.
// (Marked, then collected by one scan of the columns they span: sorting them cost more than the scores.)
void sparse_union(const SparseColumns& sparse, int first, int end, Buffers& b) {
    for (int c : b.columns) b.position[c] = -1;  // the previous tile's marks
    b.columns.clear();
    int lo = std::numeric_limits<int>::max(), hi = -1;
    for (int row = first; row < end; ++row) {
        for (const int* c = sparse.of(row); c != sparse.of(row) + sparse.count(row); ++c) {
            b.position[*c] = 0;
            lo = std::min(lo, *c);
            hi = std::max(hi, *c);
        }
    }
    for (int c = lo; c <= hi; ++c) {
        if (b.position[c] == 0) b.columns.push_back(c);
    }
    for (size_t u = 0; u < b.columns.size(); ++u) b.position[b.columns[u]] = static_cast<int>(u);
}

DECIDE_CLONES void scale_row(float* row, int n, float factor) {
#pragma omp simd
    for (int j = 0; j < n; ++j) row[j] *= factor;
}

// A row's running softmax meets new scores whose max is `top`: returns the factor its sum and
// weighted values so far are rescaled by (exactly 1 when the max did not move).
inline float raise_top(float& running, float top) {
    const float factor = running == kMinusInf ? 1.0f : exp_poly(running - top);
    running = top;
    return factor;
}

// The tile's dense columns, kBlockCols at a time (online softmax): each block's scores stay in cache
// between the two products. Blocks start at fixed columns, so a row's result does not depend on the tile.
void attend_dense(const AttentionInput& in, const Tile& t, Buffers& b, const HeadOperands& head, const void* queries) {
    const int m = in.heads / in.kv_heads * t.rows, d = in.dim;
    const NumeratorsFn fused = in.operands ? in.operands->numerators : nullptr;
    for (int c0 = 0; c0 < t.cols; c0 += kBlockCols) {
        const int cb = std::min(kBlockCols, t.cols - c0);
        product(in, true, m, cb, d, queries, d, head.keys.row(c0), static_cast<int>(head.keys.stride), 0.0f,
                b.scores.data(), b.score_stride);
        for (int r = 0; r < m; ++r) {
            const int i = r % t.rows, row = t.first_row + i;
            float* line = b.scores.data() + static_cast<size_t>(r) * b.score_stride;
            int visible = 0;
            if (i < t.real) {
                if (in.bias) {
                    visible = cb;  // the shared keys: every query sees them (their bias is 0, not read)
                } else {
                    visible = static_cast<int>(std::clamp<int64_t>(row + in.causal_offset + 1 - c0, 0, cb));
                }
            }
            const float top = std::max(b.top[r], row_max(line, visible));
            if (top == kMinusInf) visible = 0;  // nothing seen yet: the row's weights stay 0
            const float factor = visible ? raise_top(b.top[r], top) : 1.0f;
            float sum = 0.0f;
            if (fused) {
                unsigned char* operands = b.score_operands.data() + static_cast<size_t>(r) * b.score_stride * in.operands->bytes;
                sum = fused(line, visible, top, operands, cb);
            } else {
                sum = visible ? exp_and_sum(line, visible, top) : 0.0f;
                std::fill(line + visible, line + cb, 0.0f);
            }
            b.total[r] = b.total[r] * factor + sum;
            if (factor != 1.0f) scale_row(b.values.data() + static_cast<size_t>(r) * d, d, factor);
        }
        const void* weights = b.scores.data();
        if (fused) {
            weights = b.score_operands.data();
        } else if (in.operands) {
            const size_t bytes = in.operands->bytes;
            for (int r = 0; r < m; ++r) {
                const size_t at = static_cast<size_t>(r) * b.score_stride;
                in.operands->convert(b.scores.data() + at, b.score_operands.data() + at * bytes, cb);
            }
            weights = b.score_operands.data();
        }
        product(in, false, m, d, cb, weights, b.score_stride, head.values.row(c0), static_cast<int>(head.values.stride),
                c0 == 0 ? 0.0f : 1.0f, b.values.data(), d);
    }
}

// Under a bias, the rows' own (sparse) columns after the shared ones: scored through the BLAS against
// the tile's union of them, but each row's softmax sum and weighted values are summed here, in column order.
void attend_sparse(const AttentionInput& in, const Tile& t, const SparseColumns& sparse, Buffers& b,
                   const HeadOperands& head, const void* queries) {
    const int group = in.heads / in.kv_heads, m = group * t.rows, d = in.dim;
    int widest = 0;
    for (int i = 0; i < t.real; ++i) widest = std::max(widest, sparse.count(t.first_row + i));
    sparse_union(sparse, t.first_row, t.first_row + t.real, b);
    const int width = static_cast<int>(b.columns.size());
    b.sparse.resize(std::max(b.sparse.size(), static_cast<size_t>(m) * widest));
    b.union_scores.resize(std::max(b.union_scores.size(), static_cast<size_t>(m) * width));
    // A run of consecutive columns at a time. Each score is a dot product of one head size: the same
    // wherever the column sits.
    for (int u = 0; u < width;) {
        int end = u + 1;
        while (end < width && b.columns[end] == b.columns[end - 1] + 1) ++end;
        product(in, true, m, end - u, d, queries, d, head.keys.row(b.columns[u]), static_cast<int>(head.keys.stride),
                0.0f, b.union_scores.data() + u, width);
        u = end;
    }
    for (int r = 0; r < m; ++r) {
        const int i = r % t.rows, row = t.first_row + i;
        if (i >= t.real) continue;
        const int n = sparse.count(row);
        const int* cols = sparse.of(row);
        const float* bias = in.bias + row * in.bias_row_stride;
        const float* scored = b.union_scores.data() + static_cast<size_t>(r) * width;
        float* extra = b.sparse.data() + static_cast<size_t>(r) * widest;
        gather_scores(extra, scored, b.position.data(), cols, bias, n);
        const float top = std::max(b.top[r], row_max(extra, n));
        if (top == kMinusInf) continue;
        float* acc = b.values.data() + static_cast<size_t>(r) * d;
        const float factor = raise_top(b.top[r], top);
        if (factor != 1.0f) scale_row(acc, d, factor);
        b.total[r] = b.total[r] * factor + exp_and_sum(extra, n, top);  // the row's own columns, in their order
        add_sparse_values(acc, head.float_values, head.float_value_stride, cols, extra, n, d);
    }
}

// One tile: `rows` query rows of every query head of one KV group.
void attend_tile(const AttentionInput& in, const Tile& t, const SparseColumns* sparse, const HeadOperands& head,
                 Buffers& b, float* out) {
    const int group = in.heads / in.kv_heads, d = in.dim, m = group * t.rows;
    for (int h = 0; h < group; ++h) {
        for (int i = 0; i < t.rows; ++i) {
            float* dst = b.queries.data() + (h * t.rows + i) * d;
            if (i >= t.real) {
                std::fill(dst, dst + d, 0.0f);
                continue;
            }
            const float* src = in.q.data + (t.kv_head * group + h) * in.q.head_stride + (t.first_row + i) * in.q.row_stride;
            scaled_copy(dst, src, d, in.scale);
        }
    }
    const void* queries = b.queries.data();
    if (in.operands) {
        in.operands->convert(b.queries.data(), b.query_operands.data(), static_cast<size_t>(m) * d);
        queries = b.query_operands.data();
    }
    std::fill(b.top.begin(), b.top.begin() + m, kMinusInf);
    std::fill(b.total.begin(), b.total.begin() + m, 0.0f);
    std::fill(b.values.begin(), b.values.begin() + static_cast<size_t>(m) * d, 0.0f);
    attend_dense(in, t, b, head, queries);
    if (sparse) attend_sparse(in, t, *sparse, b, head, queries);
    for (int h = 0; h < group; ++h) {
        for (int i = 0; i < t.real; ++i) {
            const int r = h * t.rows + i;
            const float inverse = b.total[r] > 0.0f ? 1.0f / b.total[r] : 0.0f;  // nothing visible: zeros
            const float* acc = b.values.data() + static_cast<size_t>(r) * d;
            float* dst = out + ((static_cast<int64_t>(t.kv_head) * group + h) * in.length + t.first_row + i) * d;
            scaled_copy(dst, acc, d, inverse);
        }
    }
}

// Our threads share out the tiles (the softmax between the products is then parallel too) while the
// BLAS runs each product on its calling thread: its own threads would compete with ours. With no
// OpenBLAS thread control found, the tiles run on one thread and the BLAS threads its products.
// (decide/runtime.py also stops OpenBLAS's threads from spinning between calls: they would hold
// the cores our threads need.)
class BlasThreads {
  public:
    BlasThreads() {
        for (const char* prefix : {"", "scipy_"}) {
            get_ = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, (std::string(prefix) + "openblas_get_num_threads").c_str()));
            set_ = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, (std::string(prefix) + "openblas_set_num_threads").c_str()));
            if (get_ && set_) return;
        }
        get_ = nullptr;
    }
    int count() const { return get_ ? get_() : 1; }
    void set(int n) const { set_(n); }

  private:
    int (*get_)() = nullptr;
    void (*set_)(int) = nullptr;
};

const BlasThreads& blas_threads() {
    static const BlasThreads threads;
    return threads;
}

class OneBlasThread {  // for the life of the object; then back to `restore` threads
  public:
    OneBlasThread(const BlasThreads& blas, int restore) : blas_(blas), restore_(restore) { blas_.set(1); }
    ~OneBlasThread() { blas_.set(restore_); }
    OneBlasThread(const OneBlasThread&) = delete;
    OneBlasThread& operator=(const OneBlasThread&) = delete;

  private:
    const BlasThreads& blas_;
    int restore_;
};

constexpr size_t kThreadedScores = 256 * 1024;  // below this, one thread (starting one costs ~30 us)

}  // namespace

bool attention_available() { return sgemm() != nullptr; }

void attention(const AttentionInput& in, float* out) {
    const int group = in.heads / in.kv_heads;
    // Under a bias the dense columns are the shared ones, and every tile has the same shape (the
    // last one padded): the BLAS then computes each row the same way wherever it sits, so a
    // question's answers do not move when other questions join the pass.
    const int dense = in.bias ? in.shared : in.span;
    std::vector<Tile> tiles;
    for (int g = 0; g < in.kv_heads; ++g) {
        for (int r0 = 0; r0 < in.length; r0 += kTileRows) {
            const int real = std::min(kTileRows, in.length - r0);
            if (in.bias) {
                tiles.push_back({g, r0, kTileRows, real, dense});
            } else {  // the tile's last row sees the most: no column after it is computed
                const int cols = static_cast<int>(std::clamp<int64_t>(r0 + real + in.causal_offset, 1, in.span));
                tiles.push_back({g, r0, real, real, cols});
            }
        }
    }
    const std::optional<SparseColumns> sparse = in.bias ? std::optional<SparseColumns>(in) : std::nullopt;
    std::vector<unsigned char> key_store, value_store;
    const std::vector<OperandRows> keys = head_operands(in, in.k, key_store), values = head_operands(in, in.v, value_store);
    std::vector<HeadOperands> heads;
    for (int g = 0; g < in.kv_heads; ++g) {
        heads.push_back({keys[g], values[g], in.v.data + g * in.v.head_stride, in.v.row_stride});
    }
    const size_t operand_bytes = in.operands ? in.operands->bytes : 0;
    std::vector<std::exception_ptr> errors(1);
    auto work = [&](size_t worker, size_t workers) {
        try {
            const size_t m = static_cast<size_t>(group) * kTileRows;
            Buffers b;
            b.queries.resize(m * in.dim);
            // As wide as the widest block, and not a power of two (rows 2 KiB apart would share cache sets).
            b.score_stride = (std::min(kBlockCols, std::max(dense, 1)) + kLanes - 1) / kLanes * kLanes + kLanes;
            b.scores.resize(m * b.score_stride);
            b.query_operands.resize(m * in.dim * operand_bytes);
            b.score_operands.resize(m * b.score_stride * operand_bytes);
            b.values.resize(m * in.dim);
            b.top.resize(m);
            b.total.resize(m);
            b.position.assign(in.bias ? in.span : 0, -1);
            for (size_t i = worker; i < tiles.size(); i += workers) {  // interleaved: later causal tiles cost more
                attend_tile(in, tiles[i], sparse ? &*sparse : nullptr, heads[tiles[i].kv_head], b, out);
            }
        } catch (...) {
            errors[worker] = std::current_exception();
        }
    };
    const BlasThreads& blas = blas_threads();
    const int blas_count = blas.count();
    const size_t scores_total = static_cast<size_t>(in.heads) * in.length * in.span;
    const int workers = scores_total < kThreadedScores ? 1 : std::min<int>(blas_count, static_cast<int>(tiles.size()));
    if (workers <= 1) {
        work(0, 1);
    } else {
        errors.resize(workers);
        const OneBlasThread one_thread(blas, blas_count);
        std::vector<std::thread> helpers;
        int started = 1;
        try {
            for (; started < workers; ++started) helpers.emplace_back(work, started, workers);
        } catch (const std::system_error&) {  // no thread to be had: this one does their shares
        }
        for (int w = started; w < workers; ++w) work(w, workers);
        work(0, workers);
        for (auto& t : helpers) t.join();
    }
    for (const auto& error : errors) {
        if (error) std::rethrow_exception(error);
    }
}

DECIDE_CLONES void silu_product(const float* gate, const float* up, float* out, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) out[i] = gate[i] * up[i] / (1.0f + exp_poly(-gate[i]));
}

DECIDE_CLONES void rope(const StridedHeads& x, int heads, int length, int dim, const float* cos, const float* sin,
                        int dims, bool traditional, float* out) {
    const int half = dims / 2;
    for (int h = 0; h < heads; ++h) {
        for (int i = 0; i < length; ++i) {
            const float* src = x.data + h * x.head_stride + i * x.row_stride;
            float* dst = out + (static_cast<int64_t>(h) * length + i) * dim;
            const float* c = cos + static_cast<int64_t>(i) * half;
            const float* s = sin + static_cast<int64_t>(i) * half;
            if (traditional) {
#pragma omp simd
                for (int j = 0; j < half; ++j) {
                    const float a = src[2 * j], b = src[2 * j + 1];
                    dst[2 * j] = a * c[j] - b * s[j];
                    dst[2 * j + 1] = a * s[j] + b * c[j];
                }
            } else {
#pragma omp simd
                for (int j = 0; j < half; ++j) {
                    const float a = src[j], b = src[j + half];
                    dst[j] = a * c[j] - b * s[j];
                    dst[j + half] = a * s[j] + b * c[j];
                }
            }
            std::copy(src + 2 * half, src + dim, dst + 2 * half);
        }
    }
}

NumeratorsFn bf16_numerators() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (__builtin_cpu_supports("avx512bf16")) return &exp_sum_bf16;
#endif
    return nullptr;
}

}  // namespace decide
