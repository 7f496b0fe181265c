/* domain_sgemm.c — the machine's SGEMM rate, the yardstick of every other
 * benchmark.
 *
 * Two conditions: the fixed 2048³ product (measured in every run, quick or
 * not: it is what "% of SGEMM" means in the report) and "matched", which has
 * no size of its own: the harness runs it with the (m, n, k) a condition names
 * as its shape-matched SGEMM, so that a workload is also compared with a GEMM
 * over the same data through the same BLAS. Both go through
 * nf_kernels_cpu()->sgemm, the entry the nodes call.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "bench.h"
#include "kernels/kernels.h"
#include "core/rng.h"

struct sgemm_state {
    int64_t m, n, k;
    float *a, *b, *c;
};

static void sgemm_teardown(void *state)
{
    struct sgemm_state *st = state;
    if (!st)
        return;
    nf_free_aligned(st->a);
    nf_free_aligned(st->b);
    nf_free_aligned(st->c);
    free(st);
}

/* Deterministic operands in [-0.5, 0.5): no denormals, no overflow. */
static void fill(float *x, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)nf_rand_uniform(&seed) - 0.5f;
}

static int sgemm_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    struct sgemm_state *st = calloc(1, sizeof *st);
    int rc = 0;
    if (!st)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    st->m = ctx->size[0];
    st->n = ctx->size[1];
    st->k = ctx->size[2];
    if (st->m < 1 || st->n < 1 || st->k < 1) {
        rc = NF_FAIL(err, NF_EUSAGE, "sgemm needs a size m,n,k of positive integers");
        goto fail;
    }
    st->a = nf_alloc_floats((size_t)(st->m * st->k));
    st->b = nf_alloc_floats((size_t)(st->k * st->n));
    st->c = nf_alloc_floats((size_t)(st->m * st->n));
    if (!st->a || !st->b || !st->c) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for a %" PRId64 "x%" PRId64 "x%" PRId64
                     " SGEMM", st->m, st->n, st->k);
        goto fail;
    }
    fill(st->a, st->m * st->k, 1);
    fill(st->b, st->k * st->n, 2);
    *state = st;
    return 0;
fail:
    sgemm_teardown(st);
    return rc;
}

static int sgemm_run_once(void *state, struct nf_error *err)
{
    struct sgemm_state *st = state;
    (void)err;
    nf_kernels_cpu()->sgemm(false, false, st->m, st->n, st->k, 1.0f, st->a, st->k,
                            st->b, st->n, 0.0f, st->c, st->n);
    return 0;
}

static double sgemm_flops(const struct nf_bench_ctx *ctx)
{
    return 2.0 * (double)ctx->size[0] * (double)ctx->size[1] * (double)ctx->size[2];
}

static double sgemm_bytes(const struct nf_bench_ctx *ctx)
{
    const double m = (double)ctx->size[0], n = (double)ctx->size[1], k = (double)ctx->size[2];
    return 4.0 * (m * k + k * n);
}

#define SGEMM_ROW(name, runs, m, n, k)                                                  \
    { name, runs, { m, n, k, 0 }, 0, NULL, sgemm_setup, sgemm_run_once, sgemm_teardown, \
      sgemm_flops, sgemm_bytes, NULL, NULL, NULL, NULL, false }

const struct nf_bench_condition nf_bench_sgemm_conditions[] = {
    SGEMM_ROW("2048^3", NF_BENCH_QUICK | NF_BENCH_FULL, 2048, 2048, 2048),
    SGEMM_ROW("matched", NF_BENCH_SHAPE, 0, 0, 0),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};
