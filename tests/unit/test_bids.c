/* test_bids.c — the BIDS walk behind the `bids` node (nodes/bids/bids_files.c)
 * on small data sets made here: entity parsing, the subject/session/run
 * filters, sidecar inheritance (top level, subject, session and file level:
 * the nearest RepetitionTime wins; two at one level are an error), the JSON
 * reader's located errors, and a scan with fMRIPrep derivatives (which files
 * each run gets, labels, what is missing). Then the node itself: a run
 * without events when `require` lists them, a run without a TR, and no
 * matching run are errors naming what is wrong; bold items carry the
 * sidecar's TR.
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

#include "node.h"
#include "io/io.h"
#include "core/util.h"
#include "bids/bids.h"
#include "bids/bids_internal.h"

static char root[256];

static void put(const char *rel, const char *text)
{
    char *path = nf_path_join(root, rel), *dir = nf_path_dirname(path);
    struct nf_error err = { 0 };
    assert_int_equal(nf_mkdirs(dir, &err), 0);
    assert_int_equal(nf_write_file_atomic(path, text, strlen(text), &err), 0);
    free(path);
    free(dir);
}

/* A 2x2x2 series of n frames with header TR tr (0: none). */
static void put_bold(const char *rel, int64_t n, double tr)
{
    struct nf_grid g = { .dim = { 2, 2, 2 }, .pixdim = { 3, 3, 3 } };
    for (int a = 0; a < 3; a++)
        g.affine[a][a] = 3;
    g.affine[3][3] = 1;
    float data[64] = { 0 };
    for (int i = 0; i < 64; i++)
        data[i] = (float)i;
    char *path = nf_path_join(root, rel), *dir = nf_path_dirname(path);
    struct nf_error err = { 0 };
    assert_int_equal(nf_mkdirs(dir, &err), 0);
    assert_true(n <= 8);
    assert_int_equal(nf_nifti_write_series(path, &g, n, data, tr, "test", &err), 0);
    free(path);
    free(dir);
}

static char *at(const char *rel)
{
    return nf_path_join(root, rel);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/nlflow-test-bids-XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nf_remove_tree(root);
    return 0;
}

/* ---- names and filters ---- */

static void test_name_parse(void **state)
{
    (void)state;
    struct bids_name n;
    assert_int_equal(bids_name_parse("a/b/sub-01_ses-pre_task-faces_run-2_space-MNI_desc-preproc_bold.nii.gz", &n), 1);
    assert_int_equal(n.n, 6);
    assert_string_equal(n.key[0], "sub");
    assert_string_equal(n.value[0], "01");
    assert_string_equal(bids_name_get(&n, "ses"), "pre");
    assert_string_equal(bids_name_get(&n, "run"), "2");
    assert_string_equal(bids_name_get(&n, "desc"), "preproc");
    assert_null(bids_name_get(&n, "acq"));
    assert_string_equal(n.suffix, "bold");
    assert_string_equal(n.ext, ".nii.gz");
    bids_name_release(&n);
    assert_int_equal(bids_name_parse("task-faces_bold.json", &n), 1);
    assert_int_equal(n.n, 1);
    assert_string_equal(n.suffix, "bold");
    assert_string_equal(n.ext, ".json");
    bids_name_release(&n);
    /* not entity names */
    assert_int_equal(bids_name_parse("dataset_description.json", &n), 0);
    assert_int_equal(bids_name_parse("bold.nii.gz", &n), 0);
    assert_int_equal(bids_name_parse("sub-01__bold.nii", &n), 0);
    assert_int_equal(bids_name_parse("sub-0.1_bold.nii", &n), 0);
}

static void test_filters(void **state)
{
    (void)state;
    char *v[] = { "sub-01", "1*", "3" };
    struct nf_str_list l = { 3, v };
    assert_true(bids_filter_selects(&l, "sub", "01"));
    assert_true(bids_filter_selects(&l, "sub", "12"));
    assert_true(bids_filter_selects(&l, "sub", "03"));   /* numbers: 3 is 03 */
    assert_false(bids_filter_selects(&l, "sub", "02"));
    assert_false(bids_filter_selects(&l, "sub", "ab"));
    struct nf_str_list none = { 0, NULL };
    assert_true(bids_filter_selects(&none, "run", "7"));
    assert_true(bids_filter_selects(NULL, "run", "7"));
}

/* ---- sidecars ---- */

static void test_inheritance_nearest_wins(void **state)
{
    (void)state;
    put("inh/task-x_bold.json", "{\"RepetitionTime\": 2.5, \"TaskName\": \"x\"}");
    put("inh/sub-01/sub-01_task-x_bold.json", "{\"Other\": [1, {\"a\": null}]}");
    put("inh/sub-01/ses-1/sub-01_ses-1_task-x_bold.json", "{\"RepetitionTime\": 1.5}");
    put("inh/sub-01/ses-1/func/sub-01_ses-1_task-x_run-1_bold.json", "{\"RepetitionTime\": 0.8}");
    /* do not apply: other task, other run, other suffix */
    put("inh/task-y_bold.json", "{\"RepetitionTime\": 9}");
    put("inh/sub-01/ses-1/func/sub-01_ses-1_task-x_run-2_bold.json", "{\"RepetitionTime\": 9}");
    put("inh/sub-01/ses-1/func/sub-01_ses-1_task-x_run-1_events.json", "{\"RepetitionTime\": 9}");
    char *r = at("inh"), *data = at("inh/sub-01/ses-1/func/sub-01_ses-1_task-x_run-1_bold.nii.gz");
    char **found = NULL;
    size_t n = 0;
    struct nf_error err = { 0 };
    assert_int_equal(bids_inherited(r, data, "bold", ".json", &found, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_non_null(strstr(found[0], "inh/task-x_bold.json"));
    assert_non_null(strstr(found[1], "sub-01/sub-01_task-x_bold.json"));
    assert_non_null(strstr(found[2], "ses-1/sub-01_ses-1_task-x_bold.json"));
    assert_non_null(strstr(found[3], "func/sub-01_ses-1_task-x_run-1_bold.json"));
    for (size_t i = 0; i < n; i++)
        free(found[i]);
    free(found);

    /* the scan: TR from the file-level sidecar; run 2 from the session level */
    put_bold("inh/sub-01/ses-1/func/sub-01_ses-1_task-x_run-1_bold.nii.gz", 4, 0);
    put_bold("inh/sub-01/ses-1/func/sub-01_ses-1_task-x_run-2_bold.nii.gz", 4, 0);
    put("inh/sub-01/ses-1/func/sub-01_ses-1_task-x_run-2_bold.json", "{\"Other\": 1}");
    struct bids_query q = { .root = r };
    struct bids_scan s;
    assert_int_equal(bids_scan(&q, &s, &err), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.items[0].label, "sub-01_ses-1_task-x_run-1");
    assert_string_equal(s.items[1].label, "sub-01_ses-1_task-x_run-2");
    assert_true(s.items[0].tr == 0.8);
    assert_true(s.items[1].tr == 1.5);
    assert_non_null(strstr(s.items[1].tr_source, "ses-1/sub-01_ses-1_task-x_bold.json"));
    assert_null(s.items[0].events);
    assert_null(s.items[0].mask);
    bids_scan_release(&s);

    /* two sidecars at one level apply: an error naming both */
    put("inh/sub-01/ses-1/func/sub-01_task-x_bold.json", "{}");
    assert_true(bids_inherited(r, data, "bold", ".json", &found, &n, &err) < 0);
    assert_non_null(strstr(err.msg, "sub-01_task-x_bold.json"));
    assert_non_null(strstr(err.msg, "sub-01_ses-1_task-x_run-1_bold.json"));
    free(r);
    free(data);
}

static void test_json_errors(void **state)
{
    (void)state;
    static const struct { const char *text, *where, *what; } bad[] = {
        { "{\"RepetitionTime\": 2,}", ":1:22:", "expected a string" },
        { "{\n  \"RepetitionTime\" 2\n}", ":2:20:", "expected ':'" },
        { "[1, 2]", ":1:1:", "must be a JSON object" },
        { "{\"a\": tru}", ":1:7:", "expected a value" },
        { "{\"a\": \"x}", ":1:", "unterminated string" },
        { "{} x", ":1:4:", "text after" },
        { "{\"RepetitionTime\": \"2\"}", "", "is not a number" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put("bad.json", bad[i].text);
        char *p = at("bad.json");
        double v;
        bool found;
        struct nf_error err = { 0 };
        assert_true(bids_json_number(p, "RepetitionTime", &v, &found, &err) < 0);
        assert_int_equal(err.code, NF_EDATA);
        assert_non_null(strstr(err.msg, p));
        if (!strstr(err.msg, bad[i].where) || !strstr(err.msg, bad[i].what))
            fail_msg("case %zu: '%s'", i, err.msg);
        free(p);
    }
    put("good.json", " {\"x\": {\"RepetitionTime\": 7}, \"RepetitionTime\": 1.25e0, \"s\": \"a\\\"b\"} ");
    char *p = at("good.json");
    double v = 0;
    bool found = false;
    struct nf_error err = { 0 };
    assert_int_equal(bids_json_number(p, "RepetitionTime", &v, &found, &err), 0);
    assert_true(found);
    assert_true(v == 1.25);   /* the top-level key, not the nested one */
    free(p);
}

/* ---- a data set with fMRIPrep derivatives ---- */

#define DER "ds/derivatives/fmriprep/"

static void make_dataset(void)
{
    put("ds/dataset_description.json", "{\"Name\": \"t\", \"BIDSVersion\": \"1.8.0\"}");
    put("ds/task-faces_bold.json", "{\"TaskName\": \"faces\", \"RepetitionTime\": 2.0}");
    static const char *const subs[] = { "01", "02", "10" };
    for (int s = 0; s < 3; s++)
        for (int r = 1; r <= 2; r++) {
            char rel[512];
            snprintf(rel, sizeof rel, "ds/sub-%s/func/sub-%s_task-faces_run-%d_bold.nii.gz", subs[s], subs[s], r);
            put_bold(rel, 4, 2.0);
            if (!(s == 1 && r == 2)) {   /* sub-02 run 2 has no events */
                snprintf(rel, sizeof rel, "ds/sub-%s/func/sub-%s_task-faces_run-%d_events.tsv", subs[s], subs[s], r);
                put(rel, "onset\tduration\ttrial_type\n1\t2\tfaces\n5\t2\thouses\n");
            }
            static const char *const spaces[] = { "MNI152NLin2009cAsym", "T1w" };
            for (int sp = 0; sp < 2; sp++) {
                snprintf(rel, sizeof rel, DER "sub-%s/func/sub-%s_task-faces_run-%d_space-%s_desc-preproc_bold.nii.gz",
                         subs[s], subs[s], r, spaces[sp]);
                put_bold(rel, 4, 2.0);
                snprintf(rel, sizeof rel, DER "sub-%s/func/sub-%s_task-faces_run-%d_space-%s_desc-brain_mask.nii.gz",
                         subs[s], subs[s], r, spaces[sp]);
                put_bold(rel, 1, 0);
            }
            snprintf(rel, sizeof rel, DER "sub-%s/func/sub-%s_task-faces_run-%d_desc-confounds_timeseries.tsv",
                     subs[s], subs[s], r);
            put(rel, "trans_x\tframewise_displacement\n0\tn/a\n0.1\t0.1\n0.2\t0.1\n0.1\t0.1\n");
        }
    /* another task, only in the raw data */
    put_bold("ds/sub-01/func/sub-01_task-rest_bold.nii.gz", 4, 2.0);
}

static struct bids_params params_for(const char *task, const char *space)
{
    struct bids_params p;
    memset(&p, 0, sizeof p);
    nf_params_defaults(&nf_node_bids, &p);
    p.root = at("ds");
    p.derivatives = at("ds/derivatives/fmriprep");
    p.task = task ? nf_strdup(task) : NULL;
    p.space = space ? nf_strdup(space) : NULL;
    return p;
}

static void test_scan_derivatives(void **state)
{
    (void)state;
    make_dataset();
    char *r = at("ds"), *d = at("ds/derivatives/fmriprep");
    char *subs[] = { "0*" };
    struct nf_str_list subjects = { 1, subs };
    struct bids_query q = { .root = r, .derivatives = d, .task = "faces", .space = "MNI152NLin2009cAsym",
                            .desc = "preproc", .subjects = &subjects };
    struct bids_scan s;
    struct nf_error err = { 0 };
    assert_int_equal(bids_scan(&q, &s, &err), 0);
    assert_int_equal(s.n, 4);   /* sub-01, sub-02 (not sub-10) x 2 runs */
    assert_string_equal(s.items[0].label, "sub-01_task-faces_run-1_space-MNI152NLin2009cAsym");
    assert_string_equal(s.items[3].label, "sub-02_task-faces_run-2_space-MNI152NLin2009cAsym");
    for (size_t i = 0; i < s.n; i++) {
        assert_non_null(strstr(s.items[i].bold, "space-MNI152NLin2009cAsym_desc-preproc_bold.nii.gz"));
        assert_non_null(strstr(s.items[i].mask, "space-MNI152NLin2009cAsym_desc-brain_mask.nii.gz"));
        assert_non_null(strstr(s.items[i].confounds, "desc-confounds_timeseries.tsv"));
        assert_true(s.items[i].tr == 2.0);
    }
    assert_null(s.items[3].events);
    assert_non_null(strstr(s.items[2].events, "sub-02_task-faces_run-1_events.tsv"));
    bids_scan_release(&s);

    /* without space: two spaces are two candidates, an error asking for `space` */
    q.space = NULL;
    assert_true(bids_scan(&q, &s, &err) < 0);
    assert_non_null(strstr(err.msg, "give `space`"));
    free(r);
    free(d);
}

/* ---- the node ---- */

static int resolve(struct bids_params *p, const bool *wanted, struct nf_shape out[BIDS_N_OUT], struct nf_error *err)
{
    struct nf_resolve r = { .params = p, .out = out, .err = err, .wanted = wanted };
    memset(out, 0, BIDS_N_OUT * sizeof *out);
    return nf_node_bids.resolve(&r);
}

static void test_node_outputs(void **state)
{
    (void)state;
    make_dataset();
    struct bids_params p = params_for("faces", "MNI152NLin2009cAsym");
    p.runs.v = nf_calloc(1, sizeof *p.runs.v);   /* owned by p: released with it */
    p.runs.v[0] = nf_strdup("1");
    p.runs.n = 1;
    struct nf_shape out[BIDS_N_OUT];
    struct nf_error err = { 0 };
    assert_int_equal(resolve(&p, NULL, out, &err), 0);
    assert_int_equal(out[BIDS_OUT_BOLD].kind, NF_KIND_COLLECTION);
    assert_int_equal(out[BIDS_OUT_BOLD].n_items, 3);
    assert_int_equal(out[BIDS_OUT_BOLD].dim[3], 4);
    assert_int_equal(out[BIDS_OUT_EVENTS].item_kind, NF_KIND_TABLE);
    assert_int_equal(out[BIDS_OUT_CONFOUNDS].dim[0], 4);

    /* no participants.tsv: that output is not made */
    assert_int_equal(out[BIDS_OUT_PARTICIPANTS].kind, NF_KIND_NONE);
    struct nf_value *vals[BIDS_N_OUT] = { 0 };
    struct nf_run run = { .params = &p, .out = vals, .err = &err };
    assert_int_equal(nf_node_bids.run_cpu(&run), 0);
    for (int o = 0; o < BIDS_N_RUN_OUT; o++) {
        assert_non_null(vals[o]);
        assert_int_equal(vals[o]->u.coll.n, 3);
    }
    assert_null(vals[BIDS_OUT_PARTICIPANTS]);
    /* with one: a table, its header known at plan time, n/a kept as missing */
    put("ds/participants.tsv", "participant_id\tage\tsex\nsub-01\t31\tF\nsub-02\tn/a\tM\nsub-10\t25\tF\n");
    assert_int_equal(resolve(&p, NULL, out, &err), 0);
    assert_int_equal(out[BIDS_OUT_PARTICIPANTS].kind, NF_KIND_TABLE);
    assert_int_equal(out[BIDS_OUT_PARTICIPANTS].dim[0], 3);
    assert_string_equal(out[BIDS_OUT_PARTICIPANTS].col_names, "participant_id\nage\nsex\n");
    struct nf_value *again[BIDS_N_OUT] = { 0 };
    run.out = again;
    assert_int_equal(nf_node_bids.run_cpu(&run), 0);
    const struct nf_value *tab = again[BIDS_OUT_PARTICIPANTS];
    assert_non_null(tab);
    assert_int_equal(tab->kind, NF_KIND_TABLE);
    assert_int_equal(tab->u.tab.n_rows, 3);
    assert_string_equal(tab->u.tab.cols[0].str[2], "sub-10");
    assert_true(tab->u.tab.cols[1].numeric && isnan(tab->u.tab.cols[1].num[1]) && tab->u.tab.cols[1].num[2] == 25);
    for (int o = 0; o < BIDS_N_OUT; o++)
        nf_value_unref(again[o]);
    /* a broken one: a warning and no output unless a node reads it, then an error */
    put("ds/participants.tsv", "participant_id\tage\nsub-01\t31\textra\n");
    assert_int_equal(resolve(&p, NULL, out, &err), 0);
    assert_int_equal(out[BIDS_OUT_PARTICIPANTS].kind, NF_KIND_NONE);
    bool wants_all_but_participants[BIDS_N_OUT] = { true, true, true, true, false };
    run.out = again;
    run.wanted = wants_all_but_participants;
    assert_int_equal(nf_node_bids.run_cpu(&run), 0);
    assert_null(again[BIDS_OUT_PARTICIPANTS]);
    for (int o = 0; o < BIDS_N_OUT; o++)
        nf_value_unref(again[o]);
    bool wants_participants[BIDS_N_OUT] = { true, false, false, false, true };
    assert_true(resolve(&p, wants_participants, out, &err) < 0);
    assert_non_null(strstr(err.msg, "line 2 has 3 fields"));
    memset(&err, 0, sizeof err);
    run.wanted = NULL;
    run.out = vals;
    static const char *const labels[] = { "sub-01_task-faces_run-1_space-MNI152NLin2009cAsym",
                                          "sub-02_task-faces_run-1_space-MNI152NLin2009cAsym",
                                          "sub-10_task-faces_run-1_space-MNI152NLin2009cAsym" };
    for (size_t i = 0; i < 3; i++) {
        struct nf_value *b = vals[BIDS_OUT_BOLD]->u.coll.items[i];
        assert_string_equal(b->label, labels[i]);
        assert_true(b->u.vol.lazy);
        assert_true(b->u.vol.tr == 2.0);
        assert_string_equal(vals[BIDS_OUT_EVENTS]->u.coll.items[i]->label, labels[i]);
        assert_string_equal(vals[BIDS_OUT_MASK]->u.coll.items[i]->label, labels[i]);
        assert_non_null(vals[BIDS_OUT_MASK]->u.coll.items[i]->u.vol.data);
        assert_int_equal(vals[BIDS_OUT_EVENTS]->u.coll.items[i]->kind, NF_KIND_TABLE);
        assert_int_equal(vals[BIDS_OUT_EVENTS]->u.coll.items[i]->u.tab.n_rows, 2);
        /* the sidecar's TR survives reading the voxels */
        struct nf_value *full = nf_value_materialize(b, &err);
        assert_non_null(full);
        assert_true(full->u.vol.tr == 2.0);
        nf_value_unref(full);
    }
    for (int o = 0; o < BIDS_N_OUT; o++)
        nf_value_unref(vals[o]);
    nf_params_release(&nf_node_bids, &p);
}

static void test_node_errors(void **state)
{
    (void)state;
    make_dataset();
    struct nf_shape out[BIDS_N_OUT];
    struct nf_error err = { 0 };

    /* sub-02 run 2 has no events: required -> error; consumed -> error; else the output is left out */
    struct bids_params p = params_for("faces", "MNI152NLin2009cAsym");
    char *req[] = { "events" };
    p.require = (struct nf_str_list){ 1, req };
    assert_true(resolve(&p, NULL, out, &err) < 0);
    assert_non_null(strstr(err.msg, "sub-02_task-faces_run-2_space-MNI152NLin2009cAsym has no events file"));
    assert_non_null(strstr(err.msg, "require lists it"));
    assert_non_null(strstr(err.msg, "1 of 6 runs"));
    p.require = (struct nf_str_list){ 0, NULL };
    bool wanted[BIDS_N_OUT] = { true, false, true, false, false };
    memset(&err, 0, sizeof err);
    assert_true(resolve(&p, wanted, out, &err) < 0);
    assert_non_null(strstr(err.msg, "a node reads this output"));
    /* participants.tsv absent: an error only when a node reads it */
    bool wants_participants[BIDS_N_OUT] = { true, false, false, false, true };
    memset(&err, 0, sizeof err);
    assert_true(resolve(&p, wants_participants, out, &err) < 0);
    assert_non_null(strstr(err.msg, "the dataset has no participants.tsv"));
    assert_non_null(strstr(err.msg, "does not exist) but a node reads output 'participants'"));
    memset(&err, 0, sizeof err);
    assert_int_equal(resolve(&p, NULL, out, &err), 0);
    assert_int_equal(out[BIDS_OUT_EVENTS].kind, NF_KIND_NONE);
    assert_int_equal(out[BIDS_OUT_BOLD].n_items, 6);
    char *bad_req[] = { "eventz" };
    p.require = (struct nf_str_list){ 1, bad_req };
    memset(&err, 0, sizeof err);
    assert_true(resolve(&p, NULL, out, &err) < 0);
    assert_non_null(strstr(err.msg, "'eventz' is not a piece"));
    p.require = (struct nf_str_list){ 0, NULL };
    nf_params_release(&nf_node_bids, &p);

    /* nothing matches: the filters and what there is */
    p = params_for("facez", "MNI152NLin2009cAsym");
    memset(&err, 0, sizeof err);
    assert_true(resolve(&p, NULL, out, &err) < 0);
    assert_non_null(strstr(err.msg, "no BOLD runs"));
    assert_non_null(strstr(err.msg, "task facez"));
    assert_non_null(strstr(err.msg, "tasks: faces, rest"));
    nf_params_release(&nf_node_bids, &p);

    /* a header TR that disagrees with the sidecar */
    put("ds/sub-10/func/sub-10_task-faces_run-2_bold.json", "{\"RepetitionTime\": 2.5}");
    p = params_for("faces", "MNI152NLin2009cAsym");
    memset(&err, 0, sizeof err);
    assert_true(resolve(&p, NULL, out, &err) < 0);
    assert_non_null(strstr(err.msg, "sub-10_task-faces_run-2_space-MNI152NLin2009cAsym: the repetition time is 2.5 s"));
    assert_non_null(strstr(err.msg, "says 2 s"));

    /* no TR at all */
    char *path = at("ds/task-faces_bold.json");
    unlink(path);
    free(path);
    path = at("ds/sub-10/func/sub-10_task-faces_run-2_bold.json");
    unlink(path);
    free(path);
    memset(&err, 0, sizeof err);
    assert_true(resolve(&p, NULL, out, &err) < 0);
    assert_non_null(strstr(err.msg, "sub-01_task-faces_run-1_space-MNI152NLin2009cAsym: no JSON sidecar gives RepetitionTime"));
    nf_params_release(&nf_node_bids, &p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_parse),
        cmocka_unit_test(test_filters),
        cmocka_unit_test_setup_teardown(test_inheritance_nearest_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_derivatives, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_outputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
