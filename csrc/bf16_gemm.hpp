// A decide::Gemm (csrc/kernels.hpp) in bfloat16: A and B rounded to bf16, multiplied by oneDNN with float32
// accumulation (AVX512-BF16 / AMX where the CPU has them: oneDNN's JIT picks the kernel at run time).
// Run on the calling thread only: the attention kernel's own threads share out its tiles.
#pragma once

namespace decide {

void bf16_gemm(bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta,
               float* c, int ldc);

}  // namespace decide
