/* ref_solve.h — the unit tests' reference linear solve, in double: the
 * independent computations that nodes' float results are checked against
 * (test_ridge.c, test_predict.c, test_predict_models.c, test_searchlight.c,
 * test_gpu.c). Header-only, static inline: a test includes what it uses.
 */
#ifndef NF_TESTS_REF_SOLVE_H
#define NF_TESTS_REF_SOLVE_H

#include <math.h>
#include <stdint.h>

/* Gauss-Jordan with partial pivoting: A x = B (A s x s, B s x q), in place;
 * B ends as x. */
static inline void gauss(double *A, double *B, int64_t s, int64_t q)
{
    for (int64_t c = 0; c < s; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < s; r++)
            if (fabs(A[r * s + c]) > fabs(A[p * s + c]))
                p = r;
        for (int64_t j = 0; j < s; j++) {
            double t = A[c * s + j];
            A[c * s + j] = A[p * s + j];
            A[p * s + j] = t;
        }
        for (int64_t o = 0; o < q; o++) {
            double t = B[c * q + o];
            B[c * q + o] = B[p * q + o];
            B[p * q + o] = t;
        }
        for (int64_t r = 0; r < s; r++) {
            if (r == c)
                continue;
            double f = A[r * s + c] / A[c * s + c];
            for (int64_t j = 0; j < s; j++)
                A[r * s + j] -= f * A[c * s + j];
            for (int64_t o = 0; o < q; o++)
                B[r * q + o] -= f * B[c * q + o];
        }
    }
    for (int64_t c = 0; c < s; c++)
        for (int64_t o = 0; o < q; o++)
            B[c * q + o] /= A[c * s + c];
}

#endif
