"""Native extensions: the token trie and CPU attention (C++/pybind11), the log-prob gather (Cython), a BLAS shim (C)."""

import importlib.metadata
import re
import sysconfig
from pathlib import Path

import numpy
from Cython.Build import cythonize
from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import Extension, setup

VERSION = re.search(r'__version__ = "([^"]+)"', Path("decide/__init__.py").read_text()).group(1)
VERSION_MACRO = [("DECIDE_VERSION", f'"{VERSION}"')]

native = Pybind11Extension(
    "decide._native",
    ["csrc/bindings.cpp", "csrc/trie.cpp", "csrc/kernels.cpp"],
    include_dirs=["csrc"],
    cxx_std=17,
    define_macros=VERSION_MACRO,
    extra_compile_args=["-O3", "-fopenmp-simd"],
    libraries=["dl", "pthread"],
)
gather = Extension(
    "decide._gather",
    ["csrc/gather.pyx"],
    include_dirs=[numpy.get_include(), "csrc"],
    define_macros=[*VERSION_MACRO, ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=["-O3", "-fopenmp-simd"],
)
# Not a Python module: a shared library that exports cblas_sgemm & co. over an optimized BLAS
# loaded at run time (decide/runtime.py), so MLX's reference-BLAS calls go to OpenBLAS.
blas_shim = Extension("decide._blas_shim", ["csrc/blas_shim.c"], extra_compile_args=["-O2"], libraries=["dl"])


def onednn_root() -> Path | None:
    """The prefix holding oneDNN's include/oneapi/dnnl and lib/libdnnl.so: where the wheels onednn-devel-cpu-gomp
    (a build requirement on Linux x86-64) and onednn-cpu-gomp put them, even in pip's isolated build env."""
    candidates = [Path(sysconfig.get_paths()["data"])]
    try:
        dist = importlib.metadata.distribution("onednn-devel-cpu-gomp")
        headers = [f for f in dist.files or () if str(f).endswith("oneapi/dnnl/dnnl.hpp")]
        # <prefix>/include/oneapi/dnnl/dnnl.hpp -> <prefix>
        candidates = [Path(dist.locate_file(f)).resolve().parents[3] for f in headers] + candidates
    except importlib.metadata.PackageNotFoundError:
        pass
    for root in candidates:
        if (root / "include/oneapi/dnnl/dnnl.hpp").exists() and (root / "lib/libdnnl.so").exists():
            return root
    return None


def bf16_extensions() -> list[Extension]:
    """decide._onednn, the bfloat16 linear layers and attention products, where oneDNN is installed (decide/bf16.py loads its library)."""
    root = onednn_root()
    if root is None:
        print("oneDNN not found: building without the bfloat16 backend")
        return []
    onednn = Pybind11Extension(
        "decide._onednn",
        [
            "csrc/onednn_bindings.cpp",
            "csrc/bf16_linear.cpp",
            "csrc/bf16_gemm.cpp",
            "csrc/kernels.cpp",
            "csrc/rms_norm.cpp",
        ],
        include_dirs=["csrc", str(root / "include")],
        library_dirs=[str(root / "lib")],
        libraries=["dnnl", "gomp", "dl", "pthread"],
        cxx_std=17,
        define_macros=VERSION_MACRO,
        extra_compile_args=["-O3", "-fopenmp-simd"],
    )
    return [onednn]


setup(
    ext_modules=[native, *cythonize([gather], language_level=3), blas_shim, *bf16_extensions()],
    cmdclass={"build_ext": build_ext},
)
