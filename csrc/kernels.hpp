// CPU kernels for the trie engine's forward, where MLX's own ops are slow on a CPU.
//
// Attention for one sequence: softmax(q kᵀ · scale + mask) v, grouped-query aware. MLX evaluates attention on a CPU as a chain of separate passes over the whole score matrix
// (matmul, add, max, exp, sum, matmul), each streaming it through memory. Here a tile of query
// rows of one KV group is done at a time: its scores stay in cache, the two products go to the
// process's BLAS (cblas_sgemm), and the softmax is one vectorized loop. Under a causal mask a tile
// computes only the keys its last row can see.
#pragma once

#include <cstddef>
#include <cstdint>

namespace decide {

struct StridedHeads {  // float32 [heads, rows, dim], the last axis contiguous; strides in elements
    const float* data;
    int64_t head_stride;
    int64_t row_stride;
};

// One pass for an attention's softmax numerators: out[j] ← operand of exp(scores[j] - top) (0 where scores[j] is
// -inf) for j < n, 0 for n <= j < width; returns the float32 sum of the numerators, in the order exp_and_sum
// adds them.
using NumeratorsFn = float (*)(const float* scores, int n, float top, void* out, int width);

// The element type an attention's two products take their operands in, and the GEMM on them:
// C[m, n] = A[m, k] · B + beta · C (beta 0 or 1), row-major with row strides in elements; B is [k, n], or
// [n, k] used transposed when trans_b; C float32. The kernel converts q · scale, k and v once per call
// and the softmax numerators once per block, so the GEMM sees ready operands.
struct Operands {
    size_t bytes;                                           // per element (2 for bf16 bits)
    void (*convert)(const float* in, void* out, size_t n);  // float32 → operands (rounding)
    void (*gemm)(bool trans_b, int m, int n, int k, const void* a, int lda, const void* b, int ldb, float beta,
                 float* c, int ldc);
    NumeratorsFn numerators = nullptr;  // optional; null: the kernel exponentiates in place, then converts
};

// `Operands::numerators` for bfloat16 operands, where the CPU converts to bf16 itself (AVX512-BF16); else null.
NumeratorsFn bf16_numerators();

struct AttentionInput {
    StridedHeads q;  // [heads, length, dim]
    StridedHeads k;  // [kv_heads, span, dim]
    StridedHeads v;  // [kv_heads, span, dim]
    int heads, kv_heads, length, span, dim;
    float scale;
    const float* bias;        // [length, span] additive (0 or -inf), or null for a causal mask:
    int64_t bias_row_stride;  //   then query i sees the keys j <= i + causal_offset
    int64_t causal_offset;
    int shared;  // with a bias: keys [0, shared) are seen by every query (a forest's cached prefix; their bias is not read)
    const Operands* operands = nullptr;  // the products' (decide::bf16_operands()); null: float32 through
                                         // cblas_sgemm, on q, k and v as they are
};

// True when a cblas_sgemm is in the process's global symbol scope (an optimized BLAS loaded
// RTLD_GLOBAL, see decide/runtime.py). attention() must not be called otherwise (its threads are
// counted from the BLAS's, and without `in.operands` its products are the BLAS's).
bool attention_available();

// out: float32 [heads, length, dim], contiguous.
void attention(const AttentionInput& in, float* out);

// RoPE at per-token positions: out[h, i] is x[h, i] ([heads, length, dim], last axis contiguous) with its
// first `dims` features rotated by the angles of row i of the tables (cos, sin: [length, dims / 2]), pairs
// (j, j + dims / 2), or (2j, 2j + 1) when `traditional`; the other features are copied. out contiguous.
// One pass over x: MLX rotated a transposed view through several copies (slices, then a concatenation).
void rope(const StridedHeads& x, int heads, int length, int dim, const float* cos, const float* sin, int dims,
          bool traditional, float* out);

// SwiGLU's product silu(gate) · up = gate · up / (1 + exp(-gate)), elementwise over n floats. MLX
// computes exp with one libm call per element; this is the vectorized exp of attention.
void silu_product(const float* gate, const float* up, float* out, size_t n);

}  // namespace decide
