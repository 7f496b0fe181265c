/* domain_bootstrap.c — the `bootstrap` benchmark domain (issue 19):
 * bootstrapped ridge weights through the whole pipeline
 *
 *   design: load X.npy (n x p)   brain: load Y.npy (n x V)
 *   boot: bootstrap, n_boot resamples, alpha 1, 95% percentile interval
 *   keep: summarize boot.mean and boot.p
 *
 * and the same with predictions (variant 1, the "+predict" rows): X_test
 * from Xt.npy, n / 5 test samples (a held-out fifth), and keep also
 * summarises boot.pred_mean and boot.pred_p: the price of X_test next to
 * the weights alone.
 *
 * run in process as `nlflow run` would (reading X and Y, writing the maps
 * count in the time).
 *
 * size[] = n samples, V voxels, p features, B resamples: the issue's
 * 1,000 resamples of 500 x 20k x 50, and a quick one. X is standard normal,
 * Y = X W + unit noise with W standard normal / sqrt(p).
 *
 * The floor is the time of the node's FLOPs at the rate of its dominant
 * GEMM, measured in the same run: one block's (B p x n) by (n x block)
 * product, the GEMM that gives every resample's weights of a block. FLOPs
 * per resample (a fixed alpha: the Cholesky form): the Gram matrix of the
 * drawn rows (n p², counting every row), its Cholesky factor (p³ / 3) and
 * two triangular solves per row (2 n p²); then the stacked GEMM, 2 B p n V. The per-weight reduction (sums in double, the
 * selection of the percentile interval) counts in the time, not in the floor.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "bench.h"
#include "io/io.h"
#include "kernels/kernels.h"
#include "core/value.h"
#include "lang/ytree.h"
#include "core/rng.h"
#include "bootstrap/bootstrap.h"

static double boot_flops(const struct nf_bench_ctx *ctx)
{
    double n = (double)ctx->size[0], V = (double)ctx->size[1], p = (double)ctx->size[2], B = (double)ctx->size[3];
    double m = ctx->cond->variant ? (double)(ctx->size[0] / 5 > 0 ? ctx->size[0] / 5 : 1) : 0;
    return B * (3 * n * p * p + p * p * p / 3) + 2 * B * p * n * V + 2 * B * m * p * V;
}

static double boot_bytes(const struct nf_bench_ctx *ctx)
{
    return 4.0 * (double)ctx->size[0] * (double)(ctx->size[1] + ctx->size[2]);
}

/* One block's stacked GEMM, as the node cuts blocks. */
static void boot_matched(const struct nf_bench_ctx *ctx, int64_t mnk[3])
{
    mnk[0] = ctx->size[3] * ctx->size[2];
    mnk[1] = nf_bootstrap_block(ctx->size[3], ctx->size[2], ctx->size[1]);
    mnk[2] = ctx->size[0];
}

/* Writes X.npy, Y.npy and Xt.npy (n / 5 test samples) unless they exist
 * (writes are atomic). */
static int boot_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t n = ctx->size[0], V = ctx->size[1], p = ctx->size[2], m = n / 5 > 0 ? n / 5 : 1;
    char *x_path = nf_path_join(ctx->data_dir, "X.npy"), *y_path = nf_path_join(ctx->data_dir, "Y.npy");
    char *xt_path = nf_path_join(ctx->data_dir, "Xt.npy");
    struct nf_value *X = NULL, *Y = NULL, *W = NULL, *Xt = NULL;
    uint64_t seed = 0x626f6f74ull + (uint64_t)(n * 31 + p);
    struct stat st;
    int rc = 0;
    if (!x_path || !y_path || !xt_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (stat(x_path, &st) == 0 && stat(y_path, &st) == 0 && stat(xt_path, &st) == 0)
        goto fail;   /* nothing to do: rc is 0 */
    if (!(X = nf_value_new_matrix(n, p, NULL, err)) || !(Y = nf_value_new_matrix(n, V, NULL, err)) ||
        !(W = nf_value_new_matrix(p, V, NULL, err)) || !(Xt = nf_value_new_matrix(m, p, NULL, err))) {
        rc = err->code;
        goto fail;
    }
    for (int64_t e = 0; e < n * p; e++)
        X->u.mat.data[e] = (float)nf_rand_normal(&seed);
    for (int64_t e = 0; e < p * V; e++)
        W->u.mat.data[e] = (float)(nf_rand_normal(&seed) / sqrt((double)p));
    nf_kernels_cpu()->sgemm(false, false, n, V, p, 1.0f, X->u.mat.data, p, W->u.mat.data, V, 0.0f,
                            Y->u.mat.data, V);
    for (int64_t e = 0; e < n * V; e++)
        Y->u.mat.data[e] += (float)nf_rand_normal(&seed);
    NF_TRY(rc = nf_npy_write(x_path, &X->u.mat, err));
    NF_TRY(rc = nf_npy_write(y_path, &Y->u.mat, err));
    for (int64_t e = 0; e < m * p; e++)   /* after X, Y: their data as before */
        Xt->u.mat.data[e] = (float)nf_rand_normal(&seed);
    NF_TRY(rc = nf_npy_write(xt_path, &Xt->u.mat, err));
fail:
    nf_value_unref(X);
    nf_value_unref(Y);
    nf_value_unref(W);
    nf_value_unref(Xt);
    free(x_path);
    free(y_path);
    free(xt_path);
    return rc;
}

static int boot_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    if (ctx->cond->variant)
        return nf_bench_pipeline_setup(ctx, "bench-bootstrap-predict", state, err,
            "  design: {type: load, path: '%s/X.npy'}\n"
            "  brain: {type: load, path: '%s/Y.npy'}\n"
            "  test: {type: load, path: '%s/Xt.npy'}\n"
            "  boot: {type: bootstrap, in: {X: design, Y: brain, X_test: test}, n_boot: %" PRId64 ", alpha: 1, "
            "seed: 0}\n"
            "  keep: {type: summarize, in: {mean: boot.mean, p: boot.p, pred: boot.pred_mean, "
            "pred_p: boot.pred_p}}\n",
            ctx->data_dir, ctx->data_dir, ctx->data_dir, ctx->size[3]);
    return nf_bench_pipeline_setup(ctx, "bench-bootstrap", state, err,
        "  design: {type: load, path: '%s/X.npy'}\n"
        "  brain: {type: load, path: '%s/Y.npy'}\n"
        "  boot: {type: bootstrap, in: {X: design, Y: brain}, n_boot: %" PRId64 ", alpha: 1, seed: 0}\n"
        "  keep: {type: summarize, in: {mean: boot.mean, p: boot.p}}\n",
        ctx->data_dir, ctx->data_dir, ctx->size[3]);
}

#define BOOT_ROW(name, runs, n, v, p, b, predict)                                                   \
    { name, runs, { n, v, p, b }, predict, boot_prepare, boot_setup, nf_bench_pipeline_run_once,          \
      nf_bench_pipeline_teardown, boot_flops, boot_bytes, boot_matched, NULL, NULL, NULL, false }

const struct nf_bench_condition nf_bench_bootstrap_conditions[] = {
    BOOT_ROW("bootstrap[n=60,v=500,p=5,B=200]", NF_BENCH_QUICK, 60, 500, 5, 200, 0),
    BOOT_ROW("bootstrap[n=500,v=20000,p=50,B=1000]", NF_BENCH_FULL, 500, 20000, 50, 1000, 0),
    BOOT_ROW("bootstrap+predict[n=60,v=500,p=5,B=200,m=12]", NF_BENCH_QUICK, 60, 500, 5, 200, 1),
    BOOT_ROW("bootstrap+predict[n=500,v=20000,p=50,B=1000,m=100]", NF_BENCH_FULL, 500, 20000, 50, 1000, 1),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};

/* The figure: time and its ratio to the GEMM floor. */
void nf_bench_bootstrap_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *c;
    bool any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        if (!any)
            nf_strbuf_addf(md, "\nIssue 19 asks for the time and its ratio to the GEMM floor: floor = the "
                               "FLOP count (see bench/domain_bootstrap.c) / the GFLOP/s of the matched "
                               "SGEMM ((B p x n) by (n x block), one block's stacked product, measured "
                               "in the same run). The reduction of every weight (sums, the percentile "
                               "interval's selection), reading X and Y and writing the maps count in "
                               "the time, not in the floor.\n\n");
        any = true;
        double t = nf_ypath_num(c, "measure.median_s"), flops = nf_ypath_num(c, "measure.flops");
        double rate = nf_ypath_num(c, "matched_sgemm.gflops"), floor_s = flops / (rate * 1e9);
        nf_strbuf_addf(md, "- %s: ", nf_ypath_str(c, "name"));
        nf_bench_add_seconds(md, t);
        nf_strbuf_addf(md, " = %.2f x the floor of ", t / floor_s);
        nf_bench_add_seconds(md, floor_s);
        nf_strbuf_addf(md, " (%.3g GFLOP at %.3g GFLOP/s).\n", flops * 1e-9, rate);
    }
}
