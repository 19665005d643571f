"""MLX, imported once with the fastest BLAS this machine has.

Every decide module gets MLX through `from decide.runtime import mx`. On Linux the mlx-cpu
wheel links netlib's reference BLAS; float32 matmuls run 10-30x faster on OpenBLAS. Loading an
optimized BLAS with RTLD_GLOBAL *before* `import mlx.core` makes the dynamic linker bind
libmlx's cblas_sgemm/dgemm/cgemm imports to it (LAPACK is left alone). Order of preference:

1. env DECIDE_BLAS: a shared-library path, or "reference" to keep MLX's own BLAS;
2. Debian's OpenBLAS (package libopenblas0-pthread), which exports plain cblas_* names;
3. PyPI scipy-openblas32, whose symbols are "scipy_"-prefixed: it is loaded, then our
   decide._blas_shim, which exports the plain names and forwards to it;
4. the reference BLAS, with a warning.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import platform
import sys
from pathlib import Path

log = logging.getLogger(__name__)

_GEMMS = ("cblas_sgemm", "cblas_dgemm", "cblas_cgemm")
_HERE = Path(__file__).resolve().parent

# Handles of the libraries we loaded: they must stay open for the life of the process.
_loaded: list[ctypes.CDLL] = []


def _exports(lib: ctypes.CDLL, names: tuple[str, ...]) -> bool:
    return all(hasattr(lib, name) for name in names)


def _open_global(path: str | Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    _loaded.append(lib)
    return lib


def _openblas_config(lib: ctypes.CDLL, prefix: str = "") -> str:
    fn = getattr(lib, f"{prefix}openblas_get_config", None)
    if fn is None:
        return ""
    fn.restype = ctypes.c_char_p
    return fn().decode(errors="replace").strip()


def _shim_path() -> Path | None:
    return next(iter(sorted(_HERE.glob("_blas_shim*.so"))), None)


def _load_prefixed(path: str | Path) -> str | None:
    """Load a scipy_-prefixed OpenBLAS plus our shim; return the description or None."""
    shim = _shim_path()
    if shim is None:
        log.warning("decide._blas_shim is not built (python setup.py build_ext --inplace); cannot use %s", path)
        return None
    lib = _open_global(path)
    if not _exports(lib, tuple(f"scipy_{name}" for name in _GEMMS)):
        return None
    _open_global(shim)
    config = _openblas_config(lib, "scipy_") or "OpenBLAS"
    return f"{config} (scipy-openblas32 {path} via {shim.name})"


def _load_path(path: str) -> str | None:
    """Load the library at `path`, whichever symbol naming it uses."""
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    if _exports(lib, _GEMMS):
        lib = _open_global(path)
        return f"{_openblas_config(lib) or 'BLAS'} ({path})"
    if _exports(lib, tuple(f"scipy_{name}" for name in _GEMMS)):
        return _load_prefixed(path)
    log.warning("DECIDE_BLAS=%s exports no cblas_sgemm/dgemm/cgemm; ignoring it", path)
    return None


def _debian_openblas() -> str | None:
    multiarch = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu", "arm64": "aarch64-linux-gnu"}
    triple = multiarch.get(platform.machine())
    if triple is None:
        return None
    path = Path(f"/usr/lib/{triple}/openblas-pthread/libblas.so.3")
    if not path.exists():
        return None
    lib = _open_global(path)
    return f"{_openblas_config(lib) or 'OpenBLAS'} (Debian {path})"


def _scipy_openblas() -> str | None:
    spec = importlib.util.find_spec("scipy_openblas32")
    if spec is None or not spec.submodule_search_locations:
        return None
    libs = sorted(Path(spec.submodule_search_locations[0], "lib").glob("libscipy_openblas*.so*"))
    return _load_prefixed(libs[0]) if libs else None


def _try(loader, *args) -> str | None:
    try:
        return loader(*args)
    except OSError as exc:
        log.warning("could not load an optimized BLAS (%s): %s", getattr(loader, "__name__", loader), exc)
        return None


def _select_blas() -> str:
    """Load the preferred BLAS into the global symbol scope; return a human-readable name."""
    if sys.platform != "linux":
        return "Accelerate (macOS)" if sys.platform == "darwin" else "MLX default"
    if "mlx.core" in sys.modules:
        log.warning(
            "mlx.core was imported before decide.runtime: the BLAS could not be swapped "
            "(float32 matmuls stay on MLX's bundled BLAS); import decide first"
        )
        return "unchanged: mlx.core was imported before decide.runtime"
    # OpenBLAS's threads spin after each call (2^28 cycles by default) waiting for the next one; they
    # would hold the cores the native attention's own threads need (csrc/kernels.cpp). Read when the
    # library loads: 2^4 cycles, they sleep at once (measured: state20 -13%, jevcompat's 255 options -11%).
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    choice = os.environ.get("DECIDE_BLAS", "").strip()
    if choice == "reference":
        return "reference (netlib, bundled with mlx; DECIDE_BLAS=reference)"
    if choice and (name := _try(_load_path, choice)):
        return name
    for loader in (_debian_openblas, _scipy_openblas):
        if name := _try(loader):
            return name
    log.warning(
        "no optimized BLAS found: float32 matmuls use the slow reference BLAS "
        "(pip install scipy-openblas32, or apt-get install libopenblas0-pthread)"
    )
    return "reference (netlib, bundled with mlx)"


BLAS: str = _select_blas()

import mlx.core as mx  # noqa: E402  (must follow the BLAS preload above)


def device() -> str:
    """'gpu' when MLX runs on Metal or CUDA by default, else 'cpu'."""
    return "gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"


def compute_dtype() -> mx.Dtype:
    """Weights dtype: float32 on CPU (only float32 matmuls use the BLAS), float16 on a GPU."""
    return mx.float16 if device() == "gpu" else mx.float32


__all__ = ["BLAS", "compute_dtype", "device", "mx"]
