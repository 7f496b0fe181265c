/* tfce.c — TFCE and cluster extent / mass of a statistic map over a mask's
 * voxel graph, one near-linear pass per map (definitions in tfce.h).
 *
 * TFCE: a voxel with value x on its side of the map reaches the thresholds
 * h_1 .. h_L(x) (L: its level, exactly the largest k with x >= h_k in double),
 * so only levels matter: the clusters at h_k are the connected components of
 * the voxels of level >= k, and they only grow and merge as k goes down —
 * a component tree over at most `steps` levels. One pass in column order
 * computes the levels into a padded box around the mask (cells outside the
 * mask stay 0, so a voxel's neighbours are fixed cell offsets, with no
 * neighbour list to read and no edge test); then each component of each side
 * is flooded from its first voxel (Nistér–Stewénius: gather the highest
 * waiting voxel, descend into a higher neighbour as soon as one is met, keep
 * lower neighbours in a FIFO queue per level). The flood moves between
 * neighbouring cells, so it stays in cache, where a union-find over the
 * voxels sorted by level jumps across the whole brain at every level (the
 * previous version, 15-25% slower). With the box in cache (one byte per
 * cell at the default 100 steps) its cost is instructions and branches, not
 * memory: no prefetching, levels in float with one test per voxel, and the
 * waiting neighbours found as a bit mask. A tree node is a component of s voxels
 * from the level where it formed or last changed down to the level where it
 * grew or merged (its parent). A node contributes s^E (P(top) - P(end)) to
 * every voxel below it, P(k) = sum of h_j^H for j <= k, so a voxel's TFCE is
 * the sum over its chain of nodes, evaluated once per node from the roots
 * down (a node closes before its parent, so one backward pass over the
 * closing order). The tree, and so every node's value, does not depend on
 * the order of the flood: the same bits as the union-find gave. Each voxel's
 * value is that of the node it was gathered into; a node's value never
 * exceeds its children's (contributions are >= 0, and so are their rounded
 * sums), so the largest node value is the largest voxel value bit for bit,
 * and null maps need no per-voxel output. The two signs of a two-tailed map
 * never share a component and go through the same pass. Cost: O(V) with a
 * queue operation and `connectivity` cell reads per voxel, no pow() per map
 * beyond the `steps` heights (s^E is a table in the plan).
 *
 * Clusters at one threshold T: the same union-find in column order (voxels
 * beyond T joined with their earlier neighbours on the same side), then sizes,
 * masses and peaks per cluster summed in column order, so that the max-only
 * entry and the labelling sum each mass in the same order. Mass is nilearn's,
 * sum of (|stat| - T) over the cluster; FSL randomise -C instead clusters the
 * voxels >= T and sums the statistic itself (its mass is this mass plus
 * size * T).
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/value.h"

#include "tfce.h"

/* A component of one side of the map over a range of levels: `size` voxels
 * from level `level` down to (not including) its parent's level; parent -1:
 * down to level 1. Children are created before their parents. */
struct nf_tfce_tree_node {
    int32_t parent;
    int32_t size;
    int32_t level;
};

/* A component on the flood's stack: the voxels gathered so far at `level`
 * and above, and its tree node (numbered when it was opened). */
struct nf_tfce_flood_comp {
    int32_t level, size, node;
};

/* ---- the voxel graph ---- */

/* The padded box around the mask's voxels (a layer of cells outside the
 * mask on every side, so that every voxel's neighbours are cells of the
 * box): each voxel's cell and the neighbour steps as cell offsets. -1 when
 * the box has more than 2^31 - 1 cells. */
static int cell_grid(const struct nf_geom *geom, int64_t V, const int (*steps)[3], int n_steps,
                     struct nf_voxel_graph *g)
{
    int64_t nx = geom->grid.dim[0], ny = geom->grid.dim[1];
    int64_t lo[3] = { INT64_MAX, INT64_MAX, INT64_MAX }, hi[3] = { 0, 0, 0 };
    for (int64_t c = 0; c < V; c++) {
        int64_t off = geom->index[c], ijk[3] = { off % nx, off / nx % ny, off / nx / ny };
        for (int d = 0; d < 3; d++) {
            lo[d] = ijk[d] < lo[d] ? ijk[d] : lo[d];
            hi[d] = ijk[d] > hi[d] ? ijk[d] : hi[d];
        }
    }
    if (V == 0)
        lo[0] = lo[1] = lo[2] = 0;
    int64_t bx = hi[0] - lo[0] + 3, by = hi[1] - lo[1] + 3, bz = hi[2] - lo[2] + 3;
    if (bx * by > INT32_MAX || bx * by * bz > INT32_MAX)
        return -1;
    g->n_cells = bx * by * bz;
    for (int64_t c = 0; c < V; c++) {
        int64_t off = geom->index[c];
        int64_t i = off % nx - lo[0] + 1, j = off / nx % ny - lo[1] + 1, k = off / nx / ny - lo[2] + 1;
        g->cell[c] = (int32_t)(i + bx * (j + by * k));
    }
    g->cell[V] = 0;   /* a corner of the padding: no voxel */
    for (int s = 0; s < n_steps; s++)
        g->offset[s] = (int32_t)(steps[s][0] + bx * (steps[s][1] + by * steps[s][2]));
    return 0;
}

int nf_voxel_graph_build(const struct nf_geom *geom, int connectivity, struct nf_voxel_graph *g,
                         struct nf_error *err)
{
    memset(g, 0, sizeof *g);
    if (connectivity != 6 && connectivity != 18 && connectivity != 26)
        return NF_FAIL(err, NF_EINVAL, "connectivity must be 6, 18 or 26 (got %d)", connectivity);
    int64_t V = geom->n_voxels;
    if (V < 0 || V > (int64_t)1 << 30)   /* TFCE's tree has up to 2 V components, numbered in int32 */
        return NF_FAIL(err, NF_EDATA, "a mask of %lld voxels is more than TFCE and clusters handle (2^30)",
                       (long long)V);
    int64_t nx = geom->grid.dim[0], ny = geom->grid.dim[1], nz = geom->grid.dim[2];
    size_t cells;
    if (nx < 1 || ny < 1 || nz < 1 || !nf_size_mul((size_t)nx, (size_t)ny, &cells) ||
        !nf_size_mul(cells, (size_t)nz, &cells))
        return NF_FAIL(err, NF_EDATA, "the mask's grid %lldx%lldx%lld has no voxels or too many",
                       (long long)nx, (long long)ny, (long long)nz);
    /* grid offset -> column, -1 outside the mask */
    int32_t *column = nf_malloc_array(cells, sizeof *column);
    g->nbr = nf_malloc_array((size_t)V * (size_t)connectivity + 1, sizeof *g->nbr);
    g->cell = nf_malloc_array((size_t)V + 1, sizeof *g->cell);
    if (!column || !g->nbr || !g->cell) {
        free(column);
        nf_voxel_graph_release(g);
        return NF_FAIL(err, NF_ENOMEM, "out of memory for the neighbours of %lld voxels", (long long)V);
    }
    memset(column, 0xff, cells * sizeof *column);
    for (int64_t c = 0; c < V; c++) {
        int64_t off = geom->index[c];
        if (off < 0 || (size_t)off >= cells || column[off] >= 0) {
            free(column);
            nf_voxel_graph_release(g);
            return NF_FAIL(err, NF_EDATA, "mask column %lld: grid offset %lld is %s", (long long)c,
                           (long long)off, off < 0 || (size_t)off >= cells ? "off the grid" : "used twice");
        }
        column[off] = (int32_t)c;
    }
    /* neighbour steps in (di, dj, dk) order: columns run over (i, j, k) in C
     * order, so this lists each voxel's neighbours in ascending column order */
    int steps[26][3], n_steps = 0;
    for (int di = -1; di <= 1; di++)
        for (int dj = -1; dj <= 1; dj++)
            for (int dk = -1; dk <= 1; dk++) {
                int moved = (di != 0) + (dj != 0) + (dk != 0);
                if (moved == 0 || (connectivity == 6 && moved > 1) || (connectivity == 18 && moved > 2))
                    continue;
                steps[n_steps][0] = di;
                steps[n_steps][1] = dj;
                steps[n_steps][2] = dk;
                n_steps++;
            }
    if (cell_grid(geom, V, steps, n_steps, g) < 0) {
        free(column);
        nf_voxel_graph_release(g);
        return NF_FAIL(err, NF_EDATA, "the mask's bounding box has too many voxels for TFCE and clusters (2^31)");
    }
    int64_t n = 0;
    for (int64_t c = 0; c < V; c++) {
        int64_t off = geom->index[c];
        int64_t i = off % nx, j = off / nx % ny, k = off / nx / ny;
        for (int s = 0; s < n_steps; s++) {
            int64_t a = i + steps[s][0], b = j + steps[s][1], d = k + steps[s][2];
            if (a < 0 || a >= nx || b < 0 || b >= ny || d < 0 || d >= nz)
                continue;
            int32_t w = column[a + nx * (b + ny * d)];
            if (w >= 0)
                g->nbr[n++] = w;
        }
        while (n < (c + 1) * n_steps)
            g->nbr[n++] = (int32_t)V;
    }
    free(column);
    g->n_voxels = V;
    g->connectivity = connectivity;
    return 0;
}

void nf_voxel_graph_release(struct nf_voxel_graph *g)
{
    if (!g)
        return;
    free(g->nbr);
    free(g->cell);
    memset(g, 0, sizeof *g);
}

/* ---- plans and workspace ---- */

static bool tail_known(int tail)
{
    return tail == NF_TAIL_TWO || tail == NF_TAIL_UPPER || tail == NF_TAIL_LOWER;
}

int nf_tfce_plan_init(struct nf_tfce_plan *p, const struct nf_voxel_graph *g, int tail, double E, double H,
                      int steps, struct nf_error *err)
{
    memset(p, 0, sizeof *p);
    if (!tail_known(tail))
        return NF_FAIL(err, NF_EINVAL, "TFCE: unknown tail %d", tail);
    if (!(isfinite(E) && E >= 0) || !(isfinite(H) && H >= 0))
        return NF_FAIL(err, NF_EINVAL, "TFCE: E and H must be finite and >= 0 (got E %g, H %g)", E, H);
    if (steps < 1 || steps > NF_TFCE_MAX_STEPS)
        return NF_FAIL(err, NF_EINVAL, "TFCE: steps must be 1 .. %d (got %d)", NF_TFCE_MAX_STEPS, steps);
    p->size_pow = nf_malloc_array((size_t)g->n_voxels + 1, sizeof *p->size_pow);
    if (!p->size_pow)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for TFCE's table of %lld sizes", (long long)g->n_voxels);
    p->size_pow[0] = 0;
    for (int64_t s = 1; s <= g->n_voxels; s++)
        p->size_pow[s] = pow((double)s, E);
    p->graph = g;
    p->tail = tail;
    p->E = E;
    p->H = H;
    p->steps = steps;
    return 0;
}

void nf_tfce_plan_release(struct nf_tfce_plan *p)
{
    if (!p)
        return;
    free(p->size_pow);
    p->size_pow = NULL;
}

int nf_cluster_plan_init(struct nf_cluster_plan *p, const struct nf_voxel_graph *g, int tail, double threshold,
                         struct nf_error *err)
{
    memset(p, 0, sizeof *p);
    if (!tail_known(tail))
        return NF_FAIL(err, NF_EINVAL, "clusters: unknown tail %d", tail);
    if (!(isfinite(threshold) && threshold >= 0))
        return NF_FAIL(err, NF_EINVAL, "clusters: the cluster-forming threshold must be finite and >= 0 (got %g)",
                       threshold);
    p->graph = g;
    p->tail = tail;
    p->threshold = threshold;
    return 0;
}

/* The 8-byte words that hold the box's cell levels (one byte per cell, or
 * two when `wide`). */
static size_t level_words(int64_t n_cells, bool wide)
{
    return ((size_t)n_cells * (wide ? 2 : 1) + 7) / 8;
}

int nf_tfce_work_init(struct nf_tfce_work *w, const struct nf_voxel_graph *g, int steps, struct nf_error *err)
{
    memset(w, 0, sizeof *w);
    if (steps < 0 || steps > NF_TFCE_MAX_STEPS)
        return NF_FAIL(err, NF_EINVAL, "TFCE: steps must be 1 .. %d (got %d)", NF_TFCE_MAX_STEPS, steps);
    size_t V = (size_t)g->n_voxels + 1;
    w->level = nf_malloc_array(V, sizeof *w->level);
    w->parent = nf_malloc_array(V, sizeof *w->parent);
    w->size = nf_malloc_array(V, sizeof *w->size);
    w->value = nf_malloc_array(V, sizeof *w->value);
    w->queue = nf_malloc_array(V, sizeof *w->queue);
    if (steps > 0) {
        w->order = nf_malloc_array(V, sizeof *w->order);
        w->tree = nf_malloc_array(V, sizeof *w->tree);
        w->comp = nf_malloc_array((size_t)steps + 2, sizeof *w->comp);
        w->nonempty = nf_calloc((size_t)steps / 64 + 1, sizeof *w->nonempty);
        /* whole 8-byte words, the last one padded with zeros, for the scan
         * for seeds */
        w->cell_level = nf_calloc(level_words(g->n_cells, steps > INT8_MAX), sizeof(uint64_t));
        w->cell_birth = nf_malloc_array((size_t)g->n_cells, sizeof *w->cell_birth);
    }
    w->bucket = nf_malloc_array(2 * ((size_t)steps + 1), sizeof *w->bucket);
    w->height = nf_malloc_array((size_t)steps + 2, sizeof *w->height);
    w->height_sum = nf_malloc_array((size_t)steps + 1, sizeof *w->height_sum);
    if (!w->level || !w->parent || !w->size || !w->value || !w->bucket || !w->height || !w->height_sum ||
        !w->queue || (steps > 0 && (!w->order || !w->tree || !w->comp || !w->nonempty || !w->cell_level ||
                       !w->cell_birth))) {
        nf_tfce_work_release(w);
        return NF_FAIL(err, NF_ENOMEM, "out of memory for TFCE's workspace (%lld voxels)", (long long)g->n_voxels);
    }
    w->n_voxels = g->n_voxels;
    w->steps = steps;
    return 0;
}

void nf_tfce_work_release(struct nf_tfce_work *w)
{
    if (!w)
        return;
    free(w->level);
    free(w->queue);
    free(w->order);
    free(w->comp);
    free(w->nonempty);
    free(w->cell_level);
    free(w->cell_birth);
    free(w->bucket);
    free(w->height);
    free(w->height_sum);
    free(w->parent);
    free(w->size);
    free(w->tree);
    free(w->value);
    memset(w, 0, sizeof *w);
}

/* ---- union-find ---- */

/* The root of x in a forest whose roots hold negative payloads in parent[],
 * halving the path. */
static inline int32_t uf_root(int32_t *parent, int32_t x)
{
    for (;;) {
        int32_t p = parent[x];
        if (p < 0)
            return x;
        int32_t gp = parent[p];
        if (gp < 0)
            return p;
        parent[x] = gp;
        x = gp;
    }
}

/* The root of x in a forest whose roots are their own parents, halving the
 * path. */
static inline int32_t uf_find(int32_t *parent, int32_t x)
{
    while (parent[x] != x) {
        int32_t p = parent[x];
        parent[x] = parent[p];
        x = p;
    }
    return x;
}

/* ---- TFCE ---- */

/* The largest k in 0 .. steps with a >= h_k, in float: given fh[k], the
 * least float at or above h_k (so a >= fh[k] exactly when (double)a >= h_k),
 * fh[0] = 0 and fh[steps + 1] = +inf; 0 for NaN, negative values and values
 * above m (infinities). A first guess from a / dh, then corrected against the
 * thresholds themselves so that values exactly on a threshold count. Float
 * and one test in the common case: the chain of operations per voxel is
 * short, so the out-of-order core overlaps many voxels. */
static inline int level_of(float a, int steps, float m, float inv_dh, const float *fh)
{
    a = (a > 0) & (a <= m) ? a : 0;   /* NaN fails both */
    float guess = a * inv_dh;          /* inf or NaN when inv_dh overflows float (m tiny): then steps */
    int k = guess < (float)steps ? (int)guess : steps;
    if ((a >= fh[k + 1]) | (a < fh[k])) {   /* a guess off by one, rounding near a threshold */
        while (a >= fh[k + 1])
            k++;
        while (a < fh[k])
            k--;
    }
    return k;
}

/* A cell's signed level in the workspace's box: int8 when the levels fit
 * (the default 100 steps: the box then stays in L2 cache, which the flood's
 * reads need), else int16. `wide` is a constant where they are called. */
static inline __attribute__((always_inline)) int cell_get(const void *level, const bool wide, int32_t c)
{
    return wide ? ((const int16_t *)level)[c] : ((const int8_t *)level)[c];
}

static inline __attribute__((always_inline)) void cell_put(void *level, const bool wide, int32_t c, int k)
{
    if (wide)
        ((int16_t *)level)[c] = (int16_t)k;
    else
        ((int8_t *)level)[c] = (int8_t)k;
}

/* Each voxel's level, signed by its side (level_of), and the count of voxels
 * per level: count[k] + count2[k] (even and odd voxels apart: neighbouring
 * voxels of a smooth map share a level, and one counter would make each
 * increment wait for the one before). `tail` is a constant where it is
 * called, so the loop has no per-voxel choice of side. */
static inline __attribute__((always_inline)) void signed_levels(const float *stat, const struct nf_voxel_graph *g,
                                                                const int tail, int steps, float m,
                                                                float inv_dh, const float *fh, void *level,
                                                                const bool wide, int64_t *count, int64_t *count2)
{
    const int32_t *cell = g->cell;
    for (int64_t v = 0; v < g->n_voxels; v++) {
        float x = stat[v];
        float a = tail == NF_TAIL_UPPER ? x : tail == NF_TAIL_LOWER ? -x : fabsf(x);
        int k = level_of(a, steps, m, inv_dh, fh);
        int negative = tail == NF_TAIL_LOWER || (tail == NF_TAIL_TWO && x < 0);
        cell_put(level, wide, cell[v], negative ? -k : k);
        (v & 1 ? count2 : count)[k]++;
    }
}

/* The tail's height of the map: the largest finite value on its side(s). */
static double tail_height(const float *stat, int64_t V, int tail)
{
    float hi = 0, lo = 0;
    for (int64_t v = 0; v < V; v++) {
        float x = stat[v];
        hi = x > hi && x <= FLT_MAX ? x : hi;     /* NaN and inf fail */
        lo = x < lo && x >= -FLT_MAX ? x : lo;
    }
    double up = hi, down = -(double)lo;
    return tail == NF_TAIL_UPPER ? up : tail == NF_TAIL_LOWER ? down : (up > down ? up : down);
}

/* Closes the component c: its node spans c's level down to `parent`'s
 * level (parent -1: down to level 1). */
static inline void close_node(struct nf_tfce_work *w, int32_t *n_closed, struct nf_tfce_flood_comp c, int32_t parent)
{
    w->tree[c.node] = (struct nf_tfce_tree_node){ .parent = parent, .size = c.size, .level = c.level };
    w->order[(*n_closed)++] = c.node;
}

/* The highest non-empty level below k (0: none), from the bitmap of
 * non-empty levels. */
static inline int next_level_below(const uint64_t *nonempty, int k)
{
    int word = k >> 6;
    uint64_t bits = nonempty[word] & (((uint64_t)1 << (k & 63)) - 1);
    while (!bits) {
        if (--word < 0)
            return 0;
        bits = nonempty[word];
    }
    return word * 64 + 63 - __builtin_clzll(bits);
}

/* The flood meets u, a neighbour of *cur higher than its level *k: it
 * gathers u's first and comes back to cur later, cur back at the head of its
 * queue (where it was just taken from, if it was: so that no voxel is queued
 * twice), with a component opened at u's level ku on the stack. */
static inline __attribute__((always_inline)) void descend(struct nf_tfce_work *w, int64_t *head, int64_t *tail,
                                                          int32_t *cur, int *k, bool *queued, int *top,
                                                          int32_t *n_nodes, int32_t u, int ku)
{
    if (*queued)
        head[*k]--;
    else
        w->queue[tail[*k]++] = *cur;
    w->nonempty[*k >> 6] |= (uint64_t)1 << (*k & 63);
    w->comp[++*top] = (struct nf_tfce_flood_comp){ ku, 0, (*n_nodes)++ };
    *cur = u;
    *queued = false;
    *k = ku;
}

/* Floods the component of one side that holds `seed` (levels as
 * tfce_sweep's, already-visited voxels at 0): the Nistér–Stewénius walk,
 * which gathers the voxels highest level first, descends into a higher
 * neighbour as soon as it meets one, and keeps the lower neighbours in one
 * FIFO queue per level. The components open at the current voxel form a
 * stack of increasing levels; when the highest waiting level drops below a
 * component's, that component closes, merged into the one beneath it (when
 * the beneath one's level is still reached) or continued at the lower
 * level. `conn` and `wide` are constants where it is called. */
static inline __attribute__((always_inline)) void flood(const struct nf_tfce_plan *p, struct nf_tfce_work *w,
                                                        int32_t seed, const int conn, const bool wide,
                                                        bool births, int32_t *n_nodes, int32_t *n_closed)
{
    void *level = w->cell_level;
    const int32_t *offset = p->graph->offset;
    int32_t *queue = w->queue, *birth = w->cell_birth;
    int64_t *head = w->bucket, *tail = w->bucket + p->steps + 1;
    uint64_t *nonempty = w->nonempty;
    struct nf_tfce_flood_comp *st = w->comp;   /* st[0]: level 0, below every component */
    int side = cell_get(level, wide, seed) > 0 ? 1 : -1, k = cell_get(level, wide, seed) * side, top = 1;
    int32_t cur = seed;
    bool queued = false;   /* cur was taken from its level's queue */
    cell_put(level, wide, seed, 0);
    st[0] = (struct nf_tfce_flood_comp){ 0, 0, -1 };
    st[1] = (struct nf_tfce_flood_comp){ k, 0, (*n_nodes)++ };
    for (;;) {
    next_neighbours:
        if (conn == 26) {
            for (int j = 0; j < conn; j++) {
                int32_t u = cur + offset[j];
                int ku = cell_get(level, wide, u) * side;
                if (ku <= 0)
                    continue;
                cell_put(level, wide, u, 0);
                if (ku <= k) {
                    queue[tail[ku]++] = u;
                    nonempty[ku >> 6] |= (uint64_t)1 << (ku & 63);
                    continue;
                }
                descend(w, head, tail, &cur, &k, &queued, &top, n_nodes, u, ku);
                goto next_neighbours;
            }
        } else {
            /* which neighbours wait on this side, as bits, then those only:
             * one voxel in six or so, and which one is a coin toss, so a
             * branch per neighbour is mispredicted about once per voxel
             * (12% of the time at connectivity 6; at 26 the 26 tests cost
             * more than they save) */
            uint32_t waiting = 0;
            for (int j = 0; j < conn; j++)
                waiting |= (uint32_t)(cell_get(level, wide, cur + offset[j]) * side > 0) << j;
            for (; waiting; waiting &= waiting - 1) {
                int32_t u = cur + offset[__builtin_ctz(waiting)];
                int ku = cell_get(level, wide, u) * side;
                cell_put(level, wide, u, 0);
                if (ku <= k) {
                    queue[tail[ku]++] = u;
                    nonempty[ku >> 6] |= (uint64_t)1 << (ku & 63);
                    continue;
                }
                descend(w, head, tail, &cur, &k, &queued, &top, n_nodes, u, ku);
                goto next_neighbours;
            }
        }
        st[top].size++;
        if (births)
            birth[cur] = st[top].node;
        if (head[k] == tail[k]) {
            nonempty[k >> 6] &= ~((uint64_t)1 << (k & 63));
            int next = next_level_below(nonempty, k);
            /* close the components above the next level */
            while (st[top].level > next) {
                struct nf_tfce_flood_comp c = st[top];
                if (st[top - 1].level < next) {   /* c continues at the next level */
                    int32_t t = (*n_nodes)++;
                    close_node(w, n_closed, c, t);
                    st[top] = (struct nf_tfce_flood_comp){ next, c.size, t };
                    break;
                }
                top--;
                if (top == 0) {
                    close_node(w, n_closed, c, -1);
                    return;
                }
                close_node(w, n_closed, c, st[top].node);
                st[top].size += c.size;
            }
            k = next;
        }
        cur = queue[head[k]++];
        queued = true;
    }
}

/* signed_levels and flood with the tail and the connectivity as constants. */
static inline __attribute__((always_inline)) void signed_levels_of_tail(const float *stat,
                                                                        const struct nf_voxel_graph *g, int tail,
                                                                        int steps, float m, float inv_dh,
                                                                        const float *fh, void *level,
                                                                        const bool wide, int64_t *count,
                                                                        int64_t *count2)
{
    if (tail == NF_TAIL_TWO)
        signed_levels(stat, g, NF_TAIL_TWO, steps, m, inv_dh, fh, level, wide, count, count2);
    else if (tail == NF_TAIL_UPPER)
        signed_levels(stat, g, NF_TAIL_UPPER, steps, m, inv_dh, fh, level, wide, count, count2);
    else
        signed_levels(stat, g, NF_TAIL_LOWER, steps, m, inv_dh, fh, level, wide, count, count2);
}

static inline __attribute__((always_inline)) void flood_of_conn(const struct nf_tfce_plan *p,
                                                                struct nf_tfce_work *w, int32_t seed, int conn,
                                                                const bool wide, bool births, int32_t *n_nodes,
                                                                int32_t *n_closed)
{
    if (conn == 6)
        flood(p, w, seed, 6, wide, births, n_nodes, n_closed);
    else if (conn == 18)
        flood(p, w, seed, 18, wide, births, n_nodes, n_closed);
    else
        flood(p, w, seed, 26, wide, births, n_nodes, n_closed);
}

/* The sweep: levels, then every component of each side flooded from its
 * first voxel in column order, with every tree node's value final. birth[v]
 * (the node v was gathered into; -1: none) is set only when `births`.
 * Returns the number of tree nodes (0: the map has no voxel on its side). */
static int32_t tfce_sweep(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat, bool births)
{
    const struct nf_voxel_graph *g = p->graph;
    int64_t V = g->n_voxels;
    int steps = p->steps;
    void *level = w->cell_level;   /* all 0 between maps: the flood zeroes what it visits */
    bool wide = steps > INT8_MAX;
    double m = tail_height(stat, V, p->tail);
    if (!(m > 0))
        return 0;

    /* thresholds h_k = k (m / steps), h_steps = m, as numpy's linspace(0, m,
     * steps + 1) in double; fh[k] the least float at or above h_k; P(k) =
     * sum of h_j^H for j <= k */
    double *P = w->height_sum, dh = m / steps;
    float *fh = w->height;
    fh[0] = 0;
    P[0] = 0;
    for (int k = 1; k <= steps; k++) {
        double h = k == steps ? m : k * dh;
        float f = (float)h;
        fh[k] = (double)f < h ? nextafterf(f, INFINITY) : f;
        P[k] = P[k - 1] + pow(h, p->H);
    }
    fh[steps + 1] = INFINITY;

    /* levels, signed by side; each level's queue gets room for its voxels */
    int64_t *head = w->bucket, *tail = w->bucket + steps + 1;
    memset(head, 0, 2 * (size_t)(steps + 1) * sizeof *head);
    if (wide)
        signed_levels_of_tail(stat, g, p->tail, steps, (float)m, (float)(steps / m), fh, level, true, head, tail);
    else
        signed_levels_of_tail(stat, g, p->tail, steps, (float)m, (float)(steps / m), fh, level, false, head, tail);
    int64_t at = 0;
    for (int k = 1; k <= steps; k++) {
        int64_t room = head[k] + tail[k];
        head[k] = tail[k] = at;
        at += room;
    }
    memset(w->nonempty, 0, (size_t)(steps / 64 + 1) * sizeof *w->nonempty);
    if (births)
        memset(w->cell_birth, 0xff, (size_t)g->n_cells * sizeof *w->cell_birth);

    /* a flood from every cell still holding a level, in cell order (column
     * order), 8 bytes of cells at a time: most are 0 by then (padding,
     * flooded, below h_1) */
    int32_t n_nodes = 0, n_closed = 0;
    int conn = g->connectivity, per_word = wide ? 4 : 8;
    size_t n_words = level_words(g->n_cells, wide);
    for (size_t i = 0; i < n_words; i++) {
        uint64_t word;
        memcpy(&word, (const char *)level + 8 * i, sizeof word);
        if (!word)
            continue;
        for (int32_t c = (int32_t)i * per_word, end = c + per_word; c < end; c++) {
            if (!cell_get(level, wide, c))
                continue;
            if (wide)
                flood_of_conn(p, w, c, conn, true, births, &n_nodes, &n_closed);
            else
                flood_of_conn(p, w, c, conn, false, births, &n_nodes, &n_closed);
        }
    }

    /* node values, parents (closed after their children) first */
    const double *sp = p->size_pow;
    const struct nf_tfce_tree_node *tree = w->tree;
    double *value = w->value;
    for (int32_t i = n_closed - 1; i >= 0; i--) {
        int32_t t = w->order[i], up_node = tree[t].parent;
        double below = up_node < 0 ? 0 : P[tree[up_node].level];
        value[t] = sp[tree[t].size] * (P[tree[t].level] - below) + (up_node < 0 ? 0 : value[up_node]);
    }
    return n_nodes;
}

void nf_tfce_map(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat, float *out)
{
    int64_t V = p->graph->n_voxels;
    int32_t n_tree = tfce_sweep(p, w, stat, true);
    for (int64_t v = 0; v < V; v++) {
        int32_t b = n_tree ? w->cell_birth[p->graph->cell[v]] : -1;
        float t = b >= 0 ? (float)w->value[b] : 0.0f;
        bool negative = b >= 0 && (p->tail == NF_TAIL_LOWER || (p->tail == NF_TAIL_TWO && stat[v] < 0));
        out[v] = negative ? -t : t;
    }
}

float nf_tfce_max(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat)
{
    int32_t n_tree = tfce_sweep(p, w, stat, false);
    double best = 0;
    for (int32_t t = 0; t < n_tree; t++)
        best = w->value[t] > best ? w->value[t] : best;
    return (float)best;
}

/* ---- clusters ---- */

/* Which voxels are beyond T (w->level: +1, -1, 0), joined with their earlier
 * neighbours on the same side (w->size: a root's voxel count). Returns how
 * many, listed in column order in w->queue (so that the passes after it
 * visit those few, not all V). */
static int64_t cluster_forest(const struct nf_cluster_plan *p, struct nf_tfce_work *w, const float *stat)
{
    const struct nf_voxel_graph *g = p->graph;
    int64_t V = g->n_voxels;
    double T = p->threshold;
    bool up = p->tail != NF_TAIL_LOWER, down = p->tail != NF_TAIL_UPPER;
    int16_t *side = w->level;
    int32_t *parent = w->parent, *size = w->size, *beyond = w->queue;
    int64_t n = 0;
    for (int64_t v = 0; v < V; v++) {
        double x = stat[v];
        int s = up && x > T && isfinite(x) ? 1 : down && x < -T && isfinite(x) ? -1 : 0;
        side[v] = (int16_t)s;
        if (!s)
            continue;
        beyond[n++] = (int32_t)v;
        parent[v] = (int32_t)v;
        size[v] = 1;
        int32_t root = (int32_t)v;
        const int32_t *nb = g->nbr + v * g->connectivity;
        for (int j = 0; j < g->connectivity; j++) {
            int32_t u = nb[j];
            if (u > v)
                break;   /* ascending, "none" last: the rest come later */
            if (side[u] != s)
                continue;
            int32_t r = uf_find(parent, u);
            if (r == root)
                continue;
            int32_t big = size[r] > size[root] ? r : root, small = big == r ? root : r;
            parent[small] = big;
            size[big] += size[small];
            root = big;
        }
    }
    return n;
}

int64_t nf_clusters_label(const struct nf_cluster_plan *p, struct nf_tfce_work *w, const float *stat,
                          int32_t *ids, struct nf_cluster *clusters)
{
    int64_t V = p->graph->n_voxels;
    double T = p->threshold;
    cluster_forest(p, w, stat);
    memset(ids, 0, (size_t)V * sizeof *ids);
    int64_t n = 0;
    /* positive clusters first, each numbered at its first voxel */
    for (int s = 1; s >= -1; s -= 2)
        for (int64_t v = 0; v < V; v++) {
            if (w->level[v] != s)
                continue;
            int32_t r = uf_find(w->parent, (int32_t)v);
            if (!ids[r]) {
                ids[r] = (int32_t)++n;
                clusters[n - 1] = (struct nf_cluster){ .sign = s, .size = w->size[r], .mass = 0,
                                                      .peak = stat[v], .peak_voxel = v };
            }
            struct nf_cluster *c = &clusters[ids[r] - 1];
            ids[v] = ids[r];
            c->mass += fabs((double)stat[v]) - T;
            if (fabsf(stat[v]) > fabsf(c->peak)) {
                c->peak = stat[v];
                c->peak_voxel = v;
            }
        }
    return n;
}

void nf_clusters_max(const struct nf_cluster_plan *p, struct nf_tfce_work *w, const float *stat,
                     int64_t *max_size, double *max_mass)
{
    double T = p->threshold;
    int64_t n = cluster_forest(p, w, stat);
    const int32_t *beyond = w->queue;
    /* masses summed per root in column order, as nf_clusters_label sums them */
    double *mass = w->value;
    for (int64_t i = 0; i < n; i++)
        mass[beyond[i]] = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t v = beyond[i];
        mass[uf_find(w->parent, v)] += fabs((double)stat[v]) - T;
    }
    int64_t best_size = 0;
    double best_mass = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t v = beyond[i];
        if (w->parent[v] == v) {
            best_size = w->size[v] > best_size ? w->size[v] : best_size;
            best_mass = mass[v] > best_mass ? mass[v] : best_mass;
        }
    }
    *max_size = best_size;
    *max_mass = best_mass;
}
