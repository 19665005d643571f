// The one oneDNN CPU engine that decide's bfloat16 code (bf16_linear.cpp, bf16_gemm.cpp) runs on, and
// the type its GEMMs take their operands in.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace decide {

inline dnnl::engine& cpu_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

// bf16 where oneDNN has bf16 GEMM kernels for this CPU (AVX-512 or AMX). Elsewhere (AVX2 only) f32:
// the operands are still rounded to bf16, and a product of two bf16 values is exact in float32, so an
// f32 GEMM of them computes what the bf16 one would (up to the order of the sums), only slower.
inline dnnl::memory::data_type operand_type() {
    static const dnnl::memory::data_type type = [] {
        using dnnl::memory;
        try {
            const memory::desc a({1, 16}, memory::data_type::bf16, memory::format_tag::ab);
            const memory::desc b({16, 16}, memory::data_type::bf16, memory::format_tag::ab);
            const memory::desc c({1, 16}, memory::data_type::f32, memory::format_tag::ab);
            dnnl::matmul::primitive_desc(cpu_engine(), a, b, c);
            return memory::data_type::bf16;
        } catch (const dnnl::error&) {
            return memory::data_type::f32;
        }
    }();
    return type;
}

}  // namespace decide
