/* domain_gpu.c — the `gpu` benchmark domain (issue 8): the GPU ridge and
 * permute nodes at the sizes, next to the CPU nodes on the same data
 * in the same run.
 *
 *   ridge[gpu,n,v,p]: nf_ridge_run_gpu on X (n x p) and Y (n x V) in memory,
 *     20 alphas logspace(-2, 4), 5 contiguous folds, per-voxel alpha, as the
 *     ridge domain; sizes 500 x 20000 x 50, 1000 x 20000 x 100 and the whole
 *     brain 1000 x 230000 x 100.
 *   permute[gpu,t,max,n,v,N]: nf_permute_run_gpu, one-sample t, two tails,
 *     10000 random sign flips (the max-statistic FWE is always computed),
 *     50 x 230000.
 *   searchlight[gpu,ridge_classifier,n,v,cv,r]: nf_predict_run_gpu, mode
 *     searchlight, the full-brain case of the predict domain: 120 images x
 *     50000 voxels of a brain-shaped ellipsoid on a 3 mm grid, radius 6 mm
 *     (spheres of up to 33 voxels), stratified 5-fold, two balanced classes
 *     that shift the voxels within 9 mm of a point.
 *
 * The node is called directly (not through a pipeline), so a timed run is the
 * node: the GPU context is made during the warm-up, and each run includes its
 * arena allocation, every upload and download, and the host's share (drawing
 * permutations, packing blocks, checking inputs). Data are generated in
 * setup() (not timed), shaped as in the ridge and inference domains: smooth
 * AR(1) features and planted weights; unit noise with an effect in every 20th
 * voxel.
 *
 * After the timed runs, describe() runs the CPU node once on the same inputs
 * (all cores) and records its time, the speedup, and how well the two agree
 * (chosen alphas, largest score or p difference), plus the share of the H200's
 * peak the GPU median reaches: FP32 (66.9 TFLOP/s) for ridge, whose GEMMs
 * bound it, and HBM (4.8 TB/s) for permute, whose null values stream through
 * device memory twice (written by cuBLAS, read by the epilogue). The
 * searchlight reports the FP32 share of its FLOPs (the Grams, solves and
 * decisions of every sphere and fold, counted from the actual sphere sizes),
 * and how many centres have the CPU's exact map value (the others: decision
 * values within round-off of the class boundary, docs/gpu.md).
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "plan/cost.h"
#include "kernels/kernels.h"
#include "pipeline.h"
#include "core/value.h"
#include "lang/ytree.h"
#include "permute/permute.h"
#include "predict/predict.h"
#include "predict/predict_models.h"
#include "ridge/ridge.h"
#include "searchlight/searchlight.h"
#include "core/rng.h"

#define H200_FP32_FLOPS 66.9e12
#define H200_HBM_BYTES 4.8e12

enum gpu_variant { GPU_RIDGE, GPU_PERMUTE, GPU_SEARCHLIGHT };
enum { MAX_RUNS = 1024 };

struct gpu_state {
    int variant, threads;
    struct nf_value *in[4];
    void *params;
    double times[MAX_RUNS];
    int n_runs;
};

static const struct nf_node_type *variant_node(int variant)
{
    return variant == GPU_RIDGE ? &nf_node_ridge : variant == GPU_PERMUTE ? &nf_node_permute : &nf_node_predict;
}

static int run_node(struct gpu_state *st, bool gpu, struct nf_value **out, struct nf_error *err)
{
    struct nf_env env = { .threads = st->threads, .seed = 1 };
    bool wanted[6] = { true, true, true, false, true, false };
    bool map_only[PREDICT_N_OUT] = { [PREDICT_OUT_MAP] = true };
    struct nf_run run = { .params = st->params, .env = &env, .in = st->in, .out = out, .err = err,
                          .wanted = st->variant == GPU_RIDGE ? wanted : st->variant == GPU_SEARCHLIGHT ? map_only
                                                                                                      : NULL };
#ifdef HAVE_CUDA
    if (gpu)
        return st->variant == GPU_RIDGE     ? nf_ridge_run_gpu(&run)
               : st->variant == GPU_PERMUTE ? nf_permute_run_gpu(&run)
                                            : nf_predict_run_gpu(&run);
#else
    if (gpu)
        return NF_FAIL(err, NF_EUSAGE, "this build has no CUDA support");
#endif
    return variant_node(st->variant)->run_cpu(&run);
}

static void gpu_teardown(void *state)
{
    struct gpu_state *st = state;
    if (!st)
        return;
    for (int i = 0; i < 4; i++)
        nf_value_unref(st->in[i]);
    if (st->params)
        nf_params_release(variant_node(st->variant), st->params);
    free(st->params);
    free(st);
}

/* ---- the searchlight's brain ---- */

/* The predict domain's brain (bench.h): the `voxels` voxels nearest the
 * centre of a tight 3 mm grid in the metric of an ellipsoid with a brain's
 * proportions, x flipped as in MNI space. */
static struct nf_geom *brain_geom(int64_t voxels, struct nf_error *err)
{
    struct nf_grid g = nf_bench_brain_grid(voxels);
    float *mask = nf_bench_brain_mask(&g, voxels, err);
    struct nf_geom *geom = mask ? nf_geom_from_mask(&g, mask) : NULL;
    if (mask && !geom)
        NF_FAIL(err, NF_ENOMEM, "out of memory for the searchlight's brain");
    nf_free_aligned(mask);
    return geom;
}

/* X: unit noise with voxel offsets; y: two balanced classes in a seeded
 * order, which shift the voxels within 9 mm of a point off the centre. */
static int searchlight_setup(struct gpu_state *st, const struct nf_bench_ctx *ctx, uint64_t seed,
                             struct nf_error *err)
{
    const int64_t n = ctx->size[0], voxels = ctx->size[1];
    struct predict_params *prm = calloc(1, sizeof *prm);
    struct nf_geom *geom = NULL;
    int rc = 0;
    st->params = prm;
    if (!prm)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    nf_params_defaults(&nf_node_predict, prm);
    prm->mode = PREDICT_SEARCHLIGHT;
    prm->model = NF_MODEL_RIDGE_CLASSIFIER;
    prm->cv = ctx->size[2];
    prm->seed = 0;
    prm->radius = (double)ctx->size[3];
    if (!(geom = brain_geom(voxels, err)))
        return err->code;
    const int64_t V = geom->n_voxels;
    if (!(st->in[PREDICT_IN_X] = nf_value_new_matrix(n, V, geom, err)) ||
        !(st->in[PREDICT_IN_Y] = nf_value_new_matrix(n, 1, NULL, err))) {
        rc = err->code ? err->code : NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    float *X = st->in[PREDICT_IN_X]->u.mat.data, *y = st->in[PREDICT_IN_Y]->u.mat.data;
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(i % 2);
    for (int64_t i = n - 1; i > 0; i--) {   /* Fisher-Yates */
        int64_t j = (int64_t)(nf_rand_uniform(&seed) * (double)(i + 1));
        float t = y[i];
        y[i] = y[j];
        y[j] = t;
    }
    const int64_t nx = geom->grid.dim[0], ny = geom->grid.dim[1];
    const double cx = (double)nx / 3, cy = (double)ny / 2, cz = (double)geom->grid.dim[2] / 2;
    for (int64_t v = 0; v < V; v++) {
        int64_t idx = geom->index[v];
        double dx = (double)(idx % nx) - cx, dy = (double)(idx / nx % ny) - cy, dz = (double)(idx / nx / ny) - cz;
        bool planted = (dx * dx + dy * dy + dz * dz) * NF_BENCH_BRAIN_MM * NF_BENCH_BRAIN_MM <= 81.0;
        double off = 5 * nf_rand_normal(&seed);
        for (int64_t i = 0; i < n; i++)
            X[i * V + v] = (float)(off + nf_rand_normal(&seed) + (planted && y[i] == 1.0f ? 1.0 : 0.0));
    }
fail:
    nf_geom_unref(geom);
    return rc;
}

/* FLOPs of the closed forms over the actual spheres, per sphere and fold as
 * the predict domain counts them (nf_bench_sphere_fold_flops), with folds of
 * n / k rows (the first n mod k one more). */
static double searchlight_flops(const struct nf_bench_ctx *ctx)
{
    struct nf_error err = { 0 };
    struct nf_sl_spheres s = { 0 };
    struct nf_geom *geom = brain_geom(ctx->size[1], &err);
    const int64_t n = ctx->size[0], k = ctx->size[2];
    double total = 0;
    if (geom && nf_sl_spheres_build(geom, (double)ctx->size[3], &s, &err) == 0) {
        for (int64_t c = 0; c < s.n_centres; c++) {
            double m = (double)(s.indptr[c + 1] - s.indptr[c]);
            if (m < 2)
                continue;
            for (int64_t f = 0; f < k; f++) {
                double nv = (double)(n / k + (f < n % k));
                total += nf_bench_sphere_fold_flops(m, (double)n - nv, nv);
            }
        }
    }
    nf_sl_spheres_release(&s);
    nf_geom_unref(geom);
    return total;
}

static int gpu_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    struct gpu_state *st = calloc(1, sizeof *st);
    uint64_t seed = 0x67707500ull + (uint64_t)ctx->size[0];
    int rc = 0;
    if (!st)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    st->variant = ctx->cond->variant;
    st->threads = ctx->threads;
    if (st->variant == GPU_RIDGE) {
        const int64_t n = ctx->size[0], V = ctx->size[1], p = ctx->size[2];
        struct ridge_params *prm = calloc(1, sizeof *prm);
        float *W = malloc((size_t)(p * V) * sizeof *W);
        st->params = prm;
        if (!prm || !W || !(st->in[RIDGE_IN_X] = nf_value_new_matrix(n, p, NULL, err)) ||
            !(st->in[RIDGE_IN_Y] = nf_value_new_matrix(n, V, NULL, err))) {
            free(W);
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the ridge data");
            goto fail;
        }
        nf_params_defaults(&nf_node_ridge, prm);   /* logspace(-2, 4, 20), 5 folds, per voxel */
        float *X = st->in[RIDGE_IN_X]->u.mat.data, *Y = st->in[RIDGE_IN_Y]->u.mat.data;
        const double phi = 0.9, innovation = sqrt(1.0 - phi * phi);
        for (int64_t j = 0; j < p; j++) {
            double x = nf_rand_normal(&seed);
            for (int64_t i = 0; i < n; i++) {
                if (i > 0)
                    x = phi * x + innovation * nf_rand_normal(&seed);
                X[i * p + j] = (float)x;
            }
        }
        for (int64_t v = 0; v < V; v++) {
            double u = nf_rand_uniform(&seed), amplitude = 2.0 * u * u / sqrt((double)p);
            for (int64_t j = 0; j < p; j++)
                W[j * V + v] = (float)(amplitude * nf_rand_normal(&seed));
        }
        nf_kernels_cpu()->sgemm(false, false, n, V, p, 1.0f, X, p, W, V, 0.0f, Y, V);
        free(W);
        for (int64_t e = 0; e < n * V; e++)
            Y[e] += (float)nf_rand_normal(&seed);
    } else if (st->variant == GPU_SEARCHLIGHT) {
        NF_TRY(rc = searchlight_setup(st, ctx, seed, err));
    } else {
        const int64_t n = ctx->size[0], V = ctx->size[1];
        struct permute_params *prm = calloc(1, sizeof *prm);
        st->params = prm;
        if (!prm || !(st->in[PERMUTE_IN_DATA] = nf_value_new_matrix(n, V, NULL, err))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the permutation data");
            goto fail;
        }
        nf_params_defaults(&nf_node_permute, prm);
        prm->stat = PERM_STAT_T;
        prm->n_permutations = ctx->size[2];
        prm->exact = PERM_EXACT_NEVER;
        prm->seed = 0;
        float *D = st->in[PERMUTE_IN_DATA]->u.mat.data;
        for (int64_t i = 0; i < n; i++)
            for (int64_t v = 0; v < V; v++)
                D[i * V + v] = (float)(nf_rand_normal(&seed) + (v % 20 == 0 ? 0.4 : 0.0));
    }
    *state = st;
    st = NULL;
fail:
    gpu_teardown(st);
    return rc;
}

static int gpu_run_once(void *state, struct nf_error *err)
{
    struct gpu_state *st = state;
    struct nf_value *out[6] = { 0 };
    double t0 = nf_now();
    int rc = run_node(st, true, out, err);
    if (st->n_runs < MAX_RUNS)
        st->times[st->n_runs++] = nf_now() - t0;
    for (int o = 0; o < 6; o++)
        nf_value_unref(out[o]);
    return rc;
}

static double gpu_flops(const struct nf_bench_ctx *ctx)
{
    struct nf_cost c = { 0 };
    struct nf_shape in[4] = { { 0 } };
    int ok = 0;
    if (ctx->cond->variant == GPU_SEARCHLIGHT)
        return searchlight_flops(ctx);
    if (ctx->cond->variant == GPU_RIDGE) {
        struct ridge_params prm;
        nf_params_defaults(&nf_node_ridge, &prm);
        in[RIDGE_IN_X].kind = in[RIDGE_IN_Y].kind = NF_KIND_MATRIX;
        in[RIDGE_IN_X].dim[0] = in[RIDGE_IN_Y].dim[0] = ctx->size[0];
        in[RIDGE_IN_X].dim[1] = ctx->size[2];
        in[RIDGE_IN_Y].dim[1] = ctx->size[1];
        ok = nf_ridge_cost(&prm, in, NULL, &c);
        nf_params_release(&nf_node_ridge, &prm);
    } else {
        struct permute_params prm;
        nf_params_defaults(&nf_node_permute, &prm);
        prm.n_permutations = ctx->size[2];
        prm.exact = PERM_EXACT_NEVER;
        in[PERMUTE_IN_DATA].kind = NF_KIND_MATRIX;
        in[PERMUTE_IN_DATA].dim[0] = ctx->size[0];
        in[PERMUTE_IN_DATA].dim[1] = ctx->size[1];
        ok = nf_permute_cost(&prm, in, NULL, &c);
        nf_params_release(&nf_node_permute, &prm);
    }
    return ok ? c.flops : 0.0;
}

static double gpu_bytes(const struct nf_bench_ctx *ctx)
{
    double n = (double)ctx->size[0], V = (double)ctx->size[1];
    /* the inputs: X and Y (ridge), the data (permute), X (searchlight) */
    return ctx->cond->variant == GPU_RIDGE ? 4.0 * n * (V + (double)ctx->size[2]) : 4.0 * n * V;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The CPU node once, the speedup, the agreement, the share of the peak. */
static void gpu_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    struct gpu_state *st = state;
    struct nf_value *cpu[6] = { 0 }, *gpu[6] = { 0 };
    struct nf_error err = { 0 };
    double sorted[MAX_RUNS];
    /* the first run is the warm-up */
    int n = st->n_runs > 1 ? st->n_runs - 1 : st->n_runs;
    memcpy(sorted, st->times + (st->n_runs - n), (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    double median = n ? sorted[n / 2] : NAN;
    double t0 = nf_now();
    int rc_cpu = run_node(st, false, cpu, &err);
    double cpu_s = nf_now() - t0;
    int rc_gpu = run_node(st, true, gpu, &err);
    double flops = gpu_flops(ctx), V = (double)ctx->size[1];
    /* The timed runs reuse one input value, so after the warm-up its big
     * matrix is resident on the device (nf_gpu_resident), as for a GPU node
     * that follows another on the same data. Cold: one run on a fresh copy of
     * that input (a new value), its upload included, as for the first GPU node. */
    double cold_s = NAN;
    int big = st->variant == GPU_RIDGE ? RIDGE_IN_Y : st->variant == GPU_PERMUTE ? PERMUTE_IN_DATA : PREDICT_IN_X;
    struct nf_value *fresh = st->in[big] ? nf_value_new_matrix(st->in[big]->u.mat.rows, st->in[big]->u.mat.cols,
                                                               st->in[big]->u.mat.geom, &err) : NULL;
    if (fresh) {
        struct nf_value *kept = st->in[big], *cold[6] = { 0 };
        memcpy(fresh->u.mat.data, kept->u.mat.data,
               (size_t)(kept->u.mat.rows * kept->u.mat.cols) * sizeof *fresh->u.mat.data);
        st->in[big] = fresh;
        double t1 = nf_now();
        if (run_node(st, true, cold, &err) == 0)
            cold_s = nf_now() - t1;
        st->in[big] = kept;
        nf_value_unref(fresh);
        for (int o = 0; o < 6; o++)
            nf_value_unref(cold[o]);
    }
    nf_strbuf_addf(json, ", \"gpu_median_s\": %.6g, \"gpu_cold_s\": %.6g, \"cpu_s\": %.6g, "
                   "\"speedup_vs_cpu\": %.4g", median, cold_s, rc_cpu ? NAN : cpu_s, rc_cpu ? NAN : cpu_s / median);
    if (st->variant != GPU_PERMUTE) {
        nf_strbuf_addf(json, ", \"bound\": \"fp32\", \"pct_fp32_peak\": %.4g", 100.0 * flops / median / H200_FP32_FLOPS);
    } else {
        /* null values written by cuBLAS and read by the epilogue, float32 */
        double bytes = 2.0 * 4.0 * (double)ctx->size[2] * V;
        nf_strbuf_addf(json, ", \"bound\": \"hbm\", \"pct_hbm_peak\": %.4g, \"pct_fp32_peak\": %.4g",
                       100.0 * bytes / median / H200_HBM_BYTES, 100.0 * flops / median / H200_FP32_FLOPS);
    }
    if (!rc_cpu && !rc_gpu && st->variant == GPU_SEARCHLIGHT) {
        const float *a = cpu[PREDICT_OUT_MAP]->u.mat.data, *b = gpu[PREDICT_OUT_MAP]->u.mat.data;
        int64_t same = 0, nv = cpu[PREDICT_OUT_MAP]->u.mat.cols;
        double worst = 0;
        for (int64_t v = 0; v < nv; v++) {
            same += a[v] == b[v] || (isnan(a[v]) && isnan(b[v]));
            if (!isnan(a[v]) && !isnan(b[v]))
                worst = fmax(worst, fabs(a[v] - b[v]));
        }
        nf_strbuf_addf(json, ", \"agree_fraction\": %.6g, \"agree_output\": \"map\", \"max_diff\": %.3g, "
                       "\"diff_output\": \"map\"", (double)same / (double)(nv ? nv : 1), worst);
    } else if (!rc_cpu && !rc_gpu) {
        int first = st->variant == GPU_RIDGE ? RIDGE_OUT_ALPHA : PERMUTE_OUT_P, second = st->variant == GPU_RIDGE ? RIDGE_OUT_SCORE : PERMUTE_OUT_P_FWE;
        int64_t same = 0, nv = cpu[first]->u.mat.cols;
        double worst = 0;
        for (int64_t v = 0; v < nv; v++) {
            same += cpu[first]->u.mat.data[v] == gpu[first]->u.mat.data[v];
            worst = fmax(worst, fabs(cpu[second]->u.mat.data[v] - gpu[second]->u.mat.data[v]));
        }
        nf_strbuf_addf(json, ", \"agree_fraction\": %.6g, \"agree_output\": \"%s\", \"max_diff\": %.3g, "
                       "\"diff_output\": \"%s\"", (double)same / (double)(nv ? nv : 1),
                       st->variant == GPU_RIDGE ? "alpha" : "p", worst, st->variant == GPU_RIDGE ? "score" : "p_fwe");
    }
    for (int o = 0; o < 6; o++) {
        nf_value_unref(cpu[o]);
        nf_value_unref(gpu[o]);
    }
}

#define GPU_ROW(name, n, v, p, variant) GPU_ROW4(name, n, v, p, 0, variant)
#define GPU_ROW4(name, n, v, p, extra, variant) \
    { name, NF_BENCH_FULL, { n, v, p, extra }, variant, NULL, gpu_setup, gpu_run_once, gpu_teardown, gpu_flops, \
      gpu_bytes, NULL, gpu_describe, NULL, NULL, true }

const struct nf_bench_condition nf_bench_gpu_conditions[] = {
    GPU_ROW("ridge[gpu,n=500,v=20000,p=50]", 500, 20000, 50, GPU_RIDGE),
    GPU_ROW("ridge[gpu,n=1000,v=20000,p=100]", 1000, 20000, 100, GPU_RIDGE),
    GPU_ROW("ridge[gpu,n=1000,v=230000,p=100]", 1000, 230000, 100, GPU_RIDGE),
    GPU_ROW("permute[gpu,t,max,n=50,v=230000,N=10000]", 50, 230000, 10000, GPU_PERMUTE),
    GPU_ROW4("searchlight[gpu,ridge_classifier,n=120,v=50000,cv=5,r=6]", 120, 50000, 5, 6, GPU_SEARCHLIGHT),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};

void nf_bench_gpu_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *c;
    bool any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        if (!any)
            nf_strbuf_addf(md, "\nGPU nodes (issue 8), called directly on in-memory data; each median "
                               "includes the node's downloads and host work, with its big input resident on "
                               "the device from the warm-up run (as for a GPU node after another on the same "
                               "data); cold is one run on a fresh copy of that input, its upload included "
                               "(the first GPU node). The CPU node ran once "
                               "on the same data in the same run (all cores). Peak: the H200's FP32 "
                               "66.9 TFLOP/s (ridge; searchlight: its Grams, solves and decisions) or HBM "
                               "4.8 TB/s (permute: null values written and read once each). Target: at least "
                               "30 x over the CPU on the 230k-voxel cases.\n\n");
        any = true;
        const char *name = nf_ypath_str(c, "name"), *bound = nf_ypath_str(c, "measure.bound");
        double t = nf_ypath_num(c, "measure.gpu_median_s"), cpu = nf_ypath_num(c, "measure.cpu_s");
        double speedup = nf_ypath_num(c, "measure.speedup_vs_cpu");
        bool whole_brain = name && strstr(name, "v=230000");
        nf_strbuf_addf(md, "- %s: GPU ", name ? name : "?");
        nf_bench_add_seconds(md, t);
        double cold = nf_ypath_num(c, "measure.gpu_cold_s");
        if (isfinite(cold)) {
            nf_strbuf_addf(md, " (cold ");
            nf_bench_add_seconds(md, cold);
            nf_strbuf_addf(md, ")");
        }
        if (bound && strcmp(bound, "hbm") == 0)
            nf_strbuf_addf(md, " (%.1f%% of HBM bandwidth, %.1f%% of FP32 peak)",
                           nf_ypath_num(c, "measure.pct_hbm_peak"), nf_ypath_num(c, "measure.pct_fp32_peak"));
        else
            nf_strbuf_addf(md, " (%.1f%% of FP32 peak)", nf_ypath_num(c, "measure.pct_fp32_peak"));
        nf_strbuf_addf(md, ", CPU ");
        nf_bench_add_seconds(md, cpu);
        nf_strbuf_addf(md, ": %.1f x", speedup);
        if (isfinite(cold) && isfinite(cpu))
            nf_strbuf_addf(md, " (cold %.1f x)", cpu / cold);
        if (whole_brain)
            nf_strbuf_addf(md, " (target 30 x: %s)", speedup >= 30 ? "met" : "**not met**");
        double agree = nf_ypath_num(c, "measure.agree_fraction");
        const char *same = nf_ypath_str(c, "measure.agree_output"), *diff = nf_ypath_str(c, "measure.diff_output");
        if (isfinite(agree) && same && diff)
            nf_strbuf_addf(md, "; %s identical to the CPU's in %.3f%% of voxels, largest |%s difference| %.2g", same,
                           100 * agree, diff, nf_ypath_num(c, "measure.max_diff"));
        nf_strbuf_addf(md, ".\n");
    }
}
