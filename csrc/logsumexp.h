/* A logits row's log-sum-exp in double for decide._gather (gather.pyx): the exponentials by a polynomial
   in fixed lanes, so the loop vectorizes (libm's exp is one call per element: ~5 ns, 0.13 s for the
   546 rows × 49,152 logits of a 255-option request). Lanes are filled by index, never by address: a row
   sums the same wherever it sits in memory. */
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DECIDE_LSE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DECIDE_LSE_CLONES
#endif

enum { DECIDE_LSE_LANES = 8 };

/* exp(x) for x <= 0, within a few ulp: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two, so n ln2 is
   exact), exp(r) by its Taylor series to r^13 (truncation < 1e-17), 2^n built in the exponent bits.
   Below -708 it returns exp(-708) ~ 3e-308: a row's sum holds a term 1 (its max), which such terms
   do not move. NaN stays NaN. */
static inline __attribute__((always_inline)) double decide_exp_nonpositive(double x) {
    const double log2e = 1.4426950408889634, ln2_hi = 6.93147180369123816490e-01,
                 ln2_lo = 1.90821492927058770002e-10;
    const double shift = 6755399441055744.0; /* 1.5 * 2^52: adding it rounds to an integer in the low bits */
    x = x < -708.0 ? -708.0 : x;
    const double y = x * log2e + shift;
    const double n = y - shift;
    const double r = (x - n * ln2_hi) - n * ln2_lo;
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int64_t bits, zero;
    memcpy(&bits, &y, sizeof bits);
    memcpy(&zero, &shift, sizeof zero);
    bits = (bits - zero + 1023) << 52; /* n + 1023 in the exponent field: 2^n */
    double two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* log Σ exp(x[i]), max-shifted; n >= 1. A row whose max is ±inf gives its max. */
DECIDE_LSE_CLONES static double decide_row_logsumexp(const float* x, ptrdiff_t n) {
    float top = x[0];
#pragma omp simd reduction(max : top)
    for (ptrdiff_t i = 1; i < n; ++i) top = x[i] > top ? x[i] : top;
    if (isinf(top)) return top;
    const double m = top;
    double lanes[DECIDE_LSE_LANES] = {0};
    ptrdiff_t i = 0;
    for (; i + DECIDE_LSE_LANES <= n; i += DECIDE_LSE_LANES) {
#pragma omp simd
        for (int l = 0; l < DECIDE_LSE_LANES; ++l) {
            const float* chunk = x + i; /* through a pointer: x[i + l] vectorized as a gather */
            lanes[l] += decide_exp_nonpositive((double)chunk[l] - m);
        }
    }
    double s = 0.0;
    for (int l = 0; i < n; ++i, ++l) lanes[l] += decide_exp_nonpositive((double)x[i] - m);
    for (int l = 0; l < DECIDE_LSE_LANES; ++l) s += lanes[l];
    return m + log(s);
}
