/* test_ridge_banded_ckpt.c — banded ridge's checkpoints (ridge_banded.c):
 * a run killed at every fault point of its checkpoint commits in turn (a
 * forked child with NLFLOW_KILL_AT=N dies by SIGKILL right before or after
 * its k-th commit, as `kill -9` would) and then resumed from the cache must
 * end with the outputs of an uninterrupted run without a cache, bit for bit,
 * on another thread count; the sweep must have killed runs both within the
 * candidates and within the refit. Resuming must really use the chunks: a
 * doctored state chunk (a voxel's alpha changed, every candidate done) and a
 * doctored refit chunk show up in the outputs, and a chunk cut short or with
 * a broken cv_scores chain is ignored (the outputs of a fresh run).
 * test_ridge_banded.c checks the outputs themselves against a direct
 * enumeration in double precision.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/exec_cache.h"
#include "core/rng.h"
#include "core/switches.h"
#include "core/util.h"
#include "pipeline.h"
#include "ridge/ridge.h"
#include "ridge/ridge_internal.h"

enum { N = 48, P = 12, SPLIT = 5, V = 700, NA = 4, C = 12, MAX_KILL = 2000 };
static const double alphas[NA] = { 0.1, 1, 10, 100 };

static float X[N * P], Y[N * V];
static char tmpdir[256];

/* Voxels driven by band a, band b or both in varying proportions, so that
 * they choose different candidates (several refit groups). */
static void make_data(void)
{
    uint64_t st = 2024;
    for (int i = 0; i < N * P; i++)
        X[i] = (float)nf_rand_normal(&st);
    for (int v = 0; v < V; v++) {
        double wa = nf_rand_uniform(&st) * 2, wb = nf_rand_uniform(&st) * (v % 2 ? 3 : 0.3);
        for (int i = 0; i < N; i++) {
            double y = 0.3 + 1.5 * nf_rand_normal(&st);
            for (int j = 0; j < P; j++)
                y += (j < SPLIT ? wa : wb) * X[i * P + j] * (1 + 0.05 * j);
            Y[i * V + v] = (float)y;
        }
    }
}

static void params(struct ridge_params *prm)
{
    nf_params_defaults(&nf_node_ridge, prm);
    free(prm->alphas.v);
    prm->alphas.v = malloc(sizeof alphas);
    memcpy(prm->alphas.v, alphas, sizeof alphas);
    prm->alphas.n = NA;
    prm->cv = 3;
    prm->n_iter = C;
    prm->seed = 5;
    prm->bands.v = calloc(2, sizeof(char *));
    prm->bands.v[0] = strdup("a = 0:5");
    prm->bands.v[1] = strdup("b = 5:12");
    prm->bands.n = 2;
}

/* One run of the node on `threads` threads, checkpointing into ck (NULL: none). */
static int run_banded(struct nf_checkpoint *ck, int threads, struct nf_value **out, struct nf_error *err)
{
    struct ridge_params prm;
    params(&prm);
    struct nf_value *x = nf_value_new_matrix(N, P, NULL, err), *y = nf_value_new_matrix(N, V, NULL, err);
    memcpy(x->u.mat.data, X, sizeof X);
    memcpy(y->u.mat.data, Y, sizeof Y);
    struct nf_value *in[RIDGE_N_IN] = { x, y, NULL };
    bool wanted[RIDGE_N_OUT] = { true, true, true, false, true, true, true, true };
    struct nf_env env = { .threads = threads, .seed = 7 };
    struct nf_run run = { .params = &prm, .env = &env, .in = in, .out = out, .err = err, .wanted = wanted,
                          .ckpt = ck };
    int rc = nf_node_ridge.run_cpu(&run);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_ridge, &prm);
    return rc;
}

static void release(struct nf_value **out)
{
    for (int o = 0; o < RIDGE_N_OUT; o++) {
        nf_value_unref(out[o]);
        out[o] = NULL;
    }
}

/* Same outputs, bit for bit; a voxel may be left out (-1: none). */
static void assert_same(struct nf_value **a, struct nf_value **b, int skip_voxel)
{
    for (int o = 0; o < RIDGE_N_OUT; o++) {
        assert_true((a[o] == NULL) == (b[o] == NULL));
        if (!a[o])
            continue;
        const struct nf_matrix *ma = &a[o]->u.mat, *mb = &b[o]->u.mat;
        assert_int_equal(ma->rows, mb->rows);
        assert_int_equal(ma->cols, mb->cols);
        for (int64_t r = 0; r < ma->rows; r++)
            for (int64_t v = 0; v < ma->cols; v++)
                if (v != skip_voxel)
                    assert_memory_equal(&ma->data[r * V + v], &mb->data[r * V + v], sizeof(float));
    }
}

static char *cache_path(void)
{
    return nf_asprintf("%s/cache.db", tmpdir);
}

static struct nf_cache *open_cache(void)
{
    struct nf_error err = { 0 };
    struct nf_cache *cache = NULL;
    char *path = cache_path();
    assert_int_equal(nf_cache_open(path, NULL, &cache, &err), 0);
    free(path);
    return cache;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-banded-ckpt-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The candidates committed in key's state chunk (0: none). */
static int64_t state_done(struct nf_checkpoint *ck)
{
    void *data = NULL;
    size_t bytes = 0;
    struct nf_error err = { 0 };
    struct nf_ridge_band_state sh = { 0 };
    if (nf_ckpt_get(ck, NF_RIDGE_BAND_CKPT_STATE, &data, &bytes, &err) == 1 && bytes >= sizeof sh)
        memcpy(&sh, data, sizeof sh);
    free(data);
    return sh.done;
}

static bool has_chunk(struct nf_checkpoint *ck, int64_t index)
{
    void *data = NULL;
    size_t bytes = 0;
    struct nf_error err = { 0 };
    int got = nf_ckpt_get(ck, index, &data, &bytes, &err);
    free(data);
    return got == 1;
}

/* Kill a run at fault point 1, 2, 3, ... (two per commit) until one
 * finishes; each time resume it and compare with the uninterrupted run. */
static void test_kill_and_resume(void **state)
{
    (void)state;
    struct nf_value *ref[RIDGE_N_OUT] = { 0 }, *out[RIDGE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_banded(NULL, 2, ref, &err), 0);
    int killed = 0, within_cv = 0, within_refit = 0;
    bool finished = false;
    for (long at = 1; at <= MAX_KILL && !finished; at++) {
        struct nf_key key = { 3, (uint64_t)at };
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {   /* the run to kill: its own connection to the cache */
            char n[32];
            snprintf(n, sizeof n, "%ld", at);
            setenv("NLFLOW_KILL_AT", n, 1);
            nf_switches_reload();
            struct nf_cache *cache = open_cache();
            struct nf_checkpoint ck = { cache, key, false, 0, 0, 0 };
            struct nf_value *part[RIDGE_N_OUT] = { 0 };
            struct nf_error e = { 0 };
            _exit(run_banded(&ck, 3, part, &e) == 0 ? 0 : 1);
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status)) {
            assert_int_equal(WTERMSIG(status), SIGKILL);
            killed++;
        } else {
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            finished = true;   /* fewer fault points than `at`: the sweep is complete */
        }
        struct nf_cache *cache = open_cache();
        struct nf_checkpoint ck = { cache, key, false, 0, 0, 0 };
        int64_t done = state_done(&ck);
        within_cv += done > 0 && done < C;
        for (int64_t c = 0; done == C && c < C; c++)
            if (has_chunk(&ck, 1 + C + c)) {
                within_refit++;
                break;
            }
        assert_int_equal(run_banded(&ck, 1, out, &err), 0);
        assert_same(ref, out, -1);
        release(out);
        nf_cache_close(cache);
    }
    assert_true(finished);
    assert_true(killed >= 6);        /* candidate 0, the last candidate, a refit group: 2 points each */
    assert_true(within_cv >= 1);     /* killed with some candidates committed, not all */
    assert_true(within_refit >= 1);  /* killed with some refit groups committed */
    release(ref);
}

/* Copy chunk `index` from one key to another, through edit (may be NULL). */
static void copy_chunk(struct nf_checkpoint *from, struct nf_checkpoint *to, int64_t index,
                       void (*edit)(void *data, size_t *bytes))
{
    void *data = NULL;
    size_t bytes = 0;
    struct nf_error err = { 0 };
    assert_int_equal(nf_ckpt_get(from, index, &data, &bytes, &err), 1);
    if (edit)
        edit(data, &bytes);
    nf_ckpt_put(to, index, data, bytes, &err);
    free(data);
}

/* Voxel 0 gets another alpha and an unbeatable score. */
static void doctor_state(void *data, size_t *bytes)
{
    struct nf_ridge_band_state sh;
    memcpy(&sh, data, sizeof sh);
    assert_int_equal(sh.done, C);
    assert_int_equal(*bytes, sizeof sh + (size_t)V * 12);
    unsigned char *at = (unsigned char *)data + sizeof sh;
    float big = 1e30f;
    int32_t a;
    memcpy(at, &big, sizeof big);
    memcpy(&a, at + (size_t)V * 8, sizeof a);
    a = (a + 1) % NA;
    memcpy(at + (size_t)V * 8, &a, sizeof a);
}

static void cut_short(void *data, size_t *bytes)
{
    (void)data;
    *bytes -= 4;
}

/* Every refit weight of the group doubled. */
static void doctor_refit(void *data, size_t *bytes)
{
    struct nf_ridge_band_refit rh;
    memcpy(&rh, data, sizeof rh);
    float *w = (float *)((unsigned char *)data + sizeof rh);
    for (int64_t i = 0; i < rh.p * rh.nv; i++)
        w[i] *= 2;
    assert_int_equal(*bytes, sizeof rh + (size_t)(rh.p * rh.nv) * sizeof(float));
}

/* The cv_scores chunks from candidate 0 up to `done` of key `from`. */
static void copy_rows(struct nf_checkpoint *from, struct nf_checkpoint *to, int64_t done)
{
    for (int64_t c0 = 0; c0 < done;) {
        void *data = NULL;
        size_t bytes = 0;
        struct nf_error err = { 0 };
        struct nf_ridge_band_rows rh;
        assert_int_equal(nf_ckpt_get(from, 1 + c0, &data, &bytes, &err), 1);
        memcpy(&rh, data, sizeof rh);
        assert_int_equal(rh.c0, c0);
        nf_ckpt_put(to, 1 + c0, data, bytes, &err);
        free(data);
        c0 = rh.c1;
    }
}

static void test_doctored_chunks(void **state)
{
    (void)state;
    struct nf_value *ref[RIDGE_N_OUT] = { 0 }, *out[RIDGE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    struct nf_cache *cache = open_cache();
    struct nf_checkpoint full = { cache, { 4, 1 }, false, 0, 0, 0 };
    assert_int_equal(run_banded(NULL, 2, ref, &err), 0);
    assert_int_equal(run_banded(&full, 2, out, &err), 0);   /* checkpointing changes nothing */
    assert_same(ref, out, -1);
    release(out);
    assert_int_equal(state_done(&full), C);

    /* the state: voxel 0's alpha as doctored, its score unbeatable, no candidate recomputed */
    struct nf_checkpoint st = { cache, { 4, 2 }, false, 0, 0, 0 };
    copy_rows(&full, &st, C);
    copy_chunk(&full, &st, NF_RIDGE_BAND_CKPT_STATE, doctor_state);
    assert_int_equal(run_banded(&st, 2, out, &err), 0);
    int a_ref = 0;
    while (a_ref < NA && (float)alphas[a_ref] != ref[RIDGE_OUT_ALPHA]->u.mat.data[0])
        a_ref++;
    assert_true(a_ref < NA);
    assert_true(out[RIDGE_OUT_ALPHA]->u.mat.data[0] == (float)alphas[(a_ref + 1) % NA]);
    assert_true(out[RIDGE_OUT_SCORE]->u.mat.data[0] == 1e30f);
    assert_memory_equal(out[RIDGE_OUT_ALPHA]->u.mat.data + 1, ref[RIDGE_OUT_ALPHA]->u.mat.data + 1,
                        (V - 1) * sizeof(float));
    release(out);

    /* a refit group: its weights as doctored, the other groups' refit again */
    struct nf_checkpoint rf = { cache, { 4, 3 }, false, 0, 0, 0 };
    int32_t group = (int32_t)-1;
    for (int64_t c = 0; c < C && group < 0; c++)
        if (has_chunk(&full, 1 + C + c))
            group = (int32_t)c;
    assert_true(group >= 0);
    copy_rows(&full, &rf, C);
    copy_chunk(&full, &rf, NF_RIDGE_BAND_CKPT_STATE, NULL);
    copy_chunk(&full, &rf, 1 + C + group, doctor_refit);
    assert_int_equal(run_banded(&rf, 1, out, &err), 0);
    int doubled = 0, same = 0;
    for (int64_t v = 0; v < V; v++) {
        float w = out[RIDGE_OUT_WEIGHTS]->u.mat.data[v], r = ref[RIDGE_OUT_WEIGHTS]->u.mat.data[v];
        doubled += w == 2 * r && r != 0;
        same += w == r;
    }
    assert_true(doubled >= 1);
    assert_int_equal(doubled + same, V);
    release(out);

    /* a state chunk cut short, and a cv_scores chain with a gap: not used */
    struct nf_checkpoint bad = { cache, { 4, 4 }, false, 0, 0, 0 };
    copy_rows(&full, &bad, C);
    copy_chunk(&full, &bad, NF_RIDGE_BAND_CKPT_STATE, cut_short);
    assert_int_equal(run_banded(&bad, 3, out, &err), 0);
    assert_same(ref, out, -1);
    release(out);
    struct nf_checkpoint gap = { cache, { 4, 5 }, false, 0, 0, 0 };
    copy_chunk(&full, &gap, NF_RIDGE_BAND_CKPT_STATE, doctor_state);   /* would show in voxel 0 if used */
    assert_int_equal(run_banded(&gap, 3, out, &err), 0);
    assert_same(ref, out, -1);
    release(out);

    release(ref);
    nf_cache_close(cache);
}

int main(void)
{
    nf_log_quiet = true;
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_and_resume),
        cmocka_unit_test(test_doctored_chunks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
