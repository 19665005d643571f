// The one oneDNN CPU engine that decide's bfloat16 code (bf16_linear.cpp, bf16_gemm.cpp) runs on.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace decide {

inline dnnl::engine& cpu_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

}  // namespace decide
