/* test_summarize.c — unit tests of the `summarize` node (nodes/summarize/summarize.c).
 *
 * A hand-built map on a small grid with a non-trivial affine and a mask that
 * drops a slab (so that map columns are not grid offsets) holds three blobs:
 * A and B touch only at one corner (one cluster under 26-connectivity, two under
 * 6), C is separate and negative. The expected clusters, peaks (world mm through
 * the affine) and files are written down here from that construction, and the
 * files are read back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <nifti2_io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io.h"
#include "node.h"
#include "pipeline.h"
#include "summarize/summarize.h"
#include "core/util.h"
#include "core/value.h"

#define NX 10
#define NY 9
#define NZ 8
#define OFF(i, j, k) ((i) + NX * ((j) + NY * (k)))

struct fixture {
    char dir[64];
    char *outdir;
    struct nf_grid grid;
    struct nf_geom *geom;
    float full[NX * NY * NZ];   /* the map on the whole grid */
};

static void make_grid(struct nf_grid *g)
{
    memset(g, 0, sizeof *g);
    g->dim[0] = NX;
    g->dim[1] = NY;
    g->dim[2] = NZ;
    for (int a = 0; a < 3; a++)
        g->pixdim[a] = 2.0;
    /* LAS storage: x flips, so a wrong affine shows in the peak coordinates. */
    g->affine[0][0] = -2.0;
    g->affine[0][3] = 9.0;
    g->affine[1][1] = 2.0;
    g->affine[1][3] = -8.0;
    g->affine[2][2] = 2.0;
    g->affine[2][3] = -5.0;
    g->affine[3][3] = 1.0;
    g->sform_code = 4;
    g->qform_code = 4;
}

static void world(const struct nf_grid *g, int i, int j, int k, double xyz[3])
{
    for (int a = 0; a < 3; a++)
        xyz[a] = g->affine[a][0] * i + g->affine[a][1] * j + g->affine[a][2] * k + g->affine[a][3];
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    float mask[NX * NY * NZ];
    snprintf(fx->dir, sizeof fx->dir, "/tmp/nf_test_summarize_XXXXXX");
    if (!mkdtemp(fx->dir))
        return -1;
    fx->outdir = nf_path_join(fx->dir, "out");
    make_grid(&fx->grid);
    /* Mask: everything but the slab j == 0. */
    for (int v = 0; v < NX * NY * NZ; v++)
        mask[v] = (v / NX) % NY != 0;
    fx->geom = nf_geom_from_mask(&fx->grid, mask);
    /* A: cube {1,2}^3 of 3s with 5 at (2,2,2); B: cube {3,4}^3 of 3s with 6 at
     * (4,4,4) — A and B share only the corner (2,2,2)-(3,3,3); C: (7..8, 6..7, 1)
     * of -4s with -7 at (8,7,1); one sub-threshold voxel (6,3,6) = 1. */
    for (int k = 1; k <= 2; k++)
        for (int j = 1; j <= 2; j++)
            for (int i = 1; i <= 2; i++) {
                fx->full[OFF(i, j, k)] = 3.0f;
                fx->full[OFF(i + 2, j + 2, k + 2)] = 3.0f;
            }
    fx->full[OFF(2, 2, 2)] = 5.0f;
    fx->full[OFF(4, 4, 4)] = 6.0f;
    for (int j = 6; j <= 7; j++)
        for (int i = 7; i <= 8; i++)
            fx->full[OFF(i, j, 1)] = -4.0f;
    fx->full[OFF(8, 7, 1)] = -7.0f;
    fx->full[OFF(6, 3, 6)] = 1.0f;
    *state = fx;
    return fx->geom ? 0 : -1;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    char *cmd = nf_asprintf("rm -rf '%s'", fx->dir);
    int rc = system(cmd);
    free(cmd);
    nf_geom_unref(fx->geom);
    free(fx->outdir);
    free(fx);
    return rc == 0 ? 0 : -1;
}

/* The map as a 1×V matrix with the fixture's geometry. */
static struct nf_value *map_matrix(struct fixture *fx, const float *full)
{
    struct nf_error err = {0};
    struct nf_value *m = nf_value_new_matrix(1, fx->geom->n_voxels, fx->geom, &err);
    assert_non_null(m);
    for (int64_t c = 0; c < fx->geom->n_voxels; c++)
        m->u.mat.data[c] = full[fx->geom->index[c]];
    return m;
}

static struct nf_value *map_volume(struct fixture *fx, const float *full)
{
    struct nf_error err = {0};
    struct nf_value *v = nf_value_new_volume(&fx->grid, 3, 1, &err);
    assert_non_null(v);
    memcpy(v->u.vol.data, full, sizeof(float) * NX * NY * NZ);
    return v;
}

struct sum_result {
    struct nf_value *out[2];
    struct nf_error err;
    int rc;
};

static void params_init(struct summarize_params *p)
{
    nf_params_defaults(&nf_node_summarize, p);
}

static void run_summarize(struct fixture *fx, const struct summarize_params *p, size_t n,
                          const char *const *names, struct nf_value **values,
                          struct nf_value *atlas, struct sum_result *r)
{
    struct nf_node_inst node = {0};
    struct nf_env env = {0};
    struct nf_run run = {0};
    struct nf_value *in[1] = {atlas};
    node.id = "maps";
    node.loc = (struct nf_loc){"test.yaml", 12, 3};
    env.pipeline_name = "test";
    env.pipeline_hash = "0123abcd";
    env.outputs_dir = fx->outdir;
    memset(r, 0, sizeof *r);
    run.node = &node;
    run.params = p;
    run.env = &env;
    run.in = in;
    run.n_extra = n;
    run.extra_names = names;
    run.extra_in = values;
    run.out = r->out;
    run.err = &r->err;
    r->rc = nf_node_summarize.run_cpu(&run);
}

static void result_release(struct sum_result *r)
{
    nf_value_unref(r->out[0]);
    nf_value_unref(r->out[1]);
}

static bool exists_in(const struct fixture *fx, const char *name)
{
    char *path = nf_path_join(fx->outdir, name);
    bool ok = access(path, R_OK) == 0;
    free(path);
    return ok;
}

static char *read_out(const struct fixture *fx, const char *name)
{
    struct nf_error err = {0};
    char *path = nf_path_join(fx->outdir, name);
    char *text = nf_read_file(path, NULL, &err);
    free(path);
    return text;
}

static int nifti_intent(const struct fixture *fx, const char *name)
{
    char *path = nf_path_join(fx->outdir, name);
    nifti_image *im = nifti_image_read(path, 0);
    int code = im ? im->intent_code : -1;
    nifti_image_free(im);
    free(path);
    return code;
}

/* Writing: file names, NIfTI round trip, intents, tables, collections, JSON. */
static void test_write_files(void **state)
{
    struct fixture *fx = *state;
    struct summarize_params p;
    struct sum_result r;
    struct nf_error err = {0};
    params_init(&p);

    struct nf_value *score = map_matrix(fx, fx->full);
    struct nf_value *pfwe = map_matrix(fx, fx->full);
    struct nf_value *tab = nf_value_new_table(2, 1, &err);
    tab->u.tab.cols[0].name = strdup("alpha");
    tab->u.tab.cols[0].numeric = true;
    tab->u.tab.cols[0].num = calloc(2, sizeof(double));
    tab->u.tab.cols[0].num[0] = 1.5;
    tab->u.tab.cols[0].num[1] = NAN;
    struct nf_value *coll = nf_value_new_collection(2, &err);
    coll->u.coll.items[0] = map_matrix(fx, fx->full);
    coll->u.coll.items[1] = map_volume(fx, fx->full);
    nf_value_set_label(coll->u.coll.items[0], "sub-01");
    nf_value_set_label(coll->u.coll.items[1], "sub-02");
    struct nf_value *plain = nf_value_new_matrix(2, 3, NULL, &err);

    const char *names[] = {"score", "p_fwe", "my_table", "beta", "plain-mat"};
    struct nf_value *values[] = {score, pfwe, tab, coll, plain};
    run_summarize(fx, &p, 5, names, values, NULL, &r);
    assert_int_equal(r.rc, 0);

    assert_true(exists_in(fx, "test_stat-score_statmap.nii.gz"));
    assert_true(exists_in(fx, "test_stat-pFwe_statmap.nii.gz"));
    assert_true(exists_in(fx, "test_stat-myTable.tsv"));
    assert_true(exists_in(fx, "sub-01_test_stat-beta_statmap.nii.gz"));
    assert_true(exists_in(fx, "sub-02_test_stat-beta_statmap.nii.gz"));
    assert_true(exists_in(fx, "test_stat-plainMat.tsv"));
    assert_false(exists_in(fx, "test_stat-score_clusters.tsv"));
    assert_int_equal(nifti_intent(fx, "test_stat-score_statmap.nii.gz"), 1001);
    assert_int_equal(nifti_intent(fx, "test_stat-pFwe_statmap.nii.gz"), 22);

    /* Round trip: in-mask values equal, zeros outside, same grid. */
    char *path = nf_path_join(fx->outdir, "test_stat-score_statmap.nii.gz");
    struct nf_value *back = nf_nifti_read(path, &err);
    free(path);
    assert_non_null(back);
    assert_int_equal(back->u.vol.nt, 1);
    assert_true(nf_grid_same(&back->u.vol.grid, &fx->grid));
    for (int v = 0; v < NX * NY * NZ; v++) {
        bool in_mask = (v / NX) % NY != 0;
        assert_true(back->u.vol.data[v] == (in_mask ? fx->full[v] : 0.0f));
    }
    nf_value_unref(back);

    /* The files output lists every file, JSON last. */
    const struct nf_table *files = &r.out[SUMMARIZE_OUT_FILES]->u.tab;
    assert_int_equal(files->n_cols, 2);
    assert_string_equal(files->cols[0].name, "key");
    assert_int_equal(files->n_rows, 12);   /* 4 maps with their sidecars, 2 TSVs, 2 JSON */
    assert_string_equal(files->cols[0].str[0], "score");
    assert_true(nf_path_has_suffix(files->cols[1].str[1], "test_stat-score_statmap.json"));
    assert_string_equal(files->cols[0].str[10], "summary");
    assert_string_equal(files->cols[0].str[11], "dataset_description");
    /* p_fwe said nothing about itself: its key makes it a p map, 1 outside the mask */
    path = nf_path_join(fx->outdir, "test_stat-pFwe_statmap.nii.gz");
    back = nf_nifti_read(path, &err);
    free(path);
    assert_non_null(back);
    for (int v = 0; v < NX * NY * NZ; v++)
        assert_true(back->u.vol.data[v] == ((v / NX) % NY != 0 ? fx->full[v] : 1.0f));
    nf_value_unref(back);
    /* No thresholding: an empty cluster table with the cluster columns. */
    assert_int_equal(r.out[SUMMARIZE_OUT_TABLE]->u.tab.n_rows, 0);
    assert_int_equal(r.out[SUMMARIZE_OUT_TABLE]->u.tab.n_cols, SUM_CLUSTER_COLUMNS);

    char *summary = read_out(fx, "summary.json");
    assert_non_null(summary);
    assert_non_null(strstr(summary, "\"key\": \"p_fwe\""));
    assert_non_null(strstr(summary, "\"name\": \"pFwe\""));
    assert_non_null(strstr(summary, "\"n_nonfinite\": 1"));   /* the table's NaN */
    assert_non_null(strstr(summary, "\"thresholding\": null"));
    assert_non_null(strstr(summary, "\"max\": 6"));
    assert_non_null(strstr(summary, "\"min\": -7"));
    free(summary);
    char *desc = read_out(fx, "dataset_description.json");
    assert_non_null(desc);
    assert_non_null(strstr(desc, "\"BIDSVersion\": \"1.8.0\""));
    assert_non_null(strstr(desc, "\"DatasetType\": \"derivative\""));
    assert_non_null(strstr(desc, "\"GeneratedBy\""));
    assert_non_null(strstr(desc, "\"PipelineHash\": \"0123abcd\""));
    assert_non_null(strstr(desc, "\"Name\": \"test\""));
    free(desc);

    result_release(&r);
    for (int i = 0; i < 5; i++)
        nf_value_unref(values[i]);
    nf_params_release(&nf_node_summarize, &p);
}

/* Items labelled with BIDS entities (a bids node's runs, fixed_effects'
 * subjects) go into their subject's (and session's) folder without the
 * prefix, a k x V map with named rows as one file per row (contrast-<name>,
 * each holding its own row); a label with the subject alone stays flat. */
static void test_bids_layout(void **state)
{
    struct fixture *fx = *state;
    struct summarize_params p;
    struct sum_result r;
    struct nf_error err = {0};
    params_init(&p);

    int64_t nv = fx->geom->n_voxels;
    struct nf_value *z = nf_value_new_matrix(2, nv, fx->geom, &err);
    assert_non_null(z);
    for (int64_t c = 0; c < 2 * nv; c++)
        z->u.mat.data[c] = (float)c * 0.5f - 3.0f;
    static const char *const contrasts[] = {"faces_minus_houses", "houses"};
    assert_int_equal(nf_matrix_set_row_names(z, contrasts, &err), 0);
    nf_value_set_label(z, "sub-01_ses-2_task-x_run-1_space-MNI");
    struct nf_value *coll = nf_value_new_collection(3, &err);
    coll->u.coll.items[0] = z;
    coll->u.coll.items[1] = map_matrix(fx, fx->full);
    nf_value_set_label(coll->u.coll.items[1], "sub-02_task-x_space-MNI");
    coll->u.coll.items[2] = map_matrix(fx, fx->full);
    nf_value_set_label(coll->u.coll.items[2], "sub-03");

    const char *names[] = {"z"};
    struct nf_value *values[] = {coll};
    run_summarize(fx, &p, 1, names, values, NULL, &r);
    assert_int_equal(r.rc, 0);

    static const char *const row_files[] = {
        "sub-01/ses-2/sub-01_ses-2_task-x_run-1_space-MNI_contrast-facesMinusHouses_stat-z_statmap.nii.gz",
        "sub-01/ses-2/sub-01_ses-2_task-x_run-1_space-MNI_contrast-houses_stat-z_statmap.nii.gz"};
    for (int64_t row = 0; row < 2; row++) {
        char *path = nf_path_join(fx->outdir, row_files[row]);
        struct nf_value *back = nf_nifti_read(path, &err);
        free(path);
        assert_non_null(back);
        assert_int_equal(back->u.vol.nt, 1);
        for (int64_t c = 0; c < nv; c++)
            assert_true(back->u.vol.data[fx->geom->index[c]] == z->u.mat.data[row * nv + c]);
        nf_value_unref(back);
    }
    char *side = read_out(fx, "sub-01/ses-2/sub-01_ses-2_task-x_run-1_space-MNI_contrast-houses_stat-z_statmap.json");
    assert_non_null(side);
    assert_non_null(strstr(side, "\"Contrast\": \"houses\""));
    assert_non_null(strstr(side, "\"Item\": \"sub-01_ses-2_task-x_run-1_space-MNI\""));
    free(side);
    assert_true(exists_in(fx, "sub-02/sub-02_task-x_space-MNI_stat-z_statmap.nii.gz"));
    assert_true(exists_in(fx, "sub-03_test_stat-z_statmap.nii.gz"));

    result_release(&r);
    nf_value_unref(coll);
    nf_params_release(&nf_node_summarize, &p);
}

static double num_at(const struct nf_value *tab, int col, int64_t row)
{
    return tab->u.tab.cols[col].num[row];
}

static void assert_peak(const struct fixture *fx, const struct nf_value *tab, int64_t row,
                        int i, int j, int k)
{
    double xyz[3];
    world(&fx->grid, i, j, k, xyz);
    for (int a = 0; a < 3; a++)
        assert_true(fabs(num_at(tab, 3 + a, row) - xyz[a]) < 1e-9);
}

/* Two tails, 26-connectivity, sizes, peaks, labels; on a matrix and a volume. */
static void check_two_tailed(struct fixture *fx, struct nf_value *map, bool with_atlas)
{
    struct summarize_params p;
    struct sum_result r;
    struct nf_value *atlas = NULL;
    params_init(&p);
    p.threshold = 2.5;
    if (with_atlas) {
        float labels[NX * NY * NZ];
        for (int v = 0; v < NX * NY * NZ; v++)
            labels[v] = (v % NX) < 6 ? 11.0f : 22.0f;
        atlas = map_volume(fx, labels);
    }
    const char *names[] = {"score"};
    run_summarize(fx, &p, 1, names, &map, atlas, &r);
    assert_int_equal(r.rc, 0);
    const struct nf_value *tab = r.out[SUMMARIZE_OUT_TABLE];
    assert_int_equal(tab->u.tab.n_cols, SUM_CLUSTER_COLUMNS);
    assert_string_equal(tab->u.tab.cols[0].name, "cluster");
    assert_string_equal(tab->u.tab.cols[6].name, "label");
    /* A and B merge through their shared corner: 16 voxels, then C with 4. */
    assert_int_equal(tab->u.tab.n_rows, 2);
    assert_string_equal(tab->u.tab.cols[0].str[0], "1");
    assert_string_equal(tab->u.tab.cols[0].str[1], "2");
    assert_true(num_at(tab, 1, 0) == 16);
    assert_true(num_at(tab, 2, 0) == 6.0);
    assert_peak(fx, tab, 0, 4, 4, 4);
    assert_true(num_at(tab, 1, 1) == 4);
    assert_true(num_at(tab, 2, 1) == -7.0);
    assert_peak(fx, tab, 1, 8, 7, 1);
    assert_string_equal(tab->u.tab.cols[6].str[0], with_atlas ? "11" : "n/a");
    assert_string_equal(tab->u.tab.cols[6].str[1], with_atlas ? "22" : "n/a");
    /* no label file: no names; A and B lie where i < 6 (11), C where i >= 6 (22) */
    assert_string_equal(tab->u.tab.cols[7].str[0], with_atlas ? "" : "n/a");
    assert_string_equal(tab->u.tab.cols[8].str[0], with_atlas ? "11 100%" : "n/a");
    assert_string_equal(tab->u.tab.cols[8].str[1], with_atlas ? "22 100%" : "n/a");
    assert_true(num_at(tab, 9, 0) == 16 * 8.0 && num_at(tab, 9, 1) == 4 * 8.0);

    /* The thresholded map keeps exactly the supra-threshold voxels. */
    struct nf_error err = {0};
    char *path = nf_path_join(fx->outdir, "test_stat-score_desc-thresholded_statmap.nii.gz");
    struct nf_value *thr = nf_nifti_read(path, &err);
    free(path);
    assert_non_null(thr);
    for (int v = 0; v < NX * NY * NZ; v++) {
        float x = fx->full[v];
        bool in_mask = map->kind == NF_KIND_VOLUME || (v / NX) % NY != 0;
        assert_true(thr->u.vol.data[v] == (in_mask && fabsf(x) >= 2.5f ? x : 0.0f));
    }
    nf_value_unref(thr);

    /* The clusters file holds the same table. */
    path = nf_path_join(fx->outdir, "test_stat-score_clusters.tsv");
    struct nf_value *back = nf_table_read(path, NULL, 0, &err);
    free(path);
    assert_non_null(back);
    assert_int_equal(back->u.tab.n_rows, 2);
    assert_int_equal(back->u.tab.n_cols, SUM_CLUSTER_COLUMNS);
    assert_string_equal(back->u.tab.cols[5].name, "peak_z");
    assert_true(fabs(back->u.tab.cols[3].num[1] - num_at(tab, 3, 1)) < 1e-6);
    nf_value_unref(back);

    char *summary = read_out(fx, "summary.json");
    assert_non_null(summary);
    assert_non_null(strstr(summary, "\"n_clusters\": 2"));
    assert_non_null(strstr(summary, "\"n_voxels\": 20"));
    free(summary);

    result_release(&r);
    nf_value_unref(atlas);
    nf_params_release(&nf_node_summarize, &p);
}

static void test_clusters_matrix(void **state)
{
    struct fixture *fx = *state;
    struct nf_value *m = map_matrix(fx, fx->full);
    check_two_tailed(fx, m, false);
    check_two_tailed(fx, m, true);
    nf_value_unref(m);
}

static void test_clusters_volume(void **state)
{
    struct fixture *fx = *state;
    struct nf_value *v = map_volume(fx, fx->full);
    check_two_tailed(fx, v, true);
    nf_value_unref(v);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Region names, shares, volume and sub-peaks, worked out by hand: a bar along
 * i at (j, k) = (4, 4) with values 9 4 3 5 3 4 7 6 for i = 1..8 (local maxima
 * 9 at i=1, 5 at i=4, 7 at i=7), and one voxel -8 at (8, 1, 1). The atlas has
 * label 1 for i <= 2, 2 for i = 3..4, 3 for i >= 5 and 0 at the lone voxel.
 * Peaks are kept more than 8 mm apart: 7 at i=7 is 12 mm from the peak
 * (sub-peak 1a), 5 at i=4 only 6 mm (dropped). Voxels are 2 mm: 8 mm3 each. */
static void test_atlas_regions(void **state)
{
    struct fixture *fx = *state;
    static const float bar[8] = {9, 4, 3, 5, 3, 4, 7, 6};
    float full[NX * NY * NZ] = {0}, labels[NX * NY * NZ] = {0};
    for (int i = 1; i <= 8; i++) {
        full[OFF(i, 4, 4)] = bar[i - 1];
        labels[OFF(i, 4, 4)] = i <= 2 ? 1.0f : i <= 4 ? 2.0f : 3.0f;
    }
    full[OFF(8, 1, 1)] = -8.0f;
    struct nf_value *m = map_matrix(fx, full), *atlas = map_volume(fx, labels);
    char *atlas_path = nf_path_join(fx->dir, "atl.nii.gz");
    char *txt = nf_path_join(fx->dir, "atl.nii.txt");
    char *dseg = nf_path_join(fx->dir, "names_dseg.tsv");
    char *bad = nf_path_join(fx->dir, "bad.txt");
    write_text(txt, "0 Background\r\n1 Region_A 11\r\n2 Region_B 12\r\n3 Region_C 13\r\n");
    write_text(dseg, "index\tname\n1\tAlpha\n3\tGamma\n");
    write_text(bad, "1 A\n1 B\n");
    nf_value_set_path(atlas, atlas_path);

    struct summarize_params p;
    struct sum_result r;
    const char *names[] = {"score"};
    params_init(&p);
    p.threshold = 2.5;
    run_summarize(fx, &p, 1, names, &m, atlas, &r);
    assert_int_equal(r.rc, 0);
    const struct nf_value *tab = r.out[SUMMARIZE_OUT_TABLE];
    assert_int_equal(tab->u.tab.n_cols, SUM_CLUSTER_COLUMNS);
    static const char *const cols[] = {"cluster", "size", "peak_value", "peak_x", "peak_y",
                                       "peak_z", "label", "peak_region", "regions", "size_mm3"};
    for (int c = 0; c < SUM_CLUSTER_COLUMNS; c++)
        assert_string_equal(tab->u.tab.cols[c].name, cols[c]);
    assert_int_equal(tab->u.tab.n_rows, 3);
    const struct nf_column *col = tab->u.tab.cols;
    assert_string_equal(col[0].str[0], "1");
    assert_string_equal(col[0].str[1], "1a");
    assert_string_equal(col[0].str[2], "2");
    assert_true(col[1].num[0] == 8 && isnan(col[1].num[1]) && col[1].num[2] == 1);
    assert_true(col[2].num[0] == 9 && col[2].num[1] == 7 && col[2].num[2] == -8);
    assert_peak(fx, tab, 0, 1, 4, 4);
    assert_peak(fx, tab, 1, 7, 4, 4);
    assert_peak(fx, tab, 2, 8, 1, 1);
    assert_string_equal(col[6].str[0], "1");
    assert_string_equal(col[6].str[1], "3");
    assert_string_equal(col[6].str[2], "0");
    assert_string_equal(col[7].str[0], "Region_A");
    assert_string_equal(col[7].str[1], "Region_C");
    assert_string_equal(col[7].str[2], "");   /* label 0, named or not */
    assert_string_equal(col[8].str[0], "Region_C 50%; Region_A 25%; Region_B 25%");
    assert_string_equal(col[8].str[1], "");
    assert_string_equal(col[8].str[2], "Background 100%");   /* nothing but label 0 */
    assert_true(col[9].num[0] == 64 && isnan(col[9].num[1]) && col[9].num[2] == 8);
    char *summary = read_out(fx, "summary.json");
    assert_non_null(strstr(summary, "\"atlas_labels\": \"atl.nii.txt\""));
    free(summary);
    result_release(&r);

    /* The written table reads back with the sub-peak's n/a size. */
    struct nf_error err = {0};
    char *path = nf_path_join(fx->outdir, "test_stat-score_clusters.tsv");
    char *text = nf_read_file(path, NULL, &err);
    free(path);
    assert_non_null(text);
    assert_non_null(strstr(text, "\n1a\tn/a\t7\t"));
    assert_non_null(strstr(text, "\tRegion_C\t\tn/a\n"));
    free(text);

    /* atlas_labels overrides the file beside the atlas; unnamed labels are numbers */
    p.atlas_labels = strdup(dseg);
    run_summarize(fx, &p, 1, names, &m, atlas, &r);
    assert_int_equal(r.rc, 0);
    col = r.out[SUMMARIZE_OUT_TABLE]->u.tab.cols;
    assert_string_equal(col[7].str[0], "Alpha");
    assert_string_equal(col[8].str[0], "Gamma 50%; Alpha 25%; 2 25%");
    assert_string_equal(col[8].str[2], "0 100%");
    result_release(&r);

    /* a malformed label file fails the node, naming file and line */
    free(p.atlas_labels);
    p.atlas_labels = strdup(bad);
    run_summarize(fx, &p, 1, names, &m, atlas, &r);
    assert_int_equal(r.rc, NF_EDATA);
    char *want = nf_asprintf("label file '%s', line 2: label 1 is named twice ('A' and 'B')", bad);
    assert_string_equal(r.err.msg, want);
    assert_string_equal(r.err.node, "maps");
    free(want);
    result_release(&r);

    /* without an atlas, atlas_labels is an error */
    run_summarize(fx, &p, 1, names, &m, NULL, &r);
    assert_int_equal(r.rc, NF_EINVAL);
    assert_non_null(strstr(r.err.msg, "no atlas input is connected"));
    result_release(&r);

    /* no label file anywhere: labels only, names empty, regions by number */
    free(p.atlas_labels);
    p.atlas_labels = NULL;
    unlink(txt);
    run_summarize(fx, &p, 1, names, &m, atlas, &r);
    assert_int_equal(r.rc, 0);
    col = r.out[SUMMARIZE_OUT_TABLE]->u.tab.cols;
    assert_string_equal(col[7].str[0], "");
    assert_string_equal(col[8].str[0], "3 50%; 1 25%; 2 25%");
    result_release(&r);

    nf_value_unref(m);
    nf_value_unref(atlas);
    free(atlas_path);
    free(txt);
    free(dseg);
    free(bad);
    nf_params_release(&nf_node_summarize, &p);
}

/* A table with n rows and the given columns: numeric ones from nums (NaN for
 * n/a), string ones (name in strs_of) from strs. */
static struct nf_value *table_of(int64_t n, int n_cols, const char *const *names,
                                 const double *const *nums, const char *const *const *strs)
{
    struct nf_error err = {0};
    struct nf_value *t = nf_value_new_table(n, n_cols, &err);
    assert_non_null(t);
    for (int c = 0; c < n_cols; c++) {
        if (nums[c]) {
            assert_int_equal(nf_table_column_numeric(t, c, names[c], &err), 0);
            memcpy(t->u.tab.cols[c].num, nums[c], (size_t)n * sizeof(double));
        } else {
            assert_int_equal(nf_table_column_string(t, c, names[c], &err), 0);
            for (int64_t r = 0; r < n; r++)
                t->u.tab.cols[c].str[r] = strdup(strs[c][r]);
        }
    }
    return t;
}

static char last_warning[512];
static void keep_warning(const char *node, const char *msg)
{
    snprintf(last_warning, sizeof last_warning, "%s: %s", node ? node : "", msg);
}

/* Tables with a numeric `label` column get a `region` column after it from
 * the atlas's label file (atl.nii.txt beside the atlas): 1 and 3 are named,
 * 2 is not, NaN and 2.5 are no labels, 0 is named Background; the expected
 * TSV is written out by hand. Tables without such a column (none, a text
 * label column, or a region column already there) are written byte for byte
 * as without an atlas. A malformed label file fails the node even with
 * nothing thresholded. */
static void test_table_regions(void **state)
{
    struct fixture *fx = *state;
    float labels[NX * NY * NZ] = {0};
    struct nf_value *atlas = map_volume(fx, labels);
    char *atlas_path = nf_path_join(fx->dir, "atl.nii.gz");
    char *txt = nf_path_join(fx->dir, "atl.nii.txt");
    char *bad = nf_path_join(fx->dir, "bad.txt");
    write_text(txt, "0 Background\n1 Region_A\n3 Region_C\n");
    write_text(bad, "1 A\n1 B\n");
    nf_value_set_path(atlas, atlas_path);

    static const double score[] = {0.75, 0.5, NAN, 0.25, 0.5, 0.125};
    static const double label[] = {1, 2, 3, NAN, 2.5, 0};
    static const double n_vox[] = {10, 20, 30, 1, 2, 3};
    static const double alpha[] = {1.5, NAN};
    static const char *const word[] = {"x", "y"};
    static const char *const text_label[] = {"1", "3"};
    static const char *const region[] = {"mine", ""};
    const char *rois_cols[] = {"mean_score", "label", "n_voxels"};
    const char *other_cols[] = {"alpha", "name"};
    const char *text_cols[] = {"label", "alpha"};
    const char *own_cols[] = {"label", "region"};
    struct nf_value *values[] = {
        table_of(6, 3, rois_cols, (const double *const[]){score, label, n_vox},
                 (const char *const *const[]){NULL, NULL, NULL}),
        table_of(2, 2, other_cols, (const double *const[]){alpha, NULL},
                 (const char *const *const[]){NULL, word}),
        table_of(2, 2, text_cols, (const double *const[]){NULL, alpha},
                 (const char *const *const[]){text_label, NULL}),
        table_of(2, 2, own_cols, (const double *const[]){label, NULL},
                 (const char *const *const[]){NULL, region}),
    };
    const char *names[] = {"rois", "other", "text_label", "own_region"};
    const char *files[] = {"test_stat-rois.tsv", "test_stat-other.tsv",
                           "test_stat-textLabel.tsv", "test_stat-ownRegion.tsv"};
    static const char *const plain[] = {
        "mean_score\tlabel\tn_voxels\n0.75\t1\t10\n0.5\t2\t20\nn/a\t3\t30\n0.25\tn/a\t1\n"
        "0.5\t2.5\t2\n0.125\t0\t3\n",
        "alpha\tname\n1.5\tx\nn/a\ty\n",
        "label\talpha\n1\t1.5\n3\tn/a\n",
        "label\tregion\n1\tmine\n2\t\n",
    };
    static const char *const rois_named =
        "mean_score\tlabel\tregion\tn_voxels\n0.75\t1\tRegion_A\t10\n0.5\t2\t\t20\n"
        "n/a\t3\tRegion_C\t30\n0.25\tn/a\t\t1\n0.5\t2.5\t\t2\n0.125\t0\tBackground\t3\n";

    struct summarize_params p;
    struct sum_result r;
    params_init(&p);
    /* without an atlas: every table as it is */
    run_summarize(fx, &p, 4, names, values, NULL, &r);
    assert_int_equal(r.rc, 0);
    for (int i = 0; i < 4; i++) {
        char *text = read_out(fx, files[i]);
        assert_non_null(text);
        assert_string_equal(text, plain[i]);
        free(text);
    }
    result_release(&r);

    /* with it: the ROI table names its regions, the others are unchanged */
    nf_warn_hook = keep_warning;
    run_summarize(fx, &p, 4, names, values, atlas, &r);
    nf_warn_hook = NULL;
    assert_int_equal(r.rc, 0);
    assert_string_equal(last_warning, "maps: input 'own_region' already has a region column: "
                                      "it is written without the atlas's region names");
    char *text = read_out(fx, files[0]);
    assert_non_null(text);
    assert_string_equal(text, rois_named);
    free(text);
    for (int i = 1; i < 4; i++) {
        text = read_out(fx, files[i]);
        assert_non_null(text);
        assert_string_equal(text, plain[i]);
        free(text);
    }
    /* the input itself is not changed: it may feed other nodes */
    assert_int_equal(values[0]->u.tab.n_cols, 3);
    result_release(&r);

    /* atlas_labels instead of the file beside the atlas */
    char *dseg = nf_path_join(fx->dir, "names_dseg.tsv");
    write_text(dseg, "index\tname\n2\tBeta\n");
    p.atlas_labels = strdup(dseg);
    run_summarize(fx, &p, 1, names, values, atlas, &r);
    assert_int_equal(r.rc, 0);
    text = read_out(fx, files[0]);
    assert_non_null(text);
    assert_non_null(strstr(text, "mean_score\tlabel\tregion\tn_voxels\n0.75\t1\t\t10\n"
                                 "0.5\t2\tBeta\t20\n"));
    free(text);
    result_release(&r);

    /* a malformed label file fails the node, though nothing is thresholded */
    free(p.atlas_labels);
    p.atlas_labels = strdup(bad);
    run_summarize(fx, &p, 1, names, values, atlas, &r);
    assert_int_equal(r.rc, NF_EDATA);
    char *want = nf_asprintf("label file '%s', line 2: label 1 is named twice ('A' and 'B')", bad);
    assert_string_equal(r.err.msg, want);
    assert_string_equal(r.err.node, "maps");
    free(want);
    result_release(&r);

    for (int i = 0; i < 4; i++)
        nf_value_unref(values[i]);
    nf_value_unref(atlas);
    free(atlas_path);
    free(txt);
    free(bad);
    free(dseg);
    nf_params_release(&nf_node_summarize, &p);
}

/* Sub-peaks are more than 8 mm apart and at most three: a plane of 3s at k = 6
 * (i 0..9, j 1..8) with maxima A 10 at (0,1), B 9.5 at (4,1) (exactly 8 mm
 * from A: dropped), C 9 at (9,1), D 8 at (0,8), E 7 at (9,8), F 6 at (5,5)
 * (10+ mm from all, but a fourth sub-peak: dropped). */
static void test_subpeak_rules(void **state)
{
    struct fixture *fx = *state;
    float full[NX * NY * NZ] = {0};
    for (int j = 1; j < NY; j++)
        for (int i = 0; i < NX; i++)
            full[OFF(i, j, 6)] = 3.0f;
    full[OFF(0, 1, 6)] = 10.0f;
    full[OFF(4, 1, 6)] = 9.5f;
    full[OFF(9, 1, 6)] = 9.0f;
    full[OFF(0, 8, 6)] = 8.0f;
    full[OFF(9, 8, 6)] = 7.0f;
    full[OFF(5, 5, 6)] = 6.0f;
    struct nf_value *m = map_matrix(fx, full);
    struct summarize_params p;
    struct sum_result r;
    const char *names[] = {"score"};
    params_init(&p);
    p.threshold = 2.5;
    run_summarize(fx, &p, 1, names, &m, NULL, &r);
    assert_int_equal(r.rc, 0);
    const struct nf_value *tab = r.out[SUMMARIZE_OUT_TABLE];
    assert_int_equal(tab->u.tab.n_rows, 4);
    static const char *const ids[] = {"1", "1a", "1b", "1c"};
    static const double values[] = {10, 9, 8, 7};
    static const int at[4][2] = {{0, 1}, {9, 1}, {0, 8}, {9, 8}};
    for (int q = 0; q < 4; q++) {
        assert_string_equal(tab->u.tab.cols[0].str[q], ids[q]);
        assert_true(num_at(tab, 2, q) == values[q]);
        assert_peak(fx, tab, q, at[q][0], at[q][1], 6);
        assert_string_equal(tab->u.tab.cols[7].str[q], "n/a");   /* no atlas */
    }
    assert_true(num_at(tab, 1, 0) == 80 && num_at(tab, 9, 0) == 640);
    result_release(&r);
    nf_value_unref(m);
    nf_params_release(&nf_node_summarize, &p);
}

static void test_tails_and_min_size(void **state)
{
    struct fixture *fx = *state;
    struct summarize_params p;
    struct sum_result r;
    struct nf_value *m = map_matrix(fx, fx->full);
    const char *names[] = {"score"};
    params_init(&p);
    p.threshold = 2.5;

    p.tail = SUM_TAIL_UPPER;
    run_summarize(fx, &p, 1, names, &m, NULL, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.out[SUMMARIZE_OUT_TABLE]->u.tab.n_rows, 1);
    assert_true(num_at(r.out[SUMMARIZE_OUT_TABLE], 1, 0) == 16);
    result_release(&r);

    p.tail = SUM_TAIL_LOWER;
    run_summarize(fx, &p, 1, names, &m, NULL, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.out[SUMMARIZE_OUT_TABLE]->u.tab.n_rows, 1);
    assert_true(num_at(r.out[SUMMARIZE_OUT_TABLE], 1, 0) == 4);
    assert_true(num_at(r.out[SUMMARIZE_OUT_TABLE], 2, 0) == -7.0);
    result_release(&r);

    /* Only A's and B's values of 5 and above: two separate single voxels. */
    p.tail = SUM_TAIL_UPPER;
    p.threshold = 4.5;
    run_summarize(fx, &p, 1, names, &m, NULL, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.out[SUMMARIZE_OUT_TABLE]->u.tab.n_rows, 2);
    assert_true(num_at(r.out[SUMMARIZE_OUT_TABLE], 2, 0) == 6.0);   /* ties on size: |peak| */
    assert_true(num_at(r.out[SUMMARIZE_OUT_TABLE], 2, 1) == 5.0);
    result_release(&r);

    /* min_cluster_size drops C from the table and the thresholded map. */
    p.tail = SUM_TAIL_TWO;
    p.threshold = 2.5;
    p.min_cluster_size = 5;
    run_summarize(fx, &p, 1, names, &m, NULL, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.out[SUMMARIZE_OUT_TABLE]->u.tab.n_rows, 1);
    struct nf_error err = {0};
    char *path = nf_path_join(fx->outdir, "test_stat-score_desc-thresholded_statmap.nii.gz");
    struct nf_value *thr = nf_nifti_read(path, &err);
    free(path);
    assert_non_null(thr);
    assert_true(thr->u.vol.data[OFF(8, 7, 1)] == 0.0f);
    assert_true(thr->u.vol.data[OFF(4, 4, 4)] == 6.0f);
    nf_value_unref(thr);
    result_release(&r);

    nf_value_unref(m);
    nf_params_release(&nf_node_summarize, &p);
}

/* p_below thresholds the stat map where the p map is small (only blob C). */
static nifti_image *read_header(const struct fixture *fx, const char *name)
{
    char *path = nf_path_join(fx->outdir, name);
    nifti_image *im = nifti_image_read(path, 1);
    free(path);
    assert_non_null(im);
    return im;
}

/* What maps hold, from what their producers said: p maps are 1 outside the
 * mask and the p values inside; t and correlation maps carry their intent with
 * the degrees of freedom; every map has a sidecar naming the statistic, the
 * node and port, and a 4D map's volumes. */
static void test_map_semantics(void **state)
{
    struct fixture *fx = *state;
    struct summarize_params p;
    struct sum_result r;
    struct nf_error err = {0};
    float pv[NX * NY * NZ];
    for (int v = 0; v < NX * NY * NZ; v++)
        pv[v] = 0.01f + 0.9f * (float)(v % 97) / 97.0f;
    struct nf_value *pmap = map_matrix(fx, pv), *tmap = map_matrix(fx, fx->full),
                    *rmap = map_matrix(fx, fx->full), *zmap = map_matrix(fx, fx->full);
    nf_value_set_stat(pmap, NF_STAT_P, 0, "permutation p-value");
    nf_value_set_stat(tmap, NF_STAT_T, 19, "one-sample t");
    nf_value_set_stat(rmap, NF_STAT_CORREL, 28, "Pearson correlation");
    /* zmap says nothing: its key "z" names it */
    struct nf_value *weights = nf_value_new_matrix(3, fx->geom->n_voxels, fx->geom, &err);
    assert_non_null(weights);
    for (int64_t i = 0; i < 3 * fx->geom->n_voxels; i++)
        weights->u.mat.data[i] = (float)i;
    const char *rows[] = {"age", "reaction_time", NULL};
    assert_int_equal(nf_matrix_set_row_names(weights, rows, &err), 0);
    nf_value_set_stat(weights, NF_STAT_ESTIMATE, 0, "ridge weights");

    /* a pipeline in which the inputs come from node 'perm' and 'fit' */
    struct nf_node_inst nodes[3] = {{0}};
    struct nf_pipeline pl = {0};
    nodes[0].id = "perm";
    nodes[0].type = nf_node_type_find("permute");
    nodes[1].id = "fit";
    nodes[1].type = nf_node_type_find("ridge");
    assert_non_null(nodes[0].type);
    assert_non_null(nodes[1].type);
    struct nf_edge edges[] = {
        {.port = NF_EDGE_VARIADIC, .name = "p", .src = 0,
         .src_port = nf_port_index(nodes[0].type->outputs, "p")},
        {.port = NF_EDGE_VARIADIC, .name = "w", .src = 1,
         .src_port = nf_port_index(nodes[1].type->outputs, "weights")},
    };
    nodes[2].id = "maps";
    nodes[2].edges = edges;
    nodes[2].n_edges = 2;
    pl.nodes = nodes;
    pl.n_nodes = 3;

    const char *names[] = {"p", "t", "r", "z", "w"};
    struct nf_value *values[] = {pmap, tmap, rmap, zmap, weights};
    params_init(&p);
    struct nf_env env = {.pipeline_name = "test", .pipeline_hash = "0123abcd",
                         .outputs_dir = fx->outdir, .pipeline = &pl};
    struct nf_run run = {.node = &nodes[2], .params = &p, .env = &env, .n_extra = 5,
                         .extra_names = names, .extra_in = values, .out = r.out, .err = &r.err};
    struct nf_value *in[1] = {NULL};
    memset(&r, 0, sizeof r);
    run.in = in;
    run.out = r.out;
    run.err = &r.err;
    r.rc = nf_node_summarize.run_cpu(&run);
    assert_int_equal(r.rc, 0);

    /* p: intent pval, 1 outside the mask, the p values inside */
    nifti_image *im = read_header(fx, "test_stat-p_statmap.nii.gz");
    assert_int_equal(im->intent_code, 22);
    assert_string_equal(im->intent_name, "p");
    const float *data = im->data;
    for (int v = 0; v < NX * NY * NZ; v++)
        assert_true(data[v] == ((v / NX) % NY != 0 ? pv[v] : 1.0f));
    nifti_image_free(im);
    /* t: intent t-test with its degrees of freedom; zeros outside */
    im = read_header(fx, "test_stat-t_statmap.nii.gz");
    assert_int_equal(im->intent_code, 3);
    assert_true(im->intent_p1 == 19.0);
    assert_true(((const float *)im->data)[OFF(0, 0, 0)] == 0.0f);
    nifti_image_free(im);
    im = read_header(fx, "test_stat-r_statmap.nii.gz");
    assert_int_equal(im->intent_code, 2);
    assert_true(im->intent_p1 == 28.0);
    nifti_image_free(im);
    assert_int_equal(nifti_intent(fx, "test_stat-z_statmap.nii.gz"), 5);
    im = read_header(fx, "test_stat-w_statmap.nii.gz");
    assert_int_equal(im->nt, 3);
    assert_int_equal(im->intent_code, 1001);
    nifti_image_free(im);

    char *side = read_out(fx, "test_stat-p_statmap.json");
    assert_non_null(side);
    assert_non_null(strstr(side, "\"Statistic\": \"p\""));
    assert_non_null(strstr(side, "\"Description\": \"permutation p-value\""));
    assert_non_null(strstr(side, "\"Units\": \"probability\""));
    assert_non_null(strstr(side, "\"OutsideMask\": 1"));
    assert_non_null(strstr(side, "\"Key\": \"p\""));
    assert_non_null(strstr(side, "\"Source\": {\"Node\": \"perm\", \"NodeType\": \"permute\", "
                                 "\"Port\": \"p\"}"));
    assert_null(strstr(side, "VolumeNames"));
    free(side);
    side = read_out(fx, "test_stat-t_statmap.json");
    assert_non_null(side);
    assert_non_null(strstr(side, "\"Statistic\": \"t\""));
    assert_non_null(strstr(side, "\"DegreesOfFreedom\": 19"));
    assert_non_null(strstr(side, "\"IntentCode\": 3, \"IntentName\": \"ttest\", \"IntentP1\": 19"));
    assert_non_null(strstr(side, "\"OutsideMask\": 0"));
    assert_null(strstr(side, "Source"));   /* not connected in this pipeline */
    free(side);
    /* summary.json names each input's origin too (tables have no sidecar) */
    char *summary = read_out(fx, "summary.json");
    assert_non_null(summary);
    assert_non_null(strstr(summary, "\"key\": \"p\""));
    assert_non_null(strstr(summary, "\"source\": {\"Node\": \"perm\", \"NodeType\": \"permute\", \"Port\": \"p\"}"));
    assert_non_null(strstr(summary, "\"Port\": \"weights\"}"));
    int sources = 0;
    for (const char *at = strstr(summary, "\"source\""); at; at = strstr(at + 1, "\"source\""))
        sources++;
    assert_int_equal(sources, 2);   /* p and w; t, r, z are not connected */
    free(summary);
    side = read_out(fx, "test_stat-w_statmap.json");
    assert_non_null(side);
    assert_non_null(strstr(side, "\"Statistic\": \"estimate\""));
    assert_non_null(strstr(side, "\"Port\": \"weights\""));
    /* named rows by name, an unnamed one by its index */
    assert_non_null(strstr(side, "\"VolumeNames\": [\"age\", \"reaction_time\", \"2\"]"));
    free(side);
    /* every sidecar is a written file (the cache checks them on rerun) */
    const struct nf_table *files = &r.out[SUMMARIZE_OUT_FILES]->u.tab;
    int sidecars = 0;
    for (int64_t f = 0; f < files->n_rows; f++)
        sidecars += nf_path_has_suffix(files->cols[1].str[f], "_statmap.json");
    assert_int_equal(sidecars, 5);

    result_release(&r);
    for (int i = 0; i < 5; i++)
        nf_value_unref(values[i]);
    nf_params_release(&nf_node_summarize, &p);
}

static void test_p_below(void **state)
{
    struct fixture *fx = *state;
    struct summarize_params p;
    struct sum_result r;
    float pv[NX * NY * NZ];
    for (int v = 0; v < NX * NY * NZ; v++)
        pv[v] = fx->full[v] < -3.0f ? 0.001f : 0.5f;
    struct nf_value *values[] = {map_matrix(fx, pv), map_matrix(fx, fx->full)};
    const char *names[] = {"p", "t"};
    nf_value_set_stat(values[1], NF_STAT_T, 11, "one-sample t");
    params_init(&p);
    p.p_below = 0.05;
    run_summarize(fx, &p, 2, names, values, NULL, &r);
    assert_int_equal(r.rc, 0);
    /* The default target is the first map that is not the p map: t. */
    assert_true(exists_in(fx, "test_stat-t_clusters.tsv"));
    assert_int_equal(nifti_intent(fx, "test_stat-t_statmap.nii.gz"), 3);
    assert_int_equal(nifti_intent(fx, "test_stat-t_desc-thresholded_statmap.nii.gz"), 3);
    char *side = read_out(fx, "test_stat-t_desc-thresholded_statmap.json");
    assert_non_null(side);
    assert_non_null(strstr(side, "\"Statistic\": \"t\""));
    assert_non_null(strstr(side, "\"Thresholded\": {"));
    assert_non_null(strstr(side, "\"PKey\": \"p\""));
    free(side);
    assert_int_equal(r.out[SUMMARIZE_OUT_TABLE]->u.tab.n_rows, 1);
    assert_true(num_at(r.out[SUMMARIZE_OUT_TABLE], 1, 0) == 4);
    assert_true(num_at(r.out[SUMMARIZE_OUT_TABLE], 2, 0) == -7.0);
    result_release(&r);
    nf_value_unref(values[0]);
    nf_value_unref(values[1]);
    nf_params_release(&nf_node_summarize, &p);
}

/* Equal values: the peak is the first voxel in C order over (i, j, k) — the same
 * for a volume (storage order differs) and a masked matrix. */
static void test_peak_ties(void **state)
{
    struct fixture *fx = *state;
    struct summarize_params p;
    struct sum_result r;
    float flat[NX * NY * NZ] = {0};
    flat[OFF(6, 4, 4)] = 3.0f;   /* earlier in storage order */
    flat[OFF(5, 5, 5)] = 3.0f;   /* earlier in C order; diagonal neighbour */
    struct nf_value *maps[] = {map_matrix(fx, flat), map_volume(fx, flat)};
    const char *names[] = {"flat"};
    params_init(&p);
    p.threshold = 1.0;
    for (int m = 0; m < 2; m++) {
        run_summarize(fx, &p, 1, names, &maps[m], NULL, &r);
        assert_int_equal(r.rc, 0);
        assert_int_equal(r.out[SUMMARIZE_OUT_TABLE]->u.tab.n_rows, 1);
        assert_true(num_at(r.out[SUMMARIZE_OUT_TABLE], 1, 0) == 2);
        assert_peak(fx, r.out[SUMMARIZE_OUT_TABLE], 0, 5, 5, 5);
        result_release(&r);
        nf_value_unref(maps[m]);
    }
    nf_params_release(&nf_node_summarize, &p);
}

static void test_errors(void **state)
{
    struct fixture *fx = *state;
    struct summarize_params p;
    struct sum_result r;
    struct nf_error err = {0};
    struct nf_value *m = map_matrix(fx, fx->full);
    struct nf_value *plain = nf_value_new_matrix(1, 5, NULL, &err);
    const char *names[] = {"score", "plain"};
    struct nf_value *values[] = {m, plain};

    /* Start from a clean folder: no JSON may appear after a failure. */
    char *cmd = nf_asprintf("rm -rf '%s'", fx->outdir);
    assert_int_equal(system(cmd), 0);
    free(cmd);

    params_init(&p);
    p.threshold = 1.0;
    p.threshold_key = strdup("zmap");
    run_summarize(fx, &p, 2, names, values, NULL, &r);
    assert_true(r.rc < 0);
    assert_null(r.out[0]);
    assert_null(r.out[1]);
    assert_non_null(strstr(r.err.msg, "'zmap'"));
    assert_non_null(strstr(r.err.msg, "'score', 'plain'"));
    assert_string_equal(r.err.node, "maps");
    assert_int_equal(r.err.loc.line, 12);
    assert_false(exists_in(fx, "summary.json"));
    assert_false(exists_in(fx, "dataset_description.json"));

    /* A matrix without geometry cannot be thresholded. */
    free(p.threshold_key);
    p.threshold_key = strdup("plain");
    run_summarize(fx, &p, 2, names, values, NULL, &r);
    assert_true(r.rc < 0);
    assert_non_null(strstr(r.err.msg, "geometry"));
    assert_false(exists_in(fx, "summary.json"));

    /* p_key naming a missing input. */
    free(p.threshold_key);
    p.threshold_key = NULL;
    p.threshold = NAN;
    p.p_below = 0.05;
    run_summarize(fx, &p, 2, names, values, NULL, &r);
    assert_true(r.rc < 0);
    assert_non_null(strstr(r.err.msg, "p_key 'p'"));

    /* An atlas on another grid. */
    p.p_below = NAN;
    p.threshold = 1.0;
    struct nf_grid other = fx->grid;
    other.affine[0][3] += 1.0;
    struct nf_value *atlas = nf_value_new_volume(&other, 3, 1, &err);
    run_summarize(fx, &p, 1, names, values, atlas, &r);
    assert_true(r.rc < 0);
    assert_non_null(strstr(r.err.msg, "atlas"));
    assert_false(exists_in(fx, "summary.json"));
    nf_value_unref(atlas);

    /* Keys that collide once made BIDS-safe. */
    const char *clash[] = {"p_fwe", "pFwe"};
    struct nf_value *two[] = {m, m};
    p.threshold = NAN;
    run_summarize(fx, &p, 2, clash, two, NULL, &r);
    assert_true(r.rc < 0);
    assert_non_null(strstr(r.err.msg, "stat-pFwe"));

    /* A NULL input value is reported, not dereferenced. */
    struct nf_value *none[] = {NULL};
    run_summarize(fx, &p, 1, names, none, NULL, &r);
    assert_true(r.rc < 0);

    nf_value_unref(m);
    nf_value_unref(plain);
    nf_params_release(&nf_node_summarize, &p);
}

static void test_resolve_and_check(void **state)
{
    (void)state;
    struct summarize_params p;
    struct nf_shape out[2], extra[1] = {{.kind = NF_KIND_MATRIX, .dim = {1, 50}}};
    struct nf_error err = {0};
    const char *names[] = {"score"};
    params_init(&p);
    struct nf_resolve r = {.params = &p, .n_extra = 1, .extra_names = names,
                           .extra_in = extra, .out = out, .err = &err};
    assert_int_equal(nf_node_summarize.resolve(&r), 0);
    assert_int_equal(out[SUMMARIZE_OUT_TABLE].kind, NF_KIND_TABLE);
    assert_int_equal(out[SUMMARIZE_OUT_TABLE].dim[1], SUM_CLUSTER_COLUMNS);
    /* Thresholding a matrix known to have no geometry fails at plan time. */
    p.threshold = 2.0;
    p.threshold_key = strdup("score");
    assert_true(nf_node_summarize.resolve(&r) < 0);
    extra[0].has_geom = true;
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_node_summarize.resolve(&r), 0);
    /* ... but not one holding several maps, nor a collection. */
    extra[0].dim[0] = 3;
    assert_true(nf_node_summarize.resolve(&r) < 0);
    assert_non_null(strstr(err.msg, "3 maps"));
    extra[0] = (struct nf_shape){.kind = NF_KIND_COLLECTION, .item_kind = NF_KIND_MATRIX};
    memset(&err, 0, sizeof err);
    assert_true(nf_node_summarize.resolve(&r) < 0);

    /* check(): threshold_key without a threshold. */
    struct nf_diags d;
    nf_diags_init(&d);
    p.threshold = NAN;
    nf_node_summarize.check(&p, NULL, "maps", &d);
    assert_int_equal(d.n, 1);
    nf_diags_release(&d);
    nf_params_release(&nf_node_summarize, &p);
}

int main(void)
{
    nf_log_quiet = true;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bids_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clusters_matrix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clusters_volume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atlas_regions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_regions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subpeak_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tails_and_min_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_semantics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_p_below, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peak_ties, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test(test_resolve_and_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
