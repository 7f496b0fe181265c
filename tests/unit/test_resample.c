/* test_resample.c — unit tests of the `resample` node (nodes/resample/resample.c).
 *
 * The references are written here in double, independently of the node: a
 * target voxel goes to world millimetres through the target affine and back
 * to source voxels through an inverse by cofactors; a coordinate outside
 * [0, n - 1] on any axis gives 0; `linear` is the trilinear formula of the 8
 * surrounding voxels, `nearest` the voxel floor(c + 0.5) (compared exactly),
 * and `continuous` the cubic B-spline whose coefficients solve the
 * interpolation equations (c[i-1] + 4 c[i] + c[i+1]) / 6 = v[i] with mirrored
 * ends, solved as a dense system per line, then evaluated with the B-spline
 * formula. Target grids are hand-made: a sub-voxel shift, a coarser scale, a
 * flipped axis and a rotation; coordinates within 1e-9 of a voxel edge or of
 * a .5 tie are left out (there round-off decides, in nilearn too).
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

#include "resample/resample.h"

static char node_name[] = "rs";

static struct nf_grid make_grid(int64_t nx, int64_t ny, int64_t nz, const double a[4][4])
{
    struct nf_grid g = { 0 };
    g.dim[0] = nx;
    g.dim[1] = ny;
    g.dim[2] = nz;
    memcpy(g.affine, a, sizeof g.affine);
    for (int c = 0; c < 3; c++)
        g.pixdim[c] = sqrt(a[0][c] * a[0][c] + a[1][c] * a[1][c] + a[2][c] * a[2][c]);
    g.sform_code = 4;
    return g;
}

/* Source: 2 x 2.5 x 3 mm voxels, 9 x 8 x 7, origin (-8, -10, -9). */
static const double source_affine[4][4] = {
    { 2, 0, 0, -8 }, { 0, 2.5, 0, -10 }, { 0, 0, 3, -9 }, { 0, 0, 0, 1 } };
enum { SX = 9, SY = 8, SZ = 7 };

static struct nf_value *make_source(int64_t nt)
{
    struct nf_grid g = make_grid(SX, SY, SZ, source_affine);
    struct nf_error err = { 0 };
    struct nf_value *v = nf_value_new_volume(&g, nt > 1 ? 4 : 3, nt, &err);
    assert_non_null(v);
    v->u.vol.tr = 1.5;
    nf_value_set_path(v, "src.nii.gz");
    for (int64_t t = 0; t < nt; t++)
        for (int64_t k = 0; k < SZ; k++)
            for (int64_t j = 0; j < SY; j++)
                for (int64_t i = 0; i < SX; i++)
                    v->u.vol.data[i + SX * (j + SY * (k + SZ * t))] =
                        (float)(10 * sin(0.9 * i - 0.3 * j * k + 0.2 * t) + 3 * cos(1.7 * j + 0.5 * k) + i * j - k);
    return v;
}

/* ---- reference geometry ---- */

static void inverse_by_cofactors(const double a[4][4], double inv[3][4])
{
    double m[3][3];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            m[r][c] = a[r][c];
    double det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
                 m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
                 m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            /* cofactor of m[c][r], divided by det */
            int r1 = (c + 1) % 3, r2 = (c + 2) % 3, c1 = (r + 1) % 3, c2 = (r + 2) % 3;
            inv[r][c] = (m[r1][c1] * m[r2][c2] - m[r1][c2] * m[r2][c1]) / det;
        }
    for (int r = 0; r < 3; r++)
        inv[r][3] = -(inv[r][0] * a[0][3] + inv[r][1] * a[1][3] + inv[r][2] * a[2][3]);
}

static void source_coord(const double target[4][4], const double inv[3][4], int64_t i, int64_t j,
                         int64_t k, double c[3])
{
    double w[3];
    for (int r = 0; r < 3; r++)
        w[r] = target[r][0] * i + target[r][1] * j + target[r][2] * k + target[r][3];
    for (int r = 0; r < 3; r++)
        c[r] = inv[r][0] * w[0] + inv[r][1] * w[1] + inv[r][2] * w[2] + inv[r][3];
}

static const int64_t sdim[3] = { SX, SY, SZ };

/* Whether round-off could decide this voxel: near an edge, or near a tie. */
static bool ambiguous(const double c[3], bool nearest)
{
    for (int h = 0; h < 3; h++) {
        if (fabs(c[h]) < 1e-9 || fabs(c[h] - (double)(sdim[h] - 1)) < 1e-9)
            return true;
        if (nearest && fabs(c[h] - floor(c[h]) - 0.5) < 1e-9)
            return true;
    }
    return false;
}

static bool outside(const double c[3])
{
    for (int h = 0; h < 3; h++)
        if (c[h] < 0 || c[h] > (double)(sdim[h] - 1))
            return true;
    return false;
}

static double at(const float *v, int64_t i, int64_t j, int64_t k)
{
    return v[i + SX * (j + SY * k)];
}

static double trilinear(const float *v, const double c[3])
{
    int64_t lo[3];
    double f[3];
    for (int h = 0; h < 3; h++) {
        lo[h] = (int64_t)floor(c[h]);
        if (lo[h] > sdim[h] - 2)
            lo[h] = sdim[h] - 2;
        f[h] = c[h] - (double)lo[h];
    }
    double s = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int d = 0; d < 2; d++)
                s += (a ? f[0] : 1 - f[0]) * (b ? f[1] : 1 - f[1]) * (d ? f[2] : 1 - f[2]) *
                     at(v, lo[0] + a, lo[1] + b, lo[2] + d);
    return s;
}

static double nearest(const float *v, const double c[3])
{
    return at(v, (int64_t)floor(c[0] + 0.5), (int64_t)floor(c[1] + 0.5), (int64_t)floor(c[2] + 0.5));
}

/* ---- reference cubic B-spline ---- */

static int64_t mirror(int64_t x, int64_t n)
{
    while (x < 0 || x >= n) {
        if (x < 0)
            x = -x;
        if (x >= n)
            x = 2 * (n - 1) - x;
    }
    return x;
}

/* Solve the interpolation equations of one line (dense Gaussian elimination). */
static void spline_line(double *line, int64_t n)
{
    double *m = calloc((size_t)(n * (n + 1)), sizeof *m);
    for (int64_t i = 0; i < n; i++) {
        m[i * (n + 1) + i] += 4.0 / 6;
        m[i * (n + 1) + mirror(i - 1, n)] += 1.0 / 6;
        m[i * (n + 1) + mirror(i + 1, n)] += 1.0 / 6;
        m[i * (n + 1) + n] = line[i];
    }
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (fabs(m[r * (n + 1) + c]) > fabs(m[p * (n + 1) + c]))
                p = r;
        for (int64_t k = 0; k <= n; k++) {
            double t = m[c * (n + 1) + k];
            m[c * (n + 1) + k] = m[p * (n + 1) + k];
            m[p * (n + 1) + k] = t;
        }
        for (int64_t r = 0; r < n; r++) {
            if (r == c)
                continue;
            double f = m[r * (n + 1) + c] / m[c * (n + 1) + c];
            for (int64_t k = 0; k <= n; k++)
                m[r * (n + 1) + k] -= f * m[c * (n + 1) + k];
        }
    }
    for (int64_t i = 0; i < n; i++)
        line[i] = m[i * (n + 1) + n] / m[i * (n + 1) + i];
    free(m);
}

static double *spline_coefficients(const float *v)
{
    double *c = malloc(SX * SY * SZ * sizeof *c), line[16];
    for (int64_t x = 0; x < SX * SY * SZ; x++)
        c[x] = v[x];
    const int64_t stride[3] = { 1, SX, SX * SY };
    for (int axis = 0; axis < 3; axis++)
        for (int64_t x = 0; x < SX * SY * SZ; x++) {
            int64_t p[3] = { x % SX, x / SX % SY, x / (SX * SY) };
            if (p[axis] != 0)
                continue;
            for (int64_t q = 0; q < sdim[axis]; q++)
                line[q] = c[x + q * stride[axis]];
            spline_line(line, sdim[axis]);
            for (int64_t q = 0; q < sdim[axis]; q++)
                c[x + q * stride[axis]] = line[q];
        }
    return c;
}

static double bspline3(double t)
{
    t = fabs(t);
    if (t < 1)
        return 2.0 / 3 - t * t + t * t * t / 2;
    if (t < 2)
        return (2 - t) * (2 - t) * (2 - t) / 6;
    return 0;
}

static double cubic(const double *coef, const double c[3])
{
    int64_t lo[3];
    for (int h = 0; h < 3; h++)
        lo[h] = (int64_t)floor(c[h]) - 1;
    double s = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int d = 0; d < 4; d++) {
                int64_t i = lo[0] + a, j = lo[1] + b, k = lo[2] + d;
                s += bspline3(c[0] - i) * bspline3(c[1] - j) * bspline3(c[2] - k) *
                     coef[mirror(i, SX) + SX * (mirror(j, SY) + SY * mirror(k, SZ))];
            }
    return s;
}

/* ---- running the node ---- */

static struct nf_value *run_resample(struct nf_value *data, struct nf_value *to, int interp, int threads,
                                     int *rc, struct nf_error *err)
{
    struct nf_node_inst node = { 0 };
    node.id = node_name;
    node.type = &nf_node_resample;
    node.loc = (struct nf_loc){ "pipeline.yaml", 6, 3 };
    struct resample_params p = { .interpolation = interp };
    struct nf_env env = { .threads = threads, .pipeline_name = "test" };
    struct nf_value *ins[2] = { data, to }, *outs[1] = { NULL };
    struct nf_run run = { .node = &node, .params = &p, .env = &env, .in = ins, .out = outs,
                          .err = err, .n_items = 1 };
    *rc = nf_node_resample.run_cpu(&run);
    return outs[0];
}

static struct nf_value *target_image(int64_t nx, int64_t ny, int64_t nz, const double a[4][4])
{
    struct nf_grid g = make_grid(nx, ny, nz, a);
    struct nf_error err = { 0 };
    struct nf_value *v = nf_value_new_volume(&g, 3, 1, &err);
    assert_non_null(v);
    return v;
}

/* Every interpolation onto one target against the references; returns the
 * number of target voxels that landed inside the source (so that a case
 * cannot pass by missing the source altogether). */
static int64_t check_target(const double target[4][4], int64_t nx, int64_t ny, int64_t nz, int64_t nt)
{
    struct nf_value *src = make_source(nt);
    struct nf_value *to = target_image(nx, ny, nz, target);
    double inv[3][4];
    inverse_by_cofactors(source_affine, inv);
    int64_t inside = 0;
    for (int interp = RESAMPLE_LINEAR; interp <= RESAMPLE_CONTINUOUS; interp++) {
        struct nf_error err = { 0 };
        int rc;
        struct nf_value *out = run_resample(src, to, interp, 3, &rc, &err);
        assert_int_equal(rc, 0);
        assert_true(nf_grid_same(&out->u.vol.grid, &to->u.vol.grid));
        assert_int_equal(out->u.vol.nt, nt);
        assert_true(out->u.vol.tr == 1.5);
        for (int64_t t = 0; t < nt; t++) {
            const float *v = src->u.vol.data + t * SX * SY * SZ;
            double *coef = interp == RESAMPLE_CONTINUOUS ? spline_coefficients(v) : NULL;
            for (int64_t k = 0; k < nz; k++)
                for (int64_t j = 0; j < ny; j++)
                    for (int64_t i = 0; i < nx; i++) {
                        double c[3];
                        source_coord(target, inv, i, j, k, c);
                        float got = out->u.vol.data[i + nx * (j + ny * (k + nz * t))];
                        if (ambiguous(c, interp == RESAMPLE_NEAREST))
                            continue;
                        if (outside(c)) {
                            assert_true(got == 0.0f);
                            continue;
                        }
                        inside += interp == RESAMPLE_LINEAR && t == 0;
                        if (interp == RESAMPLE_NEAREST)
                            assert_true(got == (float)nearest(v, c));
                        else if (interp == RESAMPLE_LINEAR)
                            assert_float_equal(got, trilinear(v, c), 2e-5);
                        else
                            assert_float_equal(got, cubic(coef, c), 1e-4);
                    }
            free(coef);
        }
        nf_value_unref(out);
    }
    nf_value_unref(src);
    nf_value_unref(to);
    return inside;
}

/* ---- tests ---- */

static void test_shift(void **state)
{
    (void)state;
    const double t[4][4] = { { 2, 0, 0, -8 + 0.6 }, { 0, 2.5, 0, -10 - 1.1 }, { 0, 0, 3, -9 + 1.3 },
                             { 0, 0, 0, 1 } };
    assert_true(check_target(t, SX, SY, SZ, 1) > 200);
}

static void test_scale(void **state)
{
    (void)state;
    const double t[4][4] = { { 3.3, 0, 0, -9 }, { 0, 1.7, 0, -11 }, { 0, 0, 2.2, -10 }, { 0, 0, 0, 1 } };
    assert_true(check_target(t, 7, 12, 10, 2) > 200);
}

static void test_flip(void **state)
{
    (void)state;
    /* x runs the other way (a radiological grid), j and k swapped */
    const double t[4][4] = { { -2.1, 0, 0, 9.3 }, { 0, 0, 2.4, -10.2 }, { 0, 2.9, 0, -8.7 }, { 0, 0, 0, 1 } };
    assert_true(check_target(t, 9, 7, 9, 1) > 200);
}

static void test_rotation(void **state)
{
    (void)state;
    const double c = cos(M_PI / 6), s = sin(M_PI / 6), c2 = cos(0.3), s2 = sin(0.3);
    /* 30 degrees about z, then 0.3 rad about x, 2 mm voxels */
    const double t[4][4] = { { 2 * c, -2 * s, 0, -4 }, { 2 * s * c2, 2 * c * c2, -2 * s2, -9 },
                             { 2 * s * s2, 2 * c * s2, 2 * c2, -10 }, { 0, 0, 0, 1 } };
    assert_true(check_target(t, 10, 10, 10, 3) > 200);
}

static void test_same_grid_copies(void **state)
{
    (void)state;
    struct nf_value *src = make_source(2);
    struct nf_value *to = target_image(SX, SY, SZ, source_affine);
    struct nf_error err = { 0 };
    int rc;
    struct nf_value *out = run_resample(src, to, RESAMPLE_CONTINUOUS, 2, &rc, &err);
    assert_int_equal(rc, 0);
    assert_memory_equal(out->u.vol.data, src->u.vol.data, (size_t)(SX * SY * SZ * 2) * sizeof(float));
    nf_value_unref(out);
    nf_value_unref(src);
    nf_value_unref(to);
}

static void test_matrix_target(void **state)
{
    (void)state;
    /* a masked matrix's geometry is a grid too; one without geometry is refused */
    const double t[4][4] = { { 3, 0, 0, -7 }, { 0, 3, 0, -9 }, { 0, 0, 3, -8 }, { 0, 0, 0, 1 } };
    struct nf_grid g = make_grid(5, 6, 6, t);
    float *mask = calloc(5 * 6 * 6, sizeof *mask);
    mask[7] = mask[100] = 1;
    struct nf_geom *geom = nf_geom_from_mask(&g, mask);
    free(mask);
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(1, geom->n_voxels, geom, &err);
    nf_geom_unref(geom);
    struct nf_value *src = make_source(1);
    int rc;
    struct nf_value *out = run_resample(src, m, RESAMPLE_LINEAR, 1, &rc, &err);
    assert_int_equal(rc, 0);
    assert_true(nf_grid_same(&out->u.vol.grid, &g));
    nf_value_unref(out);

    struct nf_value *plain = nf_value_new_matrix(1, 4, NULL, &err);
    out = run_resample(src, plain, RESAMPLE_LINEAR, 1, &rc, &err);
    assert_null(out);
    assert_int_equal(rc, NF_EDATA);
    assert_string_equal(err.node, node_name);
    assert_int_equal(err.loc.line, 6);
    assert_non_null(strstr(err.msg, "input 'to'"));
    assert_non_null(strstr(err.msg, "has no grid"));
    nf_value_unref(plain);
    nf_value_unref(m);
    nf_value_unref(src);
}

static void test_disjoint_grids(void **state)
{
    (void)state;
    /* the whole source lies at negative target x: nilearn's BoundingBoxError */
    const double t[4][4] = { { 2, 0, 0, 100 }, { 0, 2, 0, -10 }, { 0, 0, 2, -9 }, { 0, 0, 0, 1 } };
    struct nf_value *src = make_source(1);
    struct nf_value *to = target_image(5, 5, 5, t);
    struct nf_error err = { 0 };
    int rc;
    struct nf_value *out = run_resample(src, to, RESAMPLE_NEAREST, 1, &rc, &err);
    assert_null(out);
    assert_int_equal(rc, NF_EDATA);
    assert_non_null(strstr(err.msg, "does not contain any of 'src.nii.gz'"));
    nf_value_unref(src);
    nf_value_unref(to);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shift),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_flip),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_same_grid_copies),
        cmocka_unit_test(test_matrix_target),
        cmocka_unit_test(test_disjoint_grids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
