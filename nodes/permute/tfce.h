/* tfce.h — threshold-free cluster enhancement (TFCE) and cluster extent / mass
 * of statistic maps over a mask's voxel graph (nodes/permute/tfce.c), for the
 * permute node's TFCE and cluster-level FWE inference.
 *
 * Use: build one nf_voxel_graph per mask and connectivity, one plan per set
 * of options (both read-only afterwards, shared by threads), one nf_tfce_work
 * per thread; then one call per statistic map (the observed map, and each
 * permutation's map). Maps are V floats in the mask's column order (struct
 * nf_geom). The per-map calls allocate nothing and touch nothing but their
 * workspace and outputs.
 *
 * Definitions, as nilearn 0.14 `calculate_tfce` (dh='auto') and
 * `calculate_cluster_measures`:
 *  - TFCE: the tail's height m is max |stat| (two tails: one common height for
 *    both signs), max stat (upper) or max -stat (lower) of this map;
 *    thresholds h_k = k * (m / steps) in double for k < steps and h_steps = m
 *    (numpy's linspace); TFCE(v) = sum over k of e_k(v)^E * h_k^H, e_k(v) the
 *    voxel count of v's cluster among the voxels whose value on that side is
 *    >= h_k (not multiplied by dh, as fslmaths). Two tails: the positive part
 *    of the map and the negative part (-stat) are enhanced separately, the
 *    negative part's TFCE negative; lower tail: the negative part only, also
 *    negative. A map with no voxel above 0 on its side has TFCE 0 everywhere.
 *  - clusters at threshold T: voxels with stat > T (upper), stat < -T (lower)
 *    or either (two tails, the signs clustered separately) — strictly beyond
 *    T, as nilearn; size = voxel count, mass = sum of (|stat| - T).
 * NaN and infinite values belong to no cluster at any threshold and do not
 * count for m (nilearn's labelling would count NaN voxels as members; the
 * permute node's maps are finite). */
#ifndef NF_NODE_PERMUTE_TFCE_H
#define NF_NODE_PERMUTE_TFCE_H

#include <stdint.h>

#include "core/error.h"
#include "core/value.h"
#include "kernels/kernels.h"   /* enum nf_tail: which side is enhanced / clustered */

/* The neighbours of every mask voxel on the grid: voxels v and w (column
 * indices) are neighbours when they share a face (connectivity 6), a face or
 * an edge (18), or a face, an edge or a corner (26). Every voxel has
 * `connectivity` slots, so that the per-map loops have a fixed count. */
struct nf_voxel_graph {
    int64_t n_voxels;
    int connectivity;
    int32_t *nbr;          /* v's neighbours: nbr[v * connectivity + j], ascending, then n_voxels
                              (none) in the slots left over at the mask's edge */
    int64_t n_cells;       /* the mask's bounding box with one cell of padding on every side */
    int32_t *cell;         /* per voxel: its cell in that box */
    int32_t offset[26];    /* the neighbours' cells: cell + offset[j] */
};
/* Build from a mask's geometry (geom->index: columns → grid offsets). 0, or
 * NF_EINVAL (connectivity not 6, 18 or 26), NF_EDATA (more than 2^30 voxels,
 * an offset off the grid or twice), NF_ENOMEM. */
int nf_voxel_graph_build(const struct nf_geom *geom, int connectivity, struct nf_voxel_graph *g,
                         struct nf_error *err);
void nf_voxel_graph_release(struct nf_voxel_graph *g);   /* zeroed afterwards; NULL-safe */

struct nf_tfce_plan {
    const struct nf_voxel_graph *graph;   /* borrowed */
    int tail;              /* NF_TAIL_* */
    double E, H;           /* extent and height exponents (0.5, 2) */
    int steps;             /* thresholds per map (100) */
    double *size_pow;      /* n_voxels + 1: s^E for a cluster of s voxels */
};
/* 0, or NF_EINVAL (tail unknown, E or H not finite or negative, steps not in
 * 1 .. NF_TFCE_MAX_STEPS), NF_ENOMEM. */
enum { NF_TFCE_MAX_STEPS = 10000 };
int nf_tfce_plan_init(struct nf_tfce_plan *p, const struct nf_voxel_graph *g, int tail, double E, double H,
                      int steps, struct nf_error *err);
void nf_tfce_plan_release(struct nf_tfce_plan *p);       /* NULL-safe */

struct nf_cluster_plan {
    const struct nf_voxel_graph *graph;   /* borrowed */
    int tail;              /* NF_TAIL_* */
    double threshold;      /* T >= 0, on the statistic's scale */
};
/* 0, or NF_EINVAL (tail unknown, T negative or not finite). */
int nf_cluster_plan_init(struct nf_cluster_plan *p, const struct nf_voxel_graph *g, int tail, double threshold,
                         struct nf_error *err);

/* One thread's scratch for either kind of plan on a graph (tfce.c says how
 * each part is used): about 40 bytes per voxel and, for TFCE, 6 per cell of
 * the graph's box. */
struct nf_tfce_tree_node;
struct nf_tfce_flood_comp;
struct nf_tfce_work {
    int64_t n_voxels;
    int steps;             /* the most thresholds it holds tables for */
    int16_t *level;        /* clusters: per voxel, its side (+1 / -1) beyond T; 0: none */
    int32_t *queue;        /* V: per level, the cells waiting to be gathered (FIFO); clusters:
                              the voxels beyond T */
    int64_t *bucket;       /* 2 (steps + 1): each level's queue head and tail */
    uint64_t *nonempty;    /* bitmap over levels: which queues hold voxels */
    struct nf_tfce_flood_comp *comp;   /* steps + 2: the stack of open components */
    int32_t *order;        /* V: tree nodes in the order they closed */
    float *height;         /* steps + 2: 0, the least float at or above each threshold h_1 .. h_steps, +inf */
    double *height_sum;    /* steps + 1: sum of h_j^H for j <= k */
    int32_t *parent;       /* clusters: union-find over voxels */
    int32_t *size;         /* clusters: a root's voxel count */
    void *cell_level;      /* per cell of the graph's box: +k / -k, the last threshold its voxel
                              reaches on its side, until flooded; 0 between maps (int8, or int16
                              when steps > 127) */
    int32_t *cell_birth;   /* per cell: the tree node its voxel was gathered into (nf_tfce_map) */
    struct nf_tfce_tree_node *tree;   /* components over levels (V) */
    double *value;         /* per tree node: its TFCE (V); clusters: a root's mass */
};
/* Sized for the graph and up to `steps` thresholds (0 for clusters only).
 * 0, or NF_ENOMEM. */
int nf_tfce_work_init(struct nf_tfce_work *w, const struct nf_voxel_graph *g, int steps, struct nf_error *err);
void nf_tfce_work_release(struct nf_tfce_work *w);       /* NULL-safe */

/* TFCE of one map: out[v] for every voxel (V floats; negative for the
 * negative side). The workspace is for the plan's graph and at least its
 * steps. */
void nf_tfce_map(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat, float *out);
/* max over v of |TFCE(v)| of one map, the same float as the largest |out[v]|
 * of nf_tfce_map on the same map, bit for bit; 0 when none. For null maps. */
float nf_tfce_max(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat);

struct nf_cluster {
    int sign;              /* +1: stat > T; -1: stat < -T */
    int64_t size;          /* voxels */
    double mass;           /* sum of (|stat| - T) over the voxels */
    float peak;            /* the statistic at the peak: largest |stat| */
    int64_t peak_voxel;    /* column index of the peak (the first one when tied) */
};
/* Clusters of one map: ids[v] = the cluster of voxel v (1 .. n; 0: none),
 * clusters[id - 1] each cluster (room for up to V). Numbered as
 * scipy.ndimage.label numbers them in nilearn: by each cluster's first voxel
 * in column order, positive clusters before negative ones. Returns n. */
int64_t nf_clusters_label(const struct nf_cluster_plan *p, struct nf_tfce_work *w, const float *stat,
                          int32_t *ids, struct nf_cluster *clusters);
/* The largest cluster size and mass of one map (0 when there is no cluster),
 * equal to the largest size and mass nf_clusters_label gives, bit for bit.
 * For null maps. */
void nf_clusters_max(const struct nf_cluster_plan *p, struct nf_tfce_work *w, const float *stat,
                     int64_t *max_size, double *max_mass);

#endif
