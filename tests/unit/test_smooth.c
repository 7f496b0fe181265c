/* test_smooth.c — unit tests of the `smooth` node (nodes/smooth/smooth.c).
 *
 * The reference is written here, independently of the node: the kernel from
 * the FWHM formula (sigma = fwhm / (2 sqrt(2 ln 2)) / voxel size, truncated at
 * int(4 sigma + 0.5) voxels, normalised), the 'reflect' boundary by folding
 * an index back until it lands in the line, and a direct convolution along
 * i, j, k in turn over the whole image in double (no float rounding between
 * passes). The node sums in double and stores float32 after each pass, so the
 * two agree to a few float32 roundings. Cases: anisotropic voxels, an oblique
 * affine (voxel sizes from the columns), a kernel longer than the image (the
 * reflection repeats), per-axis fwhm with an unsmoothed axis, a 4D series,
 * fwhm 0 (a copy with a warning), non-finite input (0, with a warning), and
 * one value worked out by hand.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "core/value.h"
#include "node.h"
#include "pipeline.h"

#include "smooth/smooth.h"

static char node_name[] = "sm";

static struct nf_grid make_grid(int64_t nx, int64_t ny, int64_t nz, const double cols[3][3])
{
    struct nf_grid g = { 0 };
    g.dim[0] = nx;
    g.dim[1] = ny;
    g.dim[2] = nz;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            g.affine[r][c] = cols[c][r];
    for (int c = 0; c < 3; c++)
        g.pixdim[c] = sqrt(cols[c][0] * cols[c][0] + cols[c][1] * cols[c][1] + cols[c][2] * cols[c][2]);
    g.affine[0][3] = -30;
    g.affine[1][3] = 12;
    g.affine[2][3] = 5;
    g.affine[3][3] = 1;
    g.sform_code = 4;
    return g;
}

/* Deterministic, rough data: a sum of sines plus a spike, so that every
 * neighbour matters. */
static struct nf_value *make_image(const struct nf_grid *g, int64_t nt)
{
    struct nf_error err = { 0 };
    struct nf_value *v = nf_value_new_volume(g, nt > 1 ? 4 : 3, nt, &err);
    assert_non_null(v);
    v->u.vol.tr = 2.5;
    nf_value_set_path(v, "img.nii.gz");
    int64_t nvox = nf_grid_nvox(g);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t k = 0; k < g->dim[2]; k++)
            for (int64_t j = 0; j < g->dim[1]; j++)
                for (int64_t i = 0; i < g->dim[0]; i++) {
                    double x = sin(0.7 * i + 1.3 * j * j - 0.4 * k + t) + 0.3 * cos(2.1 * k * i + 0.5 * j);
                    v->u.vol.data[t * nvox + i + g->dim[0] * (j + g->dim[1] * k)] = (float)x;
                }
    v->u.vol.data[nvox / 2] = 25.0f;
    return v;
}

/* ---- the reference ---- */

static int64_t fold(int64_t x, int64_t n)
{
    while (x < 0 || x >= n) {
        if (x < 0)
            x = -x - 1;
        if (x >= n)
            x = 2 * n - 1 - x;
    }
    return x;
}

/* data (double, nt volumes) convolved along `axis` with a Gaussian of sigma voxels. */
static void reference_axis(double *data, const int64_t dim[3], int64_t nt, int axis, double sigma)
{
    const int64_t r = (int64_t)(4.0 * sigma + 0.5);
    double *w = calloc((size_t)(2 * r + 1), sizeof *w), sum = 0;
    for (int64_t x = -r; x <= r; x++)
        sum += w[x + r] = exp(-(double)(x * x) / (2.0 * sigma * sigma));
    for (int64_t x = -r; x <= r; x++)
        w[x + r] /= sum;
    const int64_t nvox = dim[0] * dim[1] * dim[2];
    double *out = calloc((size_t)(nvox * nt), sizeof *out);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t k = 0; k < dim[2]; k++)
            for (int64_t j = 0; j < dim[1]; j++)
                for (int64_t i = 0; i < dim[0]; i++) {
                    int64_t p[3] = { i, j, k };
                    double acc = 0;
                    for (int64_t x = -r; x <= r; x++) {
                        int64_t q[3] = { i, j, k };
                        q[axis] = fold(p[axis] + x, dim[axis]);
                        acc += w[x + r] * data[t * nvox + q[0] + dim[0] * (q[1] + dim[1] * q[2])];
                    }
                    out[t * nvox + i + dim[0] * (j + dim[1] * k)] = acc;
                }
    memcpy(data, out, (size_t)(nvox * nt) * sizeof *data);
    free(out);
    free(w);
}

/* The smoothed image in double; fwhm per axis in mm. */
static double *reference_smooth(const struct nf_value *img, const double fwhm[3])
{
    const struct nf_grid *g = &img->u.vol.grid;
    const int64_t n = nf_grid_nvox(g) * img->u.vol.nt;
    double *d = malloc((size_t)n * sizeof *d);
    for (int64_t v = 0; v < n; v++)
        d[v] = isfinite(img->u.vol.data[v]) ? img->u.vol.data[v] : 0.0;
    for (int a = 0; a < 3; a++) {
        double voxel = sqrt(g->affine[0][a] * g->affine[0][a] + g->affine[1][a] * g->affine[1][a] +
                            g->affine[2][a] * g->affine[2][a]);
        double sigma = fwhm[a] / (2.0 * sqrt(2.0 * log(2.0))) / voxel;
        if (sigma > 0)
            reference_axis(d, g->dim, img->u.vol.nt, a, sigma);
    }
    return d;
}

/* ---- running the node ---- */

static int warnings_seen;
static char last_warning[512];
static void keep_warning(const char *node, const char *msg)
{
    (void)node;
    warnings_seen++;
    snprintf(last_warning, sizeof last_warning, "%s", msg);
}

static struct nf_value *run_smooth(struct nf_value *in, const double *fwhm, size_t n_fwhm, int threads,
                                   int *rc, struct nf_error *err)
{
    struct nf_node_inst node = { 0 };
    node.id = node_name;
    node.type = &nf_node_smooth;
    node.loc = (struct nf_loc){ "pipeline.yaml", 4, 3 };
    struct smooth_params p = { .fwhm = { n_fwhm, (double *)fwhm } };
    struct nf_env env = { .threads = threads, .pipeline_name = "test" };
    struct nf_value *ins[1] = { in }, *outs[1] = { NULL };
    struct nf_run run = { .node = &node, .params = &p, .env = &env, .in = ins, .out = outs,
                          .err = err, .n_items = 1 };
    warnings_seen = 0;
    last_warning[0] = '\0';
    nf_warn_hook = keep_warning;
    *rc = nf_node_smooth.run_cpu(&run);
    nf_warn_hook = NULL;
    return outs[0];
}

/* Node against reference: relative to the image's largest value. */
static void check_against_reference(const struct nf_grid *g, int64_t nt, const double fwhm3[3],
                                    const double *fwhm, size_t n_fwhm, int threads)
{
    struct nf_value *in = make_image(g, nt);
    struct nf_error err = { 0 };
    int rc;
    struct nf_value *out = run_smooth(in, fwhm, n_fwhm, threads, &rc, &err);
    assert_int_equal(rc, 0);
    assert_non_null(out);
    assert_int_equal(out->kind, NF_KIND_VOLUME);
    assert_true(nf_grid_same(&out->u.vol.grid, g));
    assert_int_equal(out->u.vol.nt, nt);
    assert_true(out->u.vol.tr == 2.5);
    double *ref = reference_smooth(in, fwhm3);
    const int64_t n = nf_grid_nvox(g) * nt;
    double worst = 0;
    for (int64_t v = 0; v < n; v++) {
        double d = fabs(out->u.vol.data[v] - ref[v]);
        worst = d > worst ? d : worst;
    }
    /* three float32 roundings of values up to ~25 */
    assert_true(worst < 25 * 4e-7);
    free(ref);
    nf_value_unref(in);
    nf_value_unref(out);
}

/* ---- tests ---- */

static void test_anisotropic_voxels(void **state)
{
    (void)state;
    const double cols[3][3] = { { 2, 0, 0 }, { 0, 3, 0 }, { 0, 0, 1.5 } };
    struct nf_grid g = make_grid(13, 11, 9, cols);
    const double f = 6.0, f3[3] = { 6, 6, 6 };
    check_against_reference(&g, 1, f3, &f, 1, 1);
    check_against_reference(&g, 1, f3, &f, 1, 4);
}

static void test_oblique_affine(void **state)
{
    (void)state;
    /* columns of norm 2, 2.5 and 3, rotated: per-axis sigma from the column norms */
    const double c = cos(0.4), s = sin(0.4);
    const double cols[3][3] = { { 2 * c, 2 * s, 0 }, { -2.5 * s, 2.5 * c, 0 }, { 0, 0, -3 } };
    struct nf_grid g = make_grid(10, 12, 8, cols);
    const double f = 5.0, f3[3] = { 5, 5, 5 };
    check_against_reference(&g, 1, f3, &f, 1, 3);
}

static void test_kernel_longer_than_image(void **state)
{
    (void)state;
    /* sigma ~ 4.2 voxels, radius 17, on 3 and 4 voxel axes: the reflection repeats */
    const double cols[3][3] = { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } };
    struct nf_grid g = make_grid(3, 4, 20, cols);
    const double f = 10.0, f3[3] = { 10, 10, 10 };
    check_against_reference(&g, 2, f3, &f, 1, 2);
    /* a single-voxel axis stays as it is along that axis */
    struct nf_grid flat = make_grid(1, 7, 6, cols);
    check_against_reference(&flat, 1, f3, &f, 1, 1);
}

static void test_per_axis_fwhm_and_4d(void **state)
{
    (void)state;
    const double cols[3][3] = { { 3, 0, 0 }, { 0, 3, 0 }, { 0, 0, 3 } };
    struct nf_grid g = make_grid(9, 8, 7, cols);
    const double f[3] = { 8, 0, 4 };
    check_against_reference(&g, 5, f, f, 3, 3);
    /* many lines in the j and k passes (more than one block of 64 lines) */
    struct nf_grid wide = make_grid(70, 6, 5, cols);
    const double iso = 7, iso3[3] = { 7, 7, 7 };
    check_against_reference(&wide, 2, iso3, &iso, 1, 2);
}

static void test_hand_value(void **state)
{
    (void)state;
    /* 1 mm voxels, fwhm = 2 sqrt(2 ln 2) mm gives sigma = 1 voxel and radius 4;
     * a unit spike in the middle of a 11^3 image: the centre becomes g(0)^3 with
     * g(0) = 1 / sum_{x=-4..4} exp(-x^2/2) = 0.39894... */
    const double cols[3][3] = { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } };
    struct nf_grid g = make_grid(11, 11, 11, cols);
    struct nf_error err = { 0 };
    struct nf_value *in = nf_value_new_volume(&g, 3, 1, &err);
    in->u.vol.data[5 + 11 * (5 + 11 * 5)] = 1.0f;
    double sum = 0;
    for (int x = -4; x <= 4; x++)
        sum += exp(-x * x / 2.0);
    const double g0 = 1.0 / sum, g1 = exp(-0.5) / sum;
    const double fwhm = 2.0 * sqrt(2.0 * log(2.0));
    int rc;
    struct nf_value *out = run_smooth(in, &fwhm, 1, 1, &rc, &err);
    assert_int_equal(rc, 0);
    assert_float_equal(out->u.vol.data[5 + 11 * (5 + 11 * 5)], g0 * g0 * g0, 1e-7);
    assert_float_equal(out->u.vol.data[6 + 11 * (5 + 11 * 5)], g1 * g0 * g0, 1e-7);
    assert_float_equal(out->u.vol.data[6 + 11 * (4 + 11 * 6)], g1 * g1 * g1, 1e-7);
    /* beyond the radius of 4 on an axis, nothing arrives */
    assert_true(out->u.vol.data[0 + 11 * (5 + 11 * 5)] == 0.0f);
    nf_value_unref(in);
    nf_value_unref(out);
}

static void test_fwhm_zero_copies(void **state)
{
    (void)state;
    const double cols[3][3] = { { 2, 0, 0 }, { 0, 2, 0 }, { 0, 0, 2 } };
    struct nf_grid g = make_grid(5, 4, 3, cols);
    struct nf_value *in = make_image(&g, 2);
    struct nf_error err = { 0 };
    const double zero = 0;
    int rc;
    struct nf_value *out = run_smooth(in, &zero, 1, 2, &rc, &err);
    assert_int_equal(rc, 0);
    assert_memory_equal(out->u.vol.data, in->u.vol.data, (size_t)(5 * 4 * 3 * 2) * sizeof(float));
    assert_int_equal(warnings_seen, 1);
    assert_non_null(strstr(last_warning, "fwhm is 0"));
    nf_value_unref(in);
    nf_value_unref(out);
}

static void test_non_finite_become_zero(void **state)
{
    (void)state;
    const double cols[3][3] = { { 2, 0, 0 }, { 0, 2, 0 }, { 0, 0, 2 } };
    struct nf_grid g = make_grid(8, 7, 6, cols);
    struct nf_value *in = make_image(&g, 1);
    in->u.vol.data[3] = NAN;
    in->u.vol.data[40] = INFINITY;
    struct nf_error err = { 0 };
    const double f = 5, f3[3] = { 5, 5, 5 };
    int rc;
    struct nf_value *out = run_smooth(in, &f, 1, 1, &rc, &err);
    assert_int_equal(rc, 0);
    assert_int_equal(warnings_seen, 1);
    assert_non_null(strstr(last_warning, "2 non-finite"));
    double *ref = reference_smooth(in, f3);
    for (int64_t v = 0; v < nf_grid_nvox(&g); v++) {
        assert_true(isfinite(out->u.vol.data[v]));
        assert_float_equal(out->u.vol.data[v], ref[v], 1e-5);
    }
    free(ref);
    nf_value_unref(in);
    nf_value_unref(out);
}

static void test_sigmas(void **state)
{
    (void)state;
    const double cols[3][3] = { { 0, 2, 0 }, { 3, 0, 0 }, { 0, 0, 4 } };
    struct nf_grid g = make_grid(4, 4, 4, cols);
    const double fwhm[3] = { 6, 6, 0 };
    double sigma[3];
    nf_smooth_sigmas(&g, fwhm, sigma);
    const double ratio = 2.3548200450309493;   /* 2 sqrt(2 ln 2) */
    assert_float_equal(sigma[0], 6 / ratio / 2, 1e-12);
    assert_float_equal(sigma[1], 6 / ratio / 3, 1e-12);
    assert_true(sigma[2] == 0.0);
}

static void test_wrong_input(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(2, 3, NULL, &err);
    const double f = 4;
    int rc;
    struct nf_value *out = run_smooth(m, &f, 1, 1, &rc, &err);
    assert_null(out);
    assert_int_equal(rc, NF_EDATA);
    assert_string_equal(err.node, node_name);
    assert_int_equal(err.loc.line, 4);
    assert_non_null(strstr(err.msg, "must be an image"));
    nf_value_unref(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_anisotropic_voxels),
        cmocka_unit_test(test_oblique_affine),
        cmocka_unit_test(test_kernel_longer_than_image),
        cmocka_unit_test(test_per_axis_fwhm_and_4d),
        cmocka_unit_test(test_hand_value),
        cmocka_unit_test(test_fwhm_zero_copies),
        cmocka_unit_test(test_non_finite_become_zero),
        cmocka_unit_test(test_sigmas),
        cmocka_unit_test(test_wrong_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
