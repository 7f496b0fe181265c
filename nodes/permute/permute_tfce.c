/* permute_tfce.c — threshold-free cluster enhancement in the permute node:
 * the observed map's TFCE and the max-TFCE FWE p-value
 * p_tfce_fwe(v) = (1 + #{permutations whose max |TFCE| >= |TFCE(v)|}) / (N + 1)
 * (count / total when every permutation is enumerated, the identity included,
 * as p_fwe).
 *
 * TFCE needs each permutation's whole statistic map, which the fused tile
 * kernel never materialises (it keeps counts and maxima only). So after the
 * tile pass of a chunk, the chunk's rows of R are multiplied again, a few rows
 * at a time over threads, by a small float kernel, turned into the signed
 * statistic by the node's own transform (nf_perm_transform with the upper
 * tail gives the signed q, nf_perm_null_units its value in the statistic's
 * units), and reduced to their max |TFCE| (nf_tfce_max, tfce.c). The observed
 * map goes through the very same kernel and transform: the identity
 * permutation of an exact test and a mirror-image sign flip give the same
 * bits as the observed map, so those ties count exactly, with no tie window.
 * The kernel sums every element over the subjects in order whatever the rows
 * beside it, so the maps do not depend on the chunk or thread count. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/util.h"

#include "permute.h"
#include "permute_internal.h"

enum { TFCE_ROWS = 8, TFCE_BLOCK = 512 };

typedef float nf_v8f __attribute__((vector_size(32)));

/* G (nr x V) = R (nr x n) · D (n x V) in float, each element summed over the
 * subjects in order by the same instructions whichever rows share its block:
 * voxel blocks that stay in L1, TFCE_ROWS rows per pass over D. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void rows_gemm(const struct perm_ctx *c, const float *R, int64_t nr, float *G)
{
    const int64_t n = c->n, V = c->V;
    for (int64_t b = 0; b < V; b += TFCE_BLOCK) {
        const int64_t len = V - b < TFCE_BLOCK ? V - b : TFCE_BLOCK;
        for (int64_t r0 = 0; r0 < nr; r0 += TFCE_ROWS) {
            const int64_t rows = nr - r0 < TFCE_ROWS ? nr - r0 : TFCE_ROWS;
            for (int64_t r = 0; r < rows; r++)
                memset(G + (r0 + r) * V + b, 0, (size_t)len * sizeof *G);
            for (int64_t j = 0; j < n; j++) {
                const float *restrict d = c->D + j * V + b;
                for (int64_t r = 0; r < rows; r++) {
                    const float w = R[(r0 + r) * n + j];
                    float *restrict a = G + (r0 + r) * V + b;
                    int64_t v = 0;
                    for (; v + 8 <= len; v += 8) {   /* explicit vectors: -O2 leaves this loop scalar */
                        nf_v8f av, dv;
                        memcpy(&av, a + v, sizeof av);
                        memcpy(&dv, d + v, sizeof dv);
                        av += w * dv;
                        memcpy(a + v, &av, sizeof av);
                    }
                    for (; v < len; v++)
                        a[v] += w * d[v];
                }
            }
        }
    }
}

/* GEMM values of one row → the signed statistic (t, mean, difference, r) in
 * place; zero-variance voxels 0. up: the context with the upper tail. */
static void signed_stat(const struct perm_ctx *up, float *g)
{
    nf_perm_transform(up, g, 0, up->V);
    for (int64_t v = 0; v < up->V; v++)
        g[v] = nf_perm_null_units(up, g[v]);
}

int nf_perm_tfce_begin(struct perm_ctx *c, const struct nf_run *run)
{
    const struct permute_params *prm = c->prm;
    const struct nf_geom *geom = run->in[PERMUTE_IN_DATA]->u.mat.geom;
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    struct nf_tfce_work w = { 0 };
    float *g = NULL;
    int rc = 0;
    if (!geom || geom->n_voxels != c->V)
        return NF_FAIL_AT(run->err, NF_EUSAGE, loc, id,
                          "tfce needs data whose columns are voxels of a grid (the output of a mask node); "
                          "this data has %s", geom ? "a grid of another size" : "no voxel grid");
    c->tfce = true;
    NF_TRY(rc = nf_voxel_graph_build(geom, (int)prm->connectivity, &c->graph, run->err));
    NF_TRY(rc = nf_tfce_plan_init(&c->tfce_plan, &c->graph, c->tail, prm->tfce_e, prm->tfce_h,
                                  (int)prm->tfce_steps, run->err));
    NF_TRY(rc = nf_tfce_work_init(&w, &c->graph, (int)prm->tfce_steps, run->err));
    c->tfce_obs = nf_malloc((size_t)c->V * sizeof *c->tfce_obs);
    c->null_tfce = nf_malloc((size_t)(c->M ? c->M : 1) * sizeof *c->null_tfce);
    g = nf_malloc((size_t)c->V * sizeof *g);
    if (!c->tfce_obs || !c->null_tfce || !g) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for TFCE maps");
        goto fail;
    }
    struct perm_ctx up = *c;
    up.tail = PERM_TAIL_UPPER;
    rows_gemm(c, c->row0, 1, g);
    signed_stat(&up, g);
    nf_tfce_map(&c->tfce_plan, &w, g, c->tfce_obs);
fail:
    nf_tfce_work_release(&w);
    free(g);
    return rc;
}

/* One chunk's maxima over threads, TFCE_ROWS permutations per task. */
struct tfce_chunk_work {
    const struct perm_ctx *c;
    const struct nf_run *run;
    const float *R;
    int64_t p0, len;
    atomic_long next;
    atomic_int failed, interrupted;
};

static void *tfce_worker(void *arg)
{
    struct tfce_chunk_work *cw = arg;
    const struct perm_ctx *c = cw->c;
    struct perm_ctx up = *c;
    struct nf_tfce_work w = { 0 };
    struct nf_error err = { 0 };
    up.tail = PERM_TAIL_UPPER;
    float *G = nf_malloc((size_t)(TFCE_ROWS * c->V) * sizeof *G);
    if (!G || nf_tfce_work_init(&w, &c->graph, c->tfce_plan.steps, &err) < 0) {
        atomic_store(&cw->failed, 1);
        goto done;
    }
    for (int64_t r0; !atomic_load(&cw->failed) && (r0 = atomic_fetch_add(&cw->next, TFCE_ROWS)) < cw->len;) {
        if (nf_run_interrupted(cw->run)) {
            atomic_store(&cw->interrupted, 1);
            atomic_store(&cw->failed, 1);
            break;
        }
        int64_t rows = cw->len - r0 < TFCE_ROWS ? cw->len - r0 : TFCE_ROWS;
        rows_gemm(c, cw->R + r0 * c->n, rows, G);
        for (int64_t r = 0; r < rows; r++) {
            signed_stat(&up, G + r * c->V);
            c->null_tfce[cw->p0 + r0 + r] = nf_tfce_max(&c->tfce_plan, &w, G + r * c->V);
        }
    }
done:
    nf_tfce_work_release(&w);
    free(G);
    return NULL;
}

int nf_perm_tfce_chunk(struct perm_ctx *c, const struct nf_run *run, const float *R, int64_t p0, int64_t len,
                       int threads, struct nf_error *err)
{
    struct tfce_chunk_work cw = { .c = c, .run = run, .R = R, .p0 = p0, .len = len };
    int64_t tasks = (len + TFCE_ROWS - 1) / TFCE_ROWS;
    nf_perm_run_threads(tfce_worker, &cw, threads < tasks ? threads : (int)tasks);
    if (atomic_load(&cw.interrupted))
        return NF_FAIL(err, NF_EINTR, "interrupted");
    if (atomic_load(&cw.failed))
        return NF_FAIL(err, NF_ENOMEM, "out of memory for the TFCE of a chunk of permutations");
    return 0;
}

int nf_perm_tfce_finish(const struct perm_ctx *c, const struct nf_run *run, struct nf_value **out)
{
    struct nf_geom *geom = run->in[PERMUTE_IN_DATA]->u.mat.geom;
    double denom = c->exact ? (double)c->M : (double)c->M + 1.0, add = c->exact ? 0.0 : 1.0;
    float *sorted = nf_malloc((size_t)(c->M ? c->M : 1) * sizeof *sorted);
    int64_t *order = nf_malloc((size_t)(c->M ? c->M : 1) * sizeof *order);
    int rc = 0;
    if (!sorted || !order || nf_argsort_f32(c->null_tfce, c->M, order) < 0) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < c->M; i++)
        sorted[i] = c->null_tfce[order[i]];
    if (!(out[PERMUTE_OUT_TFCE] = nf_value_new_matrix(1, c->V, geom, run->err)) ||
        !(out[PERMUTE_OUT_P_TFCE_FWE] = nf_value_new_matrix(1, c->V, geom, run->err)) ||
        !(out[PERMUTE_OUT_NULL_MAX_TFCE] = nf_value_new_matrix(c->M, 1, NULL, run->err))) {
        rc = run->err->code;
        goto fail;
    }
    float *t = out[PERMUTE_OUT_TFCE]->u.mat.data, *pf = out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data;
    for (int64_t v = 0; v < c->V; v++) {
        t[v] = c->tfce_obs[v];
        /* #maxima >= |TFCE(v)|: M minus the first index at or above it */
        float x = fabsf(c->tfce_obs[v]);
        int64_t lo = 0, hi = c->M;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (sorted[mid] < x)
                lo = mid + 1;
            else
                hi = mid;
        }
        pf[v] = c->flat[v] ? 1.0f : (float)(((double)(c->M - lo) + add) / denom);
    }
    memcpy(out[PERMUTE_OUT_NULL_MAX_TFCE]->u.mat.data, c->null_tfce, (size_t)c->M * sizeof(float));
    out[PERMUTE_OUT_NULL_MAX_TFCE]->u.mat.col_names = nf_calloc(1, sizeof(char *));
    if (!out[PERMUTE_OUT_NULL_MAX_TFCE]->u.mat.col_names ||
        !(out[PERMUTE_OUT_NULL_MAX_TFCE]->u.mat.col_names[0] = nf_strdup("null_max_tfce"))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    nf_value_set_stat(out[PERMUTE_OUT_TFCE], NF_STAT_NONE, 0,
                      "threshold-free cluster enhancement of the statistic (negative where it is)");
    nf_value_set_stat(out[PERMUTE_OUT_P_TFCE_FWE], NF_STAT_P_FWE, 0,
                      "family-wise corrected p-value by the maximum TFCE over voxels");
    nf_value_set_stat(out[PERMUTE_OUT_NULL_MAX_TFCE], NF_STAT_NONE, 0,
                      c->exact ? "maximum |TFCE| over voxels of every permutation (the identity included)"
                               : "maximum |TFCE| over voxels of each random permutation");
fail:
    free(sorted);
    free(order);
    return rc;
}

void nf_perm_tfce_release(struct perm_ctx *c)
{
    nf_tfce_plan_release(&c->tfce_plan);
    nf_voxel_graph_release(&c->graph);
    free(c->tfce_obs);
    free(c->null_tfce);
}
