#include "bf16_linear.hpp"
#include "onednn_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <unordered_map>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

namespace decide {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

}  // namespace

// Vectorized for the widest ISA the CPU has, chosen at load (the default build targets baseline x86-64).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DECIDE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DECIDE_CLONES
#endif

DECIDE_CLONES void to_bf16(const float* in, uint16_t* out, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &in[i], 4);
        const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
        const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
        out[i] = static_cast<uint16_t>(nan ? (bits >> 16) | 0x40u : rounded >> 16);
    }
}

DECIDE_CLONES void from_bf16(const uint16_t* in, float* out, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
        std::memcpy(&out[i], &bits, 4);
    }
}

DECIDE_CLONES void round_to_bf16(const float* in, float* out, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &in[i], 4);
        const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
        const uint32_t rounded = nan ? bits | 0x400000u : (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
        std::memcpy(&out[i], &rounded, 4);
    }
}

size_t operand_size() { return operand_type() == dt::bf16 ? 2 : 4; }

void to_operands(const float* in, void* out, size_t n) {
    if (operand_type() == dt::bf16) {
        to_bf16(in, static_cast<uint16_t*>(out), n);
    } else {
        round_to_bf16(in, static_cast<float*>(out), n);
    }
}

namespace {

// A primitive per row count, shared by the linear layers of one shape. oneDNN's run-time row count
// (DNNL_RUNTIME_DIM_VAL) gets its gemm:jit kernel, which ran 10–60% slower than the brgemm kernel a fixed
// row count gets at a request's 64–1,000 rows (on par above). The brgemm weight layout does not depend on
// the row count, so a weight is reordered once, into the layout a probe row count chooses.
constexpr memory::dim kProbeRows = 256;

struct Plan {
    dnnl::matmul matmul;
    memory::desc scratchpad;  // each calling thread brings its own (the library's is shared by all threads)
    memory::dim out;
};

memory::desc operands_desc(memory::dim rows, memory::dim cols, dt type = operand_type()) {
    return {{rows, cols}, type, tag::ab};
}
memory::desc outputs_desc(memory::dim rows, memory::dim cols) { return {{rows, cols}, dt::f32, tag::ab}; }
memory::desc bias_desc(memory::dim out) { return {{1, out}, dt::f32, tag::ab}; }

// An int8 weight (s8) takes s8 rows and its per-column scales; the bias of an int8 layer is added by the caller,
// after the rows' own scales.
dnnl::matmul::primitive_desc describe(memory::dim rows, const memory::desc& weights, bool biased) {
    const memory::dim in = weights.get_dims()[0], out = weights.get_dims()[1];
    const bool int8 = weights.get_data_type() == dt::s8;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (int8) attr.set_scales_mask(DNNL_ARG_WEIGHTS, 1 << 1);
    const auto src = operands_desc(rows, in, weights.get_data_type()), dst = outputs_desc(rows, out);
    return biased ? dnnl::matmul::primitive_desc(cpu_engine(), src, weights, bias_desc(out), dst, attr)
                  : dnnl::matmul::primitive_desc(cpu_engine(), src, weights, dst, attr);
}

// (rows, in, out, packed, biased, int8) -> its primitive.
using Shape = std::tuple<memory::dim, memory::dim, memory::dim, bool, bool, bool>;

Plan plan(const Shape& shape, const memory::desc& weights) {
    static PrimitiveCache<Shape, Plan> cache(1024);  // a request brings ~6 new shapes
    return cache.get(shape, [&] {
        const auto pd = describe(std::get<0>(shape), weights, std::get<4>(shape));
        return Plan{dnnl::matmul(pd), pd.scratchpad_desc(), std::get<2>(shape)};
    });
}

// Runs `p` on src (rows described by `src_desc`) into y, float32 [rows, out]; `args` hold the rest.
void execute(const Plan& p, const memory::desc& src_desc, void* src, float* y, std::unordered_map<int, memory> args) {
    auto& engine = cpu_engine();
    const memory::dim rows = src_desc.get_dims()[0];
    thread_local std::vector<uint8_t> scratch;
    scratch.resize(p.scratchpad.get_size());
    args.insert({DNNL_ARG_SRC, memory(src_desc, engine, src)});
    args.insert({DNNL_ARG_DST, memory(outputs_desc(rows, p.out), engine, y)});
    args.insert({DNNL_ARG_SCRATCHPAD, memory(p.scratchpad, engine, scratch.data())});
    dnnl::stream stream(engine);
    p.matmul.execute(stream, args);
    stream.wait();
}

}  // namespace

struct Bf16Linear::Impl {
    memory weight, bias;
    bool has_bias;
};

Bf16Linear::Bf16Linear(const float* w, int64_t out, int64_t in, const float* b, bool packed_)
    : out_features(out), in_features(in), packed(packed_), impl_(std::make_unique<Impl>()) {
    auto& engine = cpu_engine();
    // W [out, in] row-major is Wᵀ [in, out] in tag ba.
    const memory::desc wei_plain({in, out}, operand_type(), tag::ba);
    const memory::desc wei_any({in, out}, operand_type(), tag::any);
    impl_->has_bias = b != nullptr;
    impl_->weight = memory(packed ? describe(kProbeRows, wei_any, impl_->has_bias).weights_desc() : wei_plain, engine);
    if (packed) {
        std::vector<float> plain(static_cast<size_t>(out * in));  // room for either operand type
        to_operands(w, plain.data(), plain.size());
        memory plain_mem(wei_plain, engine, plain.data());
        dnnl::stream stream(engine);
        dnnl::reorder(plain_mem, impl_->weight).execute(stream, plain_mem, impl_->weight);
        stream.wait();
    } else {
        to_operands(w, impl_->weight.get_data_handle(), static_cast<size_t>(out * in));
    }
    if (b) {
        impl_->bias = memory(bias_desc(out), engine);
        std::memcpy(impl_->bias.get_data_handle(), b, static_cast<size_t>(out) * 4);
    }
}

Bf16Linear::~Bf16Linear() = default;

size_t Bf16Linear::weight_bytes() const { return impl_->weight.get_desc().get_size(); }

void Bf16Linear::weight(float* out) const {
    auto& engine = cpu_engine();
    memory plain({{in_features, out_features}, operand_type(), tag::ba}, engine);
    dnnl::stream stream(engine);
    dnnl::reorder(impl_->weight, plain).execute(stream, impl_->weight, plain);
    stream.wait();
    const size_t n = static_cast<size_t>(out_features * in_features);
    if (operand_type() == dt::bf16) {
        from_bf16(static_cast<const uint16_t*>(plain.get_data_handle()), out, n);
    } else {
        std::memcpy(out, plain.get_data_handle(), n * 4);
    }
}

void Bf16Linear::rows(const int64_t* ids, size_t n, float* out) const {
    const void* table = impl_->weight.get_data_handle();
    const size_t width = static_cast<size_t>(in_features);
    for (size_t i = 0; i < n; ++i) {
        if (operand_type() == dt::bf16) {
            from_bf16(static_cast<const uint16_t*>(table) + ids[i] * width, out + i * width, width);
        } else {
            std::memcpy(out + i * width, static_cast<const float*>(table) + ids[i] * width, width * 4);
        }
    }
}

void Bf16Linear::forward(const float* x, int64_t rows, int64_t x_stride, float* y) const {
    if (rows == 0) return;
    const Plan p = plan({rows, in_features, out_features, packed, impl_->has_bias, false}, impl_->weight.get_desc());
    thread_local std::vector<float> xb;  // room for either operand type
    xb.resize(static_cast<size_t>(rows * in_features));
    auto* operands = reinterpret_cast<uint8_t*>(xb.data());
    const size_t row_bytes = static_cast<size_t>(in_features) * operand_size();
    for (int64_t r = 0; r < rows; ++r) to_operands(x + r * x_stride, operands + r * row_bytes, in_features);
    std::unordered_map<int, memory> args = {{DNNL_ARG_WEIGHTS, impl_->weight}};
    if (impl_->has_bias) args.insert({DNNL_ARG_BIAS, impl_->bias});
    execute(p, operands_desc(rows, in_features), xb.data(), y, std::move(args));
}

namespace {

// A row times `factors` (if given) in int8 with its own scale (max |x| / 127): x · factors ≈ scale · out.
DECIDE_CLONES float quantize_row(const float* in, const float* factors, int8_t* out, size_t n) {
    float peak = 0.0f;
    if (factors) {
#pragma omp simd reduction(max : peak)
        for (size_t i = 0; i < n; ++i) peak = std::max(peak, std::fabs(in[i] * factors[i]));
    } else {
#pragma omp simd reduction(max : peak)
        for (size_t i = 0; i < n; ++i) peak = std::max(peak, std::fabs(in[i]));
    }
    const float scale = peak > 0.0f ? peak / 127.0f : 1.0f, inverse = 1.0f / scale;
    if (factors) {
#pragma omp simd
        for (size_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(std::nearbyint(in[i] * factors[i] * inverse));
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(std::nearbyint(in[i] * inverse));
    }
    return scale;
}

DECIDE_CLONES void rescale_rows(float* y, const float* row_scales, const float* bias, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        float* row = y + r * cols;
        const float s = row_scales[r];
        if (bias) {
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) row[c] = row[c] * s + bias[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) row[c] *= s;
        }
    }
}

}  // namespace

struct Int8Linear::Impl {
    memory weight, scales;
    std::vector<float> bias, unsmooth;  // unsmooth: 1 / smooth, what each input row is multiplied by
};

Int8Linear::Int8Linear(const float* w, int64_t out, int64_t in, const float* b, const float* smooth)
    : out_features(out), in_features(in), impl_(std::make_unique<Impl>()) {
    auto& engine = cpu_engine();
    const memory::desc wei_plain({in, out}, dt::s8, tag::ba);  // W [out, in] row-major
    impl_->weight = memory(describe(kProbeRows, {{in, out}, dt::s8, tag::any}, false).weights_desc(), engine);
    impl_->scales = memory({{out}, dt::f32, tag::a}, engine);
    auto* scales = static_cast<float*>(impl_->scales.get_data_handle());
    std::vector<int8_t> plain(static_cast<size_t>(out * in));
    for (int64_t o = 0; o < out; ++o) scales[o] = quantize_row(w + o * in, smooth, plain.data() + o * in, in);
    memory plain_mem(wei_plain, engine, plain.data());
    dnnl::stream stream(engine);
    dnnl::reorder(plain_mem, impl_->weight).execute(stream, plain_mem, impl_->weight);
    stream.wait();
    if (b) impl_->bias.assign(b, b + out);
    if (smooth) {
        impl_->unsmooth.resize(static_cast<size_t>(in));
        for (int64_t i = 0; i < in; ++i) impl_->unsmooth[i] = 1.0f / smooth[i];
    }
}

Int8Linear::~Int8Linear() = default;

size_t Int8Linear::weight_bytes() const {
    return impl_->weight.get_desc().get_size() + static_cast<size_t>(out_features) * 4;
}

void Int8Linear::forward(const float* x, int64_t rows, int64_t x_stride, float* y) const {
    if (rows == 0) return;
    const Plan p = plan({rows, in_features, out_features, true, false, true}, impl_->weight.get_desc());
    thread_local std::vector<int8_t> xq;
    thread_local std::vector<float> row_scales;
    xq.resize(static_cast<size_t>(rows * in_features));
    row_scales.resize(static_cast<size_t>(rows));
    const float* unsmooth = impl_->unsmooth.empty() ? nullptr : impl_->unsmooth.data();
    for (int64_t r = 0; r < rows; ++r)
        row_scales[r] = quantize_row(x + r * x_stride, unsmooth, xq.data() + r * in_features, in_features);
    execute(p, operands_desc(rows, in_features, dt::s8), xq.data(), y,
            {{DNNL_ARG_WEIGHTS, impl_->weight}, {DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, impl_->scales}});
    rescale_rows(y, row_scales.data(), impl_->bias.empty() ? nullptr : impl_->bias.data(), rows, out_features);
}

}  // namespace decide
