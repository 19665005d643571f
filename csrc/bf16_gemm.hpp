// The operands of an attention's products (csrc/kernels.hpp) in bfloat16: rounded to bf16 and multiplied
// by oneDNN with float32 accumulation (AVX512-BF16 / AMX where the CPU has them: oneDNN's JIT picks the
// kernel at run time; bf16-rounded float32 GEMMs where it has no bf16 kernels, see onednn_engine.hpp).
// Each GEMM runs on its calling thread only: the attention kernel's own threads share out its tiles.
#pragma once

#include "kernels.hpp"

namespace decide {

const Operands* bf16_operands();

}  // namespace decide
