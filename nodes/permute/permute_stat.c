/* permute_stat.c — the permute node's statistic transform and thread team,
 * shared by the CPU node (permute.c), the GPU node (permute_gpu.c) and the
 * TFCE and cluster maps (permute_tfce.c): the GEMM value of a permutation row
 * and a voxel → the transformed statistic that the node compares, and a
 * function run over a team of threads, the Benjamini-Hochberg q-values and
 * the key/value `info` table (also of test: glm, permute_glm.c).
 * A file of its own so that the files that use them do not import each
 * other. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/util.h"

#include "permute.h"
#include "permute_internal.h"

/* The transformed statistic of GEMM values g[0..len) of voxels v0.. (in place).
 * Written as simple loops over float arrays so that the compiler vectorises. */
void nf_perm_transform(const struct perm_ctx *c, float *g, int64_t v0, int64_t len)
{
    const float a = (float)c->a, cc = (float)c->c;
    const float *shift = c->shift + v0, *ss = c->ss + v0, *fl = c->floor_ + v0, *cap = c->cap + v0;
    const int tail = c->tail;
    if (c->t_stat) {
        for (int64_t v = 0; v < len; v++) {
            float d = a * g[v] - shift[v];
            float den = ss[v] - cc * d * d;
            den = den > fl[v] ? den : fl[v];
            float ad = d < 0 ? -d : d;
            float q = (tail == PERM_TAIL_TWO ? ad : tail == PERM_TAIL_UPPER ? d : -d) * ad / den;
            g[v] = q < cap[v] ? q : cap[v];
        }
    } else {
        for (int64_t v = 0; v < len; v++) {
            float d = a * g[v] - shift[v];
            float q = tail == PERM_TAIL_TWO ? (d < 0 ? -d : d) : tail == PERM_TAIL_UPPER ? d : -d;
            g[v] = q < cap[v] ? q : cap[v];
        }
    }
}

void nf_perm_run_threads(void *(*fn)(void *), void *arg, int threads)
{
    pthread_t tids[64];
    int started = 0;
    for (int t = 0; t < threads - 1 && t < 64; t++)
        if (pthread_create(&tids[t], NULL, fn, arg) == 0)
            started++;
    fn(arg);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
}

/* BH q-values of the p of tested voxels (zero-variance voxels: q = 1). */
int nf_perm_bh_qvalues(const float *p, const bool *flat, int64_t V, float *q, struct nf_error *err)
{
    float *tested = nf_malloc((size_t)(V ? V : 1) * sizeof *tested);
    int64_t *idx = nf_malloc((size_t)(V ? V : 1) * sizeof *idx), *order = nf_malloc((size_t)(V ? V : 1) * sizeof *order);
    int rc = 0;
    if (!tested || !idx || !order) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    int64_t m = 0;
    for (int64_t v = 0; v < V; v++) {
        q[v] = 1.0f;
        if (!flat[v]) {
            tested[m] = p[v];
            idx[m++] = v;
        }
    }
    /* ascending p, ties in voxel order (the order does not change the
     * q-values: tied p-values get the same one) */
    if (nf_argsort_f32(tested, m, order) < 0) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    double run_min = 1.0;
    for (int64_t i = m - 1; i >= 0; i--) {
        double val = (double)tested[order[i]] * (double)m / (double)(i + 1);
        if (val < run_min)
            run_min = val;
        q[idx[order[i]]] = (float)run_min;
    }
fail:
    free(tested);
    free(idx);
    free(order);
    return rc;
}

void nf_perm_spatial_wanted(const struct permute_params *prm, const struct nf_run *run, bool *tfce,
                            bool *clusters)
{
    *tfce = prm->tfce && (nf_run_wants(run, PERMUTE_OUT_TFCE) || nf_run_wants(run, PERMUTE_OUT_P_TFCE_FWE) ||
                          nf_run_wants(run, PERMUTE_OUT_NULL_MAX_TFCE));
    *clusters = false;
    for (int o = PERMUTE_OUT_CLUSTER_P_FWE; o <= PERMUTE_OUT_NULL_MAX_CLUSTER_MASS; o++)
        *clusters |= nf_perm_clusters_asked(prm) && nf_run_wants(run, o);
}

int nf_perm_key_value_table(const char *const *keys, const char *const *vals, int rows, struct nf_value **out,
                            struct nf_error *err)
{
    struct nf_value *t = nf_value_new_table(rows, 2, err);
    if (!t)
        return err->code;
    int rc = nf_table_column_string(t, 0, "key", err);
    if (!rc)
        rc = nf_table_column_string(t, 1, "value", err);
    for (int i = 0; !rc && i < rows; i++) {
        t->u.tab.cols[0].str[i] = nf_strdup(keys[i]);
        t->u.tab.cols[1].str[i] = nf_strdup(vals[i]);
        if (!t->u.tab.cols[0].str[i] || !t->u.tab.cols[1].str[i])
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    if (rc) {
        nf_value_unref(t);
        return rc;
    }
    *out = t;
    return 0;
}
