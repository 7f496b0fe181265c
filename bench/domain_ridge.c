/* domain_ridge.c — the `ridge` benchmark domain (issue 4): cross-validated
 * ridge encoding models, one per voxel, through the whole pipeline
 *
 *   design: load X.npy (n x p)   brain: load Y.npy (n x V)
 *   fit: ridge, 20 alphas logspace(-2, 4), 5 contiguous folds, per-voxel alpha
 *   keep: summarize fit.alpha and fit.score
 *
 * run in process as `nlflow run` would, so a timed run includes reading X and Y
 * from the page cache (Y once per run) and writing the two maps.
 *
 * size[] = n samples, V voxels, p features: nltools' benchmark sizes 500 x 20000
 * x 50 and 1000 x 20000 x 100, and a whole brain, 1000 x 230000 x 100. The data
 * are synthetic but shaped like an encoding study: X has smooth (AR(1), phi 0.9)
 * unit-variance features, Y = X W + unit noise with a planted W whose per-voxel
 * amplitude ranges from 0 to 2, so CV scores range from about 0 to 0.8 and the
 * chosen alphas spread over the grid instead of all sitting at one end.
 *
 * Every size has two rows, identical on the nlflow side, because a condition
 * has one peer: vs_numpy (bench/peers/ridge_numpy.py, the same algorithm in
 * NumPy float32) and vs_sklearn (bench/peers/ridge_sklearn.py, scikit-learn's
 * RidgeCV(alpha_per_target=True) in its efficient leave-one-out mode: a
 * different, cheaper CV, so compared on time only). The quick size and
 * nltools' first size also have a shared row: alpha_mode shared, one alpha for
 * all voxels (as nltools' legacy ridge_cv), against ridge_numpy.py --mode shared.
 *
 * Each row gives three nlflow times (issue 20): the pipeline run in process
 * (median_s, what `speedup` compares), the ridge node alone by the executor's
 * clock (node_median_s: the computation the peers time, with their data in
 * memory) and a fresh `nlflow run --no-cache` process of the same pipeline from
 * exec to exit (process_median_s, and its CPU time), each with its ratio to the
 * peer's time.
 *
 * The note under the report's table checks the targets: time within
 * 1.5 x the GEMM-bound floor, peak RSS under 2 x the size of Y, faster than
 * every peer.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "io/io.h"
#include "kernels/kernels.h"
#include "pipeline.h"
#include "core/value.h"
#include "lang/ytree.h"
#include "core/rng.h"
#include "pipeline.h"
#include "ridge/ridge.h"

/* The pipeline's CV grid; ridge_flops() and the peers assume the same. */
enum { RIDGE_FOLDS = 5, RIDGE_ALPHAS = 20 };
#define RIDGE_ALPHA_GRID "{logspace: [-2, 4, 20]}"

/* The peer, and for VS_NUMPY_SHARED the alpha mode: one alpha for all voxels. */
enum ridge_peer { VS_NUMPY, VS_SKLEARN, VS_HIMALAYA, VS_NUMPY_SHARED };

/* ---- sizes and FLOPs ---- */

/* Validation rows of fold f in a contiguous unshuffled k-fold (sklearn KFold,
 * as nltools): the first n mod k folds have one sample more. */
static int64_t fold_size(int64_t n, int64_t folds, int64_t f)
{
    return n / folds + (f < n % folds ? 1 : 0);
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* FLOPs of one fit (a multiply-add counts 2). Per fold f, with n_val its size,
 * n_tr = n - n_val and r = min(n_tr, p):
 *   thin SVD of X_train             4 n_tr p^2        (LAPACK's order of magnitude)
 *   P = X_val V, G = P^T P          2 n_val p r + 2 n_val r^2
 *   U^T Y_train                     2 r n_tr V
 *   Z = P^T Y_val                   2 r n_val V
 *   T = (D_a G D_a)_a U^T Y         2 A r^2 V         (one stacked GEMM: every alpha's
 *                                                      validation error without predictions)
 *   epilogue                        6 A r V + 2 n_val V (quadratic and cross terms; SS_tot)
 * then the refit on all n samples, r = min(n, p):
 *   thin SVD of X 4 n p^2, U^T Y 2 r n V, W = V (d_alpha(v) o U^T Y) 2 p r V.
 * The SVDs are counted although they are a rounding error at these sizes
 * (under 0.1% of the total), so that GFLOP/s is a rate of the whole algorithm. */
static double ridge_flops_of(int64_t n, int64_t voxels, int64_t p, int64_t folds, int64_t alphas)
{
    const double V = (double)voxels, A = (double)alphas, P = (double)p;
    double total = 0.0;
    for (int64_t f = 0; f < folds; f++) {
        double n_val = (double)fold_size(n, folds, f), n_tr = (double)n - n_val;
        double r = (double)min64(n - fold_size(n, folds, f), p);
        total += 4.0 * n_tr * P * P + 2.0 * n_val * P * r + 2.0 * n_val * r * r + 2.0 * r * n_tr * V +
                 2.0 * r * n_val * V + 2.0 * A * r * r * V + 6.0 * A * r * V + 2.0 * n_val * V;
    }
    double r = (double)min64(n, p);
    total += 4.0 * (double)n * P * P + 2.0 * r * (double)n * V + 2.0 * P * r * V;
    return total;
}

static double ridge_flops(const struct nf_bench_ctx *ctx)
{
    return ridge_flops_of(ctx->size[0], ctx->size[1], ctx->size[2], RIDGE_FOLDS, RIDGE_ALPHAS);
}

/* Input bytes of one run: X and Y, float32. */
static double ridge_bytes(const struct nf_bench_ctx *ctx)
{
    return 4.0 * (double)ctx->size[0] * (double)(ctx->size[1] + ctx->size[2]);
}

/* The dominant GEMM, every alpha's error terms for the largest fold:
 * (A r x r) . (r x V). */
static void ridge_matched(const struct nf_bench_ctx *ctx, int64_t mnk[3])
{
    int64_t n = ctx->size[0], n_val = fold_size(n, RIDGE_FOLDS, 0);
    int64_t r = min64(n - n_val, ctx->size[2]);
    mnk[0] = RIDGE_ALPHAS * r;
    mnk[1] = ctx->size[1];
    mnk[2] = r;
}

/* ---- input files ---- */

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* X: n x p, each column an AR(1) series with phi 0.9 and unit variance (smooth,
 * like convolved stimulus features). */
static void fill_design(float *X, int64_t n, int64_t p, uint64_t *seed)
{
    const double phi = 0.9, innovation = sqrt(1.0 - phi * phi);
    for (int64_t j = 0; j < p; j++) {
        double x = nf_rand_normal(seed);
        for (int64_t i = 0; i < n; i++) {
            if (i > 0)
                x = phi * x + innovation * nf_rand_normal(seed);
            X[i * p + j] = (float)x;
        }
    }
}

/* W: p x V, column v = a_v z / sqrt(p) with z standard normal and amplitude
 * a_v = 2 u^2 (u uniform): many weak voxels, a few strong ones, as in cortex. */
static void fill_weights(float *W, int64_t p, int64_t voxels, uint64_t *seed)
{
    for (int64_t v = 0; v < voxels; v++) {
        double u = nf_rand_uniform(seed), amplitude = 2.0 * u * u / sqrt((double)p);
        for (int64_t j = 0; j < p; j++)
            W[j * voxels + v] = (float)(amplitude * nf_rand_normal(seed));
    }
}

/* Writes X.npy and Y.npy = X W + noise unless they exist (writes are atomic, so
 * a file that exists is complete). Deterministic for a given size. */
static int ridge_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t n = ctx->size[0], voxels = ctx->size[1], p = ctx->size[2];
    char *x_path = nf_path_join(ctx->data_dir, "X.npy");
    char *y_path = nf_path_join(ctx->data_dir, "Y.npy");
    struct nf_value *X = NULL, *Y = NULL;
    float *W = NULL;
    uint64_t seed = 0x72696467650000ull + (uint64_t)(n * 31 + p);
    int rc = 0;

    if (!x_path || !y_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (file_exists(x_path) && file_exists(y_path))
        goto fail;   /* nothing to do: rc is 0 */
    if (!(X = nf_value_new_matrix(n, p, NULL, err)) || !(Y = nf_value_new_matrix(n, voxels, NULL, err))) {
        rc = err->code;
        goto fail;
    }
    if (!(W = nf_alloc_floats((size_t)(p * voxels)))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the %" PRId64 " x %" PRId64 " weights",
                     p, voxels);
        goto fail;
    }
    fill_design(X->u.mat.data, n, p, &seed);
    fill_weights(W, p, voxels, &seed);
    nf_kernels_cpu()->sgemm(false, false, n, voxels, p, 1.0f, X->u.mat.data, p, W, voxels, 0.0f,
                            Y->u.mat.data, voxels);
    for (int64_t e = 0; e < n * voxels; e++)
        Y->u.mat.data[e] += (float)nf_rand_normal(&seed);
    NF_TRY(rc = nf_npy_write(x_path, &X->u.mat, err));
    NF_TRY(rc = nf_npy_write(y_path, &Y->u.mat, err));
fail:
    nf_free_aligned(W);
    nf_value_unref(X);
    nf_value_unref(Y);
    free(x_path);
    free(y_path);
    return rc;
}

/* ---- the measured run ---- */

static const char *alpha_mode(const struct nf_bench_ctx *ctx)
{
    return ctx->cond->variant == VS_NUMPY_SHARED ? "shared" : "per_voxel";
}

static int ridge_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    return nf_bench_pipeline_setup_node(ctx, "bench-ridge", "fit", state, err,
        "  design: {type: load, path: '%s/X.npy'}\n"
        "  brain: {type: load, path: '%s/Y.npy'}\n"
        "  fit: {type: ridge, in: {X: design, Y: brain}, alphas: " RIDGE_ALPHA_GRID ", cv: %d,"
        " alpha_mode: %s}\n"
        "  keep: {type: summarize, in: {alpha: fit.alpha, score: fit.score}}\n",
        ctx->data_dir, ctx->data_dir, RIDGE_FOLDS, alpha_mode(ctx));
}

/* Y's size (for the RSS target) and the CV grid, in the result file; the
 * ridge node's own times and whole `nlflow run` processes. */
static void ridge_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    nf_strbuf_addf(json, ", \"y_bytes\": %" PRId64 ", \"folds\": %d, \"alphas\": %d"
                   ", \"alpha_mode\": \"%s\"",
                   4 * ctx->size[0] * ctx->size[1], RIDGE_FOLDS, RIDGE_ALPHAS, alpha_mode(ctx));
    nf_bench_pipeline_describe(ctx, state, json);
}

/* RIDGE_ROW expands its arguments first so that NUMPY and SKLEARN can stand for
 * three of them: the variant, the peer script and its --mode. */
#define RIDGE_ROW(...) RIDGE_ROW_(__VA_ARGS__)
#define RIDGE_ROW_(name, runs, n, v, p, variant, script, mode)                           \
    { name, runs, { n, v, p, 0 }, variant, ridge_prepare, ridge_setup,                   \
      nf_bench_pipeline_run_once, nf_bench_pipeline_teardown, ridge_flops, ridge_bytes, \
      ridge_matched, ridge_describe, script, mode, false }
#define NUMPY VS_NUMPY, "ridge_numpy.py", "per_voxel"
#define SKLEARN VS_SKLEARN, "ridge_sklearn.py", "loo"
#define NUMPY_SHARED VS_NUMPY_SHARED, "ridge_numpy.py", "shared"

/* ---- banded ridge (issue 20) ----
 *
 * size[] = n samples, V voxels, p features, C candidates. Three bands in the
 * ratio 20 : 100 : 300 (the 20 + 100 + 300 features at p = 420), the
 * same 20 alphas and 5 contiguous folds, and C candidate band weightings drawn
 * once (nf_ridge_band_candidates, seed 0: the uniform one, then Dirichlet
 * samples) and given to both sides: to nlflow as `gammas`, to himalaya 0.4's
 * BandedRidgeCV as solver_params n_iter (DATA/gammas.npy). Y = X W + noise
 * with each band's weight amplitude drawn per voxel, so the chosen weightings
 * spread over the candidates. The peer (bench/peers/banded_himalaya.py)
 * reports the share of voxels with the same chosen candidate and alpha and the
 * largest score difference, read from this condition's outputs. */

static void band_edges(int64_t p, int64_t e[4])
{
    e[0] = 0;
    e[1] = p * 20 / 420;
    e[2] = e[1] + p * 100 / 420;
    e[3] = p;
}

/* The candidates both sides use, rounded to float32 as the peer reads them. */
static int banded_candidates(int64_t C, double **g, struct nf_error *err)
{
    struct ridge_params prm;
    int64_t n = 0;
    nf_params_defaults(&nf_node_ridge, &prm);
    prm.n_iter = C;
    int rc = nf_ridge_band_candidates(&prm, 3, 0, g, &n, err);
    nf_params_release(&nf_node_ridge, &prm);
    for (int64_t i = 0; rc == 0 && i < n * 3; i++)
        (*g)[i] = (float)(*g)[i];
    return rc;
}

static int banded_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t n = ctx->size[0], voxels = ctx->size[1], p = ctx->size[2], C = ctx->size[3];
    char *x_path = nf_path_join(ctx->data_dir, "X.npy"), *y_path = nf_path_join(ctx->data_dir, "Y.npy");
    char *g_path = nf_path_join(ctx->data_dir, "gammas.npy");
    struct nf_value *X = NULL, *Y = NULL, *G = NULL;
    float *W = NULL;
    double *g = NULL;
    uint64_t seed = 0x62616e646564ull + (uint64_t)(n * 31 + p);
    int64_t e[4];
    int rc = 0;
    if (!x_path || !y_path || !g_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (file_exists(x_path) && file_exists(y_path) && file_exists(g_path))
        goto fail;
    if (!(X = nf_value_new_matrix(n, p, NULL, err)) || !(Y = nf_value_new_matrix(n, voxels, NULL, err)) ||
        !(G = nf_value_new_matrix(C, 3, NULL, err))) {
        rc = err->code;
        goto fail;
    }
    if (!(W = nf_alloc_floats((size_t)(p * voxels)))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the %" PRId64 " x %" PRId64 " weights", p, voxels);
        goto fail;
    }
    fill_design(X->u.mat.data, n, p, &seed);
    fill_weights(W, p, voxels, &seed);
    band_edges(p, e);
    for (int64_t v = 0; v < voxels; v++)
        for (int b = 0; b < 3; b++) {
            double u = nf_rand_uniform(&seed), amplitude = 3.0 * u * u * sqrt((double)p / (double)(e[b + 1] - e[b]));
            for (int64_t j = e[b]; j < e[b + 1]; j++)
                W[j * voxels + v] *= (float)amplitude;
        }
    nf_kernels_cpu()->sgemm(false, false, n, voxels, p, 1.0f, X->u.mat.data, p, W, voxels, 0.0f,
                            Y->u.mat.data, voxels);
    for (int64_t i = 0; i < n * voxels; i++)
        Y->u.mat.data[i] += (float)nf_rand_normal(&seed);
    NF_TRY(rc = banded_candidates(C, &g, err));
    for (int64_t i = 0; i < C * 3; i++)
        G->u.mat.data[i] = (float)g[i];
    NF_TRY(rc = nf_npy_write(x_path, &X->u.mat, err));
    NF_TRY(rc = nf_npy_write(y_path, &Y->u.mat, err));
    NF_TRY(rc = nf_npy_write(g_path, &G->u.mat, err));
fail:
    nf_free_aligned(W);
    free(g);
    nf_value_unref(X);
    nf_value_unref(Y);
    nf_value_unref(G);
    free(x_path);
    free(y_path);
    free(g_path);
    return rc;
}

static int banded_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    int64_t e[4], C = ctx->size[3];
    double *g = NULL;
    struct nf_strbuf sb;
    int rc;
    band_edges(ctx->size[2], e);
    if ((rc = banded_candidates(C, &g, err)) < 0)
        return rc;
    nf_strbuf_init(&sb);
    for (int64_t i = 0; i < C * 3; i++)
        nf_strbuf_addf(&sb, "%s%.9g", i ? ", " : "", g[i]);
    free(g);
    char *list = nf_strbuf_detach(&sb);
    if (!list)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    rc = nf_bench_pipeline_setup_node(ctx, "bench-banded", "fit", state, err,
        "  design: {type: load, path: '%s/X.npy'}\n"
        "  brain: {type: load, path: '%s/Y.npy'}\n"
        "  fit: {type: ridge, in: {X: design, Y: brain}, alphas: " RIDGE_ALPHA_GRID ", cv: %d,"
        " bands: ['a = 0:%" PRId64 "', 'b = %" PRId64 ":%" PRId64 "', 'c = %" PRId64 ":%" PRId64 "'],"
        " gammas: [%s]}\n"
        "  keep: {type: summarize, in: {alpha: fit.alpha, score: fit.score, band_alpha: fit.band_alpha}}\n",
        ctx->data_dir, ctx->data_dir, RIDGE_FOLDS, e[1], e[1], e[2], e[2], e[3], list);
    free(list);
    return rc;
}

/* FLOPs of one banded fit: per candidate and fold the SVD of the scaled
 * training design (4 n_tr p r), P = Z_val V, the factor of PᵀP when n_val > r,
 * then per voxel u (2 r n_tr), z (2 r n_val), the cross terms (2 A r) and the
 * stacked quadratic terms (2 A m r, m = min(n_val, r)); the refit at most one
 * SVD per candidate and 2 r (n + p) per voxel. */
static double banded_flops(const struct nf_bench_ctx *ctx)
{
    const int64_t n = ctx->size[0], p = ctx->size[2], C = ctx->size[3];
    const double V = (double)ctx->size[1], A = RIDGE_ALPHAS;
    double total = 0;
    for (int64_t f = 0; f < RIDGE_FOLDS; f++) {
        double n_val = (double)fold_size(n, RIDGE_FOLDS, f), n_tr = (double)n - n_val;
        double r = (double)min64(n - fold_size(n, RIDGE_FOLDS, f), p), m = n_val < r ? n_val : r;
        total += (double)C * (4 * n_tr * (double)p * r + 2 * n_val * (double)p * r + (n_val > r ? 4 * n_val * r * r : 0) +
                              V * (2 * r * n_tr + 2 * r * n_val + 2 * A * r + 2 * A * m * r));
    }
    double r = (double)min64(n, p);
    return total + (double)C * 4 * (double)n * (double)p * r + V * 2 * r * (double)(n + p);
}

/* The dominant GEMM: the stacked quadratic terms of the largest fold, (A m) x V x r. */
static void banded_matched(const struct nf_bench_ctx *ctx, int64_t mnk[3])
{
    int64_t n = ctx->size[0], n_val = fold_size(n, RIDGE_FOLDS, 0), r = min64(n - n_val, ctx->size[2]);
    mnk[0] = RIDGE_ALPHAS * min64(n_val, r);
    mnk[1] = ctx->size[1];
    mnk[2] = r;
}

/* The grid, and where the outputs are for the peer's agreement (DATA/nlflow-outputs.txt). */
static void banded_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    nf_strbuf_addf(json, ", \"folds\": %d, \"alphas\": %d, \"bands\": 3, \"candidates\": %" PRId64,
                   RIDGE_FOLDS, RIDGE_ALPHAS, ctx->size[3]);
    char *where = nf_path_join(ctx->data_dir, "nlflow-outputs.txt"), *outputs = nf_path_join(ctx->work_dir, "out");
    struct nf_error ignored = { 0 };
    if (where && outputs)   /* without it the peer reports no agreement, nothing else */
        (void)nf_write_file_atomic(where, outputs, strlen(outputs), &ignored);
    free(where);
    free(outputs);
    nf_bench_pipeline_describe(ctx, state, json);
}

#define BANDED_ROW(name, runs, n, v, p, c)                                                   \
    { name, runs, { n, v, p, c }, VS_HIMALAYA, banded_prepare, banded_setup,                  \
      nf_bench_pipeline_run_once, nf_bench_pipeline_teardown, banded_flops, ridge_bytes,      \
      banded_matched, banded_describe, "banded_himalaya.py", "banded", false }

/* Sizes in names as key=value, so the report's plot draws one line per peer. */
const struct nf_bench_condition nf_bench_ridge_conditions[] = {
    RIDGE_ROW("ridge[vs_numpy,n=60,v=500,p=5]", NF_BENCH_QUICK, 60, 500, 5, NUMPY),
    RIDGE_ROW("ridge[vs_sklearn,n=60,v=500,p=5]", NF_BENCH_QUICK, 60, 500, 5, SKLEARN),
    RIDGE_ROW("ridge[shared,vs_numpy,n=60,v=500,p=5]", NF_BENCH_QUICK, 60, 500, 5, NUMPY_SHARED),
    RIDGE_ROW("ridge[vs_numpy,n=500,v=20000,p=50]", NF_BENCH_FULL, 500, 20000, 50, NUMPY),
    /* one alpha for all voxels (nltools' legacy ridge_cv chooses so) */
    RIDGE_ROW("ridge[shared,vs_numpy,n=500,v=20000,p=50]", NF_BENCH_FULL, 500, 20000, 50, NUMPY_SHARED),
    RIDGE_ROW("ridge[vs_sklearn,n=500,v=20000,p=50]", NF_BENCH_FULL, 500, 20000, 50, SKLEARN),
    RIDGE_ROW("ridge[vs_numpy,n=1000,v=20000,p=100]", NF_BENCH_FULL, 1000, 20000, 100, NUMPY),
    RIDGE_ROW("ridge[vs_sklearn,n=1000,v=20000,p=100]", NF_BENCH_FULL, 1000, 20000, 100, SKLEARN),
    RIDGE_ROW("ridge[vs_numpy,n=1000,v=230000,p=100]", NF_BENCH_FULL, 1000, 230000, 100, NUMPY),
    BANDED_ROW("banded[vs_himalaya,n=100,v=500,p=42,c=10]", NF_BENCH_QUICK, 100, 500, 42, 10),
    BANDED_ROW("banded[vs_himalaya,n=1000,v=50000,p=420,c=100]", NF_BENCH_FULL, 1000, 50000, 420, 100),
    /* The size with a tenth of the candidates: both sides scale linearly in the
     * candidates, and himalaya's probes of the 100-candidate row take most of an hour. */
    BANDED_ROW("banded[vs_himalaya,n=1000,v=50000,p=420,c=10]", NF_BENCH_FULL, 1000, 50000, 420, 10),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};

/* ---- the note under the report's table ---- */

void nf_bench_ridge_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *c;
    bool any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        if (strncmp(nf_ypath_str(c, "name"), "banded[", 7) == 0)
            continue;   /* their own lines below */
        if (!any)
            nf_strbuf_addf(md, "\nTargets (issue 4). Time within 1.5 x the GEMM-bound floor, where "
                               "floor = the FLOP count of the algorithm (see bench/domain_ridge.c) / "
                               "the GFLOP/s of the matched SGEMM ((20 alphas x r) x V x r, the "
                               "dominant GEMM, measured in the same run), i.e. the fit at the rate "
                               "BLAS reaches on its dominant shape; reading X and Y and writing the "
                               "maps count in the time, not in the floor. Peak RSS above baseline "
                               "under 2 x the size of Y (n x V x 4 bytes). Faster than each peer. "
                               "ridge_numpy.py runs the same algorithm (5-fold, per-voxel alpha); "
                               "ridge_sklearn.py is RidgeCV(alpha_per_target=True, cv=None): "
                               "efficient leave-one-out, not 5-fold (RidgeCV with cv=5 falls back "
                               "to a grid search that refits per alpha and fold), so its scores "
                               "differ and only its time compares. Both run with as many BLAS "
                               "threads as nlflow. The shared rows choose one alpha for all voxels "
                               "(alpha_mode shared, nltools' legacy ridge_cv) against ridge_numpy.py "
                               "--mode shared. Each row then gives the ridge node's own time (the "
                               "executor's clock: the fit the peers time, with X and Y in memory) and a "
                               "whole `nlflow run --no-cache` process (exec to exit: start-up, reading X "
                               "and Y, the fit, writing the maps), each with the peer's time over it.\n\n");
        any = true;
        double t = nf_ypath_num(c, "measure.median_s");
        double flops = nf_ypath_num(c, "measure.flops");
        double rate = nf_ypath_num(c, "matched_sgemm.gflops");
        double floor_s = flops / (rate * 1e9);
        double y_bytes = nf_ypath_num(c, "measure.y_bytes");
        double peak = nf_ypath_num(c, "measure.rss_peak_sampled") -
                      nf_ypath_num(c, "measure.rss_baseline");
        nf_strbuf_addf(md, "- %s: ", nf_ypath_str(c, "name"));
        nf_bench_add_seconds(md, t);
        nf_strbuf_addf(md, " = %.2f x the floor of ", t / floor_s);
        nf_bench_add_seconds(md, floor_s);
        nf_strbuf_addf(md, " (%.3g GFLOP at %.3g GFLOP/s): %s; peak RSS ", flops * 1e-9, rate,
                       t <= 1.5 * floor_s ? "met" : "**not met**");
        nf_bench_add_bytes(md, peak);
        nf_strbuf_addf(md, " = %.2f x Y (", peak / y_bytes);
        nf_bench_add_bytes(md, y_bytes);
        nf_strbuf_addf(md, "): %s; ", peak < 2 * y_bytes ? "met" : "**not met**");
        nf_bench_add_peer_speedup(md, c);
        nf_strbuf_addf(md, "; ");
        nf_bench_add_node_and_process(md, c);
        nf_strbuf_addf(md, ".\n");
    }
    nf_bench_name_peer(md, domain_result, "ridge_sklearn.py");   /* the table names only the first */
    any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        if (strncmp(nf_ypath_str(c, "name"), "banded[", 7) != 0)
            continue;
        if (!any)
            nf_strbuf_addf(md, "\nBanded ridge (issue 20): nlflow's ridge with bands next to himalaya 0.4's "
                               "BandedRidgeCV (numpy backend, random_search) on the same candidates, alphas "
                               "and folds (bench/peers/banded_himalaya.py; above 4000 voxels himalaya runs on "
                               "2000 and 4000 voxels and is extrapolated linearly in the voxels, and the "
                               "agreement is over those voxels). Targets: the same chosen candidate and "
                               "alpha on >= 99%% of voxels, scores within 1e-4, >= 5 x himalaya's speed.\n\n");
        any = true;
        double same = nf_ypath_num(c, "peer.result.same_choice"), diff = nf_ypath_num(c, "peer.result.max_score_diff");
        nf_strbuf_addf(md, "- %s: ", nf_ypath_str(c, "name"));
        nf_bench_add_seconds(md, nf_ypath_num(c, "measure.median_s"));
        nf_strbuf_addf(md, "; ");
        nf_bench_add_peer_speedup(md, c);
        nf_strbuf_addf(md, "; ");
        nf_bench_add_node_and_process(md, c);
        if (isfinite(same))
            nf_strbuf_addf(md, "; same choice on %.4f of voxels (%s), largest score difference %.2g (%s)", same,
                           same >= 0.99 ? "met" : "**not met**", diff, diff <= 1e-4 ? "met" : "**not met**");
        nf_strbuf_addf(md, ".\n");
    }
}
