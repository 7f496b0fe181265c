/* permute_tfce.c — threshold-free cluster enhancement and cluster-level
 * inference in the permute node: the observed map's TFCE and the max-TFCE FWE
 * p-value p_tfce_fwe(v) = (1 + #{permutations whose max |TFCE| >= |TFCE(v)|})
 * / (N + 1), and the observed clusters beyond a cluster-forming threshold with
 * their FWE p-values by the largest cluster size and mass of each permutation
 * (count / total when every permutation is enumerated, the identity included,
 * as p_fwe).
 *
 * Both need each permutation's whole statistic map, which the fused tile
 * kernel never materialises (it keeps counts and maxima only). So after the
 * tile pass of a chunk, the chunk's rows of R are multiplied again, a few rows
 * at a time over threads, by a float kernel (rows_gemm_f32, kernels.h), turned into the signed
 * statistic by the node's own transform (nf_perm_transform with the upper
 * tail gives the signed q, nf_perm_null_units its value in the statistic's
 * units), and reduced to their max |TFCE| and largest cluster (nf_tfce_max,
 * nf_clusters_max, tfce.c). The observed map goes through the very same
 * kernel and transform: the identity permutation of an exact test and a
 * mirror-image sign flip give the same bits as the observed map, so those
 * ties count exactly, with no tie window.
 * The kernel sums every element over the subjects in order whatever the rows
 * beside it, so the maps do not depend on the chunk or thread count. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/distributions.h"
#include "core/util.h"

#include "permute.h"
#include "permute_internal.h"

/* Permutations per task: their maps come from one pass over D (the
 * kernel's register tiles are 8 rows, its voxel blocks stay in L2 across
 * them), so more rows read D less often per map. */
enum { TFCE_ROWS = 16 };

/* G (nr x V) = R (nr x n) · D (n x V) in float through the kernel table:
 * every element summed over the subjects in order by the same operations,
 * whichever rows share its pass. */
static void rows_gemm(const struct perm_ctx *c, const float *R, int64_t nr, float *G)
{
    c->K->rows_gemm_f32(R, nr, c->D, c->n, c->V, G);
}

/* GEMM values of one row → the signed statistic (t, mean, difference, r) in
 * place; zero-variance voxels 0. up: the context with the upper tail. */
static void signed_stat(const struct perm_ctx *up, float *g)
{
    if (!up->t_stat) {
        nf_perm_transform(up, g, 0, up->V);
        for (int64_t v = 0; v < up->V; v++)
            g[v] = nf_perm_null_units(up, g[v]);
        return;
    }
    /* t: nf_perm_transform's upper-tail q and nf_perm_null_units fused in one
     * vectorised pass over the map (the same operations, so the same bits) */
    const double k = up->test == PERM_ONE_SAMPLE ? (double)(up->n - 1) / (double)up->n
                                                 : (double)(up->n - 2) / (1.0 / (double)up->n1 + 1.0 / (double)up->n2);
    up->K->perm_signed_t_f32(g, up->V, (float)up->a, (float)up->c, up->shift, up->ss, up->floor_, up->cap, k);
}

double nf_perm_t_isf(double p, double dof)
{
    double lo = 0, hi = 1;
    while (nf_t_sf(hi, dof) > p && hi < 1e12)
        hi *= 2;
    for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; i++) {
        double mid = (lo + hi) / 2;
        if (nf_t_sf(mid, dof) > p)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

double nf_perm_cluster_threshold(const struct perm_ctx *c)
{
    const struct permute_params *prm = c->prm;
    if (isnan(prm->cluster_p))
        return prm->cluster_threshold;
    double dof = (double)(c->test == PERM_ONE_SAMPLE ? c->n - 1 : c->n - 2);
    double t = nf_perm_t_isf(prm->cluster_p, dof);
    return c->test == PERM_CORRELATION ? t / sqrt(t * t + dof) : t;
}

int nf_perm_tfce_begin(struct perm_ctx *c, const struct nf_run *run, bool tfce, bool clusters)
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
                          "%s needs data whose columns are voxels of a grid (the output of a mask node); "
                          "this data has %s", tfce ? "tfce" : "cluster inference",
                          geom ? "a grid of another size" : "no voxel grid");
    c->tfce = tfce;
    c->clusters = clusters;
    size_t m = (size_t)(c->M ? c->M : 1);
    NF_TRY(rc = nf_voxel_graph_build(geom, (int)prm->connectivity, &c->graph, run->err));
    if (tfce) {
        NF_TRY(rc = nf_tfce_plan_init(&c->tfce_plan, &c->graph, c->tail, prm->tfce_e, prm->tfce_h,
                                      (int)prm->tfce_steps, run->err));
        c->tfce_obs = nf_malloc((size_t)c->V * sizeof *c->tfce_obs);
        c->null_tfce = nf_malloc(m * sizeof *c->null_tfce);
        if (!c->tfce_obs || !c->null_tfce)
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory for TFCE maps");
    }
    if (clusters) {
        c->cluster_T = nf_perm_cluster_threshold(c);
        NF_TRY(rc = nf_cluster_plan_init(&c->cluster_plan, &c->graph, c->tail, c->cluster_T, run->err));
        c->cluster_ids = nf_malloc((size_t)c->V * sizeof *c->cluster_ids);
        c->cluster_obs = nf_malloc((size_t)c->V * sizeof *c->cluster_obs);
        c->null_csize = nf_malloc(m * sizeof *c->null_csize);
        c->null_cmass = nf_malloc(m * sizeof *c->null_cmass);
        if (!c->cluster_ids || !c->cluster_obs || !c->null_csize || !c->null_cmass)
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory for clusters");
    }
    NF_TRY(rc = nf_tfce_work_init(&w, &c->graph, tfce ? (int)prm->tfce_steps : 0, run->err));
    if (!(g = nf_malloc((size_t)c->V * sizeof *g))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for TFCE maps");
        goto fail;
    }
    struct perm_ctx up = *c;
    up.tail = PERM_TAIL_UPPER;
    rows_gemm(c, c->row0, 1, g);
    signed_stat(&up, g);
    if (tfce)
        nf_tfce_map(&c->tfce_plan, &w, g, c->tfce_obs);
    if (clusters)
        c->n_clusters = nf_clusters_label(&c->cluster_plan, &w, g, c->cluster_ids, c->cluster_obs);
fail:
    nf_tfce_work_release(&w);
    free(g);
    return rc;
}

/* A worker thread's maps and union-find workspace, allocated by its first
 * chunk and kept for the next ones (tens of MB at a whole brain: allocating
 * them per chunk costs page faults every time). */
struct nf_perm_tfce_slot {
    float *G;                /* TFCE_ROWS x V maps */
    struct nf_tfce_work w;
};

/* One chunk's maxima over threads, TFCE_ROWS permutations per task. */
struct tfce_chunk_work {
    const struct perm_ctx *c;
    const struct nf_run *run;
    const float *R;
    int64_t p0, len;
    struct nf_perm_tfce_slot *slots;
    atomic_int next_slot;
    atomic_long next;
    atomic_int failed, interrupted;
};

static void *tfce_worker(void *arg)
{
    struct tfce_chunk_work *cw = arg;
    const struct perm_ctx *c = cw->c;
    struct perm_ctx up = *c;
    struct nf_error err = { 0 };
    up.tail = PERM_TAIL_UPPER;
    struct nf_perm_tfce_slot *slot = &cw->slots[atomic_fetch_add(&cw->next_slot, 1)];
    if (!slot->G && !(slot->G = nf_malloc((size_t)(TFCE_ROWS * c->V) * sizeof *slot->G))) {
        atomic_store(&cw->failed, 1);
        return NULL;
    }
    if (!slot->w.level && nf_tfce_work_init(&slot->w, &c->graph, c->tfce ? c->tfce_plan.steps : 0, &err) < 0) {
        atomic_store(&cw->failed, 1);
        return NULL;
    }
    float *G = slot->G;
    struct nf_tfce_work *w = &slot->w;
    for (int64_t r0; !atomic_load(&cw->failed) && (r0 = atomic_fetch_add(&cw->next, TFCE_ROWS)) < cw->len;) {
        if (nf_run_interrupted(cw->run)) {
            atomic_store(&cw->interrupted, 1);
            atomic_store(&cw->failed, 1);
            break;
        }
        int64_t rows = cw->len - r0 < TFCE_ROWS ? cw->len - r0 : TFCE_ROWS;
        rows_gemm(c, cw->R + r0 * c->n, rows, G);
        for (int64_t r = 0; r < rows; r++) {
            const float *map = G + r * c->V;
            int64_t p = cw->p0 + r0 + r, size = 0;
            signed_stat(&up, G + r * c->V);
            if (c->tfce)
                c->null_tfce[p] = nf_tfce_max(&c->tfce_plan, w, map);
            if (c->clusters) {
                nf_clusters_max(&c->cluster_plan, w, map, &size, &c->null_cmass[p]);
                c->null_csize[p] = (double)size;
            }
        }
    }
    return NULL;
}

int nf_perm_tfce_chunk(struct perm_ctx *c, const struct nf_run *run, const float *R, int64_t p0, int64_t len,
                       int threads, struct nf_error *err)
{
    int64_t tasks = (len + TFCE_ROWS - 1) / TFCE_ROWS;
    int workers = threads < tasks ? threads : (int)tasks;
    if (workers > c->n_tfce_slots) {
        struct nf_perm_tfce_slot *s = nf_realloc(c->tfce_slots, (size_t)workers * sizeof *s);
        if (!s)
            return NF_FAIL(err, NF_ENOMEM, "out of memory for the TFCE workspaces");
        memset(s + c->n_tfce_slots, 0, (size_t)(workers - c->n_tfce_slots) * sizeof *s);
        c->tfce_slots = s;
        c->n_tfce_slots = workers;
    }
    struct tfce_chunk_work cw = { .c = c, .run = run, .R = R, .p0 = p0, .len = len, .slots = c->tfce_slots };
    nf_perm_run_threads(tfce_worker, &cw, workers);
    if (atomic_load(&cw.interrupted))
        return NF_FAIL(err, NF_EINTR, "interrupted");
    if (atomic_load(&cw.failed))
        return NF_FAIL(err, NF_ENOMEM, "out of memory for the TFCE of a chunk of permutations");
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* #{values of sorted (ascending, n) >= x}. */
static int64_t count_at_least(const double *sorted, int64_t n, double x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return n - lo;
}

/* A sorted copy of M values (floats or doubles), or NULL. */
static double *sorted_copy(const float *f, const double *d, int64_t M)
{
    double *s = nf_malloc((size_t)(M ? M : 1) * sizeof *s);
    if (!s)
        return NULL;
    for (int64_t i = 0; i < M; i++)
        s[i] = f ? (double)f[i] : d[i];
    qsort(s, (size_t)M, sizeof *s, cmp_double);
    return s;
}

/* An N x 1 null distribution named `name`. */
static struct nf_value *null_column(const float *f, const double *d, int64_t M, const char *name, const char *what,
                                    struct nf_error *err)
{
    struct nf_value *v = nf_value_new_matrix(M, 1, NULL, err);
    if (!v)
        return NULL;
    for (int64_t i = 0; i < M; i++)
        v->u.mat.data[i] = f ? f[i] : (float)d[i];
    if (!(v->u.mat.col_names = nf_calloc(1, sizeof(char *))) || !(v->u.mat.col_names[0] = nf_strdup(name))) {
        nf_value_unref(v);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    nf_value_set_stat(v, NF_STAT_NONE, 0, what);
    return v;
}

static int tfce_outputs(const struct perm_ctx *c, const struct nf_run *run, struct nf_value **out, double denom,
                        double add)
{
    struct nf_geom *geom = run->in[PERMUTE_IN_DATA]->u.mat.geom;
    double *sorted = sorted_copy(c->null_tfce, NULL, c->M);
    if (!sorted)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    int rc = 0;
    if (!(out[PERMUTE_OUT_TFCE] = nf_value_new_matrix(1, c->V, geom, run->err)) ||
        !(out[PERMUTE_OUT_P_TFCE_FWE] = nf_value_new_matrix(1, c->V, geom, run->err)) ||
        !(out[PERMUTE_OUT_NULL_MAX_TFCE] =
              null_column(c->null_tfce, NULL, c->M, "null_max_tfce",
                          c->exact ? "maximum |TFCE| over voxels of every permutation (the identity "
                                     "included): p_tfce_fwe = count / N"
                                   : "maximum |TFCE| over voxels of each random permutation: "
                                     "p_tfce_fwe = (count + 1) / (N + 1)",
                          run->err))) {
        rc = run->err->code;
        goto fail;
    }
    float *t = out[PERMUTE_OUT_TFCE]->u.mat.data, *pf = out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data;
    for (int64_t v = 0; v < c->V; v++) {
        t[v] = c->tfce_obs[v];
        double count = (double)count_at_least(sorted, c->M, (double)fabsf(c->tfce_obs[v]));
        pf[v] = c->flat[v] ? 1.0f : (float)((count + add) / denom);
    }
    nf_value_set_stat(out[PERMUTE_OUT_TFCE], NF_STAT_NONE, 0,
                      "threshold-free cluster enhancement of the statistic (negative where it is)");
    nf_value_set_stat(out[PERMUTE_OUT_P_TFCE_FWE], NF_STAT_P_FWE, 0,
                      "family-wise corrected p-value by the maximum TFCE over voxels");
fail:
    free(sorted);
    return rc;
}

static const char *const cluster_columns[] = { "id", "sign", "size", "mass", "peak", "x", "y", "z",
                                               "p_size_fwe", "p_mass_fwe" };
_Static_assert(sizeof cluster_columns / sizeof *cluster_columns == NF_PERM_CLUSTER_COLUMNS, "the clusters table");

int nf_perm_cluster_pvalues(const double *null_size, const double *null_mass, int64_t M, double denom, double add,
                            const struct nf_cluster *obs, int64_t n, const int32_t *ids, int64_t V, double *p_size,
                            double *p_mass, float *ps, float *pm, struct nf_error *err)
{
    double *size = sorted_copy(NULL, null_size, M), *mass = sorted_copy(NULL, null_mass, M);
    int rc = 0;
    if (!size || !mass) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t k = 0; k < n; k++) {
        p_size[k] = ((double)count_at_least(size, M, (double)obs[k].size) + add) / denom;
        p_mass[k] = ((double)count_at_least(mass, M, obs[k].mass) + add) / denom;
    }
    for (int64_t v = 0; v < V; v++) {
        int32_t k = ids[v];
        ps[v] = k ? (float)p_size[k - 1] : 1.0f;
        pm[v] = k ? (float)p_mass[k - 1] : 1.0f;
    }
fail:
    free(size);
    free(mass);
    return rc;
}

int nf_perm_cluster_columns(struct nf_value *tab, int64_t first, struct nf_error *err)
{
    int rc = 0;
    for (int j = 0; j < NF_PERM_CLUSTER_COLUMNS; j++)
        NF_TRY(rc = nf_table_column_numeric(tab, first + j, cluster_columns[j], err));
fail:
    return rc;
}

void nf_perm_cluster_row(struct nf_value *tab, int64_t first, int64_t row, const struct nf_geom *geom,
                         const struct nf_cluster *cl, int64_t id, double p_size, double p_mass)
{
    const int64_t nx = geom->grid.dim[0], ny = geom->grid.dim[1];
    int64_t off = geom->index[cl->peak_voxel];
    double ijk[3] = { (double)(off % nx), (double)(off / nx % ny), (double)(off / nx / ny) };
    double vals[NF_PERM_CLUSTER_COLUMNS] = { (double)id, cl->sign, (double)cl->size, cl->mass, cl->peak };
    for (int d = 0; d < 3; d++)
        vals[5 + d] = geom->grid.affine[d][0] * ijk[0] + geom->grid.affine[d][1] * ijk[1] +
                      geom->grid.affine[d][2] * ijk[2] + geom->grid.affine[d][3];
    vals[8] = p_size;
    vals[9] = p_mass;
    for (int j = 0; j < NF_PERM_CLUSTER_COLUMNS; j++)
        tab->u.tab.cols[first + j].num[row] = vals[j];
}

static int cluster_outputs(const struct perm_ctx *c, const struct nf_run *run, struct nf_value **out, double denom,
                           double add)
{
    struct nf_geom *geom = run->in[PERMUTE_IN_DATA]->u.mat.geom;
    double *p_size = nf_malloc((size_t)(c->n_clusters + 1) * sizeof *p_size);
    double *p_mass = nf_malloc((size_t)(c->n_clusters + 1) * sizeof *p_mass);
    int rc = 0;
    if (!p_size || !p_mass) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    char what[200];
    snprintf(what, sizeof what, "largest cluster %%s beyond %.6g of each %spermutation: %s", c->cluster_T,
             c->exact ? "" : "random ", c->exact ? "p = count / N" : "p = (count + 1) / (N + 1)");
    char what_size[240], what_mass[240];
    snprintf(what_size, sizeof what_size, what, "size (voxels)");
    snprintf(what_mass, sizeof what_mass, what, "mass");
    if (!(out[PERMUTE_OUT_CLUSTER_P_FWE] = nf_value_new_matrix(1, c->V, geom, run->err)) ||
        !(out[PERMUTE_OUT_CLUSTER_MASS_P_FWE] = nf_value_new_matrix(1, c->V, geom, run->err)) ||
        !(out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE] =
              null_column(NULL, c->null_csize, c->M, "null_max_cluster_size", what_size, run->err)) ||
        !(out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS] =
              null_column(NULL, c->null_cmass, c->M, "null_max_cluster_mass", what_mass, run->err)) ||
        !(out[PERMUTE_OUT_CLUSTERS] = nf_value_new_table(c->n_clusters, NF_PERM_CLUSTER_COLUMNS, run->err))) {
        rc = run->err->code;
        goto fail;
    }
    NF_TRY(rc = nf_perm_cluster_pvalues(c->null_csize, c->null_cmass, c->M, denom, add, c->cluster_obs,
                                        c->n_clusters, c->cluster_ids, c->V, p_size, p_mass,
                                        out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data,
                                        out[PERMUTE_OUT_CLUSTER_MASS_P_FWE]->u.mat.data, run->err));
    struct nf_value *tab = out[PERMUTE_OUT_CLUSTERS];
    NF_TRY(rc = nf_perm_cluster_columns(tab, 0, run->err));
    for (int64_t k = 0; k < c->n_clusters; k++)
        nf_perm_cluster_row(tab, 0, k, geom, &c->cluster_obs[k], k + 1, p_size[k], p_mass[k]);
    nf_value_set_stat(out[PERMUTE_OUT_CLUSTER_P_FWE], NF_STAT_P_FWE, 0,
                      "family-wise corrected p-value of each voxel's cluster by the maximum cluster size");
    nf_value_set_stat(out[PERMUTE_OUT_CLUSTER_MASS_P_FWE], NF_STAT_P_FWE, 0,
                      "family-wise corrected p-value of each voxel's cluster by the maximum cluster mass");
fail:
    free(p_size);
    free(p_mass);
    return rc;
}

int nf_perm_tfce_finish(const struct perm_ctx *c, const struct nf_run *run, struct nf_value **out)
{
    double denom = c->exact ? (double)c->M : (double)c->M + 1.0, add = c->exact ? 0.0 : 1.0;
    int rc = 0;
    if (c->tfce)
        NF_TRY(rc = tfce_outputs(c, run, out, denom, add));
    if (c->clusters)
        NF_TRY(rc = cluster_outputs(c, run, out, denom, add));
fail:
    return rc;
}

void nf_perm_tfce_release(struct perm_ctx *c)
{
    for (int i = 0; i < c->n_tfce_slots; i++) {
        free(c->tfce_slots[i].G);
        nf_tfce_work_release(&c->tfce_slots[i].w);
    }
    free(c->tfce_slots);
    nf_tfce_plan_release(&c->tfce_plan);
    nf_voxel_graph_release(&c->graph);
    free(c->tfce_obs);
    free(c->null_tfce);
    free(c->cluster_ids);
    free(c->cluster_obs);
    free(c->null_csize);
    free(c->null_cmass);
}
