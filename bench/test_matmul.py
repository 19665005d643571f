"""The machine's practical float32 ceiling: a model-shaped matmul through MLX and the same BLAS.

(512 × hidden) @ (hidden × intermediate) is the MLP up-projection of a 512-token pass, the
largest matmul of the forward; the summary puts each path's achieved GFLOP/s next to it.
"""

from __future__ import annotations

from decide.runtime import mx

TOKENS = 512


def test_matmul_ceiling(benchmark, loaded) -> None:
    args = loaded.model.args
    m, k, n = TOKENS, args.hidden_size, args.intermediate_size
    a = mx.random.normal((m, k), key=mx.random.key(0)).astype(mx.float32)
    b = mx.random.normal((k, n), key=mx.random.key(1)).astype(mx.float32)
    mx.eval(a, b)

    def product() -> mx.array:
        c = a @ b
        mx.eval(c)
        return c

    out = benchmark.pedantic(product, rounds=30, warmup_rounds=3)
    assert mx.allclose(out[:4], a[:4] @ b, atol=1e-3).item()  # the same product, row by row
    benchmark.group = "matmul"
    benchmark.extra_info.update(
        {"model": loaded.model_id, "case": "matmul", "path": "ceiling", "shape": [m, k, n], "flops": 2.0 * m * k * n}
    )
