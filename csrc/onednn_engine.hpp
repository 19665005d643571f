// The one oneDNN CPU engine that decide's bfloat16 code (bf16_linear.cpp, bf16_gemm.cpp) runs on, the
// type its GEMMs take their operands in, and the cache of their primitives.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
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

// Primitives by shape: a request's shapes repeat over the layers and tiles, and making a primitive
// (~0.25 ms) costs as much as running one at these sizes. Thread-safe; at `capacity` shapes it starts afresh.
template <class Shape, class Primitive>
class PrimitiveCache {
   public:
    explicit PrimitiveCache(size_t capacity) : capacity_(capacity) {}

    template <class Make>
    Primitive get(const Shape& shape, Make make) {
        const std::lock_guard<std::mutex> held(lock_);
        if (auto hit = cache_.find(shape); hit != cache_.end()) return hit->second;
        if (cache_.size() >= capacity_) cache_.clear();
        return cache_.emplace(shape, make()).first->second;
    }

   private:
    size_t capacity_;
    std::mutex lock_;
    std::map<Shape, Primitive> cache_;
};

}  // namespace decide
