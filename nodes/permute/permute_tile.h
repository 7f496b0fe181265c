/* permute_tile.h — the CPU inner loop of the permute node (permute_tile.c):
 * one block of permutation rows against one tile of voxels, counted and
 * maximised. permute.c calls it with a view of its run (struct
 * nf_perm_tile_view); the tile sees nothing else of permute.c, and calls back
 * through the view for the rare near ties it decides in double. */
#ifndef NF_NODE_PERMUTE_TILE_H
#define NF_NODE_PERMUTE_TILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* The CPU's null-statistic blocks: voxels per tile (a thread's unit of work)
 * and permutation rows per BLAS call of the reference tile kernel. */
enum { NF_PERM_TILE_VOXELS = 512, NF_PERM_SUB_ROWS = 255 };
/* Implementations of nf_perm_tile. */
enum nf_perm_tile_impl { NF_PERM_TILE_REFERENCE, NF_PERM_TILE_AVX2, NF_PERM_TILE_AVX512 };

/* What a tile reads of the run (borrowed from permute.c's context, which
 * fills it once its per-voxel constants are prepared): the data, the
 * epilogue's constants, the tie window and the observed values in double. */
struct nf_perm_tile_view {
    const struct nf_kernels *K;
    const float *D;            /* n x V, leading dimension V */
    int64_t n, V;
    int tail;                  /* PERM_TAIL_* (permute.h) */
    bool t_stat;
    /* epilogue, per voxel: d = a g - shift[v]; for t, den = max(ss[v] - c d², floor[v]) */
    double a, c;
    const float *shift, *ss, *floor_, *cap;
    const float *lo, *hi;      /* V: the tie window around the observed value */
    const double *q_obs_d;     /* V: the observed transformed statistic in double */
    /* The transformed statistic of one permutation row and voxel in double
     * (permute.c's nf_perm_q_double on `run`): near ties only. */
    double (*q_double)(const void *run, const float *row, int64_t v);
    const void *run;
};

/* The fastest implementation this CPU runs; whether it runs `impl`. */
enum nf_perm_tile_impl nf_perm_tile_best(void);
bool nf_perm_tile_available(enum nf_perm_tile_impl impl);
/* What the CPU node uses: the best, unless a test forced another. */
enum nf_perm_tile_impl nf_perm_tile_choose(void);
/* Tests: make the CPU node use `impl` (-1: the best available again). */
void nf_perm_tile_force(int impl);
/* Floats of scratch nf_perm_tile needs for `rows` rows. */
size_t nf_perm_tile_scratch(int64_t rows);
/* Rows [0, rows) of R (rows x n, row-major) against voxels [v0, v0 + nv) of
 * c->D: cnt[0..nv) (the tile's counts) += exceedances, near ties decided in
 * double included; rowmax[i] = row i's largest transformed statistic over the
 * tile. `impl` must be available (falls back to the reference for shapes too
 * small to fuse). */
void nf_perm_tile(const struct nf_perm_tile_view *c, enum nf_perm_tile_impl impl, const float *R, int64_t rows,
                  int64_t v0, int64_t nv, uint32_t *cnt, float *rowmax, float *scratch);

#endif
