#include "bf16_gemm.hpp"

#include <omp.h>

#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "bf16_linear.hpp"
#include "onednn_engine.hpp"

namespace decide {

namespace {

using dnnl::memory;
using dt = memory::data_type;

// oneDNN's OpenMP threads are those of the calling thread's team: one, for the life of the object.
class OneOmpThread {
   public:
    OneOmpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
    ~OneOmpThread() { omp_set_num_threads(saved_); }
    OneOmpThread(const OneOmpThread&) = delete;
    OneOmpThread& operator=(const OneOmpThread&) = delete;

   private:
    int saved_;
};

// (m, n, k, trans_b, lda, ldb, ldc, accumulate) -> its primitive.
using Shape = std::tuple<int, int, int, bool, int, int, int, bool>;

struct Primitive {
    dnnl::matmul matmul;
    memory::desc src, weights, dst;
    memory::desc scratchpad;  // each thread brings its own: the library's would be one buffer for all threads
};

Primitive make(const Shape& shape) {
    const auto [m, n, k, trans_b, lda, ldb, ldc, accumulate] = shape;
    const memory::desc src({m, k}, operand_type(), memory::dims{lda, 1});
    const memory::desc wei({k, n}, operand_type(), trans_b ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    const memory::desc dst({m, n}, dt::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(cpu_engine(), src, wei, dst, attr);
    return Primitive{dnnl::matmul(pd), src, wei, dst, pd.scratchpad_desc()};
}

Primitive primitive(const Shape& shape) {
    static PrimitiveCache<Shape, Primitive> cache(4096);
    return cache.get(shape, [&] { return make(shape); });
}

void operand_gemm(bool trans_b, int m, int n, int k, const void* a, int lda, const void* b, int ldb, float beta,
                  float* c, int ldc) {
    const OneOmpThread one_thread;
    const Primitive p = primitive({m, n, k, trans_b, lda, ldb, ldc, beta != 0.0f});
    auto& engine = cpu_engine();
    memory src(p.src, engine, const_cast<void*>(a));
    memory wei(p.weights, engine, const_cast<void*>(b));
    memory dst(p.dst, engine, c);
    thread_local std::vector<uint8_t> scratch;
    scratch.resize(p.scratchpad.get_size());
    memory scratchpad(p.scratchpad, engine, scratch.data());
    dnnl::stream stream(engine);
    p.matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}});
    stream.wait();
}

}  // namespace

const Operands* bf16_operands() {
    static const Operands operands{operand_size(), &to_operands, &operand_gemm,
                                   operand_size() == 2 ? bf16_numerators() : nullptr};
    return &operands;
}

}  // namespace decide
