/* simulate.c — the `simulate` node: synthetic subjects with a planted, known effect.
 *
 * It gives demos, tests and benchmarks realistic data without shipping any: a
 * brain mask (the mricron-data template ch2bet when installed, else an
 * ellipsoid), resampled by block majority to `voxel_size` mm; a design X of
 * smooth and block regressors; weights that are nonzero only inside a sphere
 * (the ROI); and per subject a 4D series
 *     Y[t, v] = 100 + X[t, :] B[:, v] + subject effect(v) + noise * N(0, 1)
 * whose ground truth is returned as the `truth` map so that a pipeline can check
 * that it finds the effect where it was planted. Everything is a pure function of
 * the parameters and the seed (splitmix64 streams, one per subject, so adding a
 * subject leaves the others unchanged). With `write:` the data set is also
 * written as BIDS-like files for other tools, with an atlas (atlas.nii.gz) that
 * parcellates the mask: label 1 is the planted sphere, the other voxels fall in
 * 30 mm boxes labelled 2, 3, ... (decoding pipelines use it for ROIs).
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io.h"
#include "node.h"
#include "simulate.h"
#include "simulate_internal.h"
#include "core/util.h"
#include "core/value.h"
#include "core/rng.h"

#define SIM_SUBJECT_EFFECT 0.5       /* x effect_size, added inside the ROI */
#define SIM_PARCEL_MM 30.0           /* edge of the atlas boxes outside the ROI */
#define SIM_INTENT_LABEL 1002        /* NIFTI_INTENT_LABEL */

/* The synthetic brains: ellipsoids on virtual 1 mm grids. The whole-brain
 * one is about the size and place of an adult brain in MNI space, with
 * ch2bet's field of view, so that `auto` and `synthetic` give comparable
 * grids and the default ROI lies inside both. The small one (`bids`: a data
 * set of many runs that tests and examples write in seconds) is a 60 x 72 x
 * 60 mm field, 20 x 24 x 20 voxels at 3 mm. */
struct synth_brain {
    int64_t dim[3];
    double origin[3], centre[3], semi_axes[3];
    int xform;          /* 2 aligned (MNI-like), 4 MNI152: the BIDS files say space-MNI152... */
};
static const struct synth_brain whole_brain = {
    {181, 217, 181}, {-90.0, -125.0, -71.0}, {0.0, -17.0, 15.0}, {68.0, 86.0, 64.0}, 2 };
static const struct synth_brain small_brain = {
    {60, 72, 60}, {-29.5, -45.5, -24.5}, {0.0, -10.0, 5.0}, {27.0, 33.0, 27.0}, 4 };

enum mask_source { MASK_TEMPLATE, MASK_SYNTHETIC, MASK_FILE };

/* Where the mask comes from and the grid the data are simulated on. */
struct sim_plan {
    enum mask_source source;
    char *path;                 /* template or mask file; NULL for synthetic */
    struct nf_grid src_grid;    /* the mask's own grid (virtual for synthetic) */
    int64_t factor[3];          /* block edge of the resampling, in source voxels */
    struct nf_grid grid;        /* the simulated grid */
    const struct synth_brain *brain;   /* MASK_SYNTHETIC: which ellipsoid */
};


static void synthetic_source_grid(const struct synth_brain *b, struct nf_grid *g)
{
    memset(g, 0, sizeof *g);
    for (int a = 0; a < 3; a++) {
        g->dim[a] = b->dim[a];
        g->pixdim[a] = 1.0;
        g->affine[a][a] = 1.0;
        g->affine[a][3] = b->origin[a];
    }
    g->affine[3][3] = 1.0;
    g->sform_code = b->xform;
    g->qform_code = b->xform;
}

/* The grid of f-voxel blocks of src: each new voxel's centre is its block's
 * centre, so world coordinates stay put (the origin moves by (f-1)/2 voxels). */
static void grid_coarsen(const struct nf_grid *src, const int64_t f[3], struct nf_grid *dst)
{
    *dst = *src;
    for (int a = 0; a < 3; a++) {
        dst->dim[a] = (src->dim[a] + f[a] - 1) / f[a];
        dst->pixdim[a] = src->pixdim[a] * (double)f[a];
    }
    for (int r = 0; r < 3; r++) {
        double shift = 0.0;
        for (int c = 0; c < 3; c++) {
            dst->affine[r][c] = src->affine[r][c] * (double)f[c];
            shift += src->affine[r][c] * (double)(f[c] - 1) / 2.0;
        }
        dst->affine[r][3] = src->affine[r][3] + shift;
    }
}

static void sim_plan_release(struct sim_plan *plan)
{
    free(plan->path);
    plan->path = NULL;
}

/* `mask: synthetic`, or `auto` without the template installed. */
static bool mask_is_synthetic(const char *mask)
{
    return strcmp(mask, "synthetic") == 0 ||
           (strcmp(mask, "auto") == 0 && access(NF_SIMULATE_TEMPLATE, R_OK) != 0);
}

/* Decide the mask source and the simulated grid from headers only (plan time). */
static int sim_plan_init(const struct simulate_params *p, const struct nf_env *env,
                         const struct nf_node_inst *node, struct sim_plan *plan,
                         struct nf_error *err)
{
    const char *mask = p->mask ? p->mask : "auto";
    bool is_auto = strcmp(mask, "auto") == 0;
    struct nf_nifti_info info;
    int rc = 0;

    memset(plan, 0, sizeof *plan);
    if (p->bids && (is_auto || strcmp(mask, "synthetic") == 0)) {
        plan->source = MASK_SYNTHETIC;
        plan->brain = &small_brain;
        synthetic_source_grid(plan->brain, &plan->src_grid);
    } else if (mask_is_synthetic(mask)) {
        plan->source = MASK_SYNTHETIC;
        plan->brain = &whole_brain;
        synthetic_source_grid(plan->brain, &plan->src_grid);
    } else {
        plan->source = is_auto ? MASK_TEMPLATE : MASK_FILE;
        /* `mask` is a string parameter (it also takes keywords), so a relative
         * path is resolved here, against the pipeline's folder. */
        if (is_auto)
            plan->path = nf_strdup(NF_SIMULATE_TEMPLATE);
        else if (env && env->pipeline_dir)
            plan->path = nf_path_join(env->pipeline_dir, mask);
        else
            plan->path = nf_strdup(mask);
        if (!plan->path) {
            rc = NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(node), nf_node_id(node), "out of memory");
            goto fail;
        }
        rc = nf_nifti_read_info(plan->path, &info, err);
        if (rc < 0) {
            nf_error_on_node(node, err, rc);
            goto fail;
        }
        if (info.nt != 1) {
            rc = NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                            "mask '%s' has %" PRId64 " volumes (expected one 3D image)",
                            plan->path, info.nt);
            goto fail;
        }
        plan->src_grid = info.grid;
    }
    for (int a = 0; a < 3; a++) {
        double pix = plan->src_grid.pixdim[a] > 0 ? plan->src_grid.pixdim[a] : 1.0;
        long f = lround(p->voxel_size / pix);
        plan->factor[a] = f < 1 ? 1 : f;
    }
    grid_coarsen(&plan->src_grid, plan->factor, &plan->grid);
    return 0;

fail:
    sim_plan_release(plan);
    return rc;
}


static void ellipsoid_mask(const struct synth_brain *b, const struct nf_grid *g, float *mask)
{
    for (int64_t k = 0; k < g->dim[2]; k++)
        for (int64_t j = 0; j < g->dim[1]; j++)
            for (int64_t i = 0; i < g->dim[0]; i++) {
                double xyz[3], s = 0.0;
                sim_voxel_to_world(g, (double)i, (double)j, (double)k, xyz);
                for (int a = 0; a < 3; a++) {
                    double u = (xyz[a] - b->centre[a]) / b->semi_axes[a];
                    s += u * u;
                }
                mask[i + g->dim[0] * (j + g->dim[1] * k)] = s <= 1.0 ? 1.0f : 0.0f;
            }
}

/* Block majority: a new voxel is brain when more than half of the source voxels
 * of its block (those inside the source grid) are brain. */
static int coarsen_mask(const struct sim_plan *plan, const float *src, bool positive_only,
                        float *dst, struct nf_error *err)
{
    const struct nf_grid *s = &plan->src_grid, *d = &plan->grid;
    const int64_t *f = plan->factor;
    int64_t n_dst = nf_grid_nvox(d);
    uint32_t *count = nf_calloc((size_t)n_dst, sizeof *count);
    if (!count)
        return NF_FAIL(err, NF_ENOMEM, "out of memory resampling the mask");
    for (int64_t k = 0; k < s->dim[2]; k++)
        for (int64_t j = 0; j < s->dim[1]; j++) {
            const float *row = src + s->dim[0] * (j + s->dim[1] * k);
            int64_t base = d->dim[0] * (j / f[1] + d->dim[1] * (k / f[2]));
            for (int64_t i = 0; i < s->dim[0]; i++) {
                float v = row[i];
                bool brain = positive_only ? v > 0.0f : (isfinite(v) && v != 0.0f);
                count[base + i / f[0]] += brain;
            }
        }
    for (int64_t K = 0; K < d->dim[2]; K++)
        for (int64_t J = 0; J < d->dim[1]; J++)
            for (int64_t I = 0; I < d->dim[0]; I++) {
                int64_t ei = s->dim[0] - I * f[0], ej = s->dim[1] - J * f[1],
                        ek = s->dim[2] - K * f[2];
                int64_t present = (ei < f[0] ? ei : f[0]) * (ej < f[1] ? ej : f[1]) *
                                  (ek < f[2] ? ek : f[2]);
                int64_t at = I + d->dim[0] * (J + d->dim[1] * K);
                dst[at] = 2 * (int64_t)count[at] > present ? 1.0f : 0.0f;
            }
    free(count);
    return 0;
}

/* The mask on the simulated grid (1 brain, 0 elsewhere) as a new 3D volume. */
static struct nf_value *build_mask(const struct sim_plan *plan, const struct nf_node_inst *node,
                                   struct nf_error *err)
{
    struct nf_value *mask = NULL, *src = NULL;
    int rc = 0;

    mask = nf_value_new_volume(&plan->grid, 3, 1, err);
    if (!mask)
        goto fail;
    if (plan->source == MASK_SYNTHETIC) {
        ellipsoid_mask(plan->brain, &plan->grid, mask->u.vol.data);
        return mask;
    }
    src = nf_nifti_read(plan->path, err);
    if (!src)
        goto fail;
    /* The file may have changed since plan time; the grid must still be the one
     * the shapes were resolved from. */
    if (src->u.vol.nt != 1 || !nf_grid_same(&src->u.vol.grid, &plan->src_grid)) {
        NF_FAIL_AT(err, NF_ESHAPE, nf_node_loc(node), nf_node_id(node),
                   "mask '%s' changed since the pipeline was planned", plan->path);
        goto fail;
    }
    NF_TRY(rc = coarsen_mask(plan, src->u.vol.data, plan->source == MASK_TEMPLATE,
                             mask->u.vol.data, err));
    nf_value_unref(src);
    return mask;

fail:
    nf_value_unref(src);
    nf_value_unref(mask);
    nf_error_on_node(node, err, NF_EDATA);
    return NULL;
}

/* Design: feature 0 is a boxcar (blocks of up to 10 images), the others sines of
 * growing period; every column standardized (mean 0, population sd 1). */
static void build_design(int64_t T, int64_t F, double *X)
{
    int64_t block = T / 4 < 1 ? 1 : (T / 4 > 10 ? 10 : T / 4);
    for (int64_t f = 0; f < F; f++) {
        for (int attempt = 0; attempt < 2; attempt++) {
            double mean = 0.0, var = 0.0;
            for (int64_t t = 0; t < T; t++) {
                double x;
                if (attempt == 1)   /* fallback for a column that came out constant */
                    x = ((t + f) % 2) ? 1.0 : -1.0;
                else if (f == 0)
                    x = ((t / block) % 2) ? -1.0 : 1.0;
                else
                    x = sin(6.283185307179586 * (double)t / (5.0 + 3.1 * (double)f) +
                            0.9 * (double)f);
                X[t * F + f] = x;
                mean += x;
            }
            mean /= (double)T;
            for (int64_t t = 0; t < T; t++)
                var += (X[t * F + f] - mean) * (X[t * F + f] - mean);
            double sd = sqrt(var / (double)T);
            if (sd < 1e-9)
                continue;
            for (int64_t t = 0; t < T; t++)
                X[t * F + f] = (X[t * F + f] - mean) / sd;
            break;
        }
    }
}

/* Planted weight of feature f, in units of effect_size. */
static double feature_weight(int64_t f)
{
    return f == 0 ? 1.0 : ((f % 2) ? -0.5 : 0.5);
}



/* Stream numbers: subjects use 0..subjects-1, the target column this one. */
#define TARGET_STREAM UINT64_C(0xFFFFFFFF)

static struct nf_value *design_table(const double *X, int64_t T, int64_t F, struct nf_error *err)
{
    struct nf_value *tab = nf_value_new_table(T, F, err);
    char name[32];
    if (!tab)
        return NULL;
    for (int64_t f = 0; f < F; f++) {
        snprintf(name, sizeof name, "f%" PRId64, f + 1);
        if (nf_table_column_numeric(tab, f, name, err) < 0) {
            nf_value_unref(tab);
            return NULL;
        }
        for (int64_t t = 0; t < T; t++)
            tab->u.tab.cols[f].num[t] = X[t * F + f];
    }
    return tab;
}

/* Labels: trial_type "a"/"b" from the sign of feature 0 (classes for decoding),
 * target = feature 0 + noise (a regression target). */
static struct nf_value *labels_table(const double *X, int64_t T, int64_t F, double noise,
                                     uint64_t seed, struct nf_error *err)
{
    struct nf_value *tab = nf_value_new_table(T, 2, err);
    struct sim_normal ns;
    if (!tab)
        return NULL;
    if (nf_table_column_string(tab, 0, "trial_type", err) < 0 ||
        nf_table_column_numeric(tab, 1, "target", err) < 0)
        goto fail;
    sim_normal_init(&ns, seed, TARGET_STREAM);
    for (int64_t t = 0; t < T; t++) {
        double x0 = X[t * F];
        tab->u.tab.cols[0].str[t] = nf_strdup(x0 > 0.0 ? "a" : "b");
        if (!tab->u.tab.cols[0].str[t]) {
            NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        tab->u.tab.cols[1].num[t] = x0 + (noise > 0.0 ? noise * sim_normal_next(&ns) : 0.0);
    }
    return tab;

fail:
    nf_value_unref(tab);
    return NULL;
}


static struct nf_value *simulate_subject(const struct simulate_params *p,
                                         const struct nf_geom *geom, const int64_t *roi,
                                         int64_t n_roi, const double *roi_signal,
                                         uint64_t seed, int64_t subject, struct nf_error *err)
{
    const int64_t T = p->images, nvox = nf_grid_nvox(&geom->grid);
    struct nf_value *vol = nf_value_new_volume(&geom->grid, 4, T, err);
    struct sim_normal ns;
    if (!vol)
        return NULL;
    vol->u.vol.tr = SIM_TR;
    sim_normal_init(&ns, seed, (uint64_t)subject);
    for (int64_t t = 0; t < T; t++) {
        float *frame = vol->u.vol.data + t * nvox;
        if (p->noise > 0.0)
            for (int64_t c = 0; c < geom->n_voxels; c++)
                frame[geom->index[c]] = (float)(SIM_BASELINE + p->noise * sim_normal_next(&ns));
        else
            for (int64_t c = 0; c < geom->n_voxels; c++)
                frame[geom->index[c]] = (float)SIM_BASELINE;
        for (int64_t r = 0; r < n_roi; r++)
            frame[geom->index[roi[r]]] += (float)roi_signal[t];
    }
    return vol;
}



static int cmp_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The atlas: label 1 on the ROI's columns, then every other brain voxel by the
 * SIM_PARCEL_MM box (in world mm) it lies in, boxes numbered 2, 3, ... in the
 * order of their (x, y, z) box indices. */
static int build_atlas(const struct nf_geom *geom, const int64_t *roi, int64_t n_roi, float *atlas,
                       struct nf_error *err)
{
    const struct nf_grid *g = &geom->grid;
    int64_t n = geom->n_voxels, n_keys = 0;
    int64_t *key = nf_malloc((size_t)(n ? n : 1) * sizeof *key), *uniq = nf_malloc((size_t)(n ? n : 1) * sizeof *uniq);
    if (!key || !uniq) {
        free(key);
        free(uniq);
        return NF_FAIL(err, NF_ENOMEM, "out of memory building the atlas");
    }
    for (int64_t r = 0; r < n_roi; r++)
        atlas[geom->index[roi[r]]] = 1.0f;
    for (int64_t c = 0; c < n; c++) {
        int64_t off = geom->index[c];
        int64_t i = off % g->dim[0], j = (off / g->dim[0]) % g->dim[1], k = off / (g->dim[0] * g->dim[1]);
        double xyz[3];
        sim_voxel_to_world(g, (double)i, (double)j, (double)k, xyz);
        /* the three box indices in one key (|index| < 2^20 for any grid within 30 km) */
        key[c] = 0;
        for (int a = 0; a < 3; a++)
            key[c] = key[c] * (INT64_C(1) << 21) + (int64_t)floor(xyz[a] / SIM_PARCEL_MM) + (INT64_C(1) << 20);
        if (atlas[off] == 0.0f)
            uniq[n_keys++] = key[c];
    }
    qsort(uniq, (size_t)n_keys, sizeof *uniq, cmp_int64);
    int64_t n_boxes = 0;
    for (int64_t b = 0; b < n_keys; b++)
        if (b == 0 || uniq[b] != uniq[b - 1])
            uniq[n_boxes++] = uniq[b];
    for (int64_t c = 0; c < n; c++) {
        int64_t off = geom->index[c];
        if (atlas[off] != 0.0f)
            continue;
        const int64_t *at = bsearch(&key[c], uniq, (size_t)n_boxes, sizeof *uniq, cmp_int64);
        atlas[off] = (float)(at - uniq + 2);
    }
    free(key);
    free(uniq);
    return 0;
}

/* atlas.nii.txt, the names of the atlas's labels in mricron's format (found
 * beside atlas.nii.gz by summarize, io.h nf_label_names_sidecar): label 1 is
 * the planted ROI, the boxes are parcel_2, parcel_3, ... */
static int write_atlas_names(const char *dir, const struct nf_volume *atlas, struct nf_error *err)
{
    struct nf_strbuf sb;
    float top = 0;
    int64_t nvox = nf_grid_nvox(&atlas->grid);
    for (int64_t v = 0; v < nvox; v++)
        top = fmaxf(top, atlas->data[v]);
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "1 planted_roi\n");
    for (int64_t label = 2; label <= (int64_t)top; label++)
        nf_strbuf_addf(&sb, "%" PRId64 " parcel_%" PRId64 "\n", label, label);
    int rc = sb.oom ? NF_FAIL(err, NF_ENOMEM, "out of memory") : sim_write_text(dir, "atlas.nii.txt", sb.buf, err);
    nf_strbuf_release(&sb);
    return rc;
}

/* write/: sub-XX/func/sub-XX_task-sim_bold.nii.gz, mask, truth, atlas (and its
 * names, atlas.nii.txt), design,
 * labels, plus the two JSON files that make it a valid BIDS raw data set. */
static int write_dataset(const struct simulate_params *params, const char *dir, struct nf_value **out,
                         const struct nf_volume *atlas, struct nf_error *err)
{
    const struct nf_collection *subjects = &out[SIMULATE_OUT_DATA]->u.coll;
    const struct nf_volume *mask = &out[SIMULATE_OUT_MASK]->u.vol;
    const struct nf_volume *truth = &out[SIMULATE_OUT_TRUTH]->u.vol;
    char *path = NULL, *func = NULL;
    int rc = 0;

    char **labels = nf_calloc(subjects->n + 1, sizeof *labels);
    if (!labels)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (size_t s = 0; s < subjects->n; s++)
        labels[s] = subjects->items[s]->label;
    rc = sim_folder_begin(params, dir, labels, subjects->n, err);
    free(labels);
    if (rc < 0)
        return rc;
    for (size_t s = 0; s < subjects->n; s++) {
        struct nf_value *item = subjects->items[s];
        const char *label = item->label;
        if (nf_run_interrupted(NULL)) {   /* between subjects (nf_nifti_write polls within one) */
            rc = NF_FAIL(err, NF_EINTR, "interrupted");
            goto fail;
        }
        func = nf_asprintf("%s/%s/func", dir, label);
        path = func ? nf_asprintf("%s/%s_task-sim_bold.nii.gz", func, label) : NULL;
        if (!path) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        NF_TRY(rc = nf_mkdirs(func, err));
        NF_TRY(rc = nf_nifti_write_series(path, &item->u.vol.grid, item->u.vol.nt, item->u.vol.data,
                                          item->u.vol.tr, "nlflow simulate", err));
        nf_value_set_path(item, path);
        free(path);
        free(func);
        path = func = NULL;
    }
#define WRITE_IN(name, call)                                   \
    do {                                                       \
        path = nf_path_join(dir, name);                        \
        if (!path) {                                           \
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");     \
            goto fail;                                         \
        }                                                      \
        NF_TRY(rc = (call));                                   \
        free(path);                                            \
        path = NULL;                                           \
    } while (0)
    WRITE_IN("mask.nii.gz", nf_nifti_write(path, &mask->grid, 1, mask->data, 0,
                                           "nlflow simulate mask", err));
    WRITE_IN("truth.nii.gz", nf_nifti_write(path, &truth->grid, 1, truth->data, 1001,
                                            "nlflow simulate truth", err));
    WRITE_IN("atlas.nii.gz", nf_nifti_write(path, &atlas->grid, 1, atlas->data, SIM_INTENT_LABEL,
                                            "nlflow simulate atlas", err));
    NF_TRY(rc = write_atlas_names(dir, atlas, err));
    WRITE_IN("design.tsv", nf_table_write(path, &out[SIMULATE_OUT_X]->u.tab, err));
    WRITE_IN("labels.tsv", nf_table_write(path, &out[SIMULATE_OUT_Y]->u.tab, err));
#undef WRITE_IN
    NF_TRY(rc = sim_write_text(dir, "task-sim_bold.json",
                           "{\n  \"TaskName\": \"sim\",\n  \"RepetitionTime\": 2.0\n}\n", err));
    NF_TRY(rc = sim_write_text(dir, "dataset_description.json",
                           "{\n  \"Name\": \"nlflow simulation\",\n"
                           "  \"BIDSVersion\": \"1.8.0\",\n  \"DatasetType\": \"raw\"\n}\n",
                           err));
    return 0;

fail:
    free(path);
    free(func);
    return rc;
}

static uint64_t effective_seed(const struct simulate_params *p, const struct nf_env *env)
{
    if (p->seed >= 0)
        return (uint64_t)p->seed;
    return env ? env->seed : 0;
}

/* The code of an error a callee has already reported. */
static int err_code(const struct nf_error *err)
{
    return err->code ? err->code : NF_EBUG;
}

static int simulate_run(struct nf_run *run)
{
    const struct simulate_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    const int64_t T = p->images, F = p->features;
    const uint64_t seed = effective_seed(p, run->env);
    struct nf_value *out[5] = {0}, *atlas = NULL;
    struct sim_plan plan = {0};
    struct nf_geom *geom = NULL;
    double *X = NULL, *roi_signal = NULL;
    int64_t *roi = NULL, n_roi = 0;
    double truth_value = 0.0;
    int rc = 0;

    if (p->roi_center.n != 3 || T < 2 || F < 1 || p->subjects < 1) {
        rc = NF_FAIL_AT(run->err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                        "roi_center needs 3 values and images >= 2, features >= 1, "
                        "subjects >= 1");
        goto fail;
    }
    NF_TRY(rc = sim_plan_init(p, run->env, node, &plan, run->err));
    out[SIMULATE_OUT_MASK] = build_mask(&plan, node, run->err);
    if (!out[SIMULATE_OUT_MASK]) {
        rc = run->err->code ? run->err->code : NF_EDATA;
        goto fail;
    }
    geom = nf_geom_from_mask(&plan.grid, out[SIMULATE_OUT_MASK]->u.vol.data);
    if (!geom) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory building the mask geometry");
        goto fail;
    }
    if (geom->n_voxels == 0) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                        "the mask%s%s has no brain voxels at voxel_size %g mm",
                        plan.path ? " " : "", plan.path ? plan.path : "", p->voxel_size);
        goto fail;
    }

    X = nf_malloc((size_t)(T * F) * sizeof *X);
    roi_signal = nf_malloc((size_t)T * sizeof *roi_signal);
    roi = nf_malloc((size_t)geom->n_voxels * sizeof *roi);
    if (!X || !roi_signal || !roi) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    n_roi = sim_roi_columns(geom, p->roi_center.v, p->roi_radius, roi);
    if (n_roi == 0)
        nf_warn(nf_node_id(node),
                "the ROI sphere (centre %g,%g,%g mm, radius %g mm) holds no brain voxel: "
                "nothing is planted", p->roi_center.v[0], p->roi_center.v[1],
                p->roi_center.v[2], p->roi_radius);
    if (p->bids) {   /* the task data set instead of the regression one */
        NF_TRY(rc = sim_bids_run(run, geom, roi, n_roi, seed, out));
        goto outputs;
    }
    build_design(T, F, X);
    for (int64_t f = 0; f < F; f++)
        truth_value += p->effect_size * feature_weight(f);
    for (int64_t t = 0; t < T; t++) {
        double s = SIM_SUBJECT_EFFECT * p->effect_size;
        for (int64_t f = 0; f < F; f++)
            s += X[t * F + f] * p->effect_size * feature_weight(f);
        roi_signal[t] = s;
    }

    out[SIMULATE_OUT_TRUTH] = nf_value_new_volume(&plan.grid, 3, 1, run->err);
    if (!out[SIMULATE_OUT_TRUTH]) {
        rc = err_code(run->err);
        goto fail;
    }
    for (int64_t r = 0; r < n_roi; r++)
        out[SIMULATE_OUT_TRUTH]->u.vol.data[geom->index[roi[r]]] = (float)truth_value;

    out[SIMULATE_OUT_X] = design_table(X, T, F, run->err);
    out[SIMULATE_OUT_Y] = labels_table(X, T, F, p->noise, seed, run->err);
    out[SIMULATE_OUT_DATA] = nf_value_new_collection((size_t)p->subjects, run->err);
    if (!out[SIMULATE_OUT_X] || !out[SIMULATE_OUT_Y] || !out[SIMULATE_OUT_DATA]) {
        rc = err_code(run->err);
        goto fail;
    }
    for (int64_t s = 0; s < p->subjects; s++) {
        if (nf_run_interrupted(run)) {   /* between subjects */
            rc = NF_FAIL(run->err, NF_EINTR, "interrupted");
            goto fail;
        }
        nf_progress(run, s, p->subjects, "subjects");
        struct nf_value *vol = simulate_subject(p, geom, roi, n_roi, roi_signal, seed, s,
                                                run->err);
        char *label = sim_subject_label(s, p->subjects);
        if (vol && label)
            nf_value_set_label(vol, label);
        free(label);
        if (!vol || !label || !vol->label) {
            nf_value_unref(vol);
            rc = run->err->code ? run->err->code
                                : NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        out[SIMULATE_OUT_DATA]->u.coll.items[s] = vol;
    }

    if (p->write) {
        atlas = nf_value_new_volume(&plan.grid, 3, 1, run->err);
        if (!atlas) {
            rc = err_code(run->err);
            goto fail;
        }
        NF_TRY(rc = build_atlas(geom, roi, n_roi, atlas->u.vol.data, run->err));
        NF_TRY(rc = write_dataset(p, p->write, out, &atlas->u.vol, run->err));
    }
outputs:
    for (int o = 0; o < 5; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
    rc = 0;

fail:   /* and success: rc is 0, the outputs moved to run->out */
    if (rc < 0)
        nf_error_on_node(node, run->err, rc);
    for (int o = 0; o < 5; o++)
        nf_value_unref(out[o]);
    nf_value_unref(atlas);
    nf_geom_unref(geom);
    free(X);
    free(roi_signal);
    free(roi);
    sim_plan_release(&plan);
    return rc;
}

/* The task data set (bids) has its own design and layout: `features` and
 * `write` belong to the regression one, `runs` to the task one (node.h
 * param_matters: a parameter that cannot matter stays out of the key). */
static bool simulate_param_matters(const void *params, const struct nf_param *prm)
{
    const struct simulate_params *p = params;
    if (strcmp(prm->name, "runs") == 0)
        return p->bids != NULL;
    if (strcmp(prm->name, "features") == 0)
        return p->bids == NULL;
    return true;
}

static int simulate_resolve(struct nf_resolve *r)
{
    const struct simulate_params *p = r->params;
    struct sim_plan plan;
    if (p->bids && p->write)
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "give write (the regression data set) or bids (the task data set), not both");
    const char *folder = p->bids ? p->bids : p->write;
    if (folder && sim_folder_check(p, folder, r->node, r->err) < 0)
        return r->err->code;
    int rc = sim_plan_init(p, r->env, r->node, &plan, r->err);
    if (rc < 0)
        return rc;
    const int64_t *d = plan.grid.dim;
    r->out[SIMULATE_OUT_DATA] = (struct nf_shape){
        .kind = NF_KIND_COLLECTION, .item_kind = NF_KIND_VOLUME, .n_items = p->subjects,
        .dim = {d[0], d[1], d[2], p->images}};
    r->out[SIMULATE_OUT_MASK] = (struct nf_shape){.kind = NF_KIND_VOLUME, .dim = {d[0], d[1], d[2], 1}};
    r->out[SIMULATE_OUT_X] = (struct nf_shape){.kind = NF_KIND_TABLE, .dim = {p->images, p->features}};
    r->out[SIMULATE_OUT_Y] = (struct nf_shape){.kind = NF_KIND_TABLE, .dim = {p->images, 2}};
    if (p->bids) {   /* runs; run 1's events and regressors */
        r->out[SIMULATE_OUT_DATA].n_items = p->subjects * p->runs;
        r->out[SIMULATE_OUT_X].dim[0] = sim_bids_event_count(p->images);
        r->out[SIMULATE_OUT_X].dim[1] = 3;
    }
    r->out[SIMULATE_OUT_TRUTH] = r->out[SIMULATE_OUT_MASK];
    /* every image is on the mask's grid: a mask node pairing them with a
     * loaded image compares grids before anything runs */
    static const int images[] = { SIMULATE_OUT_DATA, SIMULATE_OUT_MASK, SIMULATE_OUT_TRUTH };
    for (size_t i = 0; i < sizeof images / sizeof images[0]; i++) {
        r->out[images[i]].has_grid = true;
        r->out[images[i]].grid = plan.grid;
    }
    sim_plan_release(&plan);
    return 0;
}

/* Working memory beyond the outputs: the full-resolution mask read from disk
 * (about (voxel_size)^3 source voxels per grid voxel for a 1 mm template, as
 * float32) and the resampling counts, the geometry index and the ROI list. */
static uint64_t simulate_estimate(const void *params, const struct nf_shape *in,
                                  const struct nf_shape *out)
{
    const struct simulate_params *p = params;
    const struct nf_shape *m = &out[SIMULATE_OUT_MASK];
    uint64_t grid = (uint64_t)(m->dim[0] * m->dim[1] * m->dim[2]);
    uint64_t f = (uint64_t)llround(p->voxel_size);
    bool synthetic = p->mask && strcmp(p->mask, "synthetic") == 0;
    (void)in;
    uint64_t bytes = grid * (8 + 8) + (uint64_t)(p->images * (p->features + 1)) * 8;
    if (!synthetic)
        bytes += grid * f * f * f * (sizeof(float) + 1) + grid * sizeof(uint32_t);
    return bytes;
}

/* The mask file the simulated brain comes from (node.h key_files): its
 * content, not its name, is part of the key, and `auto` keys differently with
 * and without mricron-data installed. */
static int simulate_key_files(const void *params, const struct nf_env *env, char ***paths,
                              size_t *n, struct nf_error *err)
{
    const struct simulate_params *p = params;
    const char *mask = p->mask ? p->mask : "auto";
    bool is_auto = strcmp(mask, "auto") == 0;
    char *path = NULL;
    *paths = NULL;
    *n = 0;
    if (strcmp(mask, "synthetic") == 0 || (is_auto && (p->bids || access(NF_SIMULATE_TEMPLATE, R_OK) != 0)))
        return 0;
    if (is_auto)
        path = nf_strdup(NF_SIMULATE_TEMPLATE);
    else
        path = env && env->pipeline_dir ? nf_path_join(env->pipeline_dir, mask) : nf_strdup(mask);
    *paths = nf_calloc(1, sizeof **paths);
    if (!path || !*paths) {
        free(path);
        free(*paths);
        *paths = NULL;
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    (*paths)[0] = path;
    *n = 1;
    return 0;
}

#define FIELD(f) offsetof(struct simulate_params, f)
static const struct nf_param simulate_param_table[] = {
    NF_PARAM_INT("subjects", FIELD(subjects), 1, 1, 10000, "number of simulated subjects"),
    NF_PARAM_INT("images", FIELD(images), 40, 2, 100000, "images (time points) per subject"),
    NF_PARAM_INT("features", FIELD(features), 2, 1, 1000,
                 "columns of the design X (feature 1 is a boxcar, the others sines)"),
    NF_PARAM_STR("mask", FIELD(mask), "auto",
                 "brain mask: auto (mricron-data's ch2bet if installed, else synthetic), "
                 "synthetic (an ellipsoid), or a NIfTI path (relative to the pipeline file; nonzero = "
                 "brain); resampled to voxel_size by block majority"),
    NF_PARAM_NUM("voxel_size", FIELD(voxel_size), 4.0, 1, 10,
                 "voxel edge of the simulated grid in mm (rounded to whole mask voxels)"),
    NF_PARAM_NUM("effect_size", FIELD(effect_size), 1.0, -1e6, 1e6,
                 "scale of the planted weights inside the ROI"),
    NF_PARAM_NUM("noise", FIELD(noise), 1.0, 0, 1e6, "standard deviation of the Gaussian noise"),
    NF_PARAM_NUM_LIST("roi_center", FIELD(roi_center), "40,-20,40", -1000, 1000, 3, 3,
                      "centre of the ROI sphere, world mm (x, y, z)"),
    NF_PARAM_NUM("roi_radius", FIELD(roi_radius), 10.0, 0, 1000, "radius of the ROI sphere in mm"),
    NF_PARAM_SEED("seed", FIELD(seed), 9007199254740992.0, "random seed; -1 uses settings.seed"),
    NF_PARAM_PATH_F("write", FIELD(write), "", NF_PF_OPTIONAL,
                    "folder to also write the data set to as BIDS-like files (sub-XX/func/"
                    "sub-XX_task-sim_bold.nii.gz, mask, truth, design.tsv, labels.tsv, and atlas.nii.gz: label 1 the "
                    "ROI sphere, 2, 3, ... 30 mm boxes of the other brain voxels; names in atlas.nii.txt)"),
    NF_PARAM_PATH_F("bids", FIELD(bids), "", NF_PF_OPTIONAL,
                    "instead: simulate a two-condition task (faces, houses) and write it to this folder as BIDS "
                    "raw data (sub-XX/func/sub-XX_task-localizer_run-R_bold.nii.gz and _events.tsv, "
                    "task-localizer_bold.json with RepetitionTime 2, participants.tsv with age, sex, group and handedness) "
                    "plus fMRIPrep-like derivatives "
                    "(derivatives/fmriprep/: _space-MNI152NLin2009cAsym_desc-preproc_bold, _desc-brain_mask, "
                    "_desc-confounds_timeseries.tsv) and derivatives/simulation/truth.nii.gz; faces - houses "
                    "is effect_size in the ROI (mask auto or synthetic: a small 60 x 72 x 60 mm brain)"),
    NF_PARAM_INT("runs", FIELD(runs), 2, 1, 99, "runs per subject of the `bids` task data set"),
    { .name = "overwrite", .help = "write into the `write`/`bids` folder even when it is not empty and simulate "
      "did not make it (it marks the folders it makes with " NF_SIMULATE_MARKER "; without this it writes only "
      "into a new or empty folder or one of its own, and removes the subjects it wrote there before)",
      .type = NF_P_BOOL, .offset = FIELD(overwrite), .def = { .i = 0 }, .flags = NF_PF_NOT_KEYED },
    NF_PARAM_END,
};
#undef FIELD

/* node_type.methods: the generative model of the description, values filled in. */
static char *simulate_methods(const void *params)
{
    const struct simulate_params *p = params;
    const char *mask = p->mask ? p->mask : "auto";
    const char *slash = strrchr(mask, '/');
    char *brain = mask_is_synthetic(mask) ? nf_strdup("a synthetic ellipsoid brain mask")
                  : strcmp(mask, "auto") == 0 ? nf_strdup("the ch2bet template brain mask")
                  : nf_asprintf("the brain mask %s", slash ? slash + 1 : mask);
    char *seed = p->seed >= 0 ? nf_asprintf(" (seed %" PRId64 ")", p->seed) : nf_strdup("");
    char *design = p->features == 1 ? nf_strdup("1 regressor (a boxcar)")
                   : p->features == 2 ? nf_strdup("2 regressors (a boxcar and a sine)")
                   : nf_asprintf("%" PRId64 " regressors (a boxcar and %" PRId64 " sines)", p->features,
                                 p->features - 1);
    char *text = NULL;
    if (p->bids && brain && seed)
        text = nf_asprintf(
            "A task-fMRI data set was simulated for %" PRId64 " subject%s, %" PRId64 " run%s each of %" PRId64
            " volumes (TR = 2 s), on %s resampled to %g mm voxels%s, and written as BIDS data with "
            "fMRIPrep-like derivatives. Each brain voxel's series was a baseline of 100 plus a shared response "
            "of %g to faces and houses events (4 s, Glover HRF), a linear drift and Gaussian noise with a "
            "standard deviation of %g; within a sphere of radius %g mm centred at (%g, %g, %g) mm faces "
            "evoked an extra response of %g times a per-subject amplitude drawn around 1 (standard deviation "
            "0.2).",
            p->subjects, p->subjects == 1 ? "" : "s", p->runs, p->runs == 1 ? "" : "s", p->images,
            mask_is_synthetic(p->mask ? p->mask : "auto") || strcmp(p->mask ? p->mask : "auto", "auto") == 0
                ? "a small synthetic ellipsoid brain mask" : brain,
            p->voxel_size, seed, 0.5 * p->effect_size, p->noise, p->roi_radius, p->roi_center.v[0],
            p->roi_center.v[1], p->roi_center.v[2], p->effect_size);
    else if (brain && seed && design)
        text = nf_asprintf(
            "Synthetic data were simulated for %" PRId64 " subject%s of %" PRId64 " images%s, on %s "
            "resampled to %g mm voxels%s. Each voxel's series was a baseline of 100 plus a design of %s "
            "whose weights, scaled by an effect size of %g, were nonzero only within a sphere of radius "
            "%g mm centred at (%g, %g, %g) mm (where a constant effect of %g was also added), plus Gaussian "
            "noise with a standard deviation of %g.",
            p->subjects, p->subjects == 1 ? "" : "s", p->images, p->subjects == 1 ? "" : " each", brain,
            p->voxel_size, seed, design,
            p->effect_size, p->roi_radius, p->roi_center.v[0], p->roi_center.v[1], p->roi_center.v[2],
            SIM_SUBJECT_EFFECT * p->effect_size, p->noise);
    free(brain);
    free(seed);
    free(design);
    return text;
}

static const struct nf_port simulate_inputs[] = {
    NF_PORT_END,
};

static const struct nf_port simulate_outputs[] = {
    {"data", "one 4D volume per subject (a collection labelled sub-01, sub-02, ...)",
     NF_PT_VOLUME | NF_PT_COLL, 0},
    {"mask", "the brain mask on the simulated grid (1 brain, 0 outside)", NF_PT_VOLUME, 0},
    {"X", "the design: columns f1..fN, one row per image", NF_PT_TABLE, 0},
    {"y", "labels per image: trial_type (a/b from the sign of f1) and target (f1 + noise)",
     NF_PT_TABLE, 0},
    {"truth", "the planted effect map: the sum of the weights inside the ROI, 0 elsewhere",
     NF_PT_VOLUME, 0},
    NF_PORT_END,
};
NF_PORTS_MATCH(simulate_inputs, SIMULATE_N_IN);
NF_PORTS_MATCH(simulate_outputs, SIMULATE_N_OUT);

const struct nf_node_type nf_node_simulate = {
    .name = "simulate",
    .summary = "synthetic subjects with a planted, known effect",
    .description =
        "Generates `subjects` 4D series on a real (mricron-data ch2bet) or synthetic brain "
        "mask resampled to `voxel_size` mm: Y[t,v] = 100 + X[t,:] B[:,v] + 0.5*effect_size "
        "(inside the ROI) + noise*N(0,1), where the weights B are effect_size times fixed "
        "per-feature weights inside a sphere of `roi_radius` mm around `roi_center` and 0 "
        "elsewhere. Deterministic from `seed`. Returns the data, the mask, the design X, "
        "labels y and the ground-truth map, and optionally writes them as BIDS-like files. With "
        "`bids`, it simulates a task instead (`nlflow simulate --bids DIR`): `subjects` x `runs` runs of "
        "`images` volumes (TR 2 s) with faces and houses events convolved with the Glover HRF, a response to "
        "both everywhere and an extra faces response of effect_size in the ROI, written as BIDS raw data "
        "with fMRIPrep-like derivatives (preprocessed images, brain masks, confounds); data are then the "
        "runs (labelled sub-XX_task-localizer_run-R), X run 1's events, y run 1's two HRF regressors and "
        "truth the faces - houses map.",
    .version = 4,   /* 2: write: also writes atlas.nii.gz; 3: bids, runs; 4: bids writes participants.tsv */
    .params = simulate_param_table,
    .params_size = sizeof(struct simulate_params),
    .inputs = simulate_inputs,
    .outputs = simulate_outputs,
    .resolve = simulate_resolve,
    .estimate = simulate_estimate,
    .run_cpu = simulate_run,
    .key_files = simulate_key_files,
    .param_matters = simulate_param_matters,
    .methods = simulate_methods,
    .flags = NF_NODE_SOURCE,
};
