"""decide.runtime: the BLAS swap under MLX, and the device/dtype choice."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from decide import runtime
from decide.runtime import mx

HAS_SCIPY_OPENBLAS = importlib.util.find_spec("scipy_openblas32") is not None
DEFAULT_BLAS = "DECIDE_BLAS" not in os.environ
VIA_SHIM = "_blas_shim" in runtime.BLAS
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="the BLAS swap is for Linux CPUs")


def _run(code: str, **env: str) -> str:
    """Run `code` in a fresh interpreter (the BLAS is chosen once per process); return stdout+stderr."""
    environ = {k: v for k, v in os.environ.items() if k != "DECIDE_BLAS"} | env
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=environ, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


@pytest.mark.parametrize(("m", "k", "n"), [(1, 64, 1), (7, 33, 5), (128, 256, 96), (300, 200, 257)])
@pytest.mark.parametrize("transpose", [False, True])
def test_float32_matmul_equals_numpy(m, k, n, transpose):
    rng = np.random.default_rng(m * k * n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose else (k, n)).astype(np.float32)
    got = mx.array(a) @ (mx.array(b).T if transpose else mx.array(b))
    expected = a.astype(np.float64) @ (b.T if transpose else b).astype(np.float64)
    np.testing.assert_allclose(np.array(got), expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_batched_and_strided_matmul_equals_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4, 40, 24)).astype(np.float32)
    b = rng.standard_normal((3, 4, 32, 24)).astype(np.float32)
    got = mx.array(a)[:, :, ::2] @ mx.array(b).swapaxes(-1, -2)
    expected = a[:, :, ::2].astype(np.float64) @ b.swapaxes(-1, -2).astype(np.float64)
    np.testing.assert_allclose(np.array(got), expected, rtol=1e-4, atol=1e-3)


def test_float64_and_complex64_matmul_equal_numpy():
    # cblas_dgemm and cblas_cgemm (complex alpha/beta passed by pointer) go through the same swap.
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((9, 17)), rng.standard_normal((17, 6))
    got = mx.array(a, dtype=mx.float64) @ mx.array(b, dtype=mx.float64)
    np.testing.assert_allclose(np.array(got), a @ b, rtol=1e-12, atol=1e-12)
    ca = (a + 1j * rng.standard_normal(a.shape)).astype(np.complex64)
    cb = (b - 1j * rng.standard_normal(b.shape)).astype(np.complex64)
    got = mx.array(ca) @ mx.array(cb)
    np.testing.assert_allclose(np.array(got), ca.astype(np.complex128) @ cb, rtol=1e-5, atol=1e-4)


def test_device_and_dtype():
    assert runtime.device() in ("cpu", "gpu")
    expected = mx.float32 if runtime.device() == "cpu" else mx.float16
    assert runtime.compute_dtype() == expected
    assert runtime.device() == ("cpu" if mx.default_device() == mx.cpu else "gpu")


@pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64", reason="oneDNN's wheels are for Linux x86-64"
)
def test_the_bfloat16_backend_is_built_where_its_wheels_exist() -> None:
    """pyproject builds decide._onednn on Linux x86-64; without this the bf16 tests would only skip."""
    from decide import bf16

    assert bf16.available()
