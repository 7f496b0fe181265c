/* test_group_design.c — the `group_design` node against designs built here
 * directly from the participants' values.
 *
 * The participants are a small array of structs; the test writes them as a
 * participants.tsv (rows in another order than the maps', one id without
 * "sub-", an n/a), reads it with the table reader, and builds each expected
 * design straight from the structs by subject: the mean of the maps'
 * subjects' ages, 0/1 per level by string comparison. Checked: numeric columns
 * demeaned and not, categories with an intercept (first sorted level dropped)
 * and without (the first category keeps every level), a numeric column forced
 * categorical, labels with entities after the subject, the node's run on a
 * collection and on a matrix with named rows, contrasts over the bracketed
 * names, and each error: a subject not in the table, n/a in a used column, a
 * participant twice, one level, an unknown column, a label without a subject,
 * a matrix without row names; and out of memory at every allocation in turn.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node.h"
#include "core/util.h"
#include "io/io.h"
#include "glm/glm.h"
#include "group_design/group_design.h"

struct person { const char *id; double age; const char *sex, *group; int site; };

/* The file's rows, in file order; sub-04 is written without "sub-", sub-02's age is n/a. */
static const struct person people[] = {
    { "sub-03", 30, "F", "patient", 1 },
    { "sub-01", 25, "M", "control", 2 },
    { "04", 41, "F", "control", 1 },
    { "sub-02", NAN, "M", "patient", 2 },
    { "sub-05", 36, "M", "patient", 1 },
    { "sub-06", 28, "F", "patient", 2 },
};
#define N_PEOPLE (sizeof people / sizeof people[0])

static char *write_tsv(const char *text)
{
    char *path = strdup("/tmp/nlflow-test-participants-XXXXXX.tsv");
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static struct nf_value *participants(void)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "participant_id\tage\tsex\tgroup\tsite\n");
    for (size_t i = 0; i < N_PEOPLE; i++) {
        char age[32];
        if (isnan(people[i].age))
            snprintf(age, sizeof age, "n/a");
        else
            snprintf(age, sizeof age, "%g", people[i].age);
        nf_strbuf_addf(&sb, "%s\t%s\t%s\t%s\t%d\n", people[i].id, age, people[i].sex, people[i].group,
                       people[i].site);
    }
    char *path = write_tsv(sb.buf);
    nf_strbuf_release(&sb);
    struct nf_error err = { 0 };
    struct nf_value *t = nf_table_read(path, NULL, 0, &err);
    assert_non_null(t);
    unlink(path);
    free(path);
    return t;
}

/* The person a map's label belongs to, found by comparing the digits. */
static const struct person *person_of(const char *label)
{
    for (size_t i = 0; i < N_PEOPLE; i++) {
        const char *digits = strncmp(people[i].id, "sub-", 4) == 0 ? people[i].id + 4 : people[i].id;
        if (strncmp(label + 4, digits, strlen(digits)) == 0 && !isalnum((unsigned char)label[4 + strlen(digits)]))
            return &people[i];
    }
    fail_msg("no person for %s", label);
    return NULL;
}

/* The maps: another order than the file's, entities after the subject. */
static const char *const maps[] = { "sub-05_task-x_space-MNI", "sub-03_task-x_space-MNI", "sub-04_task-x",
                                    "sub-01", "sub-06_task-x" };
#define N_MAPS (sizeof maps / sizeof maps[0])

struct want { const char *name; double v[N_MAPS]; };

static void check_design(const struct nf_value *d, const struct want *w, size_t k)
{
    assert_int_equal(d->kind, NF_KIND_TABLE);
    assert_int_equal(d->u.tab.n_rows, N_MAPS);
    assert_int_equal(d->u.tab.n_cols, k);
    for (size_t j = 0; j < k; j++) {
        const struct nf_column *c = &d->u.tab.cols[j];
        assert_string_equal(c->name, w[j].name);
        assert_true(c->numeric);
        for (size_t i = 0; i < N_MAPS; i++)
            if (fabs(c->num[i] - w[j].v[i]) > 1e-12)
                fail_msg("column %s, map %s: %.17g, expected %.17g", w[j].name, maps[i], c->num[i], w[j].v[i]);
    }
}

static struct group_design_params params(const char **columns, size_t n, const char **categorical, size_t nc,
                                         bool demean, bool intercept)
{
    return (struct group_design_params){ .columns = { n, (char **)columns },
                                         .categorical = { nc, (char **)categorical },
                                         .demean = demean, .intercept = intercept,
                                         .id_column = (char *)"participant_id" };
}

static struct nf_value *build(const struct group_design_params *p, const struct nf_value *t, const char *const *labels,
                              size_t n, int want_rc, struct nf_error *err)
{
    struct nf_value *d = NULL;
    char *summary = NULL;
    memset(err, 0, sizeof *err);
    int rc = group_design_build(p, &t->u.tab, "participants.tsv", labels, n, &d, &summary, err);
    if (rc != want_rc)
        fail_msg("rc %d (want %d): %s", rc, want_rc, err->msg);
    if (rc == 0) {
        assert_non_null(summary);
        free(summary);
    } else {
        assert_null(d);
    }
    return d;
}

static void test_demeaned_with_intercept(void **state)
{
    (void)state;
    struct nf_value *t = participants();
    const char *cols[] = { "age", "sex", "group" };
    struct group_design_params p = params(cols, 3, NULL, 0, true, true);
    struct nf_error err;
    struct nf_value *d = build(&p, t, maps, N_MAPS, 0, &err);
    struct want w[4] = { { "intercept", { 0 } }, { "age", { 0 } }, { "sex[M]", { 0 } }, { "group[patient]", { 0 } } };
    double mean = 0;
    for (size_t i = 0; i < N_MAPS; i++)
        mean += person_of(maps[i])->age / N_MAPS;
    for (size_t i = 0; i < N_MAPS; i++) {
        const struct person *q = person_of(maps[i]);
        w[0].v[i] = 1;
        w[1].v[i] = q->age - mean;
        w[2].v[i] = strcmp(q->sex, "M") == 0;          /* F sorts first: the reference */
        w[3].v[i] = strcmp(q->group, "patient") == 0;  /* control sorts first */
    }
    check_design(d, w, 4);
    nf_value_unref(d);
    nf_value_unref(t);
}

static void test_raw_without_intercept(void **state)
{
    (void)state;
    struct nf_value *t = participants();
    const char *cols[] = { "sex", "group", "age" };
    struct group_design_params p = params(cols, 3, NULL, 0, false, false);
    struct nf_error err;
    struct nf_value *d = build(&p, t, maps, N_MAPS, 0, &err);
    struct want w[4] = { { "sex[F]", { 0 } }, { "sex[M]", { 0 } }, { "group[patient]", { 0 } }, { "age", { 0 } } };
    for (size_t i = 0; i < N_MAPS; i++) {
        const struct person *q = person_of(maps[i]);
        w[0].v[i] = strcmp(q->sex, "F") == 0;
        w[1].v[i] = strcmp(q->sex, "M") == 0;
        w[2].v[i] = strcmp(q->group, "patient") == 0;
        w[3].v[i] = q->age;
    }
    check_design(d, w, 4);
    nf_value_unref(d);
    nf_value_unref(t);
}

static void test_numeric_categorical(void **state)
{
    (void)state;
    struct nf_value *t = participants();
    const char *cols[] = { "site", "age" }, *cat[] = { "site" };
    struct group_design_params p = params(cols, 2, cat, 1, true, true);
    struct nf_error err;
    struct nf_value *d = build(&p, t, maps, N_MAPS, 0, &err);
    struct want w[3] = { { "intercept", { 0 } }, { "site[2]", { 0 } }, { "age", { 0 } } };
    double mean = 0;
    for (size_t i = 0; i < N_MAPS; i++)
        mean += person_of(maps[i])->age / N_MAPS;
    for (size_t i = 0; i < N_MAPS; i++) {
        const struct person *q = person_of(maps[i]);
        w[0].v[i] = 1;
        w[1].v[i] = q->site == 2;
        w[2].v[i] = q->age - mean;
    }
    check_design(d, w, 3);
    /* without `categorical` the site is a number, demeaned */
    p = params(cols, 2, NULL, 0, true, true);
    nf_value_unref(d);
    d = build(&p, t, maps, N_MAPS, 0, &err);
    assert_string_equal(d->u.tab.cols[1].name, "site");
    double site_mean = 0;
    for (size_t i = 0; i < N_MAPS; i++)
        site_mean += person_of(maps[i])->site / (double)N_MAPS;
    for (size_t i = 0; i < N_MAPS; i++)
        assert_true(fabs(d->u.tab.cols[1].num[i] - (person_of(maps[i])->site - site_mean)) < 1e-12);
    nf_value_unref(d);
    nf_value_unref(t);
}

/* Contrasts of permute's test: glm name the indicator columns. */
static void test_contrast_over_levels(void **state)
{
    (void)state;
    const char *cols[] = { "intercept", "age", "sex[M]", "group[patient]" };
    double w[4];
    char why[256];
    assert_int_equal(glm_contrast_weights("group[patient] - 0.5*sex[M]", cols, 4, w, why, sizeof why), 0);
    assert_true(w[0] == 0 && w[1] == 0 && w[2] == -0.5 && w[3] == 1);
    assert_int_equal(glm_contrast_weights("group[control]", cols, 4, w, why, sizeof why), NF_EINVAL);
    assert_non_null(strstr(why, "'group[control]' is not a column"));
    assert_int_equal(glm_contrast_weights("group[patient", cols, 4, w, why, sizeof why), NF_EINVAL);
}

static void expect_error(const struct group_design_params *p, const struct nf_value *t, const char *const *labels,
                         size_t n, int code, const char *const *parts)
{
    struct nf_error err;
    build(p, t, labels, n, code, &err);
    for (size_t i = 0; parts[i]; i++)
        if (!strstr(err.msg, parts[i]))
            fail_msg("'%s' not in the message: %s", parts[i], err.msg);
}

static void test_errors(void **state)
{
    (void)state;
    struct nf_value *t = participants();
    const char *cols[] = { "age", "sex" };
    struct group_design_params p = params(cols, 2, NULL, 0, true, true);
    const char *const missing[] = { "sub-01", "sub-07_task-x" };
    expect_error(&p, t, missing, 2, NF_EDATA,
                 (const char *const[]){ "sub-07 (map 2, 'sub-07_task-x') is not in participants.tsv", "sub-01, ", NULL });
    const char *const with_na[] = { "sub-01", "sub-02", "sub-03" };
    expect_error(&p, t, with_na, 3, NF_EDATA,
                 (const char *const[]){ "column 'age' is n/a for sub-02 (map 2, row 4 of participants.tsv)", NULL });
    const char *const men[] = { "sub-01", "sub-05" };
    expect_error(&p, t, men, 2, NF_EDATA,
                 (const char *const[]){ "column 'sex' has a single level ('M') among the 2 subjects", NULL });
    const char *const unnamed[] = { "sub-01", "beta_3" };
    expect_error(&p, t, unnamed, 2, NF_EDATA, (const char *const[]){ "map 2 is labelled 'beta_3'", NULL });
    const char *bad_cols[] = { "age", "handedness" };
    struct group_design_params q = params(bad_cols, 2, NULL, 0, true, true);
    expect_error(&q, t, maps, N_MAPS, NF_EUSAGE,
                 (const char *const[]){ "no column 'handedness' (columns: participant_id, age, sex, group, site)", NULL });
    /* a constant number: all zeros once demeaned */
    const char *site_only[] = { "site" };
    q = params(site_only, 1, NULL, 0, true, false);
    const char *const ones[] = { "sub-03", "sub-05" };
    expect_error(&q, t, ones, 2, NF_EDATA, (const char *const[]){ "column 'site' is 1 for every one", NULL });
    nf_value_unref(t);

    char *path = write_tsv("participant_id\tage\nsub-01\t20\nsub-02\t30\nsub-01\t25\n");
    struct nf_error err = { 0 };
    t = nf_table_read(path, NULL, 0, &err);
    unlink(path);
    free(path);
    const char *age[] = { "age" };
    q = params(age, 1, NULL, 0, true, true);
    expect_error(&q, t, missing, 1, NF_EDATA,
                 (const char *const[]){ "participant 'sub-01' appears twice in participants.tsv (rows 1 and 3)", NULL });
    nf_value_unref(t);
}

/* The node's run: a collection of labelled maps and a matrix with named rows
 * give the same design; a matrix without row names is an error. */
static void test_run(void **state)
{
    (void)state;
    struct nf_value *t = participants();
    struct nf_error err = { 0 };
    struct nf_value *coll = nf_value_new_collection(N_MAPS, &err), *m = nf_value_new_matrix(N_MAPS, 3, NULL, &err);
    for (size_t i = 0; i < N_MAPS; i++) {
        coll->u.coll.items[i] = nf_value_new_matrix(1, 3, NULL, &err);
        nf_value_set_label(coll->u.coll.items[i], maps[i]);
    }
    assert_int_equal(nf_matrix_set_row_names(m, maps, &err), 0);
    const char *cols[] = { "age", "group" };
    struct group_design_params p = params(cols, 2, NULL, 0, true, true);
    struct nf_value *direct = build(&p, t, maps, N_MAPS, 0, &err);
    struct nf_value *inputs[2][GROUP_DESIGN_N_IN] = { { t, coll }, { t, m } };
    for (int k = 0; k < 2; k++) {
        struct nf_value *out[GROUP_DESIGN_N_OUT] = { 0 };
        struct nf_run run = { .params = &p, .in = inputs[k], .out = out, .err = &err };
        assert_int_equal(nf_node_group_design.run_cpu(&run), 0);
        assert_int_equal(out[0]->u.tab.n_cols, direct->u.tab.n_cols);
        for (int64_t j = 0; j < direct->u.tab.n_cols; j++) {
            assert_string_equal(out[0]->u.tab.cols[j].name, direct->u.tab.cols[j].name);
            assert_memory_equal(out[0]->u.tab.cols[j].num, direct->u.tab.cols[j].num, N_MAPS * sizeof(double));
        }
        nf_value_unref(out[0]);
    }
    struct nf_value *plain = nf_value_new_matrix(N_MAPS, 3, NULL, &err);
    struct nf_value *in[GROUP_DESIGN_N_IN] = { t, plain }, *out[GROUP_DESIGN_N_OUT] = { 0 };
    struct nf_run run = { .params = &p, .in = in, .out = out, .err = &err };
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_node_group_design.run_cpu(&run), NF_EDATA);
    assert_non_null(strstr(err.msg, "rows have no names"));
    assert_null(out[0]);
    nf_value_unref(plain);
    nf_value_unref(direct);
    nf_value_unref(coll);
    nf_value_unref(m);
    nf_value_unref(t);
}

/* At plan time the design's columns come from every participant with the
 * used cells filled in (sub-02's age is n/a: left out), so that permute
 * checks contrasts before anything runs; a participant twice is an error
 * then already. */
static void test_planned_columns(void **state)
{
    (void)state;
    char *path = write_tsv("participant_id\tage\tsex\tgroup\nsub-01\t20\tM\tb\nsub-02\tn/a\tF\tc\n"
                           "sub-03\t30\tF\ta\n");
    const char *cols[] = { "age", "sex", "group" };
    struct group_design_params p = params(cols, 3, NULL, 0, true, true);
    struct nf_shape in[GROUP_DESIGN_N_IN] = {
        { .kind = NF_KIND_TABLE, .dim = { 3, 4 }, .path = path, .col_names = "participant_id\nage\nsex\ngroup\n" },
        { .kind = NF_KIND_COLLECTION, .item_kind = NF_KIND_MATRIX, .n_items = 2, .dim = { 1, 10 } } };
    struct nf_shape out[GROUP_DESIGN_N_OUT];
    struct nf_error err = { 0 };
    struct nf_resolve r = { .params = &p, .in = in, .out = out, .err = &err };
    assert_int_equal(nf_node_group_design.resolve(&r), 0);
    assert_int_equal(out[0].kind, NF_KIND_TABLE);
    assert_int_equal(out[0].dim[0], 2);
    assert_int_equal(out[0].dim[1], 4);
    assert_string_equal(out[0].col_names, "intercept\nage\nsex[M]\ngroup[b]\n");
    /* an unknown column is found from the header */
    const char *bad[] = { "age", "site" };
    struct group_design_params q = params(bad, 2, NULL, 0, true, true);
    r.params = &q;
    assert_int_equal(nf_node_group_design.resolve(&r), NF_EUSAGE);
    assert_non_null(strstr(err.msg, "has no column 'site'"));
    unlink(path);
    free(path);
    path = write_tsv("participant_id\tage\nsub-01\t20\nsub-01\t30\n");
    in[0].path = path;
    in[0].col_names = "participant_id\nage\n";
    r.params = &p;
    const char *age[] = { "age" };
    p = params(age, 1, NULL, 0, true, true);
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_node_group_design.resolve(&r), NF_EDATA);
    assert_non_null(strstr(err.msg, "participant 'sub-01' appears twice"));
    unlink(path);
    free(path);
}

/* Out of memory at every allocation in turn: NF_ENOMEM and no design (and,
 * under valgrind or ASan, no leak), until the build succeeds. */
static void test_out_of_memory(void **state)
{
    (void)state;
    struct nf_value *t = participants();
    const char *cols[] = { "age", "sex", "group" };
    struct group_design_params p = params(cols, 3, NULL, 0, true, true);
    int rc = NF_ENOMEM;
    for (long k = 1; k < 10000 && rc == NF_ENOMEM; k++) {
        struct nf_value *d = NULL;
        char *summary = NULL;
        struct nf_error err = { 0 };
        nf_alloc_fail_at(k, false);
        rc = group_design_build(&p, &t->u.tab, "participants.tsv", maps, N_MAPS, &d, &summary, &err);
        nf_alloc_fail_at(0, false);
        if (rc == NF_ENOMEM)
            assert_null(d);
        else
            assert_int_equal(rc, 0);
        nf_value_unref(d);
        free(summary);
    }
    assert_int_equal(rc, 0);
    nf_value_unref(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demeaned_with_intercept),
        cmocka_unit_test(test_raw_without_intercept),
        cmocka_unit_test(test_numeric_categorical),
        cmocka_unit_test(test_contrast_over_levels),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_run),
        cmocka_unit_test(test_planned_columns),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
