/* test_mask.c — unit tests of the `mask` node (nodes/mask/mask.c).
 *
 * The voxel order is the one thing a port of nltools must not get wrong, so
 * these tests never ask the code under test what the order is: they build
 * volumes by hand in NIfTI storage order (i fastest), and compute the expected
 * columns with their own loops over (i, j, k), k fastest, as numpy's
 * np.nonzero does. Every voxel value encodes its own (i, j, k, t), so a
 * misplaced column shows up as a wrong value. Standardisation is checked
 * against a double-precision computation written here.
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
#include <unistd.h>

#include "core/error.h"
#include "node.h"
#include "pipeline.h"
#include "core/util.h"
#include "core/value.h"

#include "mask/mask.h"
#include "core/rng.h"

enum { NX = 4, NY = 3, NZ = 5, NVOX = NX * NY * NZ };

static char node_name[] = "voxels";

/* ---- fixtures built by hand ---- */

static struct nf_grid test_grid(int64_t nx, int64_t ny, int64_t nz, double x_origin)
{
    struct nf_grid g = { 0 };
    g.dim[0] = nx;
    g.dim[1] = ny;
    g.dim[2] = nz;
    for (int a = 0; a < 3; a++) {
        g.pixdim[a] = 2.0;
        g.affine[a][a] = 2.0;
    }
    g.affine[0][3] = x_origin;
    g.affine[1][3] = -20.0;
    g.affine[2][3] = -10.0;
    g.affine[3][3] = 1.0;
    g.sform_code = 4;
    return g;
}

/* NIfTI storage offset, written out here rather than taken from the engine. */
static int64_t storage_offset(int64_t i, int64_t j, int64_t k, int64_t t,
                              int64_t nx, int64_t ny, int64_t nz)
{
    return i + nx * (j + ny * (k + nz * t));
}

/* A value that names its voxel and volume, so any misplacement is visible. */
static float voxel_code(int64_t i, int64_t j, int64_t k, int64_t t)
{
    return (float)(1000 * t + 100 * i + 10 * j + k + 1);
}

static struct nf_value *new_volume(const struct nf_grid *g, int64_t nt, const char *path)
{
    struct nf_error err = { 0 };
    struct nf_value *v = nf_value_new_volume(g, nt > 1 ? 4 : 3, nt, &err);
    assert_non_null(v);
    nf_value_set_path(v, path);
    return v;
}

/* Data whose every voxel holds voxel_code(i, j, k, t). */
static struct nf_value *coded_data(const struct nf_grid *g, int64_t nt, const char *path)
{
    struct nf_value *v = new_volume(g, nt, path);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t k = 0; k < g->dim[2]; k++)
            for (int64_t j = 0; j < g->dim[1]; j++)
                for (int64_t i = 0; i < g->dim[0]; i++)
                    v->u.vol.data[storage_offset(i, j, k, t, g->dim[0], g->dim[1], g->dim[2])] =
                        voxel_code(i, j, k, t);
    return v;
}

/* The hand-picked in-mask voxels of the 4×3×5 grid, deliberately listed out of
 * order, with distinct i, j, k patterns so that i-fastest and k-fastest orders
 * differ. */
static const int64_t chosen[][3] = {
    { 3, 0, 1 }, { 0, 2, 4 }, { 1, 1, 0 }, { 0, 0, 3 }, { 2, 1, 4 },
    { 0, 2, 0 }, { 3, 2, 4 }, { 1, 0, 2 }, { 1, 1, 3 },
};
enum { N_CHOSEN = sizeof chosen / sizeof chosen[0] };

static struct nf_value *chosen_mask(const char *path)
{
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    struct nf_value *m = new_volume(&g, 1, path);
    for (size_t c = 0; c < N_CHOSEN; c++)
        m->u.vol.data[storage_offset(chosen[c][0], chosen[c][1], chosen[c][2], 0, NX, NY, NZ)] = 1.0f;
    return m;
}

/* The expected columns: (i, j, k) of every in-mask voxel, i outer, k inner.
 * In-mask = finite and nonzero. Returns the count. */
static size_t expected_columns(const struct nf_value *mask, int64_t (*ijk)[3], size_t cap)
{
    const struct nf_grid *g = &mask->u.vol.grid;
    size_t n = 0;
    for (int64_t i = 0; i < g->dim[0]; i++)
        for (int64_t j = 0; j < g->dim[1]; j++)
            for (int64_t k = 0; k < g->dim[2]; k++) {
                float x = mask->u.vol.data[storage_offset(i, j, k, 0, g->dim[0], g->dim[1], g->dim[2])];
                if (isfinite(x) && x != 0.0f) {
                    assert_true(n < cap);
                    ijk[n][0] = i;
                    ijk[n][1] = j;
                    ijk[n][2] = k;
                    n++;
                }
            }
    return n;
}

/* ---- running the node as the engine would ---- */

struct mask_call {
    struct nf_node_inst node;
    struct mask_params params;
    struct nf_env env;
    struct nf_value *in[3];
    struct nf_value *out[2];
    struct nf_error err;
    int rc;
};

static void call_init(struct mask_call *c, int standardize)
{
    memset(c, 0, sizeof *c);
    c->node.id = node_name;
    c->node.type = &nf_node_mask;
    c->node.loc = (struct nf_loc){ "pipeline.yaml", 7, 3 };
    c->params.standardize = standardize;
    c->env.threads = 1;
    c->env.pipeline_name = "test";
}

static int call_run(struct mask_call *c)
{
    struct nf_run run = { 0 };
    run.node = &c->node;
    run.params = &c->params;
    run.env = &c->env;
    run.in = c->in;
    run.out = c->out;
    run.err = &c->err;
    run.n_items = 1;
    c->rc = nf_node_mask.run_cpu(&run);
    return c->rc;
}

static void call_release(struct mask_call *c)
{
    for (int i = 0; i < 3; i++)
        nf_value_unref(c->in[i]);
    for (int i = 0; i < 2; i++)
        nf_value_unref(c->out[i]);
}

/* A failed run reports on the node's location and leaves outputs empty. */
static void assert_failed_on_node(const struct mask_call *c, int code)
{
    assert_int_equal(c->rc, code);
    assert_int_equal(c->err.code, code);
    assert_string_equal(c->err.node, node_name);
    assert_int_equal(c->err.loc.line, 7);
    assert_null(c->out[0]);
    assert_null(c->out[1]);
}

/* ---- stderr capture, for warnings ---- */

struct capture { int saved_fd; FILE *file; };

static void capture_begin(struct capture *cap)
{
    fflush(stderr);
    cap->file = tmpfile();
    assert_non_null(cap->file);
    cap->saved_fd = dup(STDERR_FILENO);
    assert_true(cap->saved_fd >= 0);
    assert_true(dup2(fileno(cap->file), STDERR_FILENO) >= 0);
}

/* Returns what was written to stderr (free it). */
static char *capture_end(struct capture *cap)
{
    fflush(stderr);
    dup2(cap->saved_fd, STDERR_FILENO);
    close(cap->saved_fd);
    long size = ftell(cap->file);
    assert_true(size >= 0);
    char *text = calloc((size_t)size + 1, 1);
    assert_non_null(text);
    rewind(cap->file);
    size_t got = fread(text, 1, (size_t)size, cap->file);
    text[got] = '\0';
    fclose(cap->file);
    return text;
}

static int count_occurrences(const char *text, const char *word)
{
    int n = 0;
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word))
        n++;
    return n;
}

/* ---- tests ---- */

static void test_voxel_order_3d(void **state)
{
    (void)state;
    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = coded_data(&g, 1, "bold.nii.gz");
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");

    int64_t ijk[NVOX][3];
    size_t n = expected_columns(c.in[MASK_IN_MASK], ijk, NVOX);
    assert_int_equal(n, N_CHOSEN);

    assert_int_equal(call_run(&c), 0);
    const struct nf_value *out = c.out[MASK_OUT_MATRIX];
    assert_non_null(out);
    assert_int_equal(out->kind, NF_KIND_MATRIX);
    assert_int_equal(out->u.mat.rows, 1);
    assert_int_equal(out->u.mat.cols, (int64_t)n);
    assert_null(c.out[MASK_OUT_LABELS]);

    const struct nf_geom *geom = out->u.mat.geom;
    assert_non_null(geom);
    assert_int_equal(geom->n_voxels, (int64_t)n);
    assert_true(nf_grid_same(&geom->grid, &g));
    for (size_t col = 0; col < n; col++) {
        assert_int_equal(geom->index[col],
                         storage_offset(ijk[col][0], ijk[col][1], ijk[col][2], 0, NX, NY, NZ));
        assert_true(out->u.mat.data[col] == voxel_code(ijk[col][0], ijk[col][1], ijk[col][2], 0));
    }
    /* The first column is the in-mask voxel with the smallest i, then j, then k:
     * (0, 0, 3); storage order would have put (1, 1, 0) first. */
    assert_true(out->u.mat.data[0] == voxel_code(0, 0, 3, 0));
    call_release(&c);
}

static void test_4d_rows(void **state)
{
    (void)state;
    enum { NT = 3 };
    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = coded_data(&g, NT, "bold.nii.gz");
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");

    int64_t ijk[NVOX][3];
    size_t n = expected_columns(c.in[MASK_IN_MASK], ijk, NVOX);

    assert_int_equal(call_run(&c), 0);
    const struct nf_matrix *m = &c.out[MASK_OUT_MATRIX]->u.mat;
    assert_int_equal(m->rows, NT);
    assert_int_equal(m->cols, (int64_t)n);
    for (int64_t t = 0; t < NT; t++)
        for (size_t col = 0; col < n; col++)
            assert_true(m->data[t * m->cols + (int64_t)col] ==
                        voxel_code(ijk[col][0], ijk[col][1], ijk[col][2], t));
    call_release(&c);
}

/* Data with varied values per voxel and image, plus one constant voxel. */
static struct nf_value *varied_data(const struct nf_grid *g, int64_t nt)
{
    struct nf_value *v = new_volume(g, nt, "bold.nii.gz");
    uint64_t state = 12345;
    int64_t nvox = g->dim[0] * g->dim[1] * g->dim[2];
    for (int64_t e = 0; e < nvox * nt; e++)
        v->u.vol.data[e] = (float)(500.0 + 40.0 * nf_rand_normal(&state));
    /* (0, 2, 4) is in the mask: make it constant over time. */
    for (int64_t t = 0; t < nt; t++)
        v->u.vol.data[storage_offset(0, 2, 4, t, g->dim[0], g->dim[1], g->dim[2])] = 7.0f;
    return v;
}

static void check_standardized(int mode)
{
    enum { NT = 6 };
    struct mask_call c;
    call_init(&c, mode);
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = varied_data(&g, NT);
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");

    int64_t ijk[NVOX][3];
    size_t n = expected_columns(c.in[MASK_IN_MASK], ijk, NVOX);

    assert_int_equal(call_run(&c), 0);
    const struct nf_matrix *m = &c.out[MASK_OUT_MATRIX]->u.mat;
    assert_int_equal(m->rows, NT);
    assert_int_equal(m->cols, (int64_t)n);

    const float *raw = c.in[MASK_IN_DATA]->u.vol.data;
    int constant_columns = 0;
    for (size_t col = 0; col < n; col++) {
        double x[NT], mean = 0.0, ss = 0.0;
        for (int t = 0; t < NT; t++) {
            x[t] = raw[storage_offset(ijk[col][0], ijk[col][1], ijk[col][2], t, NX, NY, NZ)];
            mean += x[t];
        }
        mean /= NT;
        for (int t = 0; t < NT; t++)
            ss += (x[t] - mean) * (x[t] - mean);
        double std = sqrt(ss / NT);          /* population std, as nltools */
        if (std == 0.0)
            constant_columns++;
        double divisor = (mode == MASK_STD_ZSCORE && std != 0.0) ? std : 1.0;
        for (int t = 0; t < NT; t++) {
            double want = (x[t] - mean) / divisor;
            double got = m->data[t * m->cols + (int64_t)col];
            assert_true(fabs(got - want) <= 1e-5 * (1.0 + fabs(want)));
        }
    }
    assert_int_equal(constant_columns, 1);   /* the zero-std voxel was exercised */
    call_release(&c);
}

static void test_standardize_zscore(void **state)
{
    (void)state;
    check_standardized(MASK_STD_ZSCORE);
}

static void test_standardize_center(void **state)
{
    (void)state;
    check_standardized(MASK_STD_CENTER);
}

static void test_nonfinite_data_become_zero(void **state)
{
    (void)state;
    enum { NT = 2 };
    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = coded_data(&g, NT, "bold.nii.gz");
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");
    float *d = c.in[MASK_IN_DATA]->u.vol.data;
    d[storage_offset(3, 0, 1, 0, NX, NY, NZ)] = NAN;        /* in mask, image 0 */
    d[storage_offset(0, 2, 4, 1, NX, NY, NZ)] = INFINITY;   /* in mask, image 1 */
    d[storage_offset(1, 1, 3, 1, NX, NY, NZ)] = -INFINITY;  /* in mask, image 1 */
    d[storage_offset(2, 2, 2, 0, NX, NY, NZ)] = NAN;        /* outside: not counted */

    int64_t ijk[NVOX][3];
    size_t n = expected_columns(c.in[MASK_IN_MASK], ijk, NVOX);

    struct capture cap;
    capture_begin(&cap);
    int rc = call_run(&c);
    char *log = capture_end(&cap);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "replaced 3 non-finite values with 0"));
    assert_int_equal(count_occurrences(log, "non-finite"), 1);
    free(log);

    const struct nf_matrix *m = &c.out[MASK_OUT_MATRIX]->u.mat;
    for (int64_t t = 0; t < NT; t++)
        for (size_t col = 0; col < n; col++) {
            float x = d[storage_offset(ijk[col][0], ijk[col][1], ijk[col][2], t, NX, NY, NZ)];
            float want = isfinite(x) ? x : 0.0f;
            assert_true(m->data[t * m->cols + (int64_t)col] == want);
        }
    call_release(&c);
}

/* NaN/inf in the mask are outside; several nonzero values are all inside, with
 * one warning giving the number of distinct values. */
static void test_mask_values(void **state)
{
    (void)state;
    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = coded_data(&g, 1, "bold.nii.gz");
    c.in[MASK_IN_MASK] = chosen_mask("labels.nii.gz");
    float *mk = c.in[MASK_IN_MASK]->u.vol.data;
    mk[storage_offset(1, 1, 0, 0, NX, NY, NZ)] = 2.0f;
    mk[storage_offset(2, 1, 4, 0, NX, NY, NZ)] = 3.0f;
    mk[storage_offset(3, 2, 4, 0, NX, NY, NZ)] = -1.0f;     /* negative is nonzero: in */
    mk[storage_offset(0, 0, 0, 0, NX, NY, NZ)] = NAN;       /* out */
    mk[storage_offset(3, 2, 0, 0, NX, NY, NZ)] = INFINITY;  /* out */
    /* values present: 0, 1, 2, 3, -1 (NaN/inf count as 0) */

    int64_t ijk[NVOX][3];
    size_t n = expected_columns(c.in[MASK_IN_MASK], ijk, NVOX);
    assert_int_equal(n, N_CHOSEN);

    struct capture cap;
    capture_begin(&cap);
    int rc = call_run(&c);
    char *log = capture_end(&cap);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(log, "mask 'labels.nii.gz' has 5 distinct values; every "
                                "nonzero voxel is in the mask"));
    free(log);

    const struct nf_matrix *m = &c.out[MASK_OUT_MATRIX]->u.mat;
    assert_int_equal(m->cols, (int64_t)n);
    for (size_t col = 0; col < n; col++)
        assert_true(m->data[col] == voxel_code(ijk[col][0], ijk[col][1], ijk[col][2], 0));
    call_release(&c);
}

/* The geometry of random masks on odd grids (flat ones included) against
 * the expected columns computed here: ones, zeros, NaN and +-inf scattered,
 * so that lines of the C order start and end anywhere. The node warns about
 * none of these masks (one nonzero value; NaN/inf are outside) and gathers
 * every column from its own voxel. */
static void test_geometry_random_masks(void **state)
{
    (void)state;
    static const int64_t grids[][3] = {
        { 1, 1, 1 }, { 1, 7, 3 }, { 5, 1, 4 }, { 6, 4, 1 }, { 9, 7, 5 }, { 17, 11, 13 },
    };
    uint64_t seed = 20;
    for (size_t gi = 0; gi < sizeof grids / sizeof grids[0]; gi++) {
        const int64_t nx = grids[gi][0], ny = grids[gi][1], nz = grids[gi][2];
        struct mask_call c;
        call_init(&c, MASK_STD_NONE);
        struct nf_grid g = test_grid(nx, ny, nz, -4.0);
        c.in[MASK_IN_DATA] = coded_data(&g, 2, "bold.nii.gz");
        c.in[MASK_IN_MASK] = new_volume(&g, 1, "brain.nii.gz");
        float *mk = c.in[MASK_IN_MASK]->u.vol.data;
        const int64_t nvox = nx * ny * nz;
        for (int64_t v = 0; v < nvox; v++) {
            double u = nf_rand_uniform(&seed);
            mk[v] = u < 0.45 ? 1.0f : u < 0.85 ? 0.0f : u < 0.9 ? NAN : u < 0.95 ? INFINITY
                                                                             : -INFINITY;
        }
        mk[nvox - 1] = 1.0f;   /* never empty */

        int64_t (*ijk)[3] = calloc((size_t)nvox, sizeof *ijk);
        assert_non_null(ijk);
        size_t n = expected_columns(c.in[MASK_IN_MASK], ijk, (size_t)nvox);
        struct nf_geom *geom = nf_geom_from_mask(&g, mk);
        assert_non_null(geom);
        assert_int_equal(geom->n_voxels, (int64_t)n);
        for (size_t col = 0; col < n; col++)
            assert_int_equal(geom->index[col],
                             storage_offset(ijk[col][0], ijk[col][1], ijk[col][2], 0, nx, ny, nz));
        nf_geom_unref(geom);

        struct capture cap;
        capture_begin(&cap);
        int rc = call_run(&c);
        char *log = capture_end(&cap);
        assert_int_equal(rc, 0);
        assert_string_equal(log, "");
        free(log);
        const struct nf_matrix *m = &c.out[MASK_OUT_MATRIX]->u.mat;
        assert_int_equal(m->cols, (int64_t)n);
        for (int64_t t = 0; t < 2; t++)
            for (size_t col = 0; col < n; col++)
                assert_true(m->data[t * m->cols + (int64_t)col] ==
                            voxel_code(ijk[col][0], ijk[col][1], ijk[col][2], t));
        free(ijk);
        call_release(&c);
    }
}

static void test_binary_mask_does_not_warn(void **state)
{
    (void)state;
    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = coded_data(&g, 1, "bold.nii.gz");
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");
    struct capture cap;
    capture_begin(&cap);
    int rc = call_run(&c);
    char *log = capture_end(&cap);
    assert_int_equal(rc, 0);
    assert_string_equal(log, "");
    free(log);
    call_release(&c);
}

static void test_empty_mask(void **state)
{
    (void)state;
    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = coded_data(&g, 2, "bold.nii.gz");
    c.in[MASK_IN_MASK] = new_volume(&g, 1, "empty_mask.nii.gz");
    c.in[MASK_IN_MASK]->u.vol.data[5] = NAN;   /* NaN is not "in" either */
    call_run(&c);
    assert_failed_on_node(&c, NF_EDATA);
    assert_non_null(strstr(c.err.msg, "empty_mask.nii.gz"));
    assert_non_null(strstr(c.err.msg, "no nonzero voxel"));
    call_release(&c);
}

static void check_grid_mismatch(const struct nf_grid *data_grid)
{
    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    c.in[MASK_IN_DATA] = coded_data(data_grid, 1, "sub-01_bold.nii.gz");
    c.in[MASK_IN_MASK] = chosen_mask("brain_mask.nii.gz");
    call_run(&c);
    assert_failed_on_node(&c, NF_ESHAPE);

    char want_data[400], want_mask[400];
    nf_grid_describe(data_grid, want_data, sizeof want_data);
    nf_grid_describe(&c.in[MASK_IN_MASK]->u.vol.grid, want_mask, sizeof want_mask);
    assert_non_null(strstr(c.err.msg, want_data));
    assert_non_null(strstr(c.err.msg, want_mask));
    assert_non_null(strstr(c.err.msg, "sub-01_bold.nii.gz"));
    assert_non_null(strstr(c.err.msg, "brain_mask.nii.gz"));
    call_release(&c);
}

static void test_grid_mismatch_dims(void **state)
{
    (void)state;
    struct nf_grid g = test_grid(NX, NY, NZ + 1, -4.0);
    check_grid_mismatch(&g);
}

static void test_grid_mismatch_affine(void **state)
{
    (void)state;
    struct nf_grid g = test_grid(NX, NY, NZ, -2.0);   /* shifted by one voxel */
    check_grid_mismatch(&g);
}

static void test_atlas_labels(void **state)
{
    (void)state;
    struct mask_call c;
    call_init(&c, MASK_STD_ZSCORE);   /* labels must not be standardized */
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = coded_data(&g, 3, "bold.nii.gz");
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");
    c.in[MASK_IN_ATLAS] = new_volume(&g, 1, "atlas.nii.gz");
    for (int64_t k = 0; k < NZ; k++)
        for (int64_t j = 0; j < NY; j++)
            for (int64_t i = 0; i < NX; i++)
                c.in[MASK_IN_ATLAS]->u.vol.data[storage_offset(i, j, k, 0, NX, NY, NZ)] =
                    (float)(1 + i + 10 * k);

    int64_t ijk[NVOX][3];
    size_t n = expected_columns(c.in[MASK_IN_MASK], ijk, NVOX);

    assert_int_equal(call_run(&c), 0);
    const struct nf_value *labels = c.out[MASK_OUT_LABELS];
    assert_non_null(labels);
    assert_int_equal(labels->kind, NF_KIND_MATRIX);
    assert_int_equal(labels->u.mat.rows, 1);
    assert_int_equal(labels->u.mat.cols, (int64_t)n);
    assert_non_null(labels->u.mat.geom);
    assert_int_equal(labels->u.mat.geom->n_voxels, (int64_t)n);
    for (size_t col = 0; col < n; col++)
        assert_true(labels->u.mat.data[col] == (float)(1 + ijk[col][0] + 10 * ijk[col][2]));
    call_release(&c);
}

static void test_atlas_grid_mismatch(void **state)
{
    (void)state;
    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    struct nf_grid other = test_grid(NX + 1, NY, NZ, -4.0);
    c.in[MASK_IN_DATA] = coded_data(&g, 1, "bold.nii.gz");
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");
    c.in[MASK_IN_ATLAS] = new_volume(&other, 1, "atlas_2mm.nii.gz");
    call_run(&c);
    assert_failed_on_node(&c, NF_ESHAPE);
    char want[400];
    nf_grid_describe(&other, want, sizeof want);
    assert_non_null(strstr(c.err.msg, want));
    assert_non_null(strstr(c.err.msg, "atlas_2mm.nii.gz"));
    assert_non_null(strstr(c.err.msg, "brain.nii.gz"));
    call_release(&c);
}

/* Inputs the engine should never pass still give errors, not crashes. */
static void test_bad_inputs(void **state)
{
    (void)state;
    struct nf_grid g = test_grid(NX, NY, NZ, -4.0);
    struct nf_error err = { 0 };

    struct mask_call c;
    call_init(&c, MASK_STD_NONE);
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");
    call_run(&c);                                   /* data missing */
    assert_true(c.rc < 0);
    assert_null(c.out[0]);
    call_release(&c);

    call_init(&c, MASK_STD_NONE);
    c.in[MASK_IN_DATA] = nf_value_new_matrix(2, 3, NULL, &err);
    c.in[MASK_IN_MASK] = chosen_mask("brain.nii.gz");
    call_run(&c);
    assert_failed_on_node(&c, NF_EDATA);
    call_release(&c);

    call_init(&c, MASK_STD_NONE);                   /* 4D mask */
    c.in[MASK_IN_DATA] = coded_data(&g, 1, "bold.nii.gz");
    c.in[MASK_IN_MASK] = coded_data(&g, 2, "mask4d.nii.gz");
    call_run(&c);
    assert_failed_on_node(&c, NF_ESHAPE);
    assert_non_null(strstr(c.err.msg, "mask4d.nii.gz"));
    call_release(&c);
}

/* ---- plan time ---- */

struct resolve_call {
    struct nf_node_inst node;
    struct mask_params params;
    struct nf_shape in[3], out[2];
    struct nf_error err;
};

static int call_resolve(struct resolve_call *c)
{
    struct nf_resolve r = { 0 };
    c->node.id = node_name;
    c->node.loc = (struct nf_loc){ "pipeline.yaml", 12, 5 };
    r.node = &c->node;
    r.params = &c->params;
    r.in = c->in;
    r.out = c->out;
    r.err = &c->err;
    return nf_node_mask.resolve(&r);
}

static struct nf_shape volume_shape(int64_t nx, int64_t ny, int64_t nz, int64_t nt)
{
    struct nf_shape s = { 0 };
    s.kind = NF_KIND_VOLUME;
    s.dim[0] = nx;
    s.dim[1] = ny;
    s.dim[2] = nz;
    s.dim[3] = nt;
    return s;
}

static void test_resolve_shapes(void **state)
{
    (void)state;
    struct resolve_call c;
    memset(&c, 0, sizeof c);
    c.in[MASK_IN_DATA] = volume_shape(91, 109, 91, 200);
    c.in[MASK_IN_MASK] = volume_shape(91, 109, 91, 1);
    assert_int_equal(call_resolve(&c), 0);
    assert_int_equal(c.out[0].kind, NF_KIND_MATRIX);
    assert_int_equal(c.out[0].dim[0], 200);
    assert_int_equal(c.out[0].dim[1], 91 * 109 * 91);
    assert_true(c.out[0].cols_upper_bound);
    assert_true(c.out[0].has_geom);
    assert_int_equal(c.out[1].kind, NF_KIND_NONE);   /* no atlas, no labels */

    c.in[MASK_IN_ATLAS] = volume_shape(91, 109, 91, 1);
    assert_int_equal(call_resolve(&c), 0);
    assert_int_equal(c.out[1].kind, NF_KIND_MATRIX);
    assert_int_equal(c.out[1].dim[0], 1);
    assert_int_equal(c.out[1].dim[1], 91 * 109 * 91);

    /* Working memory: at least one float per grid voxel. */
    uint64_t work = nf_node_mask.estimate(&c.params, c.in, c.out);
    assert_true(work >= (uint64_t)91 * 109 * 91 * sizeof(float));
}

static void test_resolve_mismatch(void **state)
{
    (void)state;
    struct resolve_call c;
    memset(&c, 0, sizeof c);
    c.in[MASK_IN_DATA] = volume_shape(91, 109, 91, 200);
    c.in[MASK_IN_MASK] = volume_shape(61, 73, 61, 1);
    assert_int_equal(call_resolve(&c), NF_ESHAPE);
    assert_int_equal(c.err.code, NF_ESHAPE);
    assert_string_equal(c.err.node, node_name);
    assert_int_equal(c.err.loc.line, 12);
    assert_non_null(strstr(c.err.msg, "91x109x91"));
    assert_non_null(strstr(c.err.msg, "61x73x61"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_voxel_order_3d),
        cmocka_unit_test(test_4d_rows),
        cmocka_unit_test(test_standardize_zscore),
        cmocka_unit_test(test_standardize_center),
        cmocka_unit_test(test_nonfinite_data_become_zero),
        cmocka_unit_test(test_mask_values),
        cmocka_unit_test(test_binary_mask_does_not_warn),
        cmocka_unit_test(test_geometry_random_masks),
        cmocka_unit_test(test_empty_mask),
        cmocka_unit_test(test_grid_mismatch_dims),
        cmocka_unit_test(test_grid_mismatch_affine),
        cmocka_unit_test(test_atlas_labels),
        cmocka_unit_test(test_atlas_grid_mismatch),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_resolve_shapes),
        cmocka_unit_test(test_resolve_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
