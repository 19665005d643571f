/*
 * cblas_{s,d,c}gemm over a BLAS whose symbols carry a "scipy_" prefix (PyPI scipy-openblas32).
 *
 * The mlx-cpu wheel's libmlx.so imports cblas_sgemm/dgemm/cgemm and links netlib's reference
 * BLAS. decide/runtime.py loads libscipy_openblas.so and then this library, both RTLD_GLOBAL,
 * before mlx.core: the dynamic linker then binds libmlx's imports to the functions below,
 * which forward to scipy_cblas_*. There is no link-time dependency on OpenBLAS: each target is
 * looked up with dlsym on first call, so this file builds anywhere.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int, const double *,
                         int, double, double *, int);
typedef void (*cgemm_fn)(int, int, int, int, int, int, const void *, const void *, int, const void *,
                         int, const void *, void *, int);

static void *sgemm_target;
static void *dgemm_target;
static void *cgemm_target;

/* Resolve `name` once; concurrent first calls resolve the same address, so a race is harmless. */
static void *resolve(void **slot, const char *name) {
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (fn) return fn;
    fn = dlsym(RTLD_DEFAULT, name);
    if (!fn) {
        /* runtime.py checks the symbols before loading this shim, so this means a broken setup. */
        fprintf(stderr, "decide._blas_shim: %s not found (load libscipy_openblas RTLD_GLOBAL first)\n", name);
        abort();
    }
    __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    return fn;
}

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    sgemm_fn fn = (sgemm_fn)resolve(&sgemm_target, "scipy_cblas_sgemm");
    fn(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc) {
    dgemm_fn fn = (dgemm_fn)resolve(&dgemm_target, "scipy_cblas_dgemm");
    fn(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_cgemm(int order, int trans_a, int trans_b, int m, int n, int k, const void *alpha, const void *a,
                 int lda, const void *b, int ldb, const void *beta, void *c, int ldc) {
    cgemm_fn fn = (cgemm_fn)resolve(&cgemm_target, "scipy_cblas_cgemm");
    fn(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* For tests: the resolved sgemm address, NULL until MLX has called cblas_sgemm through the shim. */
void *decide_blas_shim_sgemm_target(void) { return __atomic_load_n(&sgemm_target, __ATOMIC_ACQUIRE); }
