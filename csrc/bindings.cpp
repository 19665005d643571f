// decide._native: binds the token forest of csrc/trie.hpp and the CPU kernels of csrc/kernels.hpp. Only
// binding code here; the GIL is released around the C++ work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <vector>
#include <stdexcept>

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

decide::StridedHeads heads_view(const FloatArray& a, const char* name, int dim) {
    // (A stride along an axis of length 1 is meaningless: numpy and MLX may report 0 there.)
    if (a.ndim() != 3 || a.shape(2) != dim || (dim > 1 && a.strides(2) != sizeof(float)) ||
        a.strides(1) % sizeof(float) != 0 || a.strides(0) % sizeof(float) != 0 || a.strides(1) < 0 || a.strides(0) < 0) {
        throw std::invalid_argument(std::string(name) + " must be float32 [heads, rows, dim] with a contiguous last axis");
    }
    return {a.data(), static_cast<int64_t>(a.strides(0) / sizeof(float)), static_cast<int64_t>(a.strides(1) / sizeof(float))};
}

py::array_t<float> attention(const FloatArray& q, const FloatArray& k, const FloatArray& v, float scale,
                             const std::optional<FloatArray>& bias, int64_t causal_offset, int64_t shared) {
    if (!decide::attention_available()) throw std::runtime_error("no cblas_sgemm in the process (see decide.runtime)");
    if (q.ndim() != 3 || k.ndim() != 3) throw std::invalid_argument("q, k, v must be [heads, rows, dim]");
    decide::AttentionInput in{};
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
        decide::attention(in, dst);
    }
    return out;
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
    m.def("attention_available", &decide::attention_available,
          "True when a cblas_sgemm is in the process's global symbol scope (decide.runtime loaded a BLAS).");
    m.def("attention", &attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("scale"), py::arg("bias"),
          py::arg("causal_offset") = 0, py::arg("shared") = 0,
          "softmax(q kᵀ · scale + mask) v for one sequence: q float32 [heads, length, dim], k and v [kv_heads, span, "
          "dim]; mask = bias [length, span] (0 / -inf; keys [0, shared) are seen by every query), or with bias None "
          "causal (query i sees keys j <= i + causal_offset). Returns float32 [heads, length, dim].");
}
