#include "bf16_gemm.hpp"

#include <omp.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "bf16_linear.hpp"
#include "onednn_engine.hpp"

namespace decide {

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

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

// (m, n, k, trans_b, ldc, accumulate) -> its primitive. A request's shapes repeat over the layers and
// tiles; creating one costs far more than running it at these sizes.
using Shape = std::tuple<int, int, int, bool, int, bool>;

struct Primitive {
    dnnl::matmul matmul;
    memory::desc scratchpad;  // each thread brings its own: the library's would be one buffer for all threads
};

Primitive primitive(const Shape& shape) {
    static std::mutex lock;
    static std::map<Shape, Primitive> cache;
    constexpr size_t kCapacity = 4096;  // distinct shapes kept; then started afresh
    const std::lock_guard<std::mutex> held(lock);
    if (auto hit = cache.find(shape); hit != cache.end()) return hit->second;
    const auto [m, n, k, trans_b, ldc, accumulate] = shape;
    memory::desc src({m, k}, operand_type(), tag::ab);
    memory::desc wei({k, n}, operand_type(), trans_b ? tag::ba : tag::ab);
    memory::desc dst({m, n}, dt::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
    }
    if (cache.size() >= kCapacity) cache.clear();
    const dnnl::matmul::primitive_desc pd(cpu_engine(), src, wei, dst, attr);
    return cache.emplace(shape, Primitive{dnnl::matmul(pd), pd.scratchpad_desc()}).first->second;
}

// rows × cols floats at a row stride of `stride`, rounded to bf16 as contiguous operands.
void rows_to_operands(const float* x, int rows, int cols, int stride, std::vector<float>& out) {
    out.resize(static_cast<size_t>(rows) * cols);  // room for either operand type
    auto* bytes = reinterpret_cast<uint8_t*>(out.data());
    const size_t row_bytes = static_cast<size_t>(cols) * operand_size();
    for (int r = 0; r < rows; ++r) to_operands(x + static_cast<int64_t>(r) * stride, bytes + r * row_bytes, cols);
}

}  // namespace

void bf16_gemm(bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta,
               float* c, int ldc) {
    thread_local std::vector<float> a16, b16;
    rows_to_operands(a, m, k, lda, a16);
    if (trans_b) {
        rows_to_operands(b, n, k, ldb, b16);
    } else {
        rows_to_operands(b, k, n, ldb, b16);
    }
    const bool accumulate = beta != 0.0f;
    const OneOmpThread one_thread;
    const Primitive p = primitive({m, n, k, trans_b, ldc, accumulate});
    auto& engine = cpu_engine();
    memory src({{m, k}, operand_type(), tag::ab}, engine, a16.data());
    memory wei({{k, n}, operand_type(), trans_b ? tag::ba : tag::ab}, engine, b16.data());
    memory dst({{m, n}, dt::f32, memory::dims{ldc, 1}}, engine, c);
    thread_local std::vector<uint8_t> scratch;
    scratch.resize(p.scratchpad.get_size());
    memory scratchpad(p.scratchpad, engine, scratch.data());
    dnnl::stream stream(engine);
    p.matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}});
    stream.wait();
}

}  // namespace decide
