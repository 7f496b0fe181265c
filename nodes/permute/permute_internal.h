/* permute_internal.h — what the CPU and GPU permute nodes share
 * (nodes/permute/permute.c, nodes/permute/permute_gpu.c): the run's context and the host-side
 * steps around the null-statistic GEMMs — inputs, per-voxel preparation, the
 * rows of R, the statistic's transform, round-off tie decisions, p-values,
 * FDR and the info table. Defined in permute.c. */
#ifndef NF_NODE_PERMUTE_INTERNAL_H
#define NF_NODE_PERMUTE_INTERNAL_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "node.h"
#include "permute.h"
#include "tfce.h"

/* The CPU's null-statistic blocks: voxels per tile (a thread's unit of work;
 * the tile kernel is nf_kernels.perm_tile, kernels.h). */
enum { NF_PERM_TILE_VOXELS = 512 };
struct perm_ctx {
    const struct permute_params *prm;
    const struct nf_kernels *K;
    int test, tail;
    bool t_stat;
    int64_t n, V, n1, n2;      /* subjects; two-sample group sizes (group 1 = the first n1 rows) */
    const float *D;            /* n x V, leading dimension V: data, pooled, or standardised */
    float *D_own;
    float *cov;                /* correlation: the standardised covariate (n) */
    /* epilogue, per voxel: d = a g - shift[v]; for t, den = max(ss[v] - c d², floor[v]) */
    double a, c, max_r;        /* max_r: the largest |R| entry */
    float *shift, *ss, *floor_, *cap;   /* cap: +FLT_MAX, or -FLT_MAX for a zero-variance voxel */
    bool *flat;
    int64_t n_flat;
    /* permutations */
    bool exact;
    int64_t M;                 /* permutations counted (N, or the exact total) */
    uint32_t *seeds;           /* N per-permutation seeds (random mode) */
    float *row0;               /* the identity permutation's row */
    double *abs_sum;           /* V: max|R| (sum_j D_jv²)^½, the scale of every GEMM value's round-off */
    /* results */
    uint32_t *count;           /* V exceedances so far */
    float *null_q;             /* M maxima over voxels, transformed statistic */
    float *q_obs;              /* V observed transformed statistic */
    float *lo, *hi;            /* V: q_obs minus / plus its round-off bound */
    double *q_obs_d;           /* V: the observed transformed statistic in double */
    double *ss_d, *shift_d;    /* V: the epilogue's constants in double */
    struct nf_perm_tile tile;  /* the CPU's tile kernel's view of the above (permute.c) */
    /* TFCE and cluster inference (permute_tfce.c), when asked for */
    bool tfce, clusters;
    struct nf_voxel_graph graph;
    struct nf_tfce_plan tfce_plan;
    float *tfce_obs;           /* V: the observed map's TFCE, signed */
    float *null_tfce;          /* M: each permutation's max |TFCE| */
    struct nf_cluster_plan cluster_plan;
    double cluster_T;          /* the cluster-forming threshold on the statistic's scale */
    int32_t *cluster_ids;      /* V: the observed map's cluster of each voxel (1..; 0: none) */
    struct nf_cluster *cluster_obs;   /* the observed clusters (room for V) */
    int64_t n_clusters;
    double *null_csize, *null_cmass;  /* M: each permutation's largest cluster size and mass */
    struct nf_perm_tfce_slot *tfce_slots;   /* per worker thread, kept across chunks (permute_tfce.c) */
    int n_tfce_slots;
};

/* Size of the full permutation set (+inf beyond 2^62). */
double nf_perm_full_set_size(const struct perm_ctx *c);
/* Row of R for permutation `index` (perm: n scratch, signs: n scratch). */
void nf_perm_row(const struct perm_ctx *c, int64_t index, float *row, int64_t *perm, int8_t *signs);
/* Rows p0 .. p0 + count - 1 of R into R (count x n), the same values,
 * generators seeded 16 at a time. 0 or NF_ENOMEM. */
int nf_perm_rows(const struct perm_ctx *c, int64_t p0, int64_t count, float *R);
/* GEMM values of voxels v0.. → the transformed statistic, in place. */
void nf_perm_transform(const struct perm_ctx *c, float *g, int64_t v0, int64_t len);
/* One row x voxel in double (near-tie decisions). */
double nf_perm_q_double(const struct perm_ctx *c, const float *row, int64_t v);
/* Round-off bound of the observed value g of voxel v. */
double nf_perm_tie_bound(const struct perm_ctx *c, int64_t v, float g);
/* Data, groups or covariate from the run's inputs into c. */
int nf_perm_gather_inputs(struct perm_ctx *c, const struct nf_run *run);
/* Per-voxel constants and the observed statistic (stat_out: V). */
int nf_perm_prepare(struct perm_ctx *c, const struct nf_run *run, float *stat_out);
int nf_perm_bh_qvalues(const float *p, const bool *flat, int64_t V, float *q, struct nf_error *err);
/* Which spatial corrections the run computes: TFCE when asked for and one of
 * its outputs is read, clusters when a threshold is set and one of theirs is. */
void nf_perm_spatial_wanted(const struct permute_params *prm, const struct nf_run *run, bool *tfce,
                            bool *clusters);
/* The node's `info` output: a table of rows (key, value) of strings. */
int nf_perm_key_value_table(const char *const *keys, const char *const *vals, int rows, struct nf_value **out,
                            struct nf_error *err);
/* A transformed value back in the statistic's units (inline: the TFCE maps
 * convert every voxel of every permutation). */
static inline float nf_perm_null_units(const struct perm_ctx *c, float q)
{
    if (q == -FLT_MAX)
        return 0;
    if (!c->t_stat)
        return c->test == PERM_ONE_SAMPLE || c->test == PERM_CORRELATION ? q / (float)c->n : q;
    double k = c->test == PERM_ONE_SAMPLE ? (double)(c->n - 1) / (double)c->n
                                          : (double)(c->n - 2) / (1.0 / (double)c->n1 + 1.0 / (double)c->n2);
    double t = sqrt(fabs((double)q) * k);
    return (float)(q < 0 ? -t : t);
}
int nf_perm_info_table(const struct perm_ctx *c, uint32_t seed, struct nf_value **out, struct nf_error *err);

/* The run around the device-specific chunk loop (the same on CPU and GPU):
 * setup (out[PERMUTE_OUT_STAT..Q_FDR] allocated, *seed set), checkpoint resume
 * (have[] marks committed chunks), and the p-values and outputs (moved into
 * run->out on success). nf_perm_release frees what the context owns. */
int nf_perm_begin(struct perm_ctx *c, const struct nf_run *run, struct nf_value **out, uint32_t *seed);
int nf_perm_resume(struct perm_ctx *c, const struct nf_run *run, int64_t chunk, bool *have, int64_t *resumed);
/* The checkpoint index of chunk ci: the chunk size is in it, because `chunk`
 * is not part of the cache key (it cannot change a result) and a rerun with
 * another chunk size must not read chunks cut differently. */
static inline int64_t nf_perm_ckpt_index(int64_t chunk, int64_t ci)
{
    return (int64_t)((uint64_t)chunk << 32 | (uint64_t)ci);
}
/* Bytes of chunk ci's checkpoint: V counts, then the len maxima, then (TFCE)
 * the len maxima of |TFCE| (floats), then (clusters) the len largest sizes
 * and the len largest masses (doubles). */
int64_t nf_perm_ckpt_bytes(const struct perm_ctx *c, int64_t len);

/* The upper-tail quantile of Student's t with dof degrees of freedom:
 * P(T > t) = p (0 < p < 1). */
double nf_perm_t_isf(double p, double dof);
/* The cluster-forming threshold of a run on the statistic's scale:
 * cluster_threshold, or cluster_p through the t (r) distribution with the
 * test's degrees of freedom (c: gathered, so n and the groups are known). */
double nf_perm_cluster_threshold(const struct perm_ctx *c);

/* Cluster-level inference's pieces, shared by the tests' outputs
 * (permute_tfce.c) and test glm's (permute_glm.c): the FWE p of a map's n
 * clusters (obs, ids: V) against M largest sizes and masses, per cluster
 * (p_size, p_mass: n) and per voxel by its cluster (ps, pm: V; 1 outside);
 * the clusters table's NF_PERM_CLUSTER_COLUMNS numeric columns from column
 * `first` (id, sign, size, mass, peak, x, y, z in mm, p_size_fwe,
 * p_mass_fwe) and one row of them. */
enum { NF_PERM_CLUSTER_COLUMNS = 10 };
int nf_perm_cluster_pvalues(const double *null_size, const double *null_mass, int64_t M, double denom, double add,
                            const struct nf_cluster *obs, int64_t n, const int32_t *ids, int64_t V, double *p_size,
                            double *p_mass, float *ps, float *pm, struct nf_error *err);
int nf_perm_cluster_columns(struct nf_value *tab, int64_t first, struct nf_error *err);
void nf_perm_cluster_row(struct nf_value *tab, int64_t first, int64_t row, const struct nf_geom *geom,
                         const struct nf_cluster *cl, int64_t id, double p_size, double p_mass);

/* fn over `threads` threads (the caller is one of them). */
void nf_perm_run_threads(void *(*fn)(void *), void *arg, int threads);

/* TFCE and clusters (permute_tfce.c). Setup after nf_perm_begin (tfce and
 * clusters: whether each is asked for): the voxel graph of the data's
 * geometry, the plans, the observed map's TFCE and clusters; a located error
 * when the data has no geometry. */
int nf_perm_tfce_begin(struct perm_ctx *c, const struct nf_run *run, bool tfce, bool clusters);
/* max |TFCE| and the largest cluster of each of the len permutations whose
 * rows are R (len x n) into null_tfce / null_csize / null_cmass [p0..].
 * NF_EINTR (interrupted) or NF_ENOMEM set in err. */
int nf_perm_tfce_chunk(struct perm_ctx *c, const struct nf_run *run, const float *R, int64_t p0, int64_t len,
                       int threads, struct nf_error *err);
/* The TFCE and cluster outputs into out[]. */
int nf_perm_tfce_finish(const struct perm_ctx *c, const struct nf_run *run, struct nf_value **out);
void nf_perm_tfce_release(struct perm_ctx *c);

int nf_perm_finish(struct perm_ctx *c, const struct nf_run *run, uint32_t seed, struct nf_value **out);
void nf_perm_release(struct perm_ctx *c);

#endif
