/* test_moments.c — the moments node and the engine's streaming fold: per-voxel
 * mean/std over all images of all subjects against a direct double-precision
 * computation, the same results whether the collection is folded item by item
 * (mask over a lazy glob feeding moments) or held whole, and a plan that keeps
 * only the items in flight. */
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
#include "pipeline.h"
#include "core/util.h"
#include "core/rng.h"

static char tmpdir[256];
enum { NX = 7, NY = 6, NZ = 5, NSUB = 5 };
static const int64_t nt_of[NSUB] = { 9, 4, 12, 7, 1 };
static float *subject[NSUB];
static float mask[NX * NY * NZ];

static float value(int s, int64_t v, int64_t t)
{
    /* deterministic, with a per-voxel offset large against the spread so that
     * a naive sum-of-squares formula would lose digits */
    uint64_t st = (uint64_t)(s * 1000003 + v * 7919 + t);
    return (float)(1000.0 + v + nf_rand_normal(&st) * (1 + v % 5));
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-moments-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    struct nf_error err = { 0 };
    struct nf_grid g = { .dim = { NX, NY, NZ }, .pixdim = { 3, 3, 3 }, .sform_code = 1 };
    for (int i = 0; i < 3; i++)
        g.affine[i][i] = 3;
    g.affine[3][3] = 1;
    int64_t nvox = NX * NY * NZ;
    for (int64_t v = 0; v < nvox; v++)
        mask[v] = (v % 4 != 1) ? 1.0f : 0.0f;
    char *mpath = nf_asprintf("%s/mask.nii.gz", tmpdir);
    if (nf_nifti_write(mpath, &g, 1, mask, 0, "t", &err) < 0)
        return -1;
    free(mpath);
    for (int s = 0; s < NSUB; s++) {
        subject[s] = calloc((size_t)(nvox * nt_of[s]), sizeof(float));
        for (int64_t t = 0; t < nt_of[s]; t++)
            for (int64_t v = 0; v < nvox; v++)
                subject[s][t * nvox + v] = value(s, v, t);
        char *path = nf_asprintf("%s/sub-%02d_bold.nii.gz", tmpdir, s + 1);
        if (nf_nifti_write(path, &g, nt_of[s], subject[s], 0, "t", &err) < 0)
            return -1;
        free(path);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int s = 0; s < NSUB; s++)
        free(subject[s]);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Run a pipeline text; return the two output maps read back from disk. */
static struct nf_pipeline *run_pipeline(const char *name, const char *text, struct nf_value **mean,
                                        struct nf_value **sd)
{
    char *path = nf_asprintf("%s/%s.yaml", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    struct nf_diags d;
    struct nf_error err = { 0 };
    nf_diags_init(&d);
    struct nf_pipeline *p = nf_pipeline_load(path, NULL, &d);
    assert_non_null(p);
    assert_int_equal(nf_resolve_shapes(p, &d), 0);
    assert_int_equal(nf_place(p, false, &d), 0);
    assert_int_equal(nf_plan_memory(p, &d), 0);
    nf_log_quiet = true;
    struct nf_exec_opts o = { .threads = 3 };
    int rc = nf_execute(p, &o, &err);
    if (rc < 0)
        nf_error_print(&err);
    assert_int_equal(rc, 0);
    char *m = nf_asprintf("%s/%s/%s_stat-mean_statmap.nii.gz", tmpdir, name, name);
    char *s = nf_asprintf("%s/%s/%s_stat-std_statmap.nii.gz", tmpdir, name, name);
    *mean = nf_nifti_read(m, &err);
    *sd = nf_nifti_read(s, &err);
    assert_non_null(*mean);
    assert_non_null(*sd);
    free(m);
    free(s);
    free(path);
    nf_diags_release(&d);
    return p;
}

static void check_against_direct(const struct nf_value *mean, const struct nf_value *sd)
{
    int64_t nvox = NX * NY * NZ;
    for (int64_t v = 0; v < nvox; v++) {
        if (mask[v] == 0) {
            assert_true(mean->u.vol.data[v] == 0 && sd->u.vol.data[v] == 0);
            continue;
        }
        double sum = 0, n = 0, ss = 0;
        for (int s = 0; s < NSUB; s++)
            for (int64_t t = 0; t < nt_of[s]; t++) {
                sum += subject[s][t * nvox + v];
                n++;
            }
        double mu = sum / n;
        for (int s = 0; s < NSUB; s++)
            for (int64_t t = 0; t < nt_of[s]; t++) {
                double dlt = subject[s][t * nvox + v] - mu;
                ss += dlt * dlt;
            }
        double sdv = sqrt(ss / n);
        assert_true(fabs(mean->u.vol.data[v] - mu) <= 1e-6 * fabs(mu));
        assert_true(fabs(sd->u.vol.data[v] - sdv) <= 1e-5 * sdv);
    }
}

static void test_streamed_equals_direct_and_whole(void **state)
{
    (void)state;
    struct nf_value *m1, *s1, *m2, *s2;
    /* streamed: mask is mapped over a lazy glob and moments is its only consumer */
    struct nf_pipeline *p = run_pipeline("streamed",
        "nlflow: 1\nname: streamed\nsettings: {outputs: streamed, memory: 64MiB}\nnodes:\n"
        "  bold: {type: load, path: 'sub-*_bold.nii.gz', lazy: true}\n"
        "  brain: {type: load, path: mask.nii.gz}\n"
        "  voxels: {type: mask, in: {data: bold, mask: brain}}\n"
        "  stats: {type: moments, in: {data: voxels}}\n"
        "  maps: {type: summarize, in: {mean: stats.mean, std: stats.std}}\n", &m1, &s1);
    const struct nf_node_inst *vox = &p->nodes[nf_node_index(p, "voxels")];
    assert_true(vox->mapped);
    assert_int_equal(vox->fold_into, nf_node_index(p, "stats"));
    assert_int_equal(vox->est_out, 0);   /* the collection is never held whole */
    nf_pipeline_free(p);
    check_against_direct(m1, s1);
    /* whole: a second consumer of voxels prevents folding; in-memory load */
    p = run_pipeline("whole",
        "nlflow: 1\nname: whole\nsettings: {outputs: whole, memory: 64MiB}\nnodes:\n"
        "  bold: {type: load, path: 'sub-*_bold.nii.gz', lazy: false}\n"
        "  brain: {type: load, path: mask.nii.gz}\n"
        "  voxels: {type: mask, in: {data: bold, mask: brain}}\n"
        "  stats: {type: moments, in: {data: voxels}}\n"
        "  maps: {type: summarize, in: {mean: stats.mean, std: stats.std, voxels: voxels}}\n", &m2, &s2);
    assert_int_equal(p->nodes[nf_node_index(p, "voxels")].fold_into, -1);
    nf_pipeline_free(p);
    int64_t nvox = NX * NY * NZ;
    /* same merge order, same arithmetic: identical bits */
    assert_memory_equal(m1->u.vol.data, m2->u.vol.data, (size_t)nvox * sizeof(float));
    assert_memory_equal(s1->u.vol.data, s2->u.vol.data, (size_t)nvox * sizeof(float));
    nf_value_unref(m1);
    nf_value_unref(s1);
    nf_value_unref(m2);
    nf_value_unref(s2);
}

/* A failure inside the stream stops the run cleanly (no leak, no hang). */
static void test_stream_failure(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    /* a subject whose header is fine but whose data is cut short: only
     * reading it, mid-stream, finds the problem */
    char *bad = nf_asprintf("%s/sub-99_bold.nii.gz", tmpdir);
    struct nf_grid g = { .dim = { NX, NY, NZ }, .pixdim = { 3, 3, 3 }, .sform_code = 1 };
    for (int i = 0; i < 3; i++)
        g.affine[i][i] = 3;
    g.affine[3][3] = 1;
    assert_int_equal(nf_nifti_write(bad, &g, nt_of[2], subject[2], 0, "t", &err), 0);
    FILE *f = fopen(bad, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(bad, size * 6 / 10), 0);
    char *path = nf_asprintf("%s/bad.yaml", tmpdir);
    f = fopen(path, "w");
    fputs("nlflow: 1\nsettings: {outputs: bad}\nnodes:\n"
          "  bold: {type: load, path: 'sub-*_bold.nii.gz', lazy: true}\n"
          "  brain: {type: load, path: mask.nii.gz}\n"
          "  voxels: {type: mask, in: {data: bold, mask: brain}}\n"
          "  stats: {type: moments, in: {data: voxels}}\n", f);
    fclose(f);
    struct nf_diags d;
    nf_diags_init(&d);
    struct nf_pipeline *p = nf_pipeline_load(path, NULL, &d);
    assert_non_null(p);
    assert_int_equal(nf_resolve_shapes(p, &d), 0);
    assert_int_equal(nf_place(p, false, &d), 0);
    assert_int_equal(nf_plan_memory(p, &d), 0);
    assert_true(p->nodes[nf_node_index(p, "voxels")].fold_into >= 0);
    struct nf_exec_opts o = { .threads = 2 };
    assert_int_equal(nf_execute(p, &o, &err), NF_EIO);
    assert_non_null(strstr(err.msg, "sub-99_bold.nii.gz"));
    assert_non_null(strstr(err.msg, "truncated"));
    nf_pipeline_free(p);
    nf_diags_release(&d);
    unlink(bad);
    free(bad);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streamed_equals_direct_and_whole),
        cmocka_unit_test(test_stream_failure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
