// The attention kernel's arguments from numpy arrays, checked: shared by decide._native (float32 products
// through the BLAS) and decide._onednn (bfloat16 products through oneDNN). Binding code only.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "kernels.hpp"

namespace decide {

namespace py = pybind11;

using FloatHeads = py::array_t<float, 0>;  // float32 as it comes, strides kept (no copy)

inline StridedHeads heads_view(const FloatHeads& a, const char* name, int dim) {
    // (A stride along an axis of length 1 is meaningless: numpy and MLX may report 0 there.)
    if (a.ndim() != 3 || a.shape(2) != dim || (dim > 1 && a.strides(2) != sizeof(float)) ||
        a.strides(1) % sizeof(float) != 0 || a.strides(0) % sizeof(float) != 0 || a.strides(1) < 0 || a.strides(0) < 0) {
        throw std::invalid_argument(std::string(name) + " must be float32 [heads, rows, dim] with a contiguous last axis");
    }
    return {a.data(), static_cast<int64_t>(a.strides(0) / sizeof(float)), static_cast<int64_t>(a.strides(1) / sizeof(float))};
}

// softmax(q kᵀ · scale + mask) v with the products on `operands` (null: float32 through the process's cblas_sgemm).
inline py::array_t<float> bound_attention(const FloatHeads& q, const FloatHeads& k, const FloatHeads& v, float scale,
                                          const std::optional<FloatHeads>& bias, int64_t causal_offset, int64_t shared,
                                          const Operands* operands) {
    if (q.ndim() != 3 || k.ndim() != 3) throw std::invalid_argument("q, k, v must be [heads, rows, dim]");
    AttentionInput in{};
    in.heads = static_cast<int>(q.shape(0));
    in.length = static_cast<int>(q.shape(1));
    in.dim = static_cast<int>(q.shape(2));
    in.kv_heads = static_cast<int>(k.shape(0));
    in.span = static_cast<int>(k.shape(1));
    in.q = heads_view(q, "q", in.dim);
    in.k = heads_view(k, "k", in.dim);
    in.v = heads_view(v, "v", in.dim);
    if (in.kv_heads < 1 || in.heads % in.kv_heads != 0 || v.shape(0) != in.kv_heads || v.shape(1) != in.span ||
        in.span < 1) {
        throw std::invalid_argument("k and v must be [kv_heads, span, dim], span >= 1, kv_heads dividing heads");
    }
    in.scale = scale;
    in.causal_offset = causal_offset;
    in.operands = operands;
    if (bias) {
        if (bias->ndim() != 2 || bias->shape(0) != in.length || bias->shape(1) != in.span ||
            (in.span > 1 && bias->strides(1) != sizeof(float)) || bias->strides(0) % sizeof(float) != 0 || bias->strides(0) < 0) {
            throw std::invalid_argument("bias must be float32 [length, span] with contiguous rows");
        }
        if (shared < 0 || shared > in.span) throw std::invalid_argument("shared must be in [0, span]");
        in.shared = static_cast<int>(shared);
        in.bias = bias->data();
        in.bias_row_stride = static_cast<int64_t>(bias->strides(0) / sizeof(float));
    }
    py::array_t<float> out({in.heads, in.length, in.dim});
    float* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        attention(in, dst);
    }
    return out;
}

}  // namespace decide
