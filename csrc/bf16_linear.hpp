// A linear layer y = x Wᵀ + b with W stored once as bfloat16, run by oneDNN as a bf16 × bf16 →
// float32-accumulate GEMM (AVX512-BF16 / AMX where the CPU has them: oneDNN's JIT picks the
// kernel at run time). x and y stay float32: x is rounded to bf16 per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace decide {

// float32 → bfloat16, rounded to nearest even (NaN stays NaN).
void to_bf16(const float* in, uint16_t* out, size_t n);
void from_bf16(const uint16_t* in, float* out, size_t n);
// float32 → float32 holding the bf16-rounded value.
void round_to_bf16(const float* in, float* out, size_t n);

// float32 rounded to bf16, stored as the GEMMs' operands are (operand_type() in onednn_engine.hpp):
// bf16 bits, or float32 on a CPU without oneDNN bf16 kernels; operand_size() bytes each.
void to_operands(const float* in, void* out, size_t n);
size_t operand_size();

class Bf16Linear {
   public:
    // weight: float32 [out, in] row-major; bias: float32 [out] or null. packed: reordered into the
    // layout oneDNN's GEMM prefers; else kept as bf16 [out, in] rows, which `rows` can read (an
    // embedding table that is also its model's head).
    Bf16Linear(const float* weight, int64_t out_features, int64_t in_features, const float* bias, bool packed);
    ~Bf16Linear();
    Bf16Linear(const Bf16Linear&) = delete;
    Bf16Linear& operator=(const Bf16Linear&) = delete;

    // x: float32 [rows, in] (row stride x_stride elements); y: float32 [rows, out], contiguous.
    void forward(const float* x, int64_t rows, int64_t x_stride, float* y) const;
    // The weight as held (bf16-rounded), widened to float32: out [out, in].
    void weight(float* out) const;
    // Rows ids[i] of an unpacked weight, widened to float32: out [n, in].
    void rows(const int64_t* ids, size_t n, float* out) const;

    int64_t out_features, in_features;
    bool packed;
    size_t weight_bytes() const;

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// A linear layer with W in int8 (a scale per output row, max |w| / 127) run by oneDNN as an int8 GEMM
// (AVX512-VNNI / AMX-INT8 where the CPU has them): each call quantizes each row of x likewise (a
// scale per row), and y = (x_q W_qᵀ) · both scales + b in float32. About 2x the bf16 GEMM's speed.
// smooth (float32 [in], positive, or null) moves an input channel's range into the weight (SmoothQuant):
// W's column i is multiplied by smooth[i] and x's by 1 / smooth[i] before they are quantized.
class Int8Linear {
   public:
    Int8Linear(const float* weight, int64_t out_features, int64_t in_features, const float* bias, const float* smooth);
    ~Int8Linear();
    Int8Linear(const Int8Linear&) = delete;
    Int8Linear& operator=(const Int8Linear&) = delete;

    void forward(const float* x, int64_t rows, int64_t x_stride, float* y) const;

    int64_t out_features, in_features;
    size_t weight_bytes() const;

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace decide
