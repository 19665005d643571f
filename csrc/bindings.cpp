// decide._native: binds the token forest of csrc/trie.hpp and the CPU kernels of csrc/kernels.hpp. Only
// binding code here; the GIL is released around the C++ work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <vector>
#include <stdexcept>

#include "attention_binding.hpp"
#include "kernels.hpp"
#include "trie.hpp"

namespace py = pybind11;

namespace {

using Int32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

decide::Int32View view(const Int32Array& a, const char* name) {
    if (a.ndim() != 1) throw std::invalid_argument(std::string(name) + " must be one-dimensional");
    return {a.data(), static_cast<size_t>(a.size())};
}

// A numpy view of a vector owned by `owner` (the bound Forest): no copy, and the array keeps the Forest alive.
template <typename T>
py::array_t<T> owned(const py::object& owner, const std::vector<T>& v) {
    return py::array_t<T>({static_cast<py::ssize_t>(v.size())}, {static_cast<py::ssize_t>(sizeof(T))}, v.data(),
                          owner);
}

template <typename T>
auto array_field(std::vector<T> decide::Forest::*field) {
    return [field](const py::object& self) { return owned(self, self.cast<const decide::Forest&>().*field); };
}

decide::Forest build_forest(const Int32Array& prompt_tokens, const Int32Array& prompt_offsets,
                            const Int32Array& cand_tokens, const Int32Array& cand_offsets,
                            const Int32Array& question_cand_offsets, int64_t prefix_len) {
    decide::ForestInput in;
    in.prompts = {view(prompt_tokens, "prompt_tokens"), view(prompt_offsets, "prompt_offsets")};
    in.candidates = {view(cand_tokens, "cand_tokens"), view(cand_offsets, "cand_offsets")};
    in.question_cand_offsets = view(question_cand_offsets, "question_cand_offsets");
    in.prefix_len = prefix_len;
    py::gil_scoped_release nogil;
    return decide::build_forest(in);
}

py::array_t<bool> ancestor_mask(const Int32Array& parents, py::ssize_t start, std::optional<py::ssize_t> stop) {
    const auto nodes = view(parents, "parents");
    const py::ssize_t end = stop.value_or(static_cast<py::ssize_t>(nodes.size));
    if (start < 0 || end < start) throw std::invalid_argument("ancestor_mask needs 0 <= start <= stop");
    py::array_t<bool> mask({end - start, end});
    auto* out = reinterpret_cast<uint8_t*>(mask.mutable_data());
    {
        py::gil_scoped_release nogil;
        decide::ancestor_mask(nodes, static_cast<size_t>(start), static_cast<size_t>(end), out);
    }
    return mask;
}

using FloatArray = py::array_t<float, 0>;  // float32 as it comes, strides kept (no copy)

py::array_t<float> attention(const FloatArray& q, const FloatArray& k, const FloatArray& v, float scale,
                             const std::optional<FloatArray>& bias, int64_t causal_offset, int64_t shared) {
    if (!decide::attention_available()) throw std::runtime_error("no cblas_sgemm in the process (see decide.runtime)");
    return decide::bound_attention(q, k, v, scale, bias, causal_offset, shared, nullptr);
}

py::array_t<float> silu_product(const FloatArray& gate, const FloatArray& up) {
    const auto c_order = py::array::c_style;
    if (!(gate.flags() & c_order) || !(up.flags() & c_order) || gate.ndim() != up.ndim() ||
        !std::equal(gate.shape(), gate.shape() + gate.ndim(), up.shape())) {
        throw std::invalid_argument("gate and up must be C-contiguous float32 arrays of one shape");
    }
    py::array_t<float> out(std::vector<py::ssize_t>(gate.shape(), gate.shape() + gate.ndim()));
    float* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        decide::silu_product(gate.data(), up.data(), dst, static_cast<size_t>(gate.size()));
    }
    return out;
}

using CFloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

py::array_t<float> rope(const FloatArray& x, const CFloatArray& cos, const CFloatArray& sin, int dims, bool traditional) {
    if (x.ndim() != 3) throw std::invalid_argument("x must be float32 [heads, length, dim]");
    const int heads = static_cast<int>(x.shape(0)), length = static_cast<int>(x.shape(1)), dim = static_cast<int>(x.shape(2));
    const auto view = decide::heads_view(x, "x", dim);
    if (dims < 2 || dims % 2 != 0 || dims > dim) throw std::invalid_argument("dims must be even, in [2, dim]");
    for (const auto* table : {&cos, &sin}) {
        if (table->ndim() != 2 || table->shape(0) != length || table->shape(1) != dims / 2) {
            throw std::invalid_argument("cos and sin must be float32 [length, dims / 2]");
        }
    }
    py::array_t<float> out({heads, length, dim});
    float* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        decide::rope(view, heads, length, dim, cos.data(), sin.data(), dims, traditional, dst);
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "Native core of decide: the token forest (trie) of a request, and CPU attention.";
    m.attr("__version__") = DECIDE_VERSION;

    py::class_<decide::Forest>(m, "Forest", "A packed token forest; arrays are read-only views owned by it.")
        .def_readonly("prefix_len", &decide::Forest::prefix_len)
        .def_property_readonly("tokens", array_field(&decide::Forest::tokens))
        .def_property_readonly("parents", array_field(&decide::Forest::parents))
        .def_property_readonly("positions", array_field(&decide::Forest::positions))
        .def_property_readonly("rows", array_field(&decide::Forest::rows))
        .def_property_readonly("row_needs_lse", array_field(&decide::Forest::row_needs_lse))
        .def_property_readonly("pair_rows", array_field(&decide::Forest::pair_rows))
        .def_property_readonly("pair_tokens", array_field(&decide::Forest::pair_tokens))
        .def_property_readonly("cand_pair_offsets", array_field(&decide::Forest::cand_pair_offsets))
        .def_property_readonly("prompt_last_nodes", array_field(&decide::Forest::prompt_last_nodes))
        .def_property_readonly("num_nodes", &decide::Forest::num_nodes)
        .def_readonly("prompt_nodes", &decide::Forest::prompt_nodes)
        .def_property_readonly("candidate_nodes", &decide::Forest::candidate_nodes);

    m.def("build_forest", &build_forest, py::arg("prompt_tokens"), py::arg("prompt_offsets"), py::arg("cand_tokens"),
          py::arg("cand_offsets"), py::arg("question_cand_offsets"), py::arg("prefix_len") = 0,
          "Build the token forest of Q prompts and their candidates (CSR int32 arrays). Raises ValueError on "
          "malformed input (empty candidate, prefix_len too large, prompts not sharing the prefix, ...).");
    m.def("ancestor_mask", &ancestor_mask, py::arg("parents"), py::arg("start") = 0, py::arg("stop") = py::none(),
          "bool[stop - start, stop]: mask[i - start, j] = node j is an ancestor-or-self of node i.");
    m.def("silu_product", &silu_product, py::arg("gate"), py::arg("up"),
          "silu(gate) * up elementwise (C-contiguous float32 arrays of one shape).");
    m.def("rope", &rope, py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("dims"), py::arg("traditional"),
          "x [heads, length, dim] (float32, contiguous last axis) with the first `dims` features of row i rotated by "
          "row i of cos and sin [length, dims / 2]: pairs (j, j + dims / 2), or (2j, 2j + 1) when traditional. "
          "Returns a contiguous copy.");
    m.def("attention_available", &decide::attention_available,
          "True when a cblas_sgemm is in the process's global symbol scope (decide.runtime loaded a BLAS).");
    m.def("attention", &attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("scale"), py::arg("bias"),
          py::arg("causal_offset") = 0, py::arg("shared") = 0,
          "softmax(q kᵀ · scale + mask) v for one sequence: q float32 [heads, length, dim], k and v [kv_heads, span, "
          "dim]; mask = bias [length, span] (0 / -inf; keys [0, shared) are seen by every query), or with bias None "
          "causal (query i sees keys j <= i + causal_offset). Returns float32 [heads, length, dim].");
}
