/* permute.h — parameters and ports of the `permute` node (nodes/permute/permute.c),
 * shared with the unit tests, which run the node without a pipeline file. */
#ifndef NF_NODE_PERMUTE_H
#define NF_NODE_PERMUTE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "node.h"

enum { PERM_ONE_SAMPLE, PERM_TWO_SAMPLE, PERM_CORRELATION, PERM_GLM };
enum { PERM_STAT_MEAN, PERM_STAT_T };
enum { PERM_TAIL_TWO, PERM_TAIL_UPPER, PERM_TAIL_LOWER };
enum { PERM_PEARSON, PERM_SPEARMAN };
enum { PERM_EXACT_AUTO, PERM_EXACT_NEVER };
enum { PERM_EXCHANGE_PERMUTE, PERM_EXCHANGE_SIGN_FLIP, PERM_EXCHANGE_BOTH };
enum { PERM_NUISANCE_FREEDMAN_LANE, PERM_NUISANCE_SMITH };

struct permute_params {
    int test;                /* PERM_ONE_SAMPLE / TWO_SAMPLE / CORRELATION */
    int stat;                /* PERM_STAT_MEAN / PERM_STAT_T (one and two-sample) */
    int tail;                /* PERM_TAIL_* */
    int64_t n_permutations;  /* N (default 5000) */
    int64_t seed;            /* RandomState seed of the per-permutation seeds; -1: settings.seed */
    int method;              /* correlation: PERM_PEARSON / PERM_SPEARMAN */
    int exact;               /* PERM_EXACT_AUTO: enumerate when the full set has <= N members */
    char *column;            /* covariate / groups column name (NULL: the first column) */
    int64_t chunk;           /* permutations per checkpoint chunk */
    bool tfce;               /* TFCE maps and their max-TFCE FWE p (permute_tfce.c) */
    double tfce_e, tfce_h;   /* TFCE extent and height exponents (0.5, 2) */
    int64_t tfce_steps;      /* thresholds per map (100) */
    int64_t connectivity;    /* 6, 18 or 26: voxels sharing a face / an edge / a corner */
    double cluster_threshold;   /* cluster-forming threshold on the statistic's scale; NaN: none */
    double cluster_p;           /* or as an upper-tail p of the t (r) distribution; NaN: none */
    double f_cluster_threshold; /* glm: the F contrasts' cluster-forming threshold on F; NaN: none */
    /* test: glm (permute_glm.c) */
    struct nf_str_list contrasts;   /* "name = expression" t contrasts over the design's columns */
    struct nf_str_list f_contrasts; /* "name = row; row; ..." F contrasts, each row an expression */
    int exchange;                   /* PERM_EXCHANGE_*: what the null may do to a subject's residuals */
    char *blocks_column;            /* exchangeability blocks: a column of `blocks`, or of the design */
    bool whole_blocks;              /* permute the blocks as wholes instead of within them */
    int nuisance_method;            /* PERM_NUISANCE_*: how the null handles the nuisance regressors */
};

/* Whether cluster inference is asked for: a cluster-forming threshold of any
 * kind (whether it is complete is the resolve step's business). */
static inline bool nf_perm_clusters_asked(const struct permute_params *p)
{
    return !isnan(p->cluster_threshold) || !isnan(p->cluster_p) || !isnan(p->f_cluster_threshold);
}

enum { PERMUTE_IN_DATA, PERMUTE_IN_DATA2, PERMUTE_IN_COVARIATE, PERMUTE_IN_GROUPS, PERMUTE_IN_DESIGN,
       PERMUTE_IN_BLOCKS, PERMUTE_N_IN };
enum { PERMUTE_OUT_STAT, PERMUTE_OUT_P, PERMUTE_OUT_P_FWE, PERMUTE_OUT_Q_FDR, PERMUTE_OUT_NULL_MAX,
       PERMUTE_OUT_INFO, PERMUTE_OUT_TFCE, PERMUTE_OUT_P_TFCE_FWE, PERMUTE_OUT_NULL_MAX_TFCE,
       PERMUTE_OUT_CLUSTER_P_FWE, PERMUTE_OUT_CLUSTER_MASS_P_FWE, PERMUTE_OUT_CLUSTERS,
       PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE, PERMUTE_OUT_NULL_MAX_CLUSTER_MASS, PERMUTE_N_OUT };
/* The outputs every run produces; the TFCE and cluster ones follow, only when
 * asked for. */
enum { PERMUTE_N_BASE_OUT = PERMUTE_OUT_INFO + 1 };

/* node_type.cost (permute_cost.c, every build): 1 and *c filled, or 0 while
 * shapes are unknown. */
int nf_permute_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                    struct nf_cost *c);
/* node_type.chunks (permute_cost.c): checkpoint chunks of one run. */
int64_t nf_permute_chunks(const void *params, const struct nf_shape *in, const struct nf_shape *out);
#ifdef HAVE_CUDA
/* The GPU implementation (permute_gpu.c, CUDA builds): the contract of run_cpu
 * and the same outputs, p-values identical except at documented near ties
 * (docs/gpu.md); without a usable GPU it warns and runs the CPU node. */
int nf_permute_run_gpu(struct nf_run *run);
#endif
/* Permutations per GEMM on the GPU: the cost model's launch count and the
 * GPU path's block size. */
enum { NF_PERMUTE_GPU_ROWS = 2048 };

extern const struct nf_node_type nf_node_permute;

#endif
