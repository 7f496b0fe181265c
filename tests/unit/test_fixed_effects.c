/* test_fixed_effects.c — the `fixed_effects` node against nilearn 0.14 and a
 * direct double-precision computation.
 *
 * The reference cases are nilearn 0.14.1's _compute_fixed_effects_params
 * (the core of compute_fixed_effects) on one voxel, printed with 17 digits:
 * plain and precision-weighted means, negative effects with few degrees of
 * freedom, zero and near-zero variances (the 1e-16 floor, the p-value clip
 * that caps z at 37.05), a zero effect. The node test builds per-run
 * collections for two subjects (one with a session), two contrasts each, and
 * checks every output map cell against the formulas computed here, the
 * grouping and labels, and the errors: runs listed differently in the two
 * collections, a label without a subject, maps of different shapes.
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

#include "node.h"
#include "core/util.h"
#include "fixed_effects/fixed_effects.h"

struct reference {
    double effect[3], variance[3];
    size_t n;
    bool precision_weighted;
    double dof;
    double fe, fv, t, z;
};

/* nilearn 0.14.1, _compute_fixed_effects_params(effects, variances, pw, dofs) */
static const struct reference nilearn[] = {
    { {1.0, 2.0, 0.5}, {0.5, 1.0, 2.0}, 3, false, 300, 1.1666666666666667, 0.3888888888888889, 1.8708286933869709, 1.8638539727887111 },
    { {1.0, 2.0, 0.5}, {0.5, 1.0, 2.0}, 3, true, 300, 1.2142857142857142, 0.2857142857142857, 2.2717205562556071, 2.2601592352538078 },
    { {-0.3, -0.1}, {0.02, 0.05}, 2, false, 6, -0.20000000000000001, 0.017500000000000002, -1.5118578920369088, -1.3366850348505803 },
    { {0.1, 0.12}, {1e-20, 0.0}, 2, true, 200, 0.11, 4.9999999999999999e-17, 15556349.186104046, 37.047096299361201 },
    { {40.0, 38.0}, {0.5, 0.6}, 2, false, 200, 39, 0.27500000000000002, 74.370081961156188, 25.880844060649576 },
    { {0.0, 0.0}, {1.0, 1.0}, 2, false, 200, 0, 0.5, 0, 0 },
    { {-9.0, -8.0}, {0.1, 0.1}, 2, true, 4, -8.5, 0.050000000000000003, -38.013155617496423, -4.680603295740366 },
};

static void close_to(double got, double want, double rel, const char *what, size_t i)
{
    if (!(fabs(got - want) <= rel * fmax(1.0, fabs(want))))
        fail_msg("case %zu: %s is %.17g, nilearn says %.17g", i, what, got, want);
}

static void test_against_nilearn(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof nilearn / sizeof nilearn[0]; i++) {
        const struct reference *r = &nilearn[i];
        double fe, fv, t, z;
        fixed_effects_combine(r->effect, r->variance, r->n, r->precision_weighted, r->dof, &fe, &fv, &t, &z);
        close_to(fe, r->fe, 1e-14, "effect", i);
        close_to(fv, r->fv, 1e-14, "variance", i);
        close_to(t, r->t, 1e-12, "t", i);
        close_to(z, r->z, 1e-9, "z", i);
    }
}

static void test_groups(void **state)
{
    (void)state;
    bool oom;
    char *g = fixed_effects_group("sub-01_task-x_run-1", &oom);
    assert_string_equal(g, "sub-01");
    free(g);
    g = fixed_effects_group("sub-ab2_ses-pre_task-x_run-2", &oom);
    assert_string_equal(g, "sub-ab2_ses-pre");
    free(g);
    g = fixed_effects_group("sub-03", &oom);
    assert_string_equal(g, "sub-03");
    free(g);
    assert_null(fixed_effects_group("run-1", &oom));
    assert_false(oom);
    assert_null(fixed_effects_group("sub-_task-x", &oom));
    assert_null(fixed_effects_group(NULL, &oom));

    /* the group's label keeps the entities every run shares, never the run */
    static const char *const same[] = { "sub-01_task-x_run-1_space-MNI", "sub-01_task-x_run-2_space-MNI" };
    g = fixed_effects_group_label("sub-01", same, 2);
    assert_string_equal(g, "sub-01_task-x_space-MNI");
    free(g);
    static const char *const mixed[] = { "sub-01_task-x_run-1_space-MNI", "sub-01_task-y_run-1_space-MNI",
                                         "sub-01_task-x_space-MNIx" };
    g = fixed_effects_group_label("sub-01", mixed, 3);
    assert_string_equal(g, "sub-01");
    free(g);
    static const char *const one[] = { "sub-02_ses-a_task-x_run-3" };
    g = fixed_effects_group_label("sub-02_ses-a", one, 1);
    assert_string_equal(g, "sub-02_ses-a_task-x");
    free(g);
}

/* ---- the node ---- */

#define V 5
#define C 2

static const char *const run_labels[] = { "sub-01_task-x_run-1", "sub-01_task-x_run-2", "sub-02_ses-a_task-x_run-1",
                                          "sub-02_ses-a_task-x_run-2", "sub-02_ses-a_task-x_run-3" };
#define N_RUNS 5

static double effect_of(size_t run, int64_t c) { return sin(1.0 + (double)run * 0.7 + (double)c * 0.3) * 2; }
static double variance_of(size_t run, int64_t c) { return 0.1 + 0.05 * (double)((run * 7 + (size_t)c * 3) % 11); }

static struct nf_value *collection(bool variance, const char *const *labels, struct nf_geom *geom)
{
    struct nf_error err = { 0 };
    struct nf_value *coll = nf_value_new_collection(N_RUNS, &err);
    assert_non_null(coll);
    for (size_t i = 0; i < N_RUNS; i++) {
        struct nf_value *m = nf_value_new_matrix(C, V, geom, &err);
        assert_non_null(m);
        for (int64_t c = 0; c < C * V; c++)
            m->u.mat.data[c] = (float)(variance ? variance_of(i, c) : effect_of(i, c));
        nf_value_set_label(m, labels[i]);
        coll->u.coll.items[i] = m;
    }
    return coll;
}

static struct nf_geom *line_geom(void)
{
    struct nf_grid g = { .dim = { V, 1, 1 }, .pixdim = { 1, 1, 1 } };
    for (int a = 0; a < 4; a++)
        g.affine[a][a] = 1;
    float mask[V] = { 1, 1, 1, 1, 1 };
    return nf_geom_from_mask(&g, mask);
}

static int run_node(struct fixed_effects_params *p, struct nf_value *E, struct nf_value *Vr,
                    struct nf_value *out[FIXED_EFFECTS_N_OUT], struct nf_error *err)
{
    struct nf_value *in[FIXED_EFFECTS_N_IN] = { E, Vr };
    struct nf_run run = { .params = p, .in = in, .out = out, .err = err };
    memset(out, 0, FIXED_EFFECTS_N_OUT * sizeof *out);
    return nf_node_fixed_effects.run_cpu(&run);
}

static void test_node(void **state)
{
    (void)state;
    struct nf_geom *geom = line_geom();
    struct nf_value *E = collection(false, run_labels, geom), *Vr = collection(true, run_labels, geom);
    for (int pw = 0; pw < 2; pw++) {
        struct fixed_effects_params p = { .precision_weighted = pw, .dof = 50 };
        struct nf_value *out[FIXED_EFFECTS_N_OUT];
        struct nf_error err = { 0 };
        assert_int_equal(run_node(&p, E, Vr, out, &err), 0);
        static const size_t first[2] = { 0, 2 }, count[2] = { 2, 3 };
        static const char *const names[2] = { "sub-01_task-x", "sub-02_ses-a_task-x" };
        for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++)
            assert_int_equal(out[o]->u.coll.n, 2);
        for (size_t g = 0; g < 2; g++) {
            for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++) {
                const struct nf_value *m = out[o]->u.coll.items[g];
                assert_string_equal(m->label, names[g]);
                assert_int_equal(m->u.mat.rows, C);
                assert_int_equal(m->u.mat.cols, V);
                assert_ptr_equal(m->u.mat.geom, geom);
            }
            assert_int_equal(out[FIXED_EFFECTS_OUT_T]->u.coll.items[g]->stat.kind, NF_STAT_T);
            assert_true(out[FIXED_EFFECTS_OUT_T]->u.coll.items[g]->stat.dof == 50.0 * (double)count[g]);
            assert_int_equal(out[FIXED_EFFECTS_OUT_Z]->u.coll.items[g]->stat.kind, NF_STAT_Z);
            for (int64_t c = 0; c < C * V; c++) {
                /* the formulas, directly, from the float inputs */
                double sw = 0, sew = 0, se = 0, sv = 0;
                for (size_t k = first[g]; k < first[g] + count[g]; k++) {
                    double e = (double)(float)effect_of(k, c), v = (double)(float)variance_of(k, c);
                    sw += 1 / v;
                    sew += e / v;
                    se += e;
                    sv += v;
                }
                double n = (double)count[g];
                double fe = pw ? sew / sw : se / n, fv = pw ? 1 / sw : sv / n / n, t = fe / sqrt(fv);
                assert_float_equal(out[FIXED_EFFECTS_OUT_EFFECT]->u.coll.items[g]->u.mat.data[c], fe, 1e-6 * fmax(1, fabs(fe)));
                assert_float_equal(out[FIXED_EFFECTS_OUT_VARIANCE]->u.coll.items[g]->u.mat.data[c], fv, 1e-6 * fv);
                assert_float_equal(out[FIXED_EFFECTS_OUT_T]->u.coll.items[g]->u.mat.data[c], t, 1e-5 * fmax(1, fabs(t)));
                double z = out[FIXED_EFFECTS_OUT_Z]->u.coll.items[g]->u.mat.data[c];
                /* with 100+ degrees of freedom z is a little smaller than t, same sign */
                assert_true(z * t >= 0 && fabs(z) <= fabs(t) + 1e-6 && fabs(z) > 0.9 * fabs(t));
            }
        }
        for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++)
            nf_value_unref(out[o]);
    }
    nf_value_unref(E);
    nf_value_unref(Vr);
    nf_geom_unref(geom);
}

static void test_node_errors(void **state)
{
    (void)state;
    struct nf_geom *geom = line_geom();
    struct fixed_effects_params p = { .dof = 100 };
    struct nf_value *out[FIXED_EFFECTS_N_OUT];
    struct nf_error err = { 0 };

    static const char *const swapped[] = { "sub-01_task-x_run-2", "sub-01_task-x_run-1", "sub-02_ses-a_task-x_run-1",
                                           "sub-02_ses-a_task-x_run-2", "sub-02_ses-a_task-x_run-3" };
    struct nf_value *E = collection(false, run_labels, geom), *Vr = collection(true, swapped, geom);
    assert_true(run_node(&p, E, Vr, out, &err) < 0);
    assert_non_null(strstr(err.msg, "run 1 is 'sub-01_task-x_run-1' in effect but 'sub-01_task-x_run-2' in variance"));
    nf_value_unref(Vr);

    static const char *const nameless[] = { "run-1", "run-2", "run-3", "run-4", "run-5" };
    struct nf_value *E2 = collection(false, nameless, geom), *V2 = collection(true, nameless, geom);
    memset(&err, 0, sizeof err);
    assert_true(run_node(&p, E2, V2, out, &err) < 0);
    assert_non_null(strstr(err.msg, "labelled 'run-1', which names no subject"));
    nf_value_unref(E2);
    nf_value_unref(V2);

    Vr = collection(true, run_labels, geom);
    nf_value_unref(Vr->u.coll.items[3]);
    memset(&err, 0, sizeof err);
    Vr->u.coll.items[3] = nf_value_new_matrix(1, V, geom, &err);
    nf_value_set_label(Vr->u.coll.items[3], run_labels[3]);
    assert_true(run_node(&p, E, Vr, out, &err) < 0);
    assert_non_null(strstr(err.msg, "variance of sub-02_ses-a_task-x_run-2 is 1 x 5 but effect of sub-01_task-x_run-1 is 2 x 5"));
    for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++)
        assert_null(out[o]);
    nf_value_unref(Vr);
    nf_value_unref(E);
    nf_geom_unref(geom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_nilearn),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_node),
        cmocka_unit_test(test_node_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
