/* resample.c — the `resample` node: an image onto another image's grid.
 *
 * It is nilearn's resample_to_img (0.14, clip off, fill 0), which calls
 * scipy.ndimage.affine_transform volume by volume: output voxel o of the
 * target grid reads the source at c = A o + b, where [A b] = inv(source
 * affine) · target affine (the identity when both affines are equal). A
 * coordinate outside [0, n - 1] on any axis gives 0 (scipy's 'constant' mode:
 * nothing is interpolated beyond the first and last voxel centres). Inside,
 * `nearest` takes the voxel floor(c + 0.5), `linear` the trilinear
 * combination of the 8 neighbours, and `continuous` the cubic B-spline of the
 * 4×4×4 neighbours after scipy's spline prefilter (in double, 'mirror'
 * boundary, as scipy uses for mode 'constant'); neighbours past an edge are
 * mirrored. When A is diagonal scipy computes c = (o + b / a) · a instead of
 * a · o + b, and so does this node, so that ties of `nearest` at exactly .5
 * fall the same way. Weights and products are taken in scipy's order and the
 * sum stored as float32. A grid equal to the source's (the mask node's test,
 * affines within 1e-4 mm) is a copy, as nilearn skips resampling then.
 *
 * Differences from nilearn: non-finite source values are replaced by 0 (with
 * a warning; nilearn extrapolates them and puts NaN back where the nearest
 * source voxel was NaN); the inverse affine is computed here, so a coordinate
 * that falls on a voxel edge or a .5 tie to within round-off (1e-15 voxels)
 * may go the other way.
 *
 * Threads share (volume, output slice) jobs through one counter.
 */
#include "resample.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static const char *const resample_interp_choices[] = { "linear", "nearest", "continuous", NULL };
static const int spline_order[] = { [RESAMPLE_LINEAR] = 1, [RESAMPLE_NEAREST] = 0,
                                    [RESAMPLE_CONTINUOUS] = 3 };

#define FIELD(f) offsetof(struct resample_params, f)
static const struct nf_param resample_params_table[] = {
    NF_PARAM_ENUM("interpolation", FIELD(interpolation), resample_interp_choices, RESAMPLE_CONTINUOUS,
                  "linear (trilinear), nearest (the closest voxel; for masks and labels) or "
                  "continuous (cubic B-spline, nilearn's default)"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port resample_inputs[] = {
    { "data", "3D image or 4D series to resample (a collection runs once per image)",
      NF_PT_VOLUME, 0 },
    { "to", "the target grid: an image (its data is not read) or a matrix carrying a mask's "
      "geometry", NF_PT_VOLUME | NF_PT_MATRIX, 0 },
    NF_PORT_END
};
static const struct nf_port resample_outputs[] = {
    { "out", "data on the target grid (same number of volumes and TR)", NF_PT_VOLUME, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(resample_inputs, RESAMPLE_N_IN);
NF_PORTS_MATCH(resample_outputs, RESAMPLE_N_OUT);

/* node_type.methods */
static char *resample_methods(const void *params)
{
    const struct resample_params *p = params;
    static const char *const how[] = {
        [RESAMPLE_LINEAR] = "linear",
        [RESAMPLE_NEAREST] = "nearest-neighbour",
        [RESAMPLE_CONTINUOUS] = "continuous (cubic B-spline)",
    };
    return nf_asprintf("Images were resampled onto the target grid with %s interpolation "
                       "(interpolation = %s; nilearn's resample_to_img).", how[p->interpolation],
                       resample_interp_choices[p->interpolation]);
}

static const char *value_name(const struct nf_value *v)
{
    if (v->path)
        return v->path;
    return v->label ? v->label : "(computed in the pipeline)";
}

/* ---- affine arithmetic ---- */

/* Inverse of an affine [R t; 0 1]: Gauss-Jordan with partial pivoting on R,
 * then -inv(R) t. false when R is singular. */
static bool affine_inverse(const double a[4][4], double inv[4][4])
{
    double m[3][6];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            m[r][c] = a[r][c];
            m[r][c + 3] = r == c ? 1.0 : 0.0;
        }
    for (int c = 0; c < 3; c++) {
        int pivot = c;
        for (int r = c + 1; r < 3; r++)
            if (fabs(m[r][c]) > fabs(m[pivot][c]))
                pivot = r;
        if (m[pivot][c] == 0.0)
            return false;
        if (pivot != c)
            for (int k = 0; k < 6; k++) {
                double t = m[c][k];
                m[c][k] = m[pivot][k];
                m[pivot][k] = t;
            }
        double d = m[c][c];
        for (int k = 0; k < 6; k++)
            m[c][k] /= d;
        for (int r = 0; r < 3; r++) {
            if (r == c || m[r][c] == 0.0)
                continue;
            double f = m[r][c];
            for (int k = 0; k < 6; k++)
                m[r][k] -= f * m[c][k];
        }
    }
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 3; c++)
            inv[r][c] = m[r][c + 3];
        inv[r][3] = -(inv[r][0] * a[0][3] + inv[r][1] * a[1][3] + inv[r][2] * a[2][3]);
        inv[3][r] = 0.0;
    }
    inv[3][3] = 1.0;
    return true;
}

static void affine_product(const double a[4][4], const double b[4][4], double out[4][4])
{
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            double s = 0.0;
            for (int k = 0; k < 4; k++)
                s += a[r][k] * b[k][c];
            out[r][c] = s;
        }
}

static bool affines_equal(const double a[4][4], const double b[4][4])
{
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            if (a[r][c] != b[r][c])
                return false;
    return true;
}

/* ---- interpolation ---- */

/* The transform from output voxels to source voxel coordinates, in scipy's two forms. */
struct transform {
    double a[3][3], b[3];
    bool diagonal;               /* c = (o + shift) * zoom */
    double zoom[3], shift[3];
};

static void source_coordinate(const struct transform *tf, int64_t i, int64_t j, int64_t k, double c[3])
{
    const double o[3] = { (double)i, (double)j, (double)k };
    for (int h = 0; h < 3; h++) {
        if (tf->diagonal) {
            c[h] = (o[h] + tf->shift[h]) * tf->zoom[h];
        } else {
            double s = 0.0;
            for (int l = 0; l < 3; l++)
                s += o[l] * tf->a[h][l];
            c[h] = s + tf->b[h];
        }
    }
}

/* scipy's mirror of a footprint index outside [0, n). */
static int64_t mirror_index(int64_t idx, int64_t n)
{
    if (n <= 1)
        return 0;
    int64_t s2 = 2 * n - 2;
    if (idx < 0) {
        idx = s2 * (-idx / s2) + idx;
        idx = idx <= 1 - n ? idx + s2 : -idx;
    } else if (idx >= n) {
        idx -= s2 * (idx / s2);
        if (idx >= n)
            idx = s2 - idx;
    }
    return idx;
}

/* scipy's get_spline_interpolation_weights for orders 1 and 3. */
static void spline_weights(double x, int order, double *w)
{
    x -= floor(x);
    if (order == 1) {
        w[0] = 1.0 - x;
    } else {
        double y = x, z = 1.0 - x;
        w[1] = (y * y * (y - 2.0) * 3.0 + 4.0) / 6.0;
        w[2] = (z * z * (z - 2.0) * 3.0 + 4.0) / 6.0;
        w[0] = z * z * z / 6.0;
    }
    w[order] = 1.0;
    for (int i = 0; i < order; i++)
        w[order] -= w[i];
}

struct resample_job {
    const struct transform *tf;
    const float *src;            /* nt source volumes (orders 0, 1) */
    const double *coef;          /* nt prefiltered volumes (order 3), or NULL */
    int64_t sdim[3], snvox;
    float *dst;
    int64_t ddim[3], dnvox;
    int64_t nt;
    int order;
    atomic_llong next;
    const struct nf_run *run;
    atomic_bool interrupted;
};

/* One output voxel of volume t, or 0 outside the source. */
static double interpolate(const struct resample_job *J, int64_t t, const double c[3])
{
    const int order = J->order;
    int64_t idx[3][4];
    double w[3][4];
    for (int h = 0; h < 3; h++) {
        const int64_t n = J->sdim[h];
        if (c[h] < 0.0 || c[h] > (double)(n - 1))
            return 0.0;
        int64_t start = order & 1 ? (int64_t)floor(c[h]) - order / 2 : (int64_t)floor(c[h] + 0.5);
        for (int l = 0; l <= order; l++)
            idx[h][l] = mirror_index(start + l, n);
        if (order > 0)
            spline_weights(c[h], order, w[h]);
    }
    const int64_t nx = J->sdim[0], nxy = J->sdim[0] * J->sdim[1];
    if (order == 0) {
        const float *v = J->src + t * J->snvox;
        return v[idx[0][0] + nx * idx[1][0] + nxy * idx[2][0]];
    }
    double sum = 0.0;
    if (order == 1) {
        const float *v = J->src + t * J->snvox;
        for (int a = 0; a <= 1; a++)
            for (int b = 0; b <= 1; b++)
                for (int d = 0; d <= 1; d++) {
                    double coeff = v[idx[0][a] + nx * idx[1][b] + nxy * idx[2][d]];
                    coeff *= w[0][a];
                    coeff *= w[1][b];
                    coeff *= w[2][d];
                    sum += coeff;
                }
        return sum;
    }
    const double *v = J->coef + t * J->snvox;
    for (int a = 0; a <= 3; a++)
        for (int b = 0; b <= 3; b++)
            for (int d = 0; d <= 3; d++) {
                double coeff = v[idx[0][a] + nx * idx[1][b] + nxy * idx[2][d]];
                coeff *= w[0][a];
                coeff *= w[1][b];
                coeff *= w[2][d];
                sum += coeff;
            }
    return sum;
}

static void *resample_worker(void *arg)
{
    struct resample_job *J = arg;
    const int64_t nz = J->ddim[2], jobs = J->nt * nz;
    for (;;) {
        int64_t job = atomic_fetch_add(&J->next, 1);
        if (job >= jobs)
            break;
        if ((job & 15) == 0 && nf_run_interrupted(J->run)) {
            atomic_store(&J->interrupted, true);
            break;
        }
        const int64_t t = job / nz, k = job % nz;
        float *out = J->dst + t * J->dnvox + k * J->ddim[0] * J->ddim[1];
        for (int64_t j = 0; j < J->ddim[1]; j++)
            for (int64_t i = 0; i < J->ddim[0]; i++) {
                double c[3];
                source_coordinate(J->tf, i, j, k, c);
                out[i + J->ddim[0] * j] = (float)interpolate(J, t, c);
            }
    }
    return NULL;
}

/* ---- the cubic spline prefilter (scipy's spline_filter, order 3, mode 'mirror') ---- */

static void prefilter_line(double *c, int64_t n)
{
    if (n <= 1)
        return;
    const double z = -0.267949192431122706472553658494127633;   /* sqrt(3) - 2 */
    const double gain = (1.0 - z) * (1.0 - 1.0 / z);
    for (int64_t i = 0; i < n; i++)
        c[i] *= gain;
    /* causal initialisation for mirror boundaries */
    double z_i = z;
    const double z_n_1 = pow(z, (double)(n - 1));
    c[0] = c[0] + z_n_1 * c[n - 1];
    for (int64_t i = 1; i < n - 1; i++) {
        c[0] += z_i * (c[i] + z_n_1 * c[n - 1 - i]);
        z_i *= z;
    }
    c[0] /= 1 - z_n_1 * z_n_1;
    for (int64_t i = 1; i < n; i++)
        c[i] += z * c[i - 1];
    c[n - 1] = (z * c[n - 2] + c[n - 1]) * z / (z * z - 1);
    for (int64_t i = n - 2; i >= 0; i--)
        c[i] = z * (c[i + 1] - c[i]);
}

/* Prefilter one volume in place along each axis in turn; line is scratch of
 * max(dim) doubles. */
static void prefilter_volume(double *v, const int64_t dim[3], double *line)
{
    const int64_t stride[3] = { 1, dim[0], dim[0] * dim[1] };
    for (int axis = 0; axis < 3; axis++) {
        const int64_t n = dim[axis];
        if (n <= 1)
            continue;
        const int64_t a = axis == 0 ? 1 : 0, b = axis == 2 ? 1 : 2;
        for (int64_t q = 0; q < dim[b]; q++)
            for (int64_t p = 0; p < dim[a]; p++) {
                double *base = v + p * stride[a] + q * stride[b];
                for (int64_t x = 0; x < n; x++)
                    line[x] = base[x * stride[axis]];
                prefilter_line(line, n);
                for (int64_t x = 0; x < n; x++)
                    base[x * stride[axis]] = line[x];
            }
    }
}

struct prefilter_job {
    double *coef;
    int64_t dim[3], nvox, nt;
    atomic_llong next;
    atomic_bool failed;
};

static void *prefilter_worker(void *arg)
{
    struct prefilter_job *P = arg;
    int64_t longest = P->dim[0];
    for (int a = 1; a < 3; a++)
        longest = P->dim[a] > longest ? P->dim[a] : longest;
    double *line = nf_malloc((size_t)longest * sizeof *line);
    if (!line) {
        atomic_store(&P->failed, true);
        return NULL;
    }
    for (;;) {
        int64_t t = atomic_fetch_add(&P->next, 1);
        if (t >= P->nt)
            break;
        prefilter_volume(P->coef + t * P->nvox, P->dim, line);
    }
    free(line);
    return NULL;
}

static void run_team(void *(*fn)(void *), void *arg, int threads)
{
    pthread_t tids[64];
    int started = 0;
    for (int t = 0; t < threads - 1 && t < 64; t++)
        if (pthread_create(&tids[t], NULL, fn, arg) == 0)
            started++;
    fn(arg);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
}

/* ---- the node ---- */

/* The target grid: an image's, or a masked matrix's geometry. */
static int target_grid(const struct nf_value *to, const struct nf_node_inst *node,
                       struct nf_grid *grid, struct nf_error *err)
{
    if (to && to->kind == NF_KIND_VOLUME) {
        *grid = to->u.vol.grid;
        return 0;
    }
    if (to && to->kind == NF_KIND_MATRIX && to->u.mat.geom) {
        *grid = to->u.mat.geom->grid;
        return 0;
    }
    return NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                      "input 'to' ('%s') has no grid: connect an image, or a matrix made by a mask node",
                      to ? value_name(to) : "nothing");
}

/* nilearn's BoundingBoxError: the source's corners in target voxels lie
 * below 0 on some axis. */
static bool source_outside_target(const struct nf_grid *src, const struct nf_grid *dst)
{
    double inv_dst[4][4], m[4][4];
    if (!affine_inverse(dst->affine, inv_dst))
        return false;
    affine_product(inv_dst, src->affine, m);
    for (int h = 0; h < 3; h++) {
        double hi = -INFINITY;
        for (int corner = 0; corner < 8; corner++) {
            double s = m[h][3];
            for (int l = 0; l < 3; l++)
                s += m[h][l] * (double)((corner >> l & 1) ? src->dim[l] - 1 : 0);
            hi = s > hi ? s : hi;
        }
        if (hi < 0)
            return true;
    }
    return false;
}

static int resample_run(struct nf_run *run)
{
    const struct resample_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    struct nf_error *err = run->err;
    const struct nf_value *in = run->in[RESAMPLE_IN_DATA];
    struct nf_value *out = NULL;
    float *clean = NULL;
    double *coef = NULL;
    int rc = 0;

    if (!in || in->kind != NF_KIND_VOLUME || !in->u.vol.data)
        return NF_FAIL_AT(err, in && in->kind != NF_KIND_VOLUME ? NF_EDATA : NF_EBUG,
                          nf_node_loc(node), nf_node_id(node),
                          "input 'data' must be an image in memory (got %s)",
                          in ? nf_kind_name(in->kind) : "nothing");
    struct nf_grid grid;
    NF_TRY(rc = target_grid(run->in[RESAMPLE_IN_TO], node, &grid, err));
    const struct nf_volume *vol = &in->u.vol;
    const int64_t snvox = nf_grid_nvox(&vol->grid), dnvox = nf_grid_nvox(&grid), nt = vol->nt;
    if (snvox <= 0 || dnvox <= 0 || nt < 1) {
        rc = NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                        "%s has no voxels", snvox <= 0 || nt < 1 ? "input 'data'" : "the target grid");
        goto fail;
    }

    out = nf_value_new_volume(&grid, vol->ndim, nt, err);
    if (!out) {
        rc = nf_error_on_node(node, err, err->code < 0 ? err->code : NF_ENOMEM);
        goto fail;
    }
    out->u.vol.tr = vol->tr;
    nf_value_set_stat(out, in->stat.kind, in->stat.dof, in->stat.description);

    if (nf_grid_same(&vol->grid, &grid)) {
        memcpy(out->u.vol.data, vol->data, (size_t)(snvox * nt) * sizeof(float));
        run->out[RESAMPLE_OUT_DATA] = out;
        return 0;
    }
    if (source_outside_target(&vol->grid, &grid)) {
        char a[400], b[400];
        nf_grid_describe(&vol->grid, a, sizeof a);
        nf_grid_describe(&grid, b, sizeof b);
        rc = NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                        "the target grid does not contain any of '%s': data is %s; target is %s",
                        value_name(in), a, b);
        goto fail;
    }

    /* the transform, as nilearn builds it */
    struct transform tf = { 0 };
    double m[4][4];
    if (affines_equal(vol->grid.affine, grid.affine)) {
        memset(m, 0, sizeof m);
        for (int h = 0; h < 4; h++)
            m[h][h] = 1.0;
    } else {
        double inv_src[4][4];
        if (!affine_inverse(vol->grid.affine, inv_src)) {
            rc = NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                            "the affine of '%s' is singular", value_name(in));
            goto fail;
        }
        affine_product(inv_src, grid.affine, m);
    }
    tf.diagonal = true;
    for (int h = 0; h < 3; h++) {
        for (int l = 0; l < 3; l++) {
            tf.a[h][l] = m[h][l];
            if (h != l && m[h][l] != 0.0)
                tf.diagonal = false;
        }
        tf.b[h] = m[h][3];
    }
    for (int h = 0; h < 3; h++) {
        tf.zoom[h] = m[h][h];
        tf.shift[h] = m[h][3] / m[h][h];
        if (m[h][h] == 0.0)
            tf.diagonal = false;
    }

    /* non-finite source values become 0 */
    const float *src = vol->data;
    int64_t n_nonfinite = 0;
    for (int64_t v = 0; v < snvox * nt; v++)
        n_nonfinite += !isfinite(vol->data[v]);
    if (n_nonfinite > 0) {
        nf_warn(nf_node_id(node), "replaced %lld non-finite values with 0 in '%s' before resampling",
                (long long)n_nonfinite, value_name(in));
        clean = nf_malloc((size_t)(snvox * nt) * sizeof *clean);
        if (!clean) {
            rc = NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(node), nf_node_id(node), "out of memory");
            goto fail;
        }
        for (int64_t v = 0; v < snvox * nt; v++)
            clean[v] = isfinite(vol->data[v]) ? vol->data[v] : 0.0f;
        src = clean;
    }

    const int order = spline_order[p->interpolation];
    const int threads = run->env && run->env->threads > 0 ? run->env->threads : 1;
    if (order == 3) {
        coef = nf_malloc_array((size_t)(snvox * nt), sizeof *coef);
        if (!coef) {
            rc = NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(node), nf_node_id(node),
                            "out of memory for the spline coefficients of '%s'", value_name(in));
            goto fail;
        }
        for (int64_t v = 0; v < snvox * nt; v++)
            coef[v] = src[v];
        struct prefilter_job P = { .coef = coef, .nvox = snvox, .nt = nt };
        memcpy(P.dim, vol->grid.dim, sizeof P.dim);
        atomic_init(&P.next, 0);
        atomic_init(&P.failed, false);
        run_team(prefilter_worker, &P, threads < nt ? threads : (int)nt);
        if (atomic_load(&P.failed)) {
            rc = NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(node), nf_node_id(node), "out of memory");
            goto fail;
        }
    }

    struct resample_job J = { .tf = &tf, .src = src, .coef = coef, .snvox = snvox,
                              .dst = out->u.vol.data, .dnvox = dnvox, .nt = nt, .order = order,
                              .run = run };
    memcpy(J.sdim, vol->grid.dim, sizeof J.sdim);
    memcpy(J.ddim, grid.dim, sizeof J.ddim);
    atomic_init(&J.next, 0);
    atomic_init(&J.interrupted, false);
    run_team(resample_worker, &J, threads);
    if (atomic_load(&J.interrupted)) {
        rc = NF_FAIL_AT(err, NF_EINTR, nf_node_loc(node), nf_node_id(node), "interrupted");
        goto fail;
    }
    free(clean);
    free(coef);
    run->out[RESAMPLE_OUT_DATA] = out;
    return 0;

fail:
    free(clean);
    free(coef);
    nf_value_unref(out);
    return rc < 0 ? rc : NF_EBUG;
}

/* ---- plan time ---- */

static int resample_resolve(struct nf_resolve *r)
{
    const struct nf_shape *data = &r->in[RESAMPLE_IN_DATA];
    const struct nf_shape *to = &r->in[RESAMPLE_IN_TO];
    r->out[RESAMPLE_OUT_DATA] = (struct nf_shape){ 0 };
    if (to->kind == NF_KIND_MATRIX && !to->has_geom) {
        char what[120];
        nf_shape_describe(to, what, sizeof what);
        return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                          "input 'to'%s%s%s is a %s matrix without a grid: connect an image, or a "
                          "matrix made by a mask node", to->path ? " ('" : "",
                          to->path ? to->path : "", to->path ? "')" : "", what);
    }
    if (data->kind != NF_KIND_VOLUME || to->kind != NF_KIND_VOLUME || !to->has_grid)
        return 0;   /* known at run time */
    struct nf_shape *out = &r->out[RESAMPLE_OUT_DATA];
    out->kind = NF_KIND_VOLUME;
    for (int a = 0; a < 3; a++)
        out->dim[a] = to->grid.dim[a];
    out->dim[3] = data->dim[3];
    out->has_grid = true;
    out->grid = to->grid;
    return 0;
}

/* A cleaned copy of the source when it holds NaN (float) and, for
 * continuous, its spline coefficients (double). */
static uint64_t resample_estimate(const void *params, const struct nf_shape *in,
                                  const struct nf_shape *out)
{
    (void)out;
    const struct resample_params *p = params;
    const struct nf_shape *s = &in[RESAMPLE_IN_DATA];
    if (s->kind != NF_KIND_VOLUME)
        return 0;
    uint64_t n = 1;
    for (int a = 0; a < 4; a++)
        n *= (uint64_t)(s->dim[a] > 0 ? s->dim[a] : 1);
    return n * (sizeof(float) + (p->interpolation == RESAMPLE_CONTINUOUS ? sizeof(double) : 0));
}

const struct nf_node_type nf_node_resample = {
    .name = "resample",
    .summary = "an image onto another grid (`to`), as nilearn's resample_to_img",
    .description =
        "Resamples a 3D image or each volume of a 4D series onto the grid of `to` (an image, "
        "whose voxels are not read, or a matrix carrying a mask's geometry), exactly as nilearn "
        "0.14's resample_to_img with its defaults (no clipping, fill 0): scipy's affine_transform "
        "with spline order 1 (linear), 0 (nearest) or 3 (continuous, after scipy's B-spline "
        "prefilter). Target voxels whose source coordinate lies outside the source's first and "
        "last voxel centres are 0. Non-finite source values become 0 (with a warning). A target "
        "grid equal to the source's gives a copy; one that holds none of the source is an error. "
        "Use nearest for masks and label images.",
    .version = 1,
    .params = resample_params_table,
    .params_size = sizeof(struct resample_params),
    .inputs = resample_inputs,
    .outputs = resample_outputs,
    .check = NULL,
    .resolve = resample_resolve,
    .estimate = resample_estimate,
    .run_cpu = resample_run,
    .run_gpu = NULL,
    .methods = resample_methods,
    .flags = 0,
};
