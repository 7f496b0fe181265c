/* test_load.c — unit tests of the `load` node (nodes/load/load.c).
 *
 * A temporary folder is filled with small NIfTI images (written with
 * nf_nifti_write), TSV tables and a .npy array, created in an order that is
 * not the sorted order. The tests then call the node's resolve() and run as
 * the engine would and check: formats by extension, collections from globs
 * (size, strcmp order, BIDS subject labels, lazy images), columns, the
 * largest-item shape at plan time, and the errors for a missing file, a glob
 * that matches nothing, an unknown extension and mixed kinds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/io.h"
#include "node.h"
#include "pipeline.h"
#include "core/util.h"
#include "core/value.h"

#include "load/load.h"

enum { NX = 4, NY = 3, NZ = 2, NVOX = NX * NY * NZ };

static char tmp_dir[] = "/tmp/nf_test_load_XXXXXX";
static char node_name[] = "bold";

/* ---- fixtures ---- */

static char *in_tmp(const char *name)
{
    char *path = nf_path_join(tmp_dir, name);
    assert_non_null(path);
    return path;
}

static struct nf_grid test_grid(void)
{
    struct nf_grid g = { 0 };
    g.dim[0] = NX;
    g.dim[1] = NY;
    g.dim[2] = NZ;
    for (int a = 0; a < 3; a++) {
        g.pixdim[a] = 3.0;
        g.affine[a][a] = 3.0;
    }
    g.affine[3][3] = 1.0;
    g.sform_code = 4;
    return g;
}

/* Voxel e of volume t of subject s: distinct everywhere. */
static float image_value(int subject, int64_t t, int64_t e)
{
    return (float)(10000 * subject + 100 * t + e);
}

static void write_image(const char *name, int subject, int64_t nt)
{
    struct nf_grid g = test_grid();
    float *data = calloc((size_t)(NVOX * nt), sizeof *data);
    assert_non_null(data);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t e = 0; e < NVOX; e++)
            data[t * NVOX + e] = image_value(subject, t, e);
    char *path = in_tmp(name);
    struct nf_error err = { 0 };
    assert_int_equal(nf_nifti_write(path, &g, nt, data, 0, "test", &err), 0);
    free(path);
    free(data);
}

static void write_text(const char *name, const char *text)
{
    char *path = in_tmp(name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    free(path);
}

static void make_folder(const char *name)
{
    char *path = in_tmp(name);
    assert_int_equal(mkdir(path, 0700), 0);
    free(path);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(tmp_dir))
        return -1;
    /* Created out of order on purpose. */
    write_image("sub-10_task-movie_bold.nii.gz", 10, 1);
    write_image("sub-02_task-movie_bold.nii.gz", 2, 2);
    write_image("sub-01_task-movie_bold.nii.gz", 1, 3);
    write_text("b_events.tsv", "onset\tduration\ttrial_type\n0\t2\tface\n10\t2\thouse\n20\t2\tface\n");
    write_text("a_events.tsv", "onset\tduration\ttrial_type\n1.5\t1\thouse\n");
    write_text("notes.foo", "not data\n");
    make_folder("runs");
    write_text("runs/sub-01_run-2_events.tsv", "onset\n5\n");
    write_text("runs/sub-01_run-1_events.tsv", "onset\n3\n");
    make_folder("sub-04");
    make_folder("sub-03");
    make_folder("sub-04/anat");
    make_folder("sub-03/anat");
    write_image("sub-04/anat/T1w.nii.gz", 4, 1);
    write_image("sub-03/anat/T1w.nii.gz", 3, 1);

    struct nf_matrix m = { 0 };
    float values[6] = { 1.5f, -2.0f, 3.25f, 4.0f, 5.0f, -6.5f };
    m.rows = 2;
    m.cols = 3;
    m.data = values;
    char *path = in_tmp("weights.npy");
    struct nf_error err = { 0 };
    int rc = nf_npy_write(path, &m, &err);
    free(path);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state)
{
    (void)state;
    return nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- calling the node as the engine would ---- */

struct load_call {
    struct nf_node_inst node;
    struct load_params params;
    char *columns[4];
    struct nf_shape shape;
    struct nf_value *out[1];
    struct nf_error resolve_err, run_err;
    int resolve_rc, run_rc;
};

/* Resolve, then (when resolve succeeded or `run_anyway`) run. */
static void call_load(struct load_call *c, const char *name, const char *const *columns,
                      bool run_anyway)
{
    memset(c, 0, sizeof *c);
    c->node.id = node_name;
    c->node.type = &nf_node_load;
    c->node.loc = (struct nf_loc){ "pipeline.yaml", 9, 5 };
    c->params.path = in_tmp(name);
    for (size_t i = 0; columns && columns[i]; i++) {
        c->columns[i] = (char *)columns[i];
        c->params.columns.n = i + 1;
    }
    c->params.columns.v = c->params.columns.n ? c->columns : NULL;

    struct nf_resolve r = { 0 };
    r.node = &c->node;
    r.params = &c->params;
    r.out = &c->shape;
    r.err = &c->resolve_err;
    c->resolve_rc = nf_node_load.resolve(&r);
    if (c->resolve_rc < 0 && !run_anyway)
        return;

    struct nf_env env = { 0 };
    struct nf_run run = { 0 };
    run.node = &c->node;
    run.params = &c->params;
    run.env = &env;
    run.out = c->out;
    run.err = &c->run_err;
    c->run_rc = nf_node_load.run_cpu(&run);
}

static void call_release(struct load_call *c)
{
    nf_value_unref(c->out[0]);
    free(c->params.path);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void assert_error_on_node(const struct nf_error *err, int code, const char *needle)
{
    assert_int_equal(err->code, code);
    assert_string_equal(err->node, node_name);
    assert_string_equal(err->loc.file, "pipeline.yaml");
    assert_int_equal(err->loc.line, 9);
    assert_non_null(strstr(err->msg, needle));
}

/* ---- tests ---- */

static void test_glob_nifti_collection(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "sub-*_task-movie_bold.nii.gz", NULL, false);
    assert_int_equal(c.resolve_rc, 0);
    assert_int_equal(c.shape.kind, NF_KIND_COLLECTION);
    assert_int_equal(c.shape.item_kind, NF_KIND_VOLUME);
    assert_int_equal(c.shape.n_items, 3);
    /* the largest item: sub-01 with 3 volumes */
    assert_int_equal(c.shape.dim[0], NX);
    assert_int_equal(c.shape.dim[1], NY);
    assert_int_equal(c.shape.dim[2], NZ);
    assert_int_equal(c.shape.dim[3], 3);

    assert_int_equal(c.run_rc, 0);
    const struct nf_value *coll = c.out[0];
    assert_non_null(coll);
    assert_int_equal(coll->kind, NF_KIND_COLLECTION);
    assert_int_equal(coll->u.coll.n, 3);
    const char *labels[] = { "sub-01", "sub-02", "sub-10" };
    const char *files[] = { "/sub-01_task-movie_bold.nii.gz", "/sub-02_task-movie_bold.nii.gz",
                            "/sub-10_task-movie_bold.nii.gz" };
    const int64_t nts[] = { 3, 2, 1 };
    for (size_t i = 0; i < 3; i++) {
        struct nf_value *item = coll->u.coll.items[i];
        assert_int_equal(item->kind, NF_KIND_VOLUME);
        assert_string_equal(item->label, labels[i]);
        assert_non_null(item->path);
        assert_true(ends_with(item->path, files[i]));
        assert_true(item->u.vol.lazy);
        assert_null(item->u.vol.data);
        assert_int_equal(item->u.vol.nt, nts[i]);
        assert_int_equal(item->u.vol.grid.dim[0], NX);
    }

    /* A lazy item reads back what was written for its subject. */
    struct nf_error err = { 0 };
    struct nf_value *full = nf_value_materialize(coll->u.coll.items[1], &err);
    assert_non_null(full);
    assert_non_null(full->u.vol.data);
    for (int64_t t = 0; t < 2; t++)
        for (int64_t e = 0; e < NVOX; e++)
            assert_true(full->u.vol.data[t * NVOX + e] == image_value(2, t, e));
    nf_value_unref(full);
    call_release(&c);
}

static void test_single_nifti(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "sub-02_task-movie_bold.nii.gz", NULL, false);
    assert_int_equal(c.resolve_rc, 0);
    assert_int_equal(c.shape.kind, NF_KIND_VOLUME);
    assert_int_equal(c.shape.dim[0], NX);
    assert_int_equal(c.shape.dim[1], NY);
    assert_int_equal(c.shape.dim[2], NZ);
    assert_int_equal(c.shape.dim[3], 2);

    assert_int_equal(c.run_rc, 0);
    const struct nf_value *v = c.out[0];
    assert_int_equal(v->kind, NF_KIND_VOLUME);
    assert_false(v->u.vol.lazy);
    assert_string_equal(v->path, c.params.path);
    assert_int_equal(v->u.vol.nt, 2);
    for (int64_t t = 0; t < 2; t++)
        for (int64_t e = 0; e < NVOX; e++)
            assert_true(v->u.vol.data[t * NVOX + e] == image_value(2, t, e));
    call_release(&c);
}

static void test_glob_tables(void **state)
{
    (void)state;
    const char *const columns[] = { "onset", NULL };
    struct load_call c;
    call_load(&c, "*_events.tsv", columns, false);
    assert_int_equal(c.resolve_rc, 0);
    assert_int_equal(c.shape.kind, NF_KIND_COLLECTION);
    assert_int_equal(c.shape.item_kind, NF_KIND_TABLE);
    assert_int_equal(c.shape.n_items, 2);
    assert_int_equal(c.shape.dim[0], 3);   /* b_events has the most rows */
    assert_int_equal(c.shape.dim[1], 1);

    assert_int_equal(c.run_rc, 0);
    const struct nf_collection *coll = &c.out[0]->u.coll;
    assert_int_equal(coll->n, 2);
    /* no subject in the names: stems, in sorted order */
    assert_string_equal(coll->items[0]->label, "a_events");
    assert_string_equal(coll->items[1]->label, "b_events");
    const struct nf_table *a = &coll->items[0]->u.tab, *b = &coll->items[1]->u.tab;
    assert_int_equal(a->n_rows, 1);
    assert_int_equal(a->n_cols, 1);
    assert_string_equal(a->cols[0].name, "onset");
    assert_true(a->cols[0].num[0] == 1.5);
    assert_int_equal(b->n_rows, 3);
    assert_true(b->cols[0].num[2] == 20.0);
    call_release(&c);
}

static void test_single_table_columns(void **state)
{
    (void)state;
    const char *const columns[] = { "trial_type", "onset", NULL };
    struct load_call c;
    call_load(&c, "b_events.tsv", columns, false);
    assert_int_equal(c.resolve_rc, 0);
    assert_int_equal(c.shape.kind, NF_KIND_TABLE);
    assert_int_equal(c.shape.dim[0], 3);
    assert_int_equal(c.shape.dim[1], 2);
    assert_int_equal(c.run_rc, 0);
    const struct nf_table *t = &c.out[0]->u.tab;
    assert_int_equal(t->n_cols, 2);
    assert_string_equal(t->cols[0].name, "trial_type");
    assert_false(t->cols[0].numeric);
    assert_string_equal(t->cols[0].str[1], "house");
    assert_string_equal(t->cols[1].name, "onset");
    assert_true(t->cols[1].num[1] == 10.0);
    call_release(&c);
}

static void test_npy(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "weights.npy", NULL, false);
    assert_int_equal(c.resolve_rc, 0);
    assert_int_equal(c.shape.kind, NF_KIND_MATRIX);
    assert_int_equal(c.shape.dim[0], 2);
    assert_int_equal(c.shape.dim[1], 3);
    assert_int_equal(c.run_rc, 0);
    const struct nf_matrix *m = &c.out[0]->u.mat;
    assert_int_equal(m->rows, 2);
    assert_int_equal(m->cols, 3);
    assert_true(m->data[2] == 3.25f);
    assert_true(m->data[5] == -6.5f);
    call_release(&c);
}

/* Two runs of one subject: the subject cannot tell them apart, stems can. */
static void test_duplicate_subjects_use_stems(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "runs/sub-01_run-*_events.tsv", NULL, false);
    assert_int_equal(c.resolve_rc, 0);
    assert_int_equal(c.run_rc, 0);
    const struct nf_collection *coll = &c.out[0]->u.coll;
    assert_int_equal(coll->n, 2);
    assert_string_equal(coll->items[0]->label, "sub-01_run-1_events");
    assert_string_equal(coll->items[1]->label, "sub-01_run-2_events");
    call_release(&c);
}

/* BIDS folders: the subject is in the path, not the file name. */
static void test_subject_from_folder(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "sub-*/anat/T1w.nii.gz", NULL, false);
    assert_int_equal(c.resolve_rc, 0);
    assert_int_equal(c.run_rc, 0);
    const struct nf_collection *coll = &c.out[0]->u.coll;
    assert_int_equal(coll->n, 2);
    assert_string_equal(coll->items[0]->label, "sub-03");
    assert_string_equal(coll->items[1]->label, "sub-04");
    call_release(&c);
}

/* One match still gives a collection: downstream mapping must not depend on
 * how many subjects happen to be on disk. */
static void test_glob_one_match_is_collection(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "sub-1?_task-movie_bold.nii.gz", NULL, false);
    assert_int_equal(c.resolve_rc, 0);
    assert_int_equal(c.shape.kind, NF_KIND_COLLECTION);
    assert_int_equal(c.shape.n_items, 1);
    assert_int_equal(c.run_rc, 0);
    assert_int_equal(c.out[0]->kind, NF_KIND_COLLECTION);
    assert_int_equal(c.out[0]->u.coll.n, 1);
    assert_string_equal(c.out[0]->u.coll.items[0]->label, "sub-10");
    call_release(&c);
}

static void test_missing_file(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "sub-99_task-movie_bold.nii.gz", NULL, true);
    assert_true(c.resolve_rc < 0);
    assert_error_on_node(&c.resolve_err, NF_EINVAL, c.params.path);
    assert_non_null(strstr(c.resolve_err.msg, "does not exist"));
    assert_int_equal(nf_err_exit_status(c.resolve_err.code), 2);   /* validate/plan: exit 2 */
    assert_true(c.run_rc < 0);
    assert_non_null(strstr(c.run_err.msg, c.params.path));
    assert_null(c.out[0]);
    call_release(&c);
}

static void test_glob_without_match(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "sub-*_task-rest_bold.nii.gz", NULL, true);
    char want[1024];
    snprintf(want, sizeof want, "no files match '%s'", c.params.path);
    assert_error_on_node(&c.resolve_err, NF_EINVAL, want);
    assert_true(c.run_rc < 0);
    assert_non_null(strstr(c.run_err.msg, want));
    assert_null(c.out[0]);
    call_release(&c);
}

static void test_unknown_extension(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "notes.foo", NULL, true);
    assert_error_on_node(&c.resolve_err, NF_EINVAL, c.params.path);
    assert_non_null(strstr(c.resolve_err.msg, ".nii.gz"));
    assert_non_null(strstr(c.resolve_err.msg, ".npy"));
    assert_true(c.run_rc < 0);
    assert_null(c.out[0]);
    call_release(&c);
}

static void test_mixed_kinds(void **state)
{
    (void)state;
    struct load_call c;
    call_load(&c, "[as]*", NULL, true);   /* a_events.tsv and sub-*.nii.gz */
    assert_error_on_node(&c.resolve_err, NF_EINVAL, "different kinds");
    assert_non_null(strstr(c.resolve_err.msg, "a_events.tsv"));
    assert_true(c.run_rc < 0);
    assert_null(c.out[0]);
    call_release(&c);
}

static void test_columns_need_a_table(void **state)
{
    (void)state;
    const char *const columns[] = { "onset", NULL };
    struct load_call c;
    call_load(&c, "sub-01_task-movie_bold.nii.gz", columns, true);
    assert_error_on_node(&c.resolve_err, NF_EINVAL, "'columns'");
    assert_true(c.run_rc < 0);
    assert_null(c.out[0]);
    call_release(&c);
}

static void test_unknown_column(void **state)
{
    (void)state;
    const char *const columns[] = { "amplitude", NULL };
    struct load_call c;
    call_load(&c, "b_events.tsv", columns, true);
    assert_true(c.resolve_rc < 0);
    assert_string_equal(c.resolve_err.node, node_name);
    assert_non_null(strstr(c.resolve_err.msg, "amplitude"));
    assert_true(c.run_rc < 0);
    assert_null(c.out[0]);
    call_release(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glob_nifti_collection),
        cmocka_unit_test(test_single_nifti),
        cmocka_unit_test(test_glob_tables),
        cmocka_unit_test(test_single_table_columns),
        cmocka_unit_test(test_npy),
        cmocka_unit_test(test_duplicate_subjects_use_stems),
        cmocka_unit_test(test_subject_from_folder),
        cmocka_unit_test(test_glob_one_match_is_collection),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_glob_without_match),
        cmocka_unit_test(test_unknown_extension),
        cmocka_unit_test(test_mixed_kinds),
        cmocka_unit_test(test_columns_need_a_table),
        cmocka_unit_test(test_unknown_column),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
