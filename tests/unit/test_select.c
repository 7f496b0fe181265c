/* test_select.c — the `select` node: the named (or numbered) row of a maps
 * matrix, with its geometry, statistic kind and name; unknown rows are errors
 * that list the rows. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/util.h"

extern const struct nf_node_type nf_node_select;

/* 3 contrasts x 5 voxels, value 10 * row + col, rows named a, b, c. */
static struct nf_value *maps(bool named)
{
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(3, 5, NULL, &err);
    assert_non_null(m);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++)
            m->u.mat.data[r * 5 + c] = (float)(10 * r + c);
    const char *names[] = { "a", "b", "c" };
    if (named)
        assert_int_equal(nf_matrix_set_row_names(m, names, &err), 0);
    nf_value_set_stat(m, NF_STAT_T, 42, "glm t");
    nf_value_set_label(m, "sub-01");
    return m;
}

static int run_select(const char *row, struct nf_value *in, struct nf_value **out, struct nf_error *err)
{
    struct { char *row; } p = { (char *)row };
    struct nf_value *ins[1] = { in };
    struct nf_value *outs[1] = { NULL };
    struct nf_run run = { .params = &p, .in = ins, .out = outs, .err = err };
    int rc = nf_node_select.run_cpu(&run);
    *out = outs[0];
    return rc;
}

static void by_name_and_number(void **state)
{
    (void)state;
    struct nf_value *m = maps(true), *out = NULL;
    struct nf_error err = { 0 };
    const char *rows[] = { "b", "3" };
    const int want[] = { 1, 2 };
    for (int k = 0; k < 2; k++) {
        assert_int_equal(run_select(rows[k], m, &out, &err), 0);
        assert_int_equal(out->u.mat.rows, 1);
        assert_int_equal(out->u.mat.cols, 5);
        for (int c = 0; c < 5; c++)
            assert_true(out->u.mat.data[c] == (float)(10 * want[k] + c));
        assert_int_equal(out->stat.kind, NF_STAT_T);
        assert_true(out->stat.dof == 42);
        assert_string_equal(out->u.mat.row_names[0], want[k] == 1 ? "b" : "c");
        nf_value_unref(out);
    }
    nf_value_unref(m);
}

static void unknown_rows(void **state)
{
    (void)state;
    struct nf_value *m = maps(true), *plain = maps(false), *out = NULL;
    struct nf_error err = { 0 };
    assert_true(run_select("d", m, &out, &err) < 0);
    assert_null(out);
    assert_non_null(strstr(err.msg, "'sub-01' has no row 'd' (3 rows: a, b, c)"));
    memset(&err, 0, sizeof err);
    assert_true(run_select("4", plain, &out, &err) < 0);
    assert_non_null(strstr(err.msg, "unnamed: give a number from 1"));
    memset(&err, 0, sizeof err);
    assert_true(run_select("0", plain, &out, &err) < 0);
    memset(&err, 0, sizeof err);
    assert_int_equal(run_select("1", plain, &out, &err), 0);   /* unnamed rows: by number */
    assert_true(out->u.mat.data[4] == 4.0f);
    assert_null(out->u.mat.row_names);
    nf_value_unref(out);
    nf_value_unref(m);
    nf_value_unref(plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(by_name_and_number),
        cmocka_unit_test(unknown_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
