"""The machine's practical matmul ceilings at the model's largest shape: float32 through MLX and the
same BLAS, bfloat16 through oneDNN (the bf16 backend's GEMM, decide/bf16.py), and int8 through oneDNN
(precision int8's GEMM, decide/int8.py).

(512 × hidden) @ (hidden × intermediate) is the MLP up-projection of a 512-token pass, the
largest matmul of the forward; the summary puts each path's achieved GFLOP/s next to its
precision's ceiling, and prints the CPU and its relevant flags.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

from decide import bf16
from decide.runtime import mx

TOKENS = 512
FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_info() -> dict:
    model = next(
        (line.partition(":")[2].strip() for line in _cpuinfo().splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    flags = bf16.cpu_flags()
    return {"cpu_model": model, "cpu_flags": [f for f in FLAGS if f in flags]}


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def _info(loaded, path: str, shape: tuple[int, int, int]) -> dict:
    m, k, n = shape
    return {"model": loaded.model_id, "case": "matmul", "path": path, "shape": list(shape), "flops": 2.0 * m * k * n}


def _shape(loaded) -> tuple[int, int, int]:
    args = loaded.model.args
    return TOKENS, args.hidden_size, args.intermediate_size


def test_matmul_ceiling(benchmark, loaded) -> None:
    m, k, n = _shape(loaded)
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
    benchmark.extra_info.update({**_info(loaded, "ceiling", (m, k, n)), **cpu_info()})


@pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")
def test_bf16_matmul_ceiling(benchmark, loaded) -> None:
    m, k, n = _shape(loaded)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)  # [out, in], as a linear layer holds it
    gemm = bf16._native().Bf16Linear(w)
    out = benchmark.pedantic(lambda: gemm(x), rounds=30, warmup_rounds=3)
    np.testing.assert_allclose(out[:4], x[:4] @ w.T, rtol=0, atol=0.05 * np.sqrt(k))  # bf16 inputs: ~3 digits
    benchmark.group = "matmul"
    benchmark.extra_info.update(_info(loaded, "ceiling_bf16", (m, k, n)))


@pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")
def test_int8_matmul_ceiling(benchmark, loaded) -> None:
    """The int8 GEMM (VNNI / AMX-INT8 where the CPU has them) of precision int8's linear layers, input quantized per row."""
    m, k, n = _shape(loaded)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    gemm = bf16._native().Int8Linear(w)
    out = benchmark.pedantic(lambda: gemm(x), rounds=30, warmup_rounds=3)
    np.testing.assert_allclose(out[:4], x[:4] @ w.T, rtol=0, atol=0.1 * np.sqrt(k))  # two int8 roundings
    benchmark.group = "matmul"
    benchmark.extra_info.update(_info(loaded, "ceiling_int8", (m, k, n)))
