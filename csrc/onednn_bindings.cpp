// decide._onednn: binds csrc/bf16_linear.hpp. Only binding code here; the GIL is released around the C++ work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "attention_binding.hpp"
#include "bf16_gemm.hpp"
#include "onednn_engine.hpp"
#include "bf16_linear.hpp"
#include "rms_norm.hpp"

namespace py = pybind11;

namespace {

using Float32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Uint16Array = py::array_t<uint16_t, py::array::c_style | py::array::forcecast>;

// A weight [out, in] and its optional bias [out], checked; the bias's data or null.
const float* checked(const Float32Array& weight, const std::optional<Float32Array>& bias) {
    if (weight.ndim() != 2) throw std::invalid_argument("weight must be [out, in]");
    if (bias && (bias->ndim() != 1 || bias->shape(0) != weight.shape(0))) throw std::invalid_argument("bias must be [out]");
    return bias ? bias->data() : nullptr;
}

std::unique_ptr<decide::Bf16Linear> make_linear(const Float32Array& weight, const std::optional<Float32Array>& bias,
                                                bool packed) {
    const float* b = checked(weight, bias);
    const auto out = weight.shape(0), in = weight.shape(1);
    py::gil_scoped_release nogil;
    return std::make_unique<decide::Bf16Linear>(weight.data(), out, in, b, packed);
}

std::unique_ptr<decide::Int8Linear> make_int8_linear(const Float32Array& weight, const std::optional<Float32Array>& bias,
                                                      const std::optional<Float32Array>& smooth) {
    const float* b = checked(weight, bias);
    const auto out = weight.shape(0), in = weight.shape(1);
    if (smooth && (smooth->ndim() != 1 || smooth->shape(0) != in)) throw std::invalid_argument("smooth must be [in]");
    const float* f = smooth ? smooth->data() : nullptr;
    for (py::ssize_t i = 0; f && i < in; ++i)
        if (!(f[i] > 0.0f) || !std::isfinite(f[i])) throw std::invalid_argument("smooth must be positive and finite");
    py::gil_scoped_release nogil;
    return std::make_unique<decide::Int8Linear>(weight.data(), out, in, b, f);
}

// x: float32 [..., in] whose last axis is contiguous and whose rows are evenly strided.
template <class Linear>
py::array_t<float> forward(const Linear& self, const py::array_t<float>& x) {
    if (x.ndim() < 1 || x.shape(x.ndim() - 1) != self.in_features)
        throw std::invalid_argument("x must be [..., " + std::to_string(self.in_features) + "]");
    py::array_t<float, py::array::c_style> flat = py::array_t<float, py::array::c_style | py::array::forcecast>(x);
    const int64_t rows = flat.size() / self.in_features;
    std::vector<py::ssize_t> shape(flat.shape(), flat.shape() + flat.ndim());
    shape.back() = self.out_features;
    py::array_t<float> y(shape);
    const float* in = flat.data();
    float* out = y.mutable_data();
    {
        py::gil_scoped_release nogil;
        if (rows) self.forward(in, rows, self.in_features, out);
    }
    return y;
}

py::array_t<float> rows(const decide::Bf16Linear& self, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& ids) {
    if (self.packed) throw std::invalid_argument("rows() needs a Bf16Linear built with packed=False");
    const int64_t* p = ids.data();
    for (py::ssize_t i = 0; i < ids.size(); ++i)
        if (p[i] < 0 || p[i] >= self.out_features) throw std::out_of_range("row id out of range");
    std::vector<py::ssize_t> shape(ids.shape(), ids.shape() + ids.ndim());
    shape.push_back(self.in_features);
    py::array_t<float> out(shape);
    float* o = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        self.rows(p, static_cast<size_t>(ids.size()), o);
    }
    return out;
}

py::array_t<float> rms_norm(const Float32Array& x, const Float32Array& weight, float eps) {
    if (x.ndim() < 1 || weight.ndim() != 1 || x.shape(x.ndim() - 1) != weight.shape(0))
        throw std::invalid_argument("x must be [..., dim] and weight [dim]");
    py::array_t<float> out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
    const int64_t dim = weight.shape(0), rows = dim ? x.size() / dim : 0;
    const float *in = x.data(), *w = weight.data();
    float* o = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        decide::rms_norm(in, w, eps, rows, dim, o);
    }
    return out;
}

py::array_t<uint16_t> to_bf16(const Float32Array& x) {
    py::array_t<uint16_t> out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
    decide::to_bf16(x.data(), out.mutable_data(), static_cast<size_t>(x.size()));
    return out;
}

py::array_t<float> from_bf16(const Uint16Array& x) {
    py::array_t<float> out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
    decide::from_bf16(x.data(), out.mutable_data(), static_cast<size_t>(x.size()));
    return out;
}

// The attention kernel's one-pass softmax numerators (csrc/kernels.cpp), where the CPU has them.
py::object softmax_numerators(const Float32Array& scores, float top, int64_t width) {
    const decide::NumeratorsFn numerators = decide::bf16_numerators();
    if (!numerators) return py::none();
    if (scores.ndim() != 1 || width < scores.size()) throw std::invalid_argument("scores must be [n], n <= width");
    py::array_t<uint16_t> out(width);
    const float total = numerators(scores.data(), static_cast<int>(scores.size()), top, out.mutable_data(), static_cast<int>(width));
    return py::make_tuple(out, total);
}

}  // namespace

PYBIND11_MODULE(_onednn, m) {
    m.doc() = "bfloat16 linear layers and attention products through oneDNN, and the float32 RMSNorm around them";
#ifdef DECIDE_VERSION
    m.attr("__version__") = DECIDE_VERSION;
#endif
    py::class_<decide::Bf16Linear>(m, "Bf16Linear")
        .def(py::init(&make_linear), py::arg("weight"), py::arg("bias") = py::none(), py::arg("packed") = true,
             "weight float32 [out, in] (and bias [out]) stored once as bfloat16; packed: in oneDNN's preferred "
             "layout, else as plain rows that rows() reads")
        .def("rows", &rows, py::arg("ids"), "rows ids of an unpacked weight as float32 [..., in]")
        .def(
            "weight",
            [](const decide::Bf16Linear& self) {
                py::array_t<float> out({self.out_features, self.in_features});
                float* o = out.mutable_data();
                {
                    py::gil_scoped_release nogil;
                    self.weight(o);
                }
                return out;
            },
            "the weight as held (bf16-rounded) as float32 [out, in]")
        .def("__call__", &forward<decide::Bf16Linear>, py::arg("x"), "x float32 [..., in] -> float32 [..., out]: x Wᵀ + b")
        .def_readonly("out_features", &decide::Bf16Linear::out_features)
        .def_readonly("in_features", &decide::Bf16Linear::in_features)
        .def_property_readonly("weight_bytes", &decide::Bf16Linear::weight_bytes);
    py::class_<decide::Int8Linear>(m, "Int8Linear")
        .def(py::init(&make_int8_linear), py::arg("weight"), py::arg("bias") = py::none(), py::arg("smooth") = py::none(),
             "weight float32 [out, in] (and bias [out]) stored once as int8 with a scale per output row; smooth "
             "[in]: input channel i divided by smooth[i] (and W's column i multiplied by it) before quantizing")
        .def("__call__", &forward<decide::Int8Linear>, py::arg("x"),
             "x float32 [..., in] -> float32 [..., out]: x Wᵀ + b, each row of x and of W quantized to int8")
        .def_readonly("out_features", &decide::Int8Linear::out_features)
        .def_readonly("in_features", &decide::Int8Linear::in_features)
        .def_property_readonly("weight_bytes", &decide::Int8Linear::weight_bytes);
    m.def(
        "attention",
        [](const decide::FloatHeads& q, const decide::FloatHeads& k, const decide::FloatHeads& v, float scale,
           const std::optional<decide::FloatHeads>& bias, int64_t causal_offset, int64_t shared) {
            return decide::bound_attention(q, k, v, scale, bias, causal_offset, shared, decide::bf16_operands());
        },
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("scale"), py::arg("bias"), py::arg("causal_offset") = 0,
        py::arg("shared") = 0,
        "decide._native.attention with its products in bfloat16 (q · scale, k, and the softmax numerators rounded "
        "to bf16, float32 accumulation; the softmax and the forest's own keys' weighted sums in float32)");
    m.def("rms_norm", &rms_norm, py::arg("x"), py::arg("weight"), py::arg("eps"),
          "x / sqrt(mean(x², last axis) + eps) · weight, float32 [..., dim]");
    m.def(
        "has_bf16_kernels", [] { return decide::operand_type() == dnnl::memory::data_type::bf16; },
        "whether oneDNN multiplies bf16 on this CPU; if not, the bf16-rounded operands run as float32 GEMMs");
    m.def("softmax_numerators", &softmax_numerators, py::arg("scores"), py::arg("top"), py::arg("width"),
          "(bf16 bits [width] of exp(scores - top), 0 where a score is -inf and past the scores; their float32 sum) "
          "as the bf16 attention computes them in one pass; None where the CPU lacks AVX512-BF16 (two passes then)");
    m.def("to_bf16", &to_bf16, py::arg("x"), "float32 -> bfloat16 bits (uint16), rounded to nearest even");
    m.def("from_bf16", &from_bf16, py::arg("x"), "bfloat16 bits (uint16) -> float32, exact");
}
