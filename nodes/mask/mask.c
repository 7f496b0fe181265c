/* mask.c — the `mask` node: brain images in, an images × voxels matrix out.
 *
 * This is where nlflow's voxel order is decided, and it must be nltools' (and
 * nilearn's `apply_mask`): the columns are the mask's nonzero voxels in C order
 * over (i, j, k), k fastest, the order of numpy's `np.nonzero(mask)`. NIfTI
 * stores i fastest, so the column order is NOT the storage order; the geometry
 * built by nf_geom_from_mask holds the storage offset of every column, and
 * extraction is a gather through it. The output keeps that geometry, so any
 * 1×V or k×V result downstream can be written back as an image.
 *
 * Conventions, as nilearn: NaN/inf in the mask count as 0 (outside); NaN/inf in
 * the data become 0 (one warning with the count); data and mask must share a
 * grid (same dims, affines equal within 1e-4 mm) — we never resample silently.
 * Unlike nilearn, a mask with more than two distinct values is accepted with a
 * warning (every nonzero voxel is in), because atlases are often used as masks.
 *
 * `standardize` works per voxel over the images (rows), with the population
 * std and std 0 treated as 1 (sklearn's `scale`), through the kernel table.
 * With an `atlas` the node also emits `labels`, the atlas value of every
 * in-mask voxel, in the same column order (for ROI analyses).
 */
#include "mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "kernels/kernels.h"
#include "core/util.h"

static const char *const mask_standardize_choices[] = { "none", "zscore", "center", NULL };

#define FIELD(f) offsetof(struct mask_params, f)
static const struct nf_param mask_params_table[] = {
    NF_PARAM_ENUM("standardize", FIELD(standardize), mask_standardize_choices, MASK_STD_NONE,
                  "per voxel, over the images: none; zscore, (x - mean) / std with the population "
                  "std (a constant voxel becomes 0); or center, x - mean"),
    NF_PARAM_END,
};

/* node_type.methods */
static char *mask_methods(const void *params)
{
    const struct mask_params *p = params;
    static const char *const how[] = {
        [MASK_STD_NONE] = "",
        [MASK_STD_ZSCORE] = ", and each voxel was z-scored over images (population standard deviation)",
        [MASK_STD_CENTER] = ", and each voxel was mean-centred over images",
    };
    return nf_asprintf("The voxels inside the brain mask were extracted from every image into an "
                       "images-by-voxels matrix%s.", how[p->standardize]);
}
#undef FIELD

static const struct nf_port mask_inputs[] = {
    { "data", "3D image or 4D series (a collection runs once per subject)", NF_PT_VOLUME,
      NF_PORT_LAZY },
    { "mask", "3D image on the same grid as data; nonzero voxels are kept", NF_PT_VOLUME, 0 },
    { "atlas", "3D label image on the mask's grid; gives `labels`", NF_PT_VOLUME,
      NF_PORT_OPTIONAL },
    NF_PORT_END
};

static const struct nf_port mask_outputs[] = {
    { "out", "images × voxels float32 matrix in nltools voxel order, with the mask's geometry",
      NF_PT_MATRIX, 0 },
    { "labels", "1 × voxels: the atlas label of each in-mask voxel (only with atlas)",
      NF_PT_MATRIX, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(mask_inputs, MASK_N_IN);
NF_PORTS_MATCH(mask_outputs, MASK_N_OUT);

/* How a value is named in messages: its file, else its label. */
static const char *value_name(const struct nf_value *v)
{
    if (v->path)
        return v->path;
    return v->label ? v->label : "(computed in the pipeline)";
}

static enum nf_standardize standardize_mode(int choice)
{
    switch (choice) {
    case MASK_STD_ZSCORE: return NF_STD_ZSCORE;
    case MASK_STD_CENTER: return NF_STD_CENTER;
    default:              return NF_STD_NONE;
    }
}

/* ---- input checks ---- */

/* The engine guarantees connected, materialized volumes; check anyway, since
 * a crash is the one failure we never want. */
static int check_volume(const struct nf_value *v, const char *port,
                        const struct nf_node_inst *node, struct nf_error *err)
{
    if (!v)
        return NF_FAIL_AT(err, NF_EBUG, nf_node_loc(node), nf_node_id(node),
                          "input '%s' is not connected", port);
    if (v->kind != NF_KIND_VOLUME)
        return NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                          "input '%s' must be an image (got a %s)", port,
                          nf_kind_name(v->kind));
    if (!v->u.vol.data && !(v->u.vol.lazy && v->path && strcmp(port, "data") == 0))
        return NF_FAIL_AT(err, NF_EBUG, nf_node_loc(node), nf_node_id(node),
                          "input '%s' ('%s') was not read into memory", port, value_name(v));
    if (nf_grid_nvox(&v->u.vol.grid) <= 0 || v->u.vol.nt < 1)
        return NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                          "input '%s' ('%s') has no voxels", port, value_name(v));
    return 0;
}

/* The fix for a grid mismatch, named in the message: a resample node that
 * puts data (or the atlas, with nearest for labels) on the mask's grid. */
static const char *resample_hint(const char *port)
{
    if (strcmp(port, "atlas") == 0)
        return "a resample node with the atlas as data, the mask as to and interpolation: nearest "
               "puts the atlas on the mask's grid";
    return "a resample node with the data as data and the mask as to puts the data on the mask's grid";
}

/* Grids must match exactly: silently resampling would change which voxels are
 * analysed. Both grids and both files go into the message, since the fix is
 * to resample one onto the other. */
static int check_same_grid(const struct nf_value *a, const char *a_port,
                           const struct nf_value *b, const char *b_port,
                           const struct nf_node_inst *node, struct nf_error *err)
{
    if (nf_grid_same(&a->u.vol.grid, &b->u.vol.grid))
        return 0;
    char a_grid[400], b_grid[400];
    nf_grid_describe(&a->u.vol.grid, a_grid, sizeof a_grid);
    nf_grid_describe(&b->u.vol.grid, b_grid, sizeof b_grid);
    return NF_FAIL_AT(err, NF_ESHAPE, nf_node_loc(node), nf_node_id(node),
                      "%s '%s' and %s '%s' are on different grids: %s is %s; %s is %s "
                      "(resample it: %s)",
                      a_port, value_name(a), b_port, value_name(b),
                      a_port, a_grid, b_port, b_grid, resample_hint(a_port));
}

static int check_single_image(const struct nf_value *v, const char *port,
                              const struct nf_node_inst *node, struct nf_error *err)
{
    if (v->u.vol.nt == 1)
        return 0;
    return NF_FAIL_AT(err, NF_ESHAPE, nf_node_loc(node), nf_node_id(node),
                      "%s '%s' has %lld volumes; it must be a single 3D image",
                      port, value_name(v), (long long)v->u.vol.nt);
}

/* ---- the mask ---- */

/* The number of in-mask voxels (finite and nonzero: NaN/inf count as 0, as
 * nilearn's load_mask_img makes them), counted in storage order. */
static int64_t count_in_mask(const float *mask, int64_t nvox)
{
    int64_t n_in = 0;
    for (int64_t v = 0; v < nvox; v++)
        n_in += mask[v] != 0.0f && isfinite(mask[v]);
    return n_in;
}

static int compare_floats(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* nilearn refuses a mask that is not {0, one value}; we keep every nonzero
 * voxel but say so, because a probabilistic map or an atlas passed as a mask
 * is usually a mistake. Whether the in-mask values are all one is seen in
 * storage order (one pass); counting the distinct values sorts them, so it
 * is only done when two of them differ. */
static void warn_if_not_binary(const float *mask, const struct nf_geom *geom,
                               const struct nf_value *mask_value, const struct nf_node_inst *node)
{
    const int64_t n = geom->n_voxels, nvox = nf_grid_nvox(&geom->grid);
    const float first = mask[geom->index[0]];
    int64_t v = 0;
    while (v < nvox && (mask[v] == first || mask[v] == 0.0f || !isfinite(mask[v])))
        v++;
    if (v == nvox)
        return;

    float *values = nf_malloc((size_t)n * sizeof *values);
    if (!values) {
        nf_warn(nf_node_id(node), "mask '%s' has more than 2 distinct values; every "
                "nonzero voxel is in the mask", value_name(mask_value));
        return;
    }
    for (int64_t c = 0; c < n; c++)
        values[c] = mask[geom->index[c]];
    qsort(values, (size_t)n, sizeof *values, compare_floats);
    int64_t distinct = 1;
    for (int64_t c = 1; c < n; c++)
        distinct += values[c] != values[c - 1];
    free(values);

    bool has_zero = n < nvox;
    nf_warn(nf_node_id(node), "mask '%s' has %lld distinct values; every nonzero voxel is "
            "in the mask", value_name(mask_value), (long long)(distinct + has_zero));
}

/* ---- extraction ---- */

/* Row t of `out` = image t of the volume at the mask's voxels. A gather over
 * index[] per image: the reads jump, the writes stream. Non-finite values
 * become 0; returns how many. */
static int64_t gather_rows(const float *volume, int64_t nvox, int64_t n_images,
                           const int64_t *index, int64_t n_cols, float *out)
{
    int64_t n_nonfinite = 0;
    for (int64_t t = 0; t < n_images; t++) {
        const float *image = volume + t * nvox;
        float *row = out + t * n_cols;
        for (int64_t c = 0; c < n_cols; c++) {
            float x = image[index[c]];
            if (!isfinite(x)) {
                x = 0.0f;
                n_nonfinite++;
            }
            row[c] = x;
        }
    }
    return n_nonfinite;
}

static int mask_run(struct nf_run *run)
{
    const struct mask_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    struct nf_error *err = run->err;
    const struct nf_value *data = run->in[MASK_IN_DATA];
    const struct nf_value *mask = run->in[MASK_IN_MASK];
    const struct nf_value *atlas = run->in[MASK_IN_ATLAS];
    struct nf_geom *geom = NULL;
    struct nf_value *out = NULL, *labels = NULL;
    int rc = 0;

    NF_TRY(rc = check_volume(data, "data", node, err));
    NF_TRY(rc = check_volume(mask, "mask", node, err));
    NF_TRY(rc = check_same_grid(data, "data", mask, "mask", node, err));
    NF_TRY(rc = check_single_image(mask, "mask", node, err));
    if (atlas) {
        NF_TRY(rc = check_volume(atlas, "atlas", node, err));
        NF_TRY(rc = check_same_grid(atlas, "atlas", mask, "mask", node, err));
        NF_TRY(rc = check_single_image(atlas, "atlas", node, err));
    }

    const int64_t nvox = nf_grid_nvox(&mask->u.vol.grid);
    const int64_t n_in = count_in_mask(mask->u.vol.data, nvox);
    if (n_in == 0) {
        rc = NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                        "mask '%s' is empty: it has no nonzero voxel", value_name(mask));
        goto fail;
    }
    geom = nf_geom_from_mask(&mask->u.vol.grid, mask->u.vol.data);
    if (!geom) {
        rc = NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(node), nf_node_id(node),
                        "out of memory for the geometry of mask '%s'", value_name(mask));
        goto fail;
    }
    if (geom->n_voxels != n_in) {
        rc = NF_FAIL_AT(err, NF_EBUG, nf_node_loc(node), nf_node_id(node),
                        "mask '%s': geometry has %lld voxels, the mask %lld nonzero ones",
                        value_name(mask), (long long)geom->n_voxels, (long long)n_in);
        goto fail;
    }
    warn_if_not_binary(mask->u.vol.data, geom, mask, node);

    const int64_t n_images = data->u.vol.nt, n_cols = geom->n_voxels;
    int64_t n_nonfinite;
    if (data->u.vol.lazy) {
        /* an image on disk (a collection's subject, or a file only masks read):
         * its in-mask voxels are gathered as it is read, so memory holds this
         * matrix and a chunk (for .nii.gz, the inflated file), not the 4D series */
        out = nf_nifti_read_masked(data->path, geom, run->env ? run->env->threads : 1,
                                   &n_nonfinite, err);
        if (!out) {
            rc = nf_error_on_node(node, err, err->code < 0 ? err->code : NF_EIO);
            goto fail;
        }
        if (out->u.mat.rows != n_images) {
            rc = NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                            "'%s' changed while the pipeline ran (%lld images, planned %lld)",
                            value_name(data), (long long)out->u.mat.rows, (long long)n_images);
            goto fail;
        }
    } else {
        out = nf_value_new_matrix_unfilled(n_images, n_cols, geom, err);   /* gather writes all */
        if (!out) {
            rc = err->code < 0 ? err->code : NF_ENOMEM;
            goto fail;
        }
        n_nonfinite = gather_rows(data->u.vol.data, nvox, n_images, geom->index, n_cols,
                                  out->u.mat.data);
    }
    if (n_nonfinite > 0)
        nf_warn(nf_node_id(node), "replaced %lld non-finite values with 0 in data '%s'",
                (long long)n_nonfinite, value_name(data));

    enum nf_standardize mode = standardize_mode(p->standardize);
    if (mode != NF_STD_NONE)
        nf_kernels_cpu()->standardize(out->u.mat.data, n_images, n_cols, mode);

    if (atlas) {
        labels = nf_value_new_matrix(1, n_cols, geom, err);
        if (!labels) {
            rc = err->code < 0 ? err->code : NF_ENOMEM;
            goto fail;
        }
        int64_t n_bad = gather_rows(atlas->u.vol.data, nvox, 1, geom->index, n_cols,
                                    labels->u.mat.data);
        if (n_bad > 0)
            nf_warn(nf_node_id(node), "atlas '%s' has %lld non-finite values inside the "
                    "mask; they get label 0", value_name(atlas), (long long)n_bad);
    }

    /* The matrices hold their own references to the geometry. */
    nf_geom_unref(geom);
    nf_value_set_stat(out, NF_STAT_DATA, 0, "images x voxels inside the mask");
    if (labels)
        nf_value_set_stat(labels, NF_STAT_LABEL, 0, "atlas label of each voxel");
    run->out[MASK_OUT_MATRIX] = out;
    run->out[MASK_OUT_LABELS] = labels;
    return 0;

fail:
    nf_value_unref(out);
    nf_value_unref(labels);
    nf_geom_unref(geom);
    return rc < 0 ? rc : NF_EBUG;
}

/* ---- plan time ---- */

static bool atlas_connected(const struct nf_node_inst *node, const struct nf_shape *atlas)
{
    return atlas->kind != NF_KIND_NONE || nf_node_input_wired(node, MASK_IN_ATLAS);
}

static bool same_spatial_dims(const struct nf_shape *a, const struct nf_shape *b)
{
    return a->dim[0] == b->dim[0] && a->dim[1] == b->dim[1] && a->dim[2] == b->dim[2];
}

static int fail_dims(struct nf_resolve *r, const char *a_port, const struct nf_shape *a,
                     const char *b_port, const struct nf_shape *b)
{
    return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                      "%s grid %lldx%lldx%lld does not match %s grid %lldx%lldx%lld",
                      a_port, (long long)a->dim[0], (long long)a->dim[1],
                      (long long)a->dim[2], b_port, (long long)b->dim[0],
                      (long long)b->dim[1], (long long)b->dim[2]);
}

/* Grids from headers, compared as at run time (check_same_grid), so that a
 * mask on another grid is reported by `validate` with the same message. */
static int fail_grids(struct nf_resolve *r, const char *a_port, const struct nf_shape *a,
                      const char *b_port, const struct nf_shape *b)
{
    char a_grid[400], b_grid[400], a_name[300] = "", b_name[300] = "";
    nf_grid_describe(&a->grid, a_grid, sizeof a_grid);
    nf_grid_describe(&b->grid, b_grid, sizeof b_grid);
    if (a->path)
        snprintf(a_name, sizeof a_name, " '%s'", a->path);
    if (b->path)
        snprintf(b_name, sizeof b_name, " '%s'", b->path);
    return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                      "%s%s and %s%s are on different grids: %s is %s; %s is %s "
                      "(resample it: %s)",
                      a_port, a_name, b_port, b_name, a_port, a_grid, b_port, b_grid,
                      resample_hint(a_port));
}

/* Headers only: the number of in-mask voxels is unknown until the mask is
 * read, so columns are the grid size, an upper bound. */
static int mask_resolve(struct nf_resolve *r)
{
    const struct nf_shape *data = &r->in[MASK_IN_DATA];
    const struct nf_shape *mask = &r->in[MASK_IN_MASK];
    const struct nf_shape *atlas = &r->in[MASK_IN_ATLAS];
    const bool data_known = data->kind == NF_KIND_VOLUME;
    const bool mask_known = mask->kind == NF_KIND_VOLUME;
    const bool atlas_known = atlas->kind == NF_KIND_VOLUME;

    r->out[MASK_OUT_MATRIX] = (struct nf_shape){ 0 };
    r->out[MASK_OUT_LABELS] = (struct nf_shape){ 0 };

    if (data_known && mask_known && data->has_grid && mask->has_grid &&
        !nf_grid_same(&data->grid, &mask->grid))
        return fail_grids(r, "data", data, "mask", mask);
    if (atlas_known && mask_known && atlas->has_grid && mask->has_grid &&
        !nf_grid_same(&atlas->grid, &mask->grid))
        return fail_grids(r, "atlas", atlas, "mask", mask);
    if (data_known && mask_known && !same_spatial_dims(data, mask))
        return fail_dims(r, "data", data, "mask", mask);
    if (atlas_known && mask_known && !same_spatial_dims(atlas, mask))
        return fail_dims(r, "atlas", atlas, "mask", mask);
    if (mask_known && mask->dim[3] > 1)
        return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                          "mask has %lld volumes; it must be a single 3D image",
                          (long long)mask->dim[3]);
    if (atlas_known && atlas->dim[3] > 1)
        return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                          "atlas has %lld volumes; it must be a single 3D image",
                          (long long)atlas->dim[3]);
    if (!data_known)
        return 0;   /* rows unknown until run time */

    const struct nf_shape *grid = mask_known ? mask : data;
    const int64_t max_cols = grid->dim[0] * grid->dim[1] * grid->dim[2];
    struct nf_shape *out = &r->out[MASK_OUT_MATRIX];
    out->kind = NF_KIND_MATRIX;
    out->dim[0] = data->dim[3] > 0 ? data->dim[3] : 1;
    out->dim[1] = max_cols;
    out->cols_upper_bound = true;
    out->has_geom = true;

    if (atlas_connected(r->node, atlas)) {
        struct nf_shape *labels = &r->out[MASK_OUT_LABELS];
        *labels = *out;
        labels->dim[0] = 1;
    }
    return 0;
}

/* Working memory beyond inputs and outputs: the geometry's index (8 bytes per
 * in-mask voxel, bounded by the grid) and, for an image read from disk
 * through the mask, the reader's tables (at most 4 bytes per grid voxel). */
static uint64_t mask_estimate(const void *params, const struct nf_shape *in,
                              const struct nf_shape *out)
{
    (void)params;
    (void)out;
    const struct nf_shape *grid = in[MASK_IN_MASK].kind == NF_KIND_VOLUME
                                      ? &in[MASK_IN_MASK] : &in[MASK_IN_DATA];
    if (grid->kind != NF_KIND_VOLUME)
        return 0;
    uint64_t nvox = (uint64_t)grid->dim[0] * (uint64_t)grid->dim[1] * (uint64_t)grid->dim[2];
    return nvox * (sizeof(float) + sizeof(int64_t));
}

const struct nf_node_type nf_node_mask = {
    .name = "mask",
    .summary = "brain images -> images x voxels matrix (nltools voxel order)",
    .description =
        "Extracts the voxels of `mask` (every nonzero, finite voxel) from `data`, "
        "a 3D image (one row) or a 4D series (one row per volume), into a float32 "
        "matrix whose columns follow nltools/nilearn: C order over (i, j, k), k "
        "fastest. NaN and inf in the data become 0 (with a warning); data, mask and "
        "atlas must share one grid (same dimensions, affines equal within 1e-4 mm), "
        "nothing is resampled here (a `resample` node puts an image on another's "
        "grid). The matrix keeps the mask's geometry, so any map computed from it "
        "can be written back as NIfTI. `standardize` applies per "
        "voxel over the images: zscore (population std; a constant voxel becomes 0) "
        "or center. With an `atlas`, `labels` gives the atlas value of each column.",
    .version = 1,
    .params = mask_params_table,
    .params_size = sizeof(struct mask_params),
    .inputs = mask_inputs,
    .outputs = mask_outputs,
    .check = NULL,
    .resolve = mask_resolve,
    .estimate = mask_estimate,
    .run_cpu = mask_run,
    .run_gpu = NULL,
    .methods = mask_methods,
    .flags = NF_NODE_LAZY_INPUTS,
};
