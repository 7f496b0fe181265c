/* domain_inference.c — the `inference` benchmark domain (issue 5): group-level
 * permutation tests over maps through the whole pipeline
 *
 *   maps: load data.npy (subjects x voxels)
 *   [groups: load groups.npy | covariate: load covariate.npy]   (n x 1 columns)
 *   perm: permute, test one_sample | two_sample | correlation, seed 0, exact: never
 *   keep: summarize perm.p and perm.p_fwe
 *
 * run in process as `nlflow run` would, so a timed run includes reading the
 * data from the page cache and writing the two maps.
 *
 * size[] = n subjects, V voxels, N permutations: nltools' benchmark sizes,
 * 30 x 5000 with 1000 and 3000 permutations for each test (one-sample with
 * its default statistic, the mean, and with t; two-sample, difference of
 * means, 15 + 15 subjects by a groups column; Pearson correlation with a
 * covariate column), and the whole brain: one-sample t, 50 x 230000 x 10000.
 * exact is never, so that N is what is asked (the node would otherwise
 * enumerate small sets); the node always computes the max-statistic FWE.
 *
 * Data (one set per size, shared by the tests): unit normal noise; in every
 * 20th voxel the first half of the subjects (group 1) is shifted by 0.8 (a
 * one-sample mean of 0.4 and a two-sample difference of 0.8), and in the next
 * voxel the data follow the covariate (0.5 x covariate: r about 0.45). So each
 * test has about 5% of voxels with a planted effect and a null elsewhere.
 * DATA/permute.json gives the peers N and the seed.
 *
 * Every one-sample size has two rows: vs_numpy (bench/peers/permute_numpy.py,
 * the same test in NumPy float32 with nltools' draws: its p-values are the
 * node's) and vs_mne (bench/peers/permute_mne.py, MNE's permutation_t_test: a
 * t test with its own RNG, compared on time only), the latter with stat t,
 * which is what MNE computes. Two-sample and correlation have no MNE
 * equivalent and only the NumPy peer.
 *
 * Spatial inference (issue 17), one-sample t on a voxel grid: the same test
 * with tfce: true, with clusters (cluster_p 0.0005, one-sided: two-sided
 * p 0.001), and plain (max-t FWE only) on the same data, so that the note
 * gives the ratio of the TFCE and cluster runs to the plain one. Their data is
 * a 4D image, data.nii (one volume per subject) with mask.nii: the brain
 * ellipsoid of bench_data.c (V voxels), each subject's volume unit noise
 * smoothed by a Gaussian of sigma 1.5 voxels (FWHM 3.5 voxels, about 7 mm at
 * 2 mm: TFCE's work depends on how smooth the maps are) and rescaled to unit
 * variance, plus 0.5 in a ball of radius 6 voxels off the centre. The
 * pipeline loads both, masks (the matrix gets the grid) and permutes. The
 * peer is nilearn 0.14's permuted_ols (bench/peers/permute_nilearn.py),
 * whose per-permutation TFCE is too slow to run N times: it times
 * probe_permutations (permute.json) and extrapolates linearly to N.
 *
 * Group GLM (issue 19): permute with test: glm at 100 x 230k x 5000 (and a
 * quick size), design.tsv = intercept, x (the covariate column: its planted
 * voxels are x's effect), age and motion (continuous covariates correlated
 * with x, GLM_ROWS_PER_PERM), contrast x = x by Freedman-Lane with
 * permutations, max-stat FWE; beside it one_sample t on the same data.npy,
 * the time the goal (glm within 2 x) is measured against, and the
 * same test by Smith's method (nuisance_method: smith, one GEMM row per
 * permutation). No peer.
 *
 * The note under the report's table checks the targets: time within
 * 1.5 x the GEMM-bound floor, faster than every peer.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "io/io.h"
#include "core/value.h"
#include "lang/ytree.h"
#include "core/rng.h"

/* The node's defaults that the FLOP count, the matched SGEMM and the peers
 * assume: nltools' random_state of its benchmark, the node's checkpoint chunk. */
enum { INF_SEED = 0, INF_CHUNK = 1000 };
/* Planted effects: every INF_EFFECT_EVERY-th voxel (and the next one). */
enum { INF_EFFECT_EVERY = 20 };
#define INF_GROUP_SHIFT 0.8
#define INF_COVARIATE_SLOPE 0.5

enum inf_variant { ONE_MEAN, ONE_T, TWO_MEAN, CORR_PEARSON, GRID_T, GRID_TFCE, GRID_CLUSTER, GLM_T, GLM_SMITH };

static const struct {
    const char *test, *stat, *input;    /* input: the extra port and file stem, or NULL */
    const char *spatial;                /* on a grid: the permute node's spatial options, else NULL */
} variants[] = {
    [ONE_MEAN] = { "one_sample", "mean", NULL, NULL },
    [ONE_T] = { "one_sample", "t", NULL, NULL },
    [TWO_MEAN] = { "two_sample", "mean", "groups", NULL },
    [CORR_PEARSON] = { "correlation", "pearson", "covariate", NULL },
    [GRID_T] = { "one_sample", "t", NULL, "" },
    [GRID_TFCE] = { "one_sample", "t", NULL, ", tfce: true" },
    [GRID_CLUSTER] = { "one_sample", "t", NULL, ", cluster_p: 0.0005" },
    [GLM_T] = { "glm", "t", "design", NULL },
    [GLM_SMITH] = { "glm", "t", "design", NULL },
};
/* Grid rows: nilearn's permutations (extrapolated from these), the planted
 * ball, the smoothing. */
enum { GRID_PROBE_PERMUTATIONS = 20, GRID_BALL_RADIUS = 6 };
#define GRID_BALL_SHIFT 0.5
#define GRID_SIGMA 1.5
/* The glm rows' design (design.tsv): intercept, x (the covariate column, the
 * regressor of interest) and two continuous nuisance covariates correlated
 * with it, age = 0.6 x + 0.8 e1 (r 0.6) and motion = 0.4 x + 0.9 e2 (r about
 * 0.4), as a group study adjusts for age and head motion. Under permutations
 * the intercept drops out exactly, so Freedman–Lane needs GLM_ROWS_PER_PERM
 * GEMM rows per permutation: x~ and the 2 covariates a draw moves. */
enum { GLM_ROWS_PER_PERM = 3 };
#define GLM_AGE_LOADING 0.6
#define GLM_MOTION_LOADING 0.4

/* ---- sizes and FLOPs ---- */

/* FLOPs of one run: the null GEMMs, R (N x n) . D (n x V), 2 N n V. The
 * epilogue (statistic, exceedance counts, per-permutation maxima: a few
 * operations per null value), drawing the permutations, the observed
 * statistic and the FWE/FDR passes are not counted: GFLOP/s is the rate of
 * the GEMM part, and the floor a bound that the whole run can only approach. */
static double inference_flops(const struct nf_bench_ctx *ctx)
{
    double rows = ctx->cond->variant == GLM_T ? GLM_ROWS_PER_PERM : 1;   /* Smith: 1 */
    return 2.0 * rows * (double)ctx->size[2] * (double)ctx->size[0] * (double)ctx->size[1];
}

/* Input bytes of one run: the data, float32 (the groups or covariate column,
 * n values, is left out). */
static double inference_bytes(const struct nf_bench_ctx *ctx)
{
    return 4.0 * (double)ctx->size[0] * (double)ctx->size[1];
}

/* The null GEMM of one checkpoint chunk, (min(N, chunk) x n) . (n x V): what
 * the node computes per chunk, as voxel tiles of single-threaded GEMMs over
 * the threads (TILE_VOXELS x SUB_ROWS in nodes/permute/permute.c). The harness's
 * matched SGEMM is one call: over the whole chunk it has the node's inner
 * dimension n, which is what bounds BLAS's rate here, and m already spans
 * BLAS's blocking; the whole N x V product would be 9 GB of output at 230k
 * voxels x 10000 permutations. One call writes its whole product to memory
 * (920 MB at 230k voxels), which the node's tiles never do, so at that size
 * the node can beat this "floor". */
static void inference_matched(const struct nf_bench_ctx *ctx, int64_t mnk[3])
{
    mnk[0] = (ctx->size[2] < INF_CHUNK ? ctx->size[2] : INF_CHUNK) * (ctx->cond->variant == GLM_T ? GLM_ROWS_PER_PERM : 1);
    mnk[1] = ctx->size[1];
    mnk[2] = ctx->size[0];
}

/* ---- input files ---- */

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Writes data.npy (n x V), groups.npy and covariate.npy (n x 1) and
 * permute.json unless they exist (writes are atomic, so a file that exists is
 * complete). Deterministic for a given size. Group 1 (value 1, the first in
 * sorted order, as the node and the peer take it) is the first n / 2 rows. */
static int inference_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t n = ctx->size[0], voxels = ctx->size[1], N = ctx->size[2];
    char *data_path = nf_path_join(ctx->data_dir, "data.npy");
    char *groups_path = nf_path_join(ctx->data_dir, "groups.npy");
    char *cov_path = nf_path_join(ctx->data_dir, "covariate.npy");
    char *json_path = nf_path_join(ctx->data_dir, "permute.json");
    char *json = NULL;
    struct nf_value *data = NULL, *groups = NULL, *cov = NULL;
    uint64_t seed = 0x7065726d757465ull + (uint64_t)(n * 7919 + voxels);
    int rc = 0;

    if (!data_path || !groups_path || !cov_path || !json_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (file_exists(data_path) && file_exists(groups_path) && file_exists(cov_path) &&
        file_exists(json_path))
        goto fail;   /* nothing to do: rc is 0 */
    if (n < 4 || voxels < 1 || N < 1) {
        rc = NF_FAIL(err, NF_EUSAGE, "inference needs at least 4 subjects, 1 voxel and 1 permutation");
        goto fail;
    }
    if (!(data = nf_value_new_matrix(n, voxels, NULL, err)) || !(groups = nf_value_new_matrix(n, 1, NULL, err)) ||
        !(cov = nf_value_new_matrix(n, 1, NULL, err))) {
        rc = err->code;
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) {
        groups->u.mat.data[i] = i < n / 2 ? 1.0f : 2.0f;
        cov->u.mat.data[i] = (float)nf_rand_normal(&seed);
    }
    for (int64_t i = 0; i < n; i++) {
        float *row = data->u.mat.data + i * voxels;
        for (int64_t v = 0; v < voxels; v++) {
            double x = nf_rand_normal(&seed);
            if (v % INF_EFFECT_EVERY == 0 && i < n / 2)
                x += INF_GROUP_SHIFT;
            else if (v % INF_EFFECT_EVERY == 1)
                x += INF_COVARIATE_SLOPE * cov->u.mat.data[i];
            row[v] = (float)x;
        }
    }
    json = nf_asprintf("{\"n_permutations\": %" PRId64 ", \"seed\": %d, \"chunk\": %d}\n", N, INF_SEED,
                       INF_CHUNK);
    if (!json) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_npy_write(data_path, &data->u.mat, err));
    NF_TRY(rc = nf_npy_write(groups_path, &groups->u.mat, err));
    NF_TRY(rc = nf_npy_write(cov_path, &cov->u.mat, err));
    NF_TRY(rc = nf_write_file_atomic(json_path, json, strlen(json), err));
fail:
    nf_value_unref(data);
    nf_value_unref(groups);
    nf_value_unref(cov);
    free(json);
    free(data_path);
    free(groups_path);
    free(cov_path);
    free(json_path);
    return rc;
}

/* The glm rows' files: inference_prepare's, and design.tsv (subjects x
 * intercept, x, age, motion; see GLM_ROWS_PER_PERM) unless it exists, x being
 * covariate.npy, whose planted voxels are the regressor's effect. */
static int inference_prepare_glm(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    static const char *const names[] = { "intercept", "x", "age", "motion" };
    const int64_t n = ctx->size[0];
    char *design_path = nf_path_join(ctx->data_dir, "design.tsv");
    char *cov_path = nf_path_join(ctx->data_dir, "covariate.npy");
    struct nf_value *cov = NULL, *design = NULL;
    uint64_t seed = 0x64657369676eull + (uint64_t)n;
    int rc = 0;
    if (!design_path || !cov_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = inference_prepare(ctx, err));
    if (file_exists(design_path))
        goto fail;   /* nothing to do: rc is 0 */
    if (!(cov = nf_npy_read(cov_path, err)) || !(design = nf_value_new_matrix(n, 4, NULL, err))) {
        rc = err->code;
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) {
        double x = cov->u.mat.data[i];
        float *row = design->u.mat.data + i * 4;
        row[0] = 1.0f;
        row[1] = (float)x;
        row[2] = (float)(GLM_AGE_LOADING * x + 0.8 * nf_rand_normal(&seed));
        row[3] = (float)(GLM_MOTION_LOADING * x + 0.9 * nf_rand_normal(&seed));
    }
    NF_TRY(rc = nf_matrix_set_col_names(design, names, err));
    NF_TRY(rc = nf_matrix_write_tsv(design_path, &design->u.mat, err));
fail:
    nf_value_unref(cov);
    nf_value_unref(design);
    free(design_path);
    free(cov_path);
    return rc;
}

/* One axis of the separable Gaussian smoothing of a volume (nx, ny, nz; i
 * fastest), in place, zero outside the grid; tmp: one line of the longest
 * axis. */
static void smooth_axis(float *vol, const int64_t dim[3], int axis, const double *kernel, int radius, double *tmp)
{
    const int64_t stride[3] = { 1, dim[0], dim[0] * dim[1] };
    const int64_t len = dim[axis], s = stride[axis];
    const int a1 = axis == 0 ? 1 : 0, a2 = axis == 2 ? 1 : 2;
    for (int64_t p = 0; p < dim[a1]; p++)
        for (int64_t q = 0; q < dim[a2]; q++) {
            float *line = vol + p * stride[a1] + q * stride[a2];
            for (int64_t i = 0; i < len; i++) {
                double acc = 0;
                for (int d = -radius; d <= radius; d++)
                    if (i + d >= 0 && i + d < len)
                        acc += kernel[d + radius] * line[(i + d) * s];
                tmp[i] = acc;
            }
            for (int64_t i = 0; i < len; i++)
                line[i * s] = (float)tmp[i];
        }
}

/* data.nii (nx x ny x nz x n), mask.nii and permute.json of the grid rows
 * unless they exist (see the top of the file). */
static int inference_prepare_grid(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t n = ctx->size[0], voxels = ctx->size[1], N = ctx->size[2];
    char *data_path = nf_path_join(ctx->data_dir, "data.nii");
    char *mask_path = nf_path_join(ctx->data_dir, "mask.nii");
    char *json_path = nf_path_join(ctx->data_dir, "permute.json");
    char *json = NULL;
    struct nf_grid grid = nf_bench_brain_grid(voxels);
    const int64_t cells = nf_grid_nvox(&grid), nx = grid.dim[0], ny = grid.dim[1];
    float *mask = NULL, *data = NULL;
    double *tmp = NULL, kernel[16];
    const int radius = (int)ceil(4 * GRID_SIGMA);
    uint64_t seed = 0x746663652d67726dull + (uint64_t)(n * 7919 + voxels);
    int rc = 0;

    if (!data_path || !mask_path || !json_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (file_exists(data_path) && file_exists(mask_path) && file_exists(json_path))
        goto fail;   /* nothing to do: rc is 0 */
    if (n < 4 || voxels < 1 || N < 1) {
        rc = NF_FAIL(err, NF_EUSAGE, "inference needs at least 4 subjects, 1 voxel and 1 permutation");
        goto fail;
    }
    if (!(mask = nf_bench_brain_mask(&grid, voxels, err))) {
        rc = err->code;
        goto fail;
    }
    data = nf_malloc_array((size_t)(cells * n), sizeof *data);
    tmp = nf_malloc_array((size_t)(grid.dim[0] + grid.dim[1] + grid.dim[2]), sizeof *tmp);
    if (!data || !tmp) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for %lld subjects' volumes", (long long)n);
        goto fail;
    }
    double ksum = 0;
    for (int d = -radius; d <= radius; d++)
        ksum += kernel[d + radius] = exp(-0.5 * d * d / (GRID_SIGMA * GRID_SIGMA));
    for (int d = 0; d <= 2 * radius; d++)
        kernel[d] /= ksum;
    /* the ball's centre: a quarter of the way from the centre to the edge along x */
    const double ci = (double)(nx - 1) * 0.625, cj = (double)(ny - 1) / 2, ck = (double)(grid.dim[2] - 1) / 2;
    for (int64_t s = 0; s < n; s++) {
        float *vol = data + s * cells;
        for (int64_t c = 0; c < cells; c++)
            vol[c] = (float)nf_rand_normal(&seed);
        for (int axis = 0; axis < 3; axis++)
            smooth_axis(vol, grid.dim, axis, kernel, radius, tmp);
        double ss = 0, m = 0;
        for (int64_t c = 0; c < cells; c++)
            if (mask[c] != 0) {
                ss += (double)vol[c] * vol[c];
                m++;
            }
        const double scale = 1 / sqrt(ss / m);
        for (int64_t c = 0; c < cells; c++) {
            double di = (double)(c % nx) - ci, dj = (double)(c / nx % ny) - cj, dk = (double)(c / nx / ny) - ck;
            bool ball = di * di + dj * dj + dk * dk <= GRID_BALL_RADIUS * GRID_BALL_RADIUS;
            vol[c] = mask[c] == 0 ? 0.0f : (float)(vol[c] * scale + (ball ? GRID_BALL_SHIFT : 0.0));
        }
    }
    json = nf_asprintf("{\"n_permutations\": %" PRId64 ", \"seed\": %d, \"chunk\": %d, \"cluster_p\": 0.0005, "
                       "\"probe_permutations\": %d}\n", N, INF_SEED, INF_CHUNK, GRID_PROBE_PERMUTATIONS);
    if (!json) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_nifti_write(data_path, &grid, n, data, 0, "nlflow bench: smooth noise", err));
    NF_TRY(rc = nf_nifti_write(mask_path, &grid, 1, mask, 0, "nlflow bench: brain ellipsoid", err));
    NF_TRY(rc = nf_write_file_atomic(json_path, json, strlen(json), err));
fail:
    nf_free_aligned(mask);
    free(data);
    free(tmp);
    free(json);
    free(data_path);
    free(mask_path);
    free(json_path);
    return rc;
}

/* ---- the measured run ---- */

static int inference_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    const int variant = ctx->cond->variant;
    const char *input = variants[variant].input;
    char *extra_node = NULL, *extra_port = NULL;
    int rc = 0;
    /* the groups or covariate column: a load node of that name and the port of that name */
    extra_node = input ? nf_asprintf("  %s: {type: load, path: '%s/%s.%s'}\n", input, ctx->data_dir, input,
                                     variant == GLM_T || variant == GLM_SMITH ? "tsv" : "npy")
                       : nf_strdup("");
    extra_port = input ? nf_asprintf(", %s: %s", input, input) : nf_strdup("");
    if (!extra_node || !extra_port) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (variants[variant].spatial) {
        /* the grid rows: the image masked (the matrix keeps the grid), then permuted */
        NF_TRY(rc = nf_bench_pipeline_setup_node(ctx, "bench-inference-grid", "perm", state, err,
            "  scans: {type: load, path: '%s/data.nii'}\n"
            "  brain: {type: load, path: '%s/mask.nii'}\n"
            "  maps: {type: mask, in: {data: scans, mask: brain}}\n"
            "  perm: {type: permute, in: {data: maps}, test: one_sample, stat: t, tail: two,"
            " n_permutations: %" PRId64 ", seed: %d, exact: never, chunk: %d%s}\n"
            "  keep: {type: summarize, in: {p_fwe: perm.p_fwe%s}}\n",
            ctx->data_dir, ctx->data_dir, ctx->size[2], INF_SEED, INF_CHUNK, variants[variant].spatial,
            variant == GRID_TFCE ? ", p_tfce_fwe: perm.p_tfce_fwe"
            : variant == GRID_CLUSTER ? ", cluster_p_fwe: perm.cluster_p_fwe" : ""));
        goto fail;
    }
    if (variant == GLM_T || variant == GLM_SMITH) {
        /* the regressor of interest x, with the intercept, age and motion as nuisance */
        NF_TRY(rc = nf_bench_pipeline_setup_node(ctx, "bench-inference-glm", "perm", state, err,
            "  maps: {type: load, path: '%s/data.npy'}\n"
            "%s"
            "  perm: {type: permute, in: {data: maps%s}, test: glm, contrasts: ['x = x'], tail: two,"
            " n_permutations: %" PRId64 ", seed: %d, chunk: %d%s}\n"
            "  keep: {type: summarize, in: {p: perm.p, p_fwe: perm.p_fwe}}\n",
            ctx->data_dir, extra_node, extra_port, ctx->size[2], INF_SEED, INF_CHUNK,
            variant == GLM_SMITH ? ", nuisance_method: smith" : ""));
        goto fail;
    }
    /* stat is the one/two-sample statistic; correlation takes method instead */
    NF_TRY(rc = nf_bench_pipeline_setup_node(ctx, "bench-inference", "perm", state, err,
        "  maps: {type: load, path: '%s/data.npy'}\n"
        "%s"
        "  perm: {type: permute, in: {data: maps%s}, test: %s, %s: %s, tail: two,"
        " n_permutations: %" PRId64 ", seed: %d, exact: never, chunk: %d}\n"
        "  keep: {type: summarize, in: {p: perm.p, p_fwe: perm.p_fwe}}\n",
        ctx->data_dir, extra_node, extra_port, variants[variant].test,
        variant == CORR_PEARSON ? "method" : "stat", variants[variant].stat,
        ctx->size[2], INF_SEED, INF_CHUNK));
fail:
    free(extra_node);
    free(extra_port);
    return rc;
}

/* The test, its statistic and the data size (for the RSS figure), in the
 * result file. */
static void inference_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    const int variant = ctx->cond->variant;
    nf_strbuf_addf(json, ", \"test\": \"%s\", \"statistic\": \"%s\", \"permutations\": %" PRId64
                   ", \"seed\": %d, \"data_bytes\": %" PRId64,
                   variants[variant].test, variants[variant].stat, ctx->size[2], INF_SEED,
                   4 * ctx->size[0] * ctx->size[1]);
    if (variant == GLM_T)
        nf_strbuf_addf(json, ", \"design\": \"intercept, x (tested: contrast x = x), age = %.1f x + noise, motion = "
                       "%.1f x + noise (Freedman-Lane, permutations; the intercept drops out: %d GEMM rows per "
                       "permutation)\"", GLM_AGE_LOADING, GLM_MOTION_LOADING, GLM_ROWS_PER_PERM);
    if (variant == GLM_SMITH)
        nf_strbuf_addf(json, ", \"design\": \"intercept, x (tested: contrast x = x), age = %.1f x + noise, motion = "
                       "%.1f x + noise (Smith, permutations: 1 GEMM row per permutation)\"", GLM_AGE_LOADING,
                       GLM_MOTION_LOADING);
    /* the permute node alone (the executor's clock) and whole `nlflow run` processes */
    nf_bench_pipeline_describe(ctx, state, json);
}

/* INF_ROW expands its arguments first so that NUMPY_* and MNE can stand for
 * three of them: the variant, the peer script and its --mode. */
#define INF_ROW(...) INF_ROW_(__VA_ARGS__)
#define INF_ROW_(name, runs, n, v, N, variant, script, mode)                                    \
    { name, runs, { n, v, N, 0 }, variant, inference_prepare, inference_setup,                  \
      nf_bench_pipeline_run_once, nf_bench_pipeline_teardown, inference_flops, inference_bytes,                 \
      inference_matched, inference_describe, script, mode, false }
#define NUMPY_ONE_MEAN ONE_MEAN, "permute_numpy.py", "one_sample_mean"
#define NUMPY_ONE_T ONE_T, "permute_numpy.py", "one_sample_t"
#define NUMPY_TWO TWO_MEAN, "permute_numpy.py", "two_sample_mean"
#define NUMPY_CORR CORR_PEARSON, "permute_numpy.py", "correlation_pearson"
#define MNE_ONE_T ONE_T, "permute_mne.py", "one_sample_t"
#define GRID_ROW(name, runs, n, v, N, variant, mode)                                            \
    { name, runs, { n, v, N, 0 }, variant, inference_prepare_grid, inference_setup,             \
      nf_bench_pipeline_run_once, nf_bench_pipeline_teardown, inference_flops, inference_bytes,                 \
      inference_matched, inference_describe, "permute_nilearn.py", mode, false }
/* glm rows: test glm and, on the same data, one_sample t (the time it is compared with), no peer */
#define GLM_ROW(...) GLM_ROW_(__VA_ARGS__)
#define GLM_ROW_(name, runs, n, v, N, variant)                                                   \
    { name, runs, { n, v, N, 0 }, variant, inference_prepare_glm, inference_setup,              \
      nf_bench_pipeline_run_once, nf_bench_pipeline_teardown, inference_flops, inference_bytes,                 \
      inference_matched, inference_describe, NULL, NULL, false }
#define QUICK NF_BENCH_QUICK, 30, 300, 200
#define NLTOOLS(N) NF_BENCH_FULL, 30, 5000, N

/* Sizes in names as key=value, so the report's plot draws one line per test
 * and peer. */
const struct nf_bench_condition nf_bench_inference_conditions[] = {
    INF_ROW("one_sample[mean,vs_numpy,n=30,v=300,N=200]", QUICK, NUMPY_ONE_MEAN),
    INF_ROW("one_sample[t,vs_numpy,n=30,v=300,N=200]", QUICK, NUMPY_ONE_T),
    INF_ROW("one_sample[t,vs_mne,n=30,v=300,N=200]", QUICK, MNE_ONE_T),
    INF_ROW("two_sample[mean,vs_numpy,n=30,v=300,N=200]", QUICK, NUMPY_TWO),
    INF_ROW("correlation[pearson,vs_numpy,n=30,v=300,N=200]", QUICK, NUMPY_CORR),
    INF_ROW("one_sample[mean,vs_numpy,n=30,v=5000,N=1000]", NLTOOLS(1000), NUMPY_ONE_MEAN),
    INF_ROW("one_sample[t,vs_mne,n=30,v=5000,N=1000]", NLTOOLS(1000), MNE_ONE_T),
    INF_ROW("two_sample[mean,vs_numpy,n=30,v=5000,N=1000]", NLTOOLS(1000), NUMPY_TWO),
    INF_ROW("correlation[pearson,vs_numpy,n=30,v=5000,N=1000]", NLTOOLS(1000), NUMPY_CORR),
    INF_ROW("one_sample[mean,vs_numpy,n=30,v=5000,N=3000]", NLTOOLS(3000), NUMPY_ONE_MEAN),
    INF_ROW("one_sample[t,vs_mne,n=30,v=5000,N=3000]", NLTOOLS(3000), MNE_ONE_T),
    INF_ROW("two_sample[mean,vs_numpy,n=30,v=5000,N=3000]", NLTOOLS(3000), NUMPY_TWO),
    INF_ROW("correlation[pearson,vs_numpy,n=30,v=5000,N=3000]", NLTOOLS(3000), NUMPY_CORR),
    INF_ROW("one_sample[t,vs_numpy,n=50,v=230000,N=10000]", NF_BENCH_FULL, 50, 230000, 10000, NUMPY_ONE_T),
    INF_ROW("one_sample[t,vs_mne,n=50,v=230000,N=10000]", NF_BENCH_FULL, 50, 230000, 10000, MNE_ONE_T),
    GRID_ROW("grid[t,vs_nilearn,n=12,v=4000,N=100]", NF_BENCH_QUICK, 12, 4000, 100, GRID_T, "one_sample_t"),
    GRID_ROW("grid[tfce,vs_nilearn,n=12,v=4000,N=100]", NF_BENCH_QUICK, 12, 4000, 100, GRID_TFCE,
             "one_sample_t_tfce"),
    GRID_ROW("grid[t,vs_nilearn,n=50,v=230000,N=5000]", NF_BENCH_FULL, 50, 230000, 5000, GRID_T, "one_sample_t"),
    GRID_ROW("grid[tfce,vs_nilearn,n=50,v=230000,N=5000]", NF_BENCH_FULL, 50, 230000, 5000, GRID_TFCE,
             "one_sample_t_tfce"),
    GRID_ROW("grid[cluster,vs_nilearn,n=50,v=230000,N=5000]", NF_BENCH_FULL, 50, 230000, 5000, GRID_CLUSTER,
             "one_sample_t_cluster"),
    GLM_ROW("glm[one_sample_t,n=30,v=300,N=200]", QUICK, ONE_T),
    GLM_ROW("glm[t_x+3_nuisance,n=30,v=300,N=200]", QUICK, GLM_T),
    GLM_ROW("glm[t_x+3_nuisance,smith,n=30,v=300,N=200]", QUICK, GLM_SMITH),
    GLM_ROW("glm[one_sample_t,n=100,v=230000,N=5000]", NF_BENCH_FULL, 100, 230000, 5000, ONE_T),
    GLM_ROW("glm[t_x+3_nuisance,n=100,v=230000,N=5000]", NF_BENCH_FULL, 100, 230000, 5000, GLM_T),
    GLM_ROW("glm[t_x+3_nuisance,smith,n=100,v=230000,N=5000]", NF_BENCH_FULL, 100, 230000, 5000, GLM_SMITH),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};

/* ---- the note under the report's table ---- */

/* The median node time of the row named `prefix` + the size of condition c
 * (what follows the first ',' of its name), NAN when it did not run. */
static double same_size_node_s(const struct nf_ynode *domain_result, const struct nf_ynode *c, const char *prefix)
{
    const char *name = nf_ypath_str(c, "name"), *rest = strchr(name, ',');
    const struct nf_ynode *o;
    for (size_t i = 0; rest && (o = nf_bench_next_ok(domain_result, &i));) {
        const char *other = nf_ypath_str(o, "name");
        if (strncmp(other, prefix, strlen(prefix)) == 0 && strchr(other, ',') &&
            strcmp(strchr(other, ','), rest) == 0)
            return nf_ypath_num(o, "measure.node_median_s");
    }
    return NAN;
}

/* Issue 17's targets for the rows on a voxel grid: TFCE at 50 x 230k x 5000
 * in 20 s or less on a 2-core machine, 100 x faster than nilearn; and the
 * ratio of the TFCE and cluster runs to the plain max-t run. */
static void grid_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *c;
    bool any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        const char *name = nf_ypath_str(c, "name");
        if (strncmp(name, "grid[", 5) != 0)
            continue;
        if (!any)
            nf_strbuf_addf(md, "\nSpatial inference (issue 17): one-sample t on a smooth-noise brain ellipsoid "
                               "(bench/domain_inference.c), plain max-t, TFCE (tfce: true) and cluster "
                               "inference (cluster_p 0.0005 one-sided, nilearn's two-sided threshold 0.001). "
                               "Targets: TFCE at 50 x 230k x 5000 in 20 s or less on this machine's cores, "
                               "100 x faster than nilearn 0.14's permuted_ols, whose time is extrapolated "
                               "linearly from a run of probe_permutations (20: nilearn takes seconds per TFCE permutation at 230k voxels) and one of none "
                               "(bench/peers/permute_nilearn.py; the measured times are in the result file). "
                               "Ratio: the node's time over the plain row's on the same data.\n\n");
        any = true;
        double node = nf_ypath_num(c, "measure.node_median_s"), plain = same_size_node_s(domain_result, c, "grid[t,");
        double N = nf_ypath_num(c, "measure.permutations");
        nf_strbuf_addf(md, "- %s: node ", name);
        nf_bench_add_seconds(md, node);
        nf_strbuf_addf(md, " (%.3g ms per permutation)", 1e3 * node / N);
        if (strncmp(name, "grid[t,", 7) != 0 && isfinite(plain))
            nf_strbuf_addf(md, ", %.1f x the plain run", node / plain);
        if (strncmp(name, "grid[tfce,", 10) == 0 && strstr(name, "v=230000,N=5000"))
            nf_strbuf_addf(md, ", 20 s target: %s", node <= 20 ? "met" : "**not met**");
        nf_strbuf_addf(md, "; ");
        nf_bench_add_peer_speedup(md, c);
        nf_strbuf_addf(md, ".\n");
    }
    if (any)
        nf_bench_name_peer(md, domain_result, "permute_nilearn.py");
}

/* Issue 19's target for test glm: at 100 x 230k x 5000, x + 3 nuisance
 * regressors, max-stat FWE, the node within 2 x the one-sample t's time on
 * the same data. Exact Freedman-Lane needs GLM_ROWS_PER_PERM GEMM rows per
 * permutation where one_sample needs 1, so the GEMM work alone is that
 * ratio (docs/randomise.md); the note gives both. */
static void glm_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *c;
    bool any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        const char *name = nf_ypath_str(c, "name");
        if (strncmp(name, "glm[t_", 6) != 0)
            continue;
        if (!any)
            nf_strbuf_addf(md, "\nGroup GLM (issue 19): permute with test: glm, contrast x = x, design intercept + "
                               "x + age + motion (two continuous covariates correlated with x, r 0.6 and 0.4), "
                               "Freedman-Lane with permutations, max-stat FWE, against test: one_sample (t) on "
                               "the same data. Goal: glm within 2 x one_sample at 100 x 230k x 5000. The exact "
                               "floor: Freedman-Lane needs per permutation the products of the permuted residuals "
                               "with x residualised on the nuisance and with the %d nuisance directions a "
                               "permutation moves (the intercept drops out), %d GEMM rows where one_sample "
                               "needs 1, so the GEMM work alone is %d x.\n\n",
                           GLM_ROWS_PER_PERM - 1, GLM_ROWS_PER_PERM, GLM_ROWS_PER_PERM);
        any = true;
        double node = nf_ypath_num(c, "measure.node_median_s"), one = same_size_node_s(domain_result, c,
                                                                                      "glm[one_sample_t,");
        double floor_s = nf_ypath_num(c, "measure.flops") / (nf_ypath_num(c, "matched_sgemm.gflops") * 1e9);
        nf_strbuf_addf(md, "- %s: node ", name);
        nf_bench_add_seconds(md, node);
        nf_strbuf_addf(md, " (%.2f x its GEMM floor of ", node / floor_s);
        nf_bench_add_seconds(md, floor_s);
        nf_strbuf_addf(md, ")");
        if (isfinite(one)) {
            nf_strbuf_addf(md, "; one_sample ");
            nf_bench_add_seconds(md, one);
            bool smith = strstr(name, ",smith") != NULL;
            nf_strbuf_addf(md, ", ratio %.2f x (GEMM work %d x)", node / one, smith ? 1 : GLM_ROWS_PER_PERM);
            if (smith)
                nf_strbuf_addf(md, " (Smith's method: another exact null; the goal is Freedman-Lane's)");
            else if (strstr(name, "n=100,v=230000,N=5000"))
                nf_strbuf_addf(md, ", 2 x goal: %s", node <= 2 * one ? "met" : "**not met**");
        }
        nf_strbuf_addf(md, ".\n");
    }
}

void nf_bench_inference_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *c;
    bool any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        if (!any)
            nf_strbuf_addf(md, "\nTargets (issue 5). The permute node's time within 1.5 x the GEMM-bound "
                               "floor, where floor = the FLOPs of the null GEMMs, 2 N n V (the epilogue, "
                               "counts, maxima, draws and preparation are not counted; see "
                               "bench/domain_inference.c) / the GFLOP/s of the matched SGEMM "
                               "(min(N, 1000) x V x n: one checkpoint chunk's null statistics as one "
                               "product, measured in the same run). The node's time is the executor's "
                               "clock from its start to its end (checks, preparation, draws, every "
                               "null statistic, p-values, FDR): the computation the floor describes. "
                               "The whole pipeline's time (loading the data, writing and fsyncing the p "
                               "and p_fwe maps, the run's summary) is given too, with its ratio: at "
                               "nltools' sizes the floor is a few ms, about what writing the outputs "
                               "durably costs. Below 1 x, the node beats that one SGEMM call: it writes "
                               "its whole product to memory (920 MB at 230k voxels), which the node's "
                               "fused register tiles never do. Faster than each peer, pipeline against "
                               "peer. permute_numpy.py runs the same test in NumPy "
                               "float32 with nltools' draws (RandomState(seed).randint(2**31-1, N), "
                               "then RandomState(seed_i) per permutation), the null statistics of "
                               "blocks of permutations as matmuls, so its p-values are the node's; "
                               "permute_mne.py is MNE's permutation_t_test (sign flips, t max, float64, "
                               "its own RNG): only its time compares; MNE has no two-sample or "
                               "correlation permutation test, so those have the NumPy peer alone. "
                               "Both run with as many BLAS threads as nlflow. Last on each line: the "
                               "node's time and a whole `nlflow run --no-cache` process of the same "
                               "pipeline (exec to exit: start-up, reading the data, the test, writing the "
                               "maps; wall and CPU time), each with the peer's time over it: the node "
                               "ratio compares computation with computation (the peers time theirs with "
                               "the data in memory), the whole-process ratio what a user waits for.\n\n");
        any = true;
        if (strncmp(nf_ypath_str(c, "name"), "grid[", 5) == 0 || strncmp(nf_ypath_str(c, "name"), "glm[", 4) == 0)
            continue;   /* the spatial and glm rows: their own notes below */
        double t = nf_ypath_num(c, "measure.median_s");
        double flops = nf_ypath_num(c, "measure.flops");
        double rate = nf_ypath_num(c, "matched_sgemm.gflops");
        double floor_s = flops / (rate * 1e9);
        double data_bytes = nf_ypath_num(c, "measure.data_bytes");
        double peak = nf_ypath_num(c, "measure.rss_peak_sampled") - nf_ypath_num(c, "measure.rss_baseline");
        double node = nf_ypath_num(c, "measure.node_median_s");
        nf_strbuf_addf(md, "- %s: node ", nf_ypath_str(c, "name"));
        if (isfinite(node)) {
            nf_bench_add_seconds(md, node);
            nf_strbuf_addf(md, " = %.2f x the floor of ", node / floor_s);
        } else {
            nf_strbuf_addf(md, "not timed (an older result file); floor ");
        }
        nf_bench_add_seconds(md, floor_s);
        nf_strbuf_addf(md, " (%.3g GFLOP at %.3g GFLOP/s): %s; pipeline ", flops * 1e-9, rate,
                       !isfinite(node) ? "—" : node <= 1.5 * floor_s ? "met" : "**not met**");
        nf_bench_add_seconds(md, t);
        nf_strbuf_addf(md, " (%.2f x); ", t / floor_s);
        nf_bench_add_peer_speedup(md, c);
        nf_strbuf_addf(md, "; peak RSS ");
        nf_bench_add_bytes(md, peak);
        nf_strbuf_addf(md, " for ");
        nf_bench_add_bytes(md, data_bytes);
        nf_strbuf_addf(md, " of data; ");
        nf_bench_add_node_and_process(md, c);
        nf_strbuf_addf(md, ".\n");
    }
    nf_bench_name_peer(md, domain_result, "permute_mne.py");   /* the table names only the first */
    grid_notes(domain_result, md);
    glm_notes(domain_result, md);
}
