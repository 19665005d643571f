"""Native extensions: the token trie and CPU attention (C++/pybind11), the log-prob gather (Cython), a BLAS shim (C)."""

import re
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
    extra_compile_args=["-O3"],
)
# Not a Python module: a shared library that exports cblas_sgemm & co. over an optimized BLAS
# loaded at run time (decide/runtime.py), so MLX's reference-BLAS calls go to OpenBLAS.
blas_shim = Extension("decide._blas_shim", ["csrc/blas_shim.c"], extra_compile_args=["-O2"], libraries=["dl"])

setup(
    ext_modules=[native, *cythonize([gather], language_level=3), blas_shim],
    cmdclass={"build_ext": build_ext},
)
