/* domain_firstlevel.c — the `firstlevel` benchmark domain (issue 18): first-level
 * GLMs of fMRI runs through the whole pipeline, next to nilearn's FirstLevelModel.
 *
 * one_run: one run of n frames on the brain ellipsoid of bench_data.c (V
 * voxels, 2 mm voxels: what 230k voxels of a whole brain are), K conditions
 * and C fMRIPrep-like confound columns, modelled as nilearn 0.14's
 * FirstLevelModel(t_r=2, hrf_model='glover', drift_model='cosine',
 * high_pass=0.01, noise_model='ar1', signal_scaling=0) does:
 *
 *   bold, brain, events, confounds: load (bold.nii, mask.nii, events.tsv, confounds.tsv)
 *   voxels: mask;  design: design (glover, cosine 0.01 Hz, every confound column)
 *   glm: glm (ar1, mean scaling, two t contrasts);  keep: summarize (the z maps)
 *
 * timed whole, in process as `nlflow run` would (reading the image from the
 * page cache, writing the z maps), and the glm node on its own (the
 * executor's clock). The peer, bench/peers/firstlevel_nilearn.py, fits
 * FirstLevelModel to the same files and computes the same contrasts; it also
 * compares its z maps with the ones this condition wrote (their folder is
 * left in DATA/nlflow-outputs.txt). Data: per voxel a baseline from 200 to
 * 2000, AR(1) noise of coefficient uniform in [-0.2, 0.7) (so that the AR
 * bins are many, as in real data) at 1% of the baseline, and a response to
 * the first condition's events in half of the voxels; events every 6 s, 1 s
 * long, each block of K events a random order of the conditions; confounds
 * six motion random walks with their derivatives, squares and squared
 * derivatives (fMRIPrep's 24-parameter set, first C of them).
 * size[] = n frames, V voxels, K conditions, C confound columns.
 *
 * bids_pipeline: a study end to end, as pipelines/bids-to-group.yaml: the
 * simulate node's BIDS + fMRIPrep-like data set (S subjects x R runs of I
 * images at M mm on mricron-data's ch2bet brain, which build.sh installs
 * (the quick row, and the full one without it: the node's small synthetic
 * brain); written by prepare, not timed), then the
 * timed pipeline: bids -> the first-level template (smoothing, mask, design,
 * AR(1) GLM, fixed effects per subject) -> the group template (sign-flip
 * permutations with TFCE) -> summarize with clusters. No peer: nilearn has no
 * pipeline of its own to compare with. size[] = S, R, I, M.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "io/io.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "core/value.h"
#include "lang/ytree.h"

enum firstlevel_variant { ONE_RUN, BIDS_PIPELINE };

/* FirstLevelModel's settings that the data and the peer share. */
#define FL_TR 2.0
#define FL_VOXEL_MM 2.0
#define FL_EVENT_EVERY_S 6.0
#define FL_EVENT_S 1.0
/* The group template's permutations in the BIDS row (as bids-to-group.yaml). */
enum { BIDS_PERMUTATIONS = 1000, BIDS_QUICK_PERMUTATIONS = 100 };
/* The BIDS row's brain: the simulate node's whole-brain template (mricron-data). */
#define BIDS_WHOLE_BRAIN "/usr/share/mricron/templates/ch2bet.nii.gz"
/* fMRIPrep's motion parameters: each with derivative1, power2 and
 * derivative1_power2 makes its 24-parameter confound set. */
static const char *const motion[] = { "trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z" };
static const char *const motion_suffix[] = { "", "_derivative1", "_power2", "_derivative1_power2" };
enum { MAX_CONFOUNDS = 24 };

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- one run: input files ---- */

/* The brain ellipsoid of bench_data.c on 2 mm voxels (its mask is defined in
 * voxels, so only the header's millimetres change). */
static struct nf_grid firstlevel_grid(int64_t voxels)
{
    struct nf_grid g = nf_bench_brain_grid(voxels);
    for (int a = 0; a < 3; a++) {
        g.pixdim[a] = FL_VOXEL_MM;
        g.affine[a][a] = a == 0 ? -FL_VOXEL_MM : FL_VOXEL_MM;
        g.affine[a][3] = (a == 0 ? 1 : -1) * FL_VOXEL_MM * (double)(g.dim[a] - 1) / 2.0;
    }
    return g;
}

/* events.tsv: an event every FL_EVENT_EVERY_S seconds from 4 s on, each block
 * of K a random order of cond00 ... cond{K-1}. *first_condition: 1 for the
 * frames where an event of cond00 is on (the planted response), n values. */
static int write_events(const char *path, int64_t n, int64_t K, uint64_t *seed, float *first_condition,
                        struct nf_error *err)
{
    struct nf_strbuf sb;
    int64_t *order = nf_malloc_array((size_t)K, sizeof *order);
    int rc;
    if (!order)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "onset\tduration\ttrial_type\n");
    memset(first_condition, 0, (size_t)n * sizeof *first_condition);
    int64_t e = 0;
    for (double onset = 4.0; onset + FL_EVENT_S < (double)n * FL_TR - 10.0; onset += FL_EVENT_EVERY_S, e++) {
        if (e % K == 0) {
            for (int64_t i = 0; i < K; i++)
                order[i] = i;
            for (int64_t i = K - 1; i > 0; i--) {   /* Fisher-Yates */
                int64_t j = (int64_t)(nf_rand_uniform(seed) * (double)(i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        }
        int64_t c = order[e % K];
        nf_strbuf_addf(&sb, "%.1f\t%.1f\tcond%02" PRId64 "\n", onset, FL_EVENT_S, c);
        if (c == 0)
            for (int64_t t = (int64_t)ceil(onset / FL_TR); (double)t * FL_TR < onset + FL_EVENT_S && t < n; t++)
                first_condition[t] = 1;
    }
    rc = sb.oom ? NF_FAIL(err, NF_ENOMEM, "out of memory") : nf_write_file_atomic(path, sb.buf, sb.len, err);
    nf_strbuf_release(&sb);
    free(order);
    return rc;
}

/* confounds.tsv: the first C columns of fMRIPrep's 24 motion parameters, from
 * random walks (derivatives 0 in the first frame, where fMRIPrep writes n/a). */
static int write_confounds(const char *path, int64_t n, int64_t C, uint64_t *seed, struct nf_error *err)
{
    struct nf_strbuf sb;
    double walk[6] = { 0 }, prev[6] = { 0 };
    nf_strbuf_init(&sb);
    for (int64_t c = 0; c < C; c++)
        nf_strbuf_addf(&sb, "%s%s%s", c ? "\t" : "", motion[c / 4], motion_suffix[c % 4]);
    nf_strbuf_addf(&sb, "\n");
    for (int64_t t = 0; t < n; t++) {
        for (int m = 0; m < 6; m++) {
            prev[m] = walk[m];
            walk[m] += 0.05 * nf_rand_normal(seed);
        }
        for (int64_t c = 0; c < C; c++) {
            const int m = (int)(c / 4);
            const double d = t ? walk[m] - prev[m] : 0.0;
            const double v = c % 4 == 0 ? walk[m] : c % 4 == 1 ? d : c % 4 == 2 ? walk[m] * walk[m] : d * d;
            nf_strbuf_addf(&sb, "%s%.9g", c ? "\t" : "", v);
        }
        nf_strbuf_addf(&sb, "\n");
    }
    int rc = sb.oom ? NF_FAIL(err, NF_ENOMEM, "out of memory") : nf_write_file_atomic(path, sb.buf, sb.len, err);
    nf_strbuf_release(&sb);
    return rc;
}

/* bold.nii (TR 2 s in its header), mask.nii, events.tsv, confounds.tsv and
 * firstlevel.json (for the peer) unless they exist; see the top of the file. */
static int one_run_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t n = ctx->size[0], voxels = ctx->size[1], K = ctx->size[2], C = ctx->size[3];
    char *bold_path = nf_path_join(ctx->data_dir, "bold.nii");
    char *mask_path = nf_path_join(ctx->data_dir, "mask.nii");
    char *events_path = nf_path_join(ctx->data_dir, "events.tsv");
    char *confounds_path = nf_path_join(ctx->data_dir, "confounds.tsv");
    char *json_path = nf_path_join(ctx->data_dir, "firstlevel.json");
    char *json = NULL;
    struct nf_grid grid = firstlevel_grid(voxels);
    const int64_t cells = nf_grid_nvox(&grid);
    float *mask = NULL, *bold = NULL, *first_condition = NULL, *noise = NULL, *rho = NULL, *base = NULL;
    uint64_t seed = 0x666972737440766cull + (uint64_t)(n * 7919 + voxels);
    int rc = 0;

    if (!bold_path || !mask_path || !events_path || !confounds_path || !json_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (file_exists(bold_path) && file_exists(mask_path) && file_exists(events_path) &&
        file_exists(confounds_path) && file_exists(json_path))
        goto fail;   /* nothing to do: rc is 0 */
    if (n < 20 || voxels < 1 || K < 2 || K > 100 || C < 0 || C > MAX_CONFOUNDS) {
        rc = NF_FAIL(err, NF_EUSAGE, "firstlevel needs at least 20 frames, 1 voxel, 2 to 100 conditions and "
                     "0 to %d confounds", MAX_CONFOUNDS);
        goto fail;
    }
    if (!(mask = nf_bench_brain_mask(&grid, voxels, err))) {
        rc = err->code;
        goto fail;
    }
    bold = nf_malloc_array((size_t)(cells * n), sizeof *bold);
    first_condition = nf_malloc_array((size_t)n, sizeof *first_condition);
    noise = nf_calloc((size_t)cells, sizeof *noise);
    rho = nf_calloc((size_t)cells, sizeof *rho);
    base = nf_calloc((size_t)cells, sizeof *base);
    if (!bold || !first_condition || !noise || !rho || !base) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for %" PRId64 " frames of %" PRId64 " voxels", n, cells);
        goto fail;
    }
    NF_TRY(rc = write_events(events_path, n, K, &seed, first_condition, err));
    NF_TRY(rc = write_confounds(confounds_path, n, C, &seed, err));
    for (int64_t c = 0; c < cells; c++)
        if (mask[c] != 0) {
            base[c] = (float)(200.0 + 1800.0 * nf_rand_uniform(&seed));
            rho[c] = (float)(-0.2 + 0.9 * nf_rand_uniform(&seed));
        }
    /* frame by frame, each voxel's AR(1) state carried in noise[] */
    for (int64_t t = 0; t < n; t++) {
        float *vol = bold + t * cells;
        for (int64_t c = 0; c < cells; c++) {
            if (mask[c] == 0) {
                vol[c] = 0;
                continue;
            }
            noise[c] = rho[c] * noise[c] + (float)nf_rand_normal(&seed);
            const double response = c % 2 ? 2.0 * first_condition[t] : 0.0;
            vol[c] = (float)(base[c] * (1.0 + 0.01 * (noise[c] + response)));
        }
    }
    json = nf_asprintf("{\"tr\": %g, \"high_pass\": 0.01, \"contrasts\": {\"cond01_minus_cond02\": "
                       "\"cond01 - cond02\", \"cond00\": \"cond00\"}}\n", FL_TR);
    if (!json) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_nifti_write_series(bold_path, &grid, n, bold, FL_TR, "nlflow bench: AR(1) BOLD", err));
    NF_TRY(rc = nf_nifti_write(mask_path, &grid, 1, mask, 0, "nlflow bench: brain ellipsoid", err));
    NF_TRY(rc = nf_write_file_atomic(json_path, json, strlen(json), err));
fail:
    nf_free_aligned(mask);
    free(bold);
    free(first_condition);
    free(noise);
    free(rho);
    free(base);
    free(json);
    free(bold_path);
    free(mask_path);
    free(events_path);
    free(confounds_path);
    free(json_path);
    return rc;
}

/* ---- the BIDS study: input files ---- */

/* DATA/bids, written by the simulate node (S subjects, R runs of I images on
 * ch2bet at M mm, as bids-to-group.yaml's but for the brain), unless
 * DATA/bids.done says it is complete. */
static int bids_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    char *done = nf_path_join(ctx->data_dir, "bids.done");
    char *pipeline = NULL;
    int rc = 0;
    if (!done)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (file_exists(done))
        goto fail;   /* nothing to do: rc is 0 */
    /* the full row on a whole brain; in bids mode the node's auto is its small synthetic one */
    const char *brain = !(ctx->cond->runs & NF_BENCH_QUICK) && file_exists(BIDS_WHOLE_BRAIN) ? BIDS_WHOLE_BRAIN
                        : "auto";
    NF_TRY(rc = nf_bench_write_pipeline(ctx, "bench-firstlevel-simulate", &pipeline, err,
        "  sim: {type: simulate, subjects: %" PRId64 ", runs: %" PRId64 ", images: %" PRId64 ", mask: %s,"
        " voxel_size: %" PRId64 ", effect_size: 2, roi_center: [15, -20, 10], roi_radius: 9, seed: 5,"
        " bids: '%s/bids'}\n",
        ctx->size[0], ctx->size[1], ctx->size[2], brain, ctx->size[3], ctx->data_dir));
    NF_TRY(rc = nf_bench_run_pipeline(pipeline, ctx->threads, false, err));
    NF_TRY(rc = nf_write_file_atomic(done, "", 0, err));
fail:
    free(pipeline);
    free(done);
    return rc;
}

/* ---- the measured runs ---- */

/* Runs kept for the glm node's own times: the warm-up and up to this many timed. */
enum { FL_MAX_RUNS = 256 };

struct firstlevel_state {
    char *pipeline;
    const char *node;           /* the node timed on its own, or NULL */
    int threads;
    double node_s[FL_MAX_RUNS]; /* its time per run, warm-up first */
    int n_runs;
};

static void firstlevel_teardown(void *state)
{
    struct firstlevel_state *st = state;
    if (!st)
        return;
    free(st->pipeline);
    free(st);
}

static int firstlevel_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    struct firstlevel_state *st = nf_calloc(1, sizeof *st);
    const char *d = ctx->data_dir;
    int rc = 0;
    if (!st)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    st->threads = ctx->threads;
    if (ctx->cond->variant == ONE_RUN) {
        st->node = "glm";
        NF_TRY(rc = nf_bench_write_pipeline(ctx, "bench-firstlevel", &st->pipeline, err,
            "  bold: {type: load, path: '%s/bold.nii'}\n"
            "  brain: {type: load, path: '%s/mask.nii'}\n"
            "  events: {type: load, path: '%s/events.tsv'}\n"
            "  confounds: {type: load, path: '%s/confounds.tsv'}\n"
            "  voxels: {type: mask, in: {data: bold, mask: brain}}\n"
            "  design: {type: design, in: {events: events, frames: bold, confounds: confounds},"
            " hrf: glover, drift: cosine, high_pass: 0.01}\n"
            "  glm: {type: glm, in: {X: design.X, Y: voxels}, noise: ar1, scaling: mean,"
            " contrasts: ['cond01_minus_cond02 = cond01 - cond02', 'cond00 = cond00']}\n"
            "  keep: {type: summarize, in: {z: glm.z}}\n",
            d, d, d, d));
    } else {
        NF_TRY(rc = nf_bench_write_pipeline(ctx, "bench-firstlevel-bids", &st->pipeline, err,
            "  runs: {type: bids, root: '%s/bids', derivatives: '%s/bids/derivatives/fmriprep', task: localizer,"
            " space: MNI152NLin2009cAsym, require: [events, confounds, mask]}\n"
            "  localizer: {type: use, path: templates/first-level.yaml,"
            " with: {contrasts: ['faces_minus_houses = faces - houses']},"
            " in: {bold: runs.bold, events: runs.events, confounds: runs.confounds, mask: runs.mask}}\n"
            "  group: {type: use, path: templates/group.yaml,"
            " with: {contrast: faces_minus_houses, n_permutations: %d}, in: {effect: localizer.subject_effect}}\n"
            "  maps: {type: summarize, in: {t: group.t, p_tfce_fwe: group.p_tfce_fwe},"
            " threshold_key: t, p_below: 0.05, p_key: p_tfce_fwe}\n",
            d, d, ctx->cond->runs & NF_BENCH_QUICK ? BIDS_QUICK_PERMUTATIONS : BIDS_PERMUTATIONS));
    }
    *state = st;
    return 0;
fail:
    firstlevel_teardown(st);
    return rc;
}

static int firstlevel_run_once(void *state, struct nf_error *err)
{
    struct firstlevel_state *st = state;
    double node_s = NAN;
    int rc = nf_bench_run_pipeline_node(st->pipeline, st->threads, false, st->node, &node_s, err);
    if (rc == 0 && st->node && st->n_runs < FL_MAX_RUNS)
        st->node_s[st->n_runs++] = node_s;
    return rc;
}

/* Input bytes of one run: the float32 image of one_run (the masked voxels'
 * frames); the BIDS row's compressed files are not counted. */
static double firstlevel_bytes(const struct nf_bench_ctx *ctx)
{
    return ctx->cond->variant == ONE_RUN ? 4.0 * (double)ctx->size[0] * (double)ctx->size[1] : 0;
}

static int cmp_seconds(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The BIDS row: the in-mask voxels of the first run (which brain `auto` gave). */
static void bids_describe(const struct nf_bench_ctx *ctx, struct nf_strbuf *json)
{
    char *path = nf_asprintf("%s/bids/derivatives/fmriprep/sub-01/func/sub-01_task-localizer_run-1_space-"
                             "MNI152NLin2009cAsym_desc-brain_mask.nii.gz", ctx->data_dir);
    struct nf_error err = { 0 };
    struct nf_value *mask = path ? nf_nifti_read(path, &err) : NULL;
    free(path);
    if (!mask)
        return;   /* the figure is left out: nothing else depends on it */
    int64_t voxels = 0, cells = nf_grid_nvox(&mask->u.vol.grid);
    for (int64_t c = 0; c < cells; c++)
        voxels += mask->u.vol.data[c] != 0;
    nf_strbuf_addf(json, ", \"voxels\": %" PRId64 ", \"permutations\": %d", voxels,
                   ctx->cond->runs & NF_BENCH_QUICK ? BIDS_QUICK_PERMUTATIONS : BIDS_PERMUTATIONS);
    nf_value_unref(mask);
}

/* The glm node's own times (timed runs only) and, for the peer's comparison
 * of z maps, where this condition's outputs are (DATA/nlflow-outputs.txt). */
static void firstlevel_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    struct firstlevel_state *st = state;
    if (ctx->cond->variant != ONE_RUN) {
        bids_describe(ctx, json);
        return;
    }
    nf_strbuf_addf(json, ", \"frames\": %" PRId64 ", \"conditions\": %" PRId64 ", \"confounds\": %" PRId64,
                   ctx->size[0], ctx->size[2], ctx->size[3]);
    char *where = nf_path_join(ctx->data_dir, "nlflow-outputs.txt");
    char *outputs = nf_path_join(ctx->work_dir, "out");
    struct nf_error ignored = { 0 };
    if (where && outputs)   /* without it, the peer reports no agreement: nothing else depends on it */
        (void)nf_write_file_atomic(where, outputs, strlen(outputs), &ignored);
    free(where);
    free(outputs);
    int n = st->n_runs - 1;
    if (n < 1)
        return;
    double t[FL_MAX_RUNS];
    memcpy(t, st->node_s + 1, (size_t)n * sizeof *t);
    nf_strbuf_addf(json, ", \"node_times_s\": [");
    for (int r = 0; r < n; r++)
        nf_strbuf_addf(json, "%s%.6g", r ? ", " : "", t[r]);
    qsort(t, (size_t)n, sizeof *t, cmp_seconds);
    nf_strbuf_addf(json, "], \"node_median_s\": %.6g", n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]));
}

#define ONE_RUN_ROW(name, runs, n, v, k, c)                                                     \
    { name, runs, { n, v, k, c }, ONE_RUN, one_run_prepare, firstlevel_setup,                   \
      firstlevel_run_once, firstlevel_teardown, NULL, firstlevel_bytes, NULL,                   \
      firstlevel_describe, "firstlevel_nilearn.py", "one_run", false }
#define BIDS_ROW(name, runs, subjects, runs_each, images, mm)                                   \
    { name, runs, { subjects, runs_each, images, mm }, BIDS_PIPELINE, bids_prepare,             \
      firstlevel_setup, firstlevel_run_once, firstlevel_teardown, NULL, firstlevel_bytes,       \
      NULL, firstlevel_describe, NULL, NULL, false }

const struct nf_bench_condition nf_bench_firstlevel_conditions[] = {
    ONE_RUN_ROW("one_run[ar1,vs_nilearn,t=40,v=3000,k=3,c=4]", NF_BENCH_QUICK, 40, 3000, 3, 4),
    ONE_RUN_ROW("one_run[ar1,vs_nilearn,t=300,v=230000,k=10,c=24]", NF_BENCH_FULL, 300, 230000, 10, 24),
    BIDS_ROW("bids_pipeline[subjects=4,runs=1,images=30,mm=8]", NF_BENCH_QUICK, 4, 1, 30, 8),
    BIDS_ROW("bids_pipeline[subjects=20,runs=2,images=80,mm=3]", NF_BENCH_FULL, 20, 2, 80, 3),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};

/* ---- the note under the report's table ---- */

/* Issue 18's targets: one run >= 20 x faster than nilearn's FirstLevelModel
 * with a peak memory below its; the BIDS study's time end to end. */
void nf_bench_firstlevel_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *c;
    bool any = false;
    for (size_t i = 0; (c = nf_bench_next_ok(domain_result, &i));) {
        const char *name = nf_ypath_str(c, "name");
        if (!any)
            nf_strbuf_addf(md, "\nTargets (issue 18). one_run: a whole run's first level (load the 4D image, "
                               "mask, design with glover HRF, cosine drifts at 0.01 Hz and the confounds, "
                               "AR(1) GLM with mean scaling, two t contrasts, z maps written) at least 20 x "
                               "faster than nilearn 0.14's FirstLevelModel(...).fit(img, events, confounds) + "
                               "compute_contrast on the same files, with a lower peak memory "
                               "(bench/peers/firstlevel_nilearn.py; nlflow: the condition's sampled peak RSS "
                               "over its baseline, nilearn: getrusage's peak of the peer's process). "
                               "Agreement: the share of in-mask voxels whose z differs from nilearn's by 1e-3 "
                               "or less, per contrast. bids_pipeline: the simulate node's BIDS + fMRIPrep-like "
                               "study (not timed), then bids -> first-level template -> group template "
                               "(TFCE, 1000 permutations) -> summarize, end to end.\n\n");
        any = true;
        double t = nf_ypath_num(c, "measure.median_s");
        double peak = nf_ypath_num(c, "measure.rss_peak_sampled") - nf_ypath_num(c, "measure.rss_baseline");
        nf_strbuf_addf(md, "- %s: pipeline ", name);
        nf_bench_add_seconds(md, t);
        if (strncmp(name, "one_run[", 8) != 0) {
            double voxels = nf_ypath_num(c, "measure.voxels");
            if (isfinite(voxels))
                nf_strbuf_addf(md, " (%.0f voxels in the brain mask)", voxels);
            nf_strbuf_addf(md, ", peak RSS ");
            nf_bench_add_bytes(md, peak);
            nf_strbuf_addf(md, ".\n");
            continue;
        }
        double node = nf_ypath_num(c, "measure.node_median_s"), speedup = nf_ypath_num(c, "speedup");
        double peer_peak = nf_ypath_num(c, "peer.result.rss_peak_getrusage");
        nf_strbuf_addf(md, ", glm node ");
        nf_bench_add_seconds(md, node);
        nf_strbuf_addf(md, "; ");
        nf_bench_add_peer_speedup(md, c);
        if (isfinite(speedup))
            nf_strbuf_addf(md, ", 20 x target: %s", speedup >= 20 ? "met" : "**not met**");
        nf_strbuf_addf(md, "; peak RSS ");
        nf_bench_add_bytes(md, peak);
        if (isfinite(peer_peak)) {
            nf_strbuf_addf(md, " vs nilearn's ");
            nf_bench_add_bytes(md, peer_peak);
            nf_strbuf_addf(md, ": %s", peak < peer_peak ? "met" : "**not met**");
        }
        const struct nf_ynode *agree = nf_ypath(c, "peer.result.z_within_1e-3");
        for (size_t k = 0; agree && agree->type == NF_Y_MAP && k < agree->n; k++)
            nf_strbuf_addf(md, "%s %s %.5f", k ? "," : "; share of voxels with z within 1e-3 of nilearn's:",
                           agree->keys[k]->value, strtod(agree->items[k]->value, NULL));
        nf_strbuf_addf(md, ".\n");
    }
}
