/* test_simulate.c — unit tests of the `simulate` node (nodes/simulate/simulate.c).
 *
 * The node is run directly through its descriptor, with parameters filled from
 * its own table's defaults. Checks are computed independently here, in double:
 * determinism from the seed, where the planted effect lies (per-voxel correlation
 * with the design and distances to the ROI centre through the affine), the
 * synthetic mask, and the files written by `write:`.
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

#include "io/io.h"
#include "node.h"
#include "pipeline.h"
#include "simulate/simulate.h"
#include "core/util.h"
#include "core/value.h"

#define N_OUT 5

struct sim_result {
    struct nf_value *out[N_OUT];
    struct nf_error err;
    int rc;
};

static void params_init(struct simulate_params *p)
{
    nf_params_defaults(&nf_node_simulate, p);
    free(p->mask);
    p->mask = strdup("synthetic");   /* independent of installed packages */
    p->subjects = 2;
    p->images = 30;
}

static void run_sim(const struct simulate_params *p, uint64_t env_seed, struct sim_result *r)
{
    struct nf_node_inst node = {0};
    struct nf_env env = {0};
    struct nf_run run = {0};
    node.id = "sim";
    node.loc = (struct nf_loc){"test.yaml", 3, 3};
    env.pipeline_name = "test";
    env.pipeline_dir = ".";
    env.seed = env_seed;
    memset(r, 0, sizeof *r);
    run.node = &node;
    run.params = p;
    run.env = &env;
    run.out = r->out;
    run.err = &r->err;
    r->rc = nf_node_simulate.run_cpu(&run);
}

static void result_release(struct sim_result *r)
{
    for (int o = 0; o < N_OUT; o++)
        nf_value_unref(r->out[o]);
}

static void world_of(const struct nf_grid *g, int64_t off, double xyz[3])
{
    int64_t i = off % g->dim[0], j = (off / g->dim[0]) % g->dim[1],
            k = off / (g->dim[0] * g->dim[1]);
    for (int a = 0; a < 3; a++)
        xyz[a] = g->affine[a][0] * i + g->affine[a][1] * j + g->affine[a][2] * k +
                 g->affine[a][3];
}

static void test_outputs_and_shapes(void **state)
{
    (void)state;
    struct simulate_params p;
    struct sim_result r;
    params_init(&p);
    run_sim(&p, 7, &r);
    assert_int_equal(r.rc, 0);
    for (int o = 0; o < N_OUT; o++)
        assert_non_null(r.out[o]);
    struct nf_value *data = r.out[SIMULATE_OUT_DATA];
    assert_int_equal(data->kind, NF_KIND_COLLECTION);
    assert_int_equal(data->u.coll.n, 2);
    assert_string_equal(data->u.coll.items[0]->label, "sub-01");
    assert_string_equal(data->u.coll.items[1]->label, "sub-02");
    assert_int_equal(data->u.coll.items[0]->u.vol.nt, 30);
    assert_int_equal(data->u.coll.items[0]->u.vol.ndim, 4);
    assert_int_equal(r.out[SIMULATE_OUT_X]->u.tab.n_rows, 30);
    assert_int_equal(r.out[SIMULATE_OUT_X]->u.tab.n_cols, 2);
    assert_string_equal(r.out[SIMULATE_OUT_X]->u.tab.cols[1].name, "f2");
    assert_string_equal(r.out[SIMULATE_OUT_Y]->u.tab.cols[0].name, "trial_type");
    assert_false(r.out[SIMULATE_OUT_Y]->u.tab.cols[0].numeric);
    assert_string_equal(r.out[SIMULATE_OUT_Y]->u.tab.cols[1].name, "target");

    /* X is standardized; trial_type follows the sign of f1. */
    const struct nf_table *X = &r.out[SIMULATE_OUT_X]->u.tab;
    for (int64_t f = 0; f < X->n_cols; f++) {
        double m = 0, v = 0;
        for (int64_t t = 0; t < X->n_rows; t++)
            m += X->cols[f].num[t];
        m /= (double)X->n_rows;
        for (int64_t t = 0; t < X->n_rows; t++)
            v += (X->cols[f].num[t] - m) * (X->cols[f].num[t] - m);
        assert_true(fabs(m) < 1e-9);
        assert_true(fabs(v / (double)X->n_rows - 1.0) < 1e-9);
    }
    for (int64_t t = 0; t < X->n_rows; t++)
        assert_string_equal(r.out[SIMULATE_OUT_Y]->u.tab.cols[0].str[t],
                            X->cols[0].num[t] > 0 ? "a" : "b");

    /* Outside the mask the data are zero; inside, around the baseline of 100. */
    const struct nf_volume *mask = &r.out[SIMULATE_OUT_MASK]->u.vol;
    const struct nf_volume *s0 = &data->u.coll.items[0]->u.vol;
    int64_t nvox = nf_grid_nvox(&mask->grid), n_brain = 0;
    assert_true(nf_grid_same(&mask->grid, &s0->grid));
    for (int64_t v = 0; v < nvox; v++) {
        if (mask->data[v] != 0.0f) {
            assert_true(mask->data[v] == 1.0f);
            n_brain++;
            assert_true(fabs(s0->data[v] - 100.0) < 10.0);
        } else {
            assert_true(s0->data[v] == 0.0f);
        }
    }
    /* A 4 mm ellipsoid brain of about 1.5 litres. */
    assert_true(n_brain > 15000 && n_brain < 35000);
    result_release(&r);
    nf_params_release(&nf_node_simulate, &p);
}

static bool volumes_equal(const struct nf_value *a, const struct nf_value *b)
{
    int64_t n = nf_grid_nvox(&a->u.vol.grid) * a->u.vol.nt;
    return n == nf_grid_nvox(&b->u.vol.grid) * b->u.vol.nt &&
           memcmp(a->u.vol.data, b->u.vol.data, (size_t)n * sizeof(float)) == 0;
}

static void test_determinism(void **state)
{
    (void)state;
    struct simulate_params p;
    struct sim_result a, b, c, d;
    params_init(&p);
    p.seed = 42;
    run_sim(&p, 1, &a);
    run_sim(&p, 999, &b);          /* explicit seed: env seed does not matter */
    p.seed = 43;
    run_sim(&p, 1, &c);
    p.seed = -1;
    run_sim(&p, 42, &d);           /* -1: the env seed */
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_int_equal(c.rc, 0);
    assert_int_equal(d.rc, 0);
    for (size_t s = 0; s < 2; s++) {
        assert_true(volumes_equal(a.out[0]->u.coll.items[s], b.out[0]->u.coll.items[s]));
        assert_true(volumes_equal(a.out[0]->u.coll.items[s], d.out[0]->u.coll.items[s]));
        assert_false(volumes_equal(a.out[0]->u.coll.items[s], c.out[0]->u.coll.items[s]));
    }
    /* Subjects differ from each other. */
    assert_false(volumes_equal(a.out[0]->u.coll.items[0], a.out[0]->u.coll.items[1]));
    /* Adding a subject leaves the existing ones unchanged. */
    struct sim_result e;
    p.seed = 42;
    p.subjects = 3;
    run_sim(&p, 1, &e);
    assert_int_equal(e.rc, 0);
    assert_true(volumes_equal(a.out[0]->u.coll.items[1], e.out[0]->u.coll.items[1]));
    result_release(&a);
    result_release(&b);
    result_release(&c);
    result_release(&d);
    result_release(&e);
    nf_params_release(&nf_node_simulate, &p);
}

static double correlation(const float *y, int64_t stride, const double *x, int64_t n)
{
    double my = 0, mx = 0, sxy = 0, sxx = 0, syy = 0;
    for (int64_t t = 0; t < n; t++) {
        my += y[t * stride];
        mx += x[t];
    }
    my /= (double)n;
    mx /= (double)n;
    for (int64_t t = 0; t < n; t++) {
        double a = y[t * stride] - my, b = x[t] - mx;
        sxy += a * b;
        sxx += b * b;
        syy += a * a;
    }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0.0;
}

/* The planted effect: truth nonzero exactly within roi_radius of roi_center, and
 * the data correlate with feature 1 there and not elsewhere. */
static void test_planted_roi(void **state)
{
    (void)state;
    struct simulate_params p;
    struct sim_result r;
    params_init(&p);
    p.images = 60;
    p.seed = 5;
    run_sim(&p, 0, &r);
    assert_int_equal(r.rc, 0);
    const struct nf_volume *mask = &r.out[SIMULATE_OUT_MASK]->u.vol;
    const struct nf_volume *truth = &r.out[SIMULATE_OUT_TRUTH]->u.vol;
    const struct nf_volume *y = &r.out[SIMULATE_OUT_DATA]->u.coll.items[0]->u.vol;
    const struct nf_table *X = &r.out[SIMULATE_OUT_X]->u.tab;
    const double *c = p.roi_center.v;
    int64_t nvox = nf_grid_nvox(&mask->grid), n_in = 0, n_out = 0;
    double corr_in = 0, corr_out = 0;
    /* sum of the weights: f1 1.0, f2 -0.5 */
    const double expected_truth = p.effect_size * (1.0 - 0.5);

    for (int64_t v = 0; v < nvox; v++) {
        double xyz[3];
        world_of(&mask->grid, v, xyz);
        double d = sqrt((xyz[0] - c[0]) * (xyz[0] - c[0]) + (xyz[1] - c[1]) * (xyz[1] - c[1]) +
                        (xyz[2] - c[2]) * (xyz[2] - c[2]));
        bool brain = mask->data[v] != 0.0f;
        if (brain && d <= p.roi_radius - 1e-6)
            assert_true(fabs(truth->data[v] - expected_truth) < 1e-6);
        if (!brain || d > p.roi_radius + 1e-6)
            assert_true(truth->data[v] == 0.0f);
        if (!brain)
            continue;
        double r0 = correlation(y->data + v, nvox, X->cols[0].num, X->n_rows);
        if (truth->data[v] != 0.0f) {
            corr_in += r0;
            n_in++;
        } else {
            corr_out += r0;
            n_out++;
        }
    }
    /* A 10 mm sphere on a 4 mm grid holds ~65 voxels. */
    assert_true(n_in > 30 && n_in < 100);
    corr_in /= (double)n_in;
    corr_out /= (double)n_out;
    /* signal sd ~1.1 against noise 1: r ~ 0.6 inside, ~0 outside. */
    assert_true(corr_in > 0.4);
    assert_true(fabs(corr_out) < 0.05);

    /* The subject effect raises the ROI mean by 0.5 * effect_size. */
    double m_in = 0, m_out = 0;
    int64_t k_in = 0, k_out = 0;
    for (int64_t v = 0; v < nvox; v++) {
        if (mask->data[v] == 0.0f)
            continue;
        for (int64_t t = 0; t < y->nt; t++) {
            if (truth->data[v] != 0.0f) {
                m_in += y->data[t * nvox + v];
                k_in++;
            } else {
                m_out += y->data[t * nvox + v];
                k_out++;
            }
        }
    }
    assert_true(fabs(m_in / k_in - m_out / k_out - 0.5) < 0.1);
    result_release(&r);
    nf_params_release(&nf_node_simulate, &p);
}

/* A ROI far outside the brain plants nothing (and does not fail). */
static void test_roi_outside_brain(void **state)
{
    (void)state;
    struct simulate_params p;
    struct sim_result r;
    params_init(&p);
    p.roi_center.v[0] = 500;
    run_sim(&p, 0, &r);
    assert_int_equal(r.rc, 0);
    const struct nf_volume *truth = &r.out[SIMULATE_OUT_TRUTH]->u.vol;
    for (int64_t v = 0; v < nf_grid_nvox(&truth->grid); v++)
        assert_true(truth->data[v] == 0.0f);
    result_release(&r);
    nf_params_release(&nf_node_simulate, &p);
}

/* The default ROI lies inside the real template too, when it is installed. */
static void test_template_mask(void **state)
{
    (void)state;
    if (access(NF_SIMULATE_TEMPLATE, R_OK) != 0) {
        skip();
        return;
    }
    struct simulate_params p;
    struct sim_result r;
    params_init(&p);
    free(p.mask);
    p.mask = strdup("auto");
    p.subjects = 4;
    p.images = 40;
    run_sim(&p, 0, &r);
    assert_int_equal(r.rc, 0);
    const struct nf_volume *mask = &r.out[SIMULATE_OUT_MASK]->u.vol;
    assert_int_equal(mask->grid.dim[0], 46);   /* ceil(181 / 4) */
    assert_int_equal(mask->grid.dim[1], 55);
    assert_int_equal(mask->grid.dim[2], 46);
    assert_true(fabs(mask->grid.affine[0][0] - 4.0) < 1e-9);
    assert_true(fabs(mask->grid.affine[0][3] - (-90.0 + 1.5)) < 1e-6);
    int64_t n_brain = 0, n_truth = 0;
    for (int64_t v = 0; v < nf_grid_nvox(&mask->grid); v++) {
        n_brain += mask->data[v] != 0.0f;
        n_truth += r.out[SIMULATE_OUT_TRUTH]->u.vol.data[v] != 0.0f;
    }
    assert_true(n_brain > 20000 && n_brain < 32000);
    assert_true(n_truth > 30);

    /* resolve() agrees with the run, from headers only. */
    struct nf_shape out[N_OUT];
    struct nf_error err = {0};
    struct nf_resolve res = {.params = &p, .out = out, .err = &err};
    assert_int_equal(nf_node_simulate.resolve(&res), 0);
    assert_int_equal(out[SIMULATE_OUT_DATA].kind, NF_KIND_COLLECTION);
    assert_int_equal(out[SIMULATE_OUT_DATA].n_items, 4);
    assert_int_equal(out[SIMULATE_OUT_DATA].dim[0], 46);
    assert_int_equal(out[SIMULATE_OUT_DATA].dim[3], 40);
    assert_int_equal(out[SIMULATE_OUT_MASK].dim[1], 55);
    assert_true(nf_node_simulate.estimate(&p, NULL, out) > 0);
    result_release(&r);
    nf_params_release(&nf_node_simulate, &p);
}

static void test_bad_mask_path(void **state)
{
    (void)state;
    struct simulate_params p;
    struct sim_result r;
    params_init(&p);
    free(p.mask);
    p.mask = strdup("/nonexistent/mask.nii.gz");
    run_sim(&p, 0, &r);
    assert_true(r.rc < 0);
    for (int o = 0; o < N_OUT; o++)
        assert_null(r.out[o]);
    assert_string_equal(r.err.node, "sim");
    assert_int_equal(r.err.loc.line, 3);
    nf_params_release(&nf_node_simulate, &p);
}

static int rm_tree(const char *dir)
{
    char *cmd = nf_asprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    return rc;
}

static void test_write(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/nf_test_simulate_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    struct simulate_params p;
    struct sim_result r;
    struct nf_error err = {0};
    params_init(&p);
    p.write = nf_path_join(dir, "ds");
    run_sim(&p, 3, &r);
    assert_int_equal(r.rc, 0);

    char *path = nf_asprintf("%s/ds/sub-02/func/sub-02_task-sim_bold.nii.gz", dir);
    struct nf_value *bold = nf_nifti_read(path, &err);
    assert_non_null(bold);
    assert_int_equal(bold->u.vol.nt, 30);
    assert_true(volumes_equal(bold, r.out[SIMULATE_OUT_DATA]->u.coll.items[1]));
    nf_value_unref(bold);
    free(path);

    path = nf_asprintf("%s/ds/truth.nii.gz", dir);
    struct nf_value *truth = nf_nifti_read(path, &err);
    assert_non_null(truth);
    assert_true(nf_grid_same(&truth->u.vol.grid, &r.out[SIMULATE_OUT_TRUTH]->u.vol.grid));
    assert_true(volumes_equal(truth, r.out[SIMULATE_OUT_TRUTH]));
    nf_value_unref(truth);
    free(path);

    path = nf_asprintf("%s/ds/mask.nii.gz", dir);
    struct nf_value *mask = nf_nifti_read(path, &err);
    assert_non_null(mask);
    assert_true(volumes_equal(mask, r.out[SIMULATE_OUT_MASK]));
    nf_value_unref(mask);
    free(path);

    path = nf_asprintf("%s/ds/design.tsv", dir);
    struct nf_value *design = nf_table_read(path, NULL, 0, &err);
    assert_non_null(design);
    assert_int_equal(design->u.tab.n_rows, 30);
    assert_int_equal(design->u.tab.n_cols, 2);
    assert_string_equal(design->u.tab.cols[0].name, "f1");
    for (int64_t t = 0; t < 30; t++)
        assert_true(fabs(design->u.tab.cols[0].num[t] -
                         r.out[SIMULATE_OUT_X]->u.tab.cols[0].num[t]) < 1e-6);
    nf_value_unref(design);
    free(path);

    path = nf_asprintf("%s/ds/labels.tsv", dir);
    struct nf_value *labels = nf_table_read(path, NULL, 0, &err);
    assert_non_null(labels);
    assert_int_equal(labels->u.tab.n_cols, 2);
    assert_string_equal(labels->u.tab.cols[0].name, "trial_type");
    assert_false(labels->u.tab.cols[0].numeric);
    assert_string_equal(labels->u.tab.cols[0].str[0], r.out[SIMULATE_OUT_Y]->u.tab.cols[0].str[0]);
    nf_value_unref(labels);
    free(path);

    path = nf_asprintf("%s/ds/dataset_description.json", dir);
    assert_int_equal(access(path, R_OK), 0);
    free(path);

    result_release(&r);
    nf_params_release(&nf_node_simulate, &p);
    assert_int_equal(rm_tree(dir), 0);
}

int main(void)
{
    nf_log_quiet = true;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs_and_shapes),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_planted_roi),
        cmocka_unit_test(test_roi_outside_brain),
        cmocka_unit_test(test_template_mask),
        cmocka_unit_test(test_bad_mask_path),
        cmocka_unit_test(test_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
