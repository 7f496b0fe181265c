/* tfce.c — TFCE and cluster extent / mass of a statistic map over a mask's
 * voxel graph, one near-linear pass per map (definitions in tfce.h).
 *
 * TFCE: a voxel with value x on its side of the map reaches the thresholds
 * h_1 .. h_L(x) (L: its level, exactly the largest k with x >= h_k in double),
 * so only levels matter: the clusters at h_k are the connected components of
 * the voxels of level >= k, and they only grow and merge as k goes down. One
 * pass in column order computes the levels; a second writes, per level (a
 * counting sort with steps + 1 buckets), each voxel followed by its
 * neighbours on the same side that come before it (a higher level, or the
 * same level and an earlier column): reading the levels from the highest down,
 * every neighbour pair is met once, in the order a union-find needs, and the
 * neighbour lists are read in column order rather than at random. The sweep
 * then adds the voxels to a union-find forest (union by size, path halving)
 * and records the components over levels as a tree: a node is a component of
 * s voxels from the level where it formed or last changed down to the level
 * where it grew or merged (its parent, formed there); changes within one
 * level update that level's node. A node contributes s^E (P(top) - P(end))
 * to every voxel below it, P(k) = sum of h_j^H for j <= k, so a voxel's TFCE
 * is the sum over its chain of nodes, evaluated once per node from the roots
 * down (parents are created after their children, so one backward pass over
 * the nodes). Each voxel's value is that of the node it joined when it was
 * added; a node's value never exceeds its children's (contributions are >= 0,
 * and so are their rounded sums), so the largest node value is the largest
 * voxel value bit for bit, and null maps need neither per-voxel output nor
 * per-voxel births. The two signs of a two-tailed map never share a
 * component and go through the same pass. Cost: two streaming passes over the
 * neighbour lists, O(V alpha(V)) union-find steps, no pow() per map beyond the
 * `steps` heights (s^E is a table in the plan).
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

/* How far ahead of a level's write position write_streams prefetches; the
 * workspace's stream has this much room past its end. */
enum { STREAM_AHEAD = 32 };

/* ---- the voxel graph ---- */

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
    if (!column || !g->nbr) {
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

int nf_tfce_work_init(struct nf_tfce_work *w, const struct nf_voxel_graph *g, int steps, struct nf_error *err)
{
    memset(w, 0, sizeof *w);
    if (steps < 0 || steps > NF_TFCE_MAX_STEPS)
        return NF_FAIL(err, NF_EINVAL, "TFCE: steps must be 1 .. %d (got %d)", NF_TFCE_MAX_STEPS, steps);
    size_t V = (size_t)g->n_voxels + 1;
    w->level = nf_malloc_array(V, sizeof *w->level);
    w->parent = nf_malloc_array(V, sizeof *w->parent);
    w->size = nf_malloc_array(V, sizeof *w->size);
    w->value = nf_malloc_array(2 * V, sizeof *w->value);
    if (steps > 0) {
        w->stream = nf_malloc_array(V * (1 + (size_t)g->connectivity) + STREAM_AHEAD, sizeof *w->stream);
        w->birth = nf_malloc_array(V, sizeof *w->birth);
        w->tree = nf_malloc_array(2 * V, sizeof *w->tree);
    }
    w->bucket = nf_malloc_array(2 * ((size_t)steps + 1), sizeof *w->bucket);
    w->height = nf_malloc_array((size_t)steps + 2, sizeof *w->height);
    w->height_sum = nf_malloc_array((size_t)steps + 1, sizeof *w->height_sum);
    if (!w->level || !w->parent || !w->size || !w->value || !w->bucket || !w->height || !w->height_sum ||
        (steps > 0 && (!w->stream || !w->birth || !w->tree))) {
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
    free(w->stream);
    free(w->bucket);
    free(w->height);
    free(w->height_sum);
    free(w->parent);
    free(w->size);
    free(w->birth);
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

/* The largest k in 0 .. steps with a >= h_k, given the thresholds h[0] = 0,
 * h[1 .. steps] and h[steps + 1] = +inf (0 for NaN, negative values and
 * values above m, that is infinities): a first guess from a / dh, then
 * corrected against the thresholds themselves so that values exactly on a
 * threshold count. */
static inline int level_of(double a, int steps, double m, double inv_dh, const double *h)
{
    a = a > 0 && a <= m ? a : 0;
    int k = (int)(a * inv_dh);
    k = k < steps ? k : steps;
    while (a >= h[k + 1])
        k++;
    while (a < h[k])
        k--;
    return k;
}

/* Each voxel's level, signed by its side (level_of), and the count of voxels
 * per level in count[]; `tail` is a constant where it is called, so the loop
 * has no per-voxel choice of side. */
static inline __attribute__((always_inline)) void signed_levels(const float *stat, int64_t V, const int tail,
                                                                int steps, double m, double inv_dh,
                                                                const double *h, int16_t *level, int64_t *count)
{
    for (int64_t v = 0; v < V; v++) {
        double x = stat[v];
        double a = tail == NF_TAIL_UPPER ? x : tail == NF_TAIL_LOWER ? -x : fabs(x);
        int k = level_of(a, steps, m, inv_dh, h);
        level[v] = (int16_t)(tail == NF_TAIL_LOWER || (tail == NF_TAIL_TWO && x < 0) ? -k : k);
        count[k]++;
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

/* A new tree node: `size` voxels from `level` down. */
static inline int32_t tree_add(struct nf_tfce_tree_node *tree, int32_t *n_tree, int32_t size, int level)
{
    int32_t t = (*n_tree)++;
    tree[t] = (struct nf_tfce_tree_node){ .parent = -1, .size = size, .level = level };
    return t;
}

/* The node that component c continues in at level k: c itself when it formed
 * at k, else a new node at k (c's range ends above k). */
static inline int32_t tree_continue(struct nf_tfce_tree_node *tree, int32_t *n_tree, int32_t c, int k)
{
    if (tree[c].level == k)
        return c;
    int32_t t = tree_add(tree, n_tree, tree[c].size, k);
    tree[c].parent = t;
    return t;
}

/* Each voxel with a level, as ~v, followed by its neighbours on its side that
 * the sweep adds before it (a higher level, or the same level and an earlier
 * column), into its level's stream; `conn` is a constant where it is called,
 * so the neighbour loop has a fixed count. */
static inline __attribute__((always_inline)) void write_streams(int64_t V, const int16_t *level, const int32_t *nbr,
                                                                const int conn, int32_t *stream, int64_t *end)
{
    for (int64_t v = 0; v < V; v++) {
        int lv = level[v];
        if (!lv)
            continue;
        int side = lv > 0 ? 1 : -1, k = lv * side;
        int64_t e = end[k];
        /* the level's stream two lines ahead, for writing: its lines were
         * last touched a map ago, and waiting for each at the store costs
         * more than the rest of this loop */
        __builtin_prefetch(stream + e + STREAM_AHEAD, 1);
        stream[e++] = ~(int32_t)v;
        const int32_t *nb = nbr + v * conn;
        for (int j = 0; j < conn; j++) {
            int32_t u = nb[j];
            int key = level[u] * side;
            stream[e] = u;   /* kept when added before v; no branch: half are */
            e += (key > k) | ((key == k) & (u < v));
        }
        end[k] = e;
    }
}

/* The sweep: levels, the per-level streams, the union-find and the tree of
 * components with every node's value final. birth[v] is set only when
 * `births`. Returns the number of tree nodes (0: the map has no voxel on its
 * side). */
static int32_t tfce_sweep(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat, bool births)
{
    const struct nf_voxel_graph *g = p->graph;
    int64_t V = g->n_voxels;
    int steps = p->steps;
    int16_t *level = w->level;
    double m = tail_height(stat, V, p->tail);
    if (!(m > 0))
        return 0;

    /* thresholds h_k = k (m / steps), h_steps = m, as numpy's linspace(0, m,
     * steps + 1) in double; P(k) = sum of h_j^H for j <= k */
    double *h = w->height, *P = w->height_sum, dh = m / steps, inv_dh = steps / m;
    h[0] = 0;
    P[0] = 0;
    for (int k = 1; k <= steps; k++) {
        h[k] = k == steps ? m : k * dh;
        P[k] = P[k - 1] + pow(h[k], p->H);
    }
    h[steps + 1] = INFINITY;

    /* levels, signed by side; room in each level's stream for its voxels and
     * all their neighbours */
    int64_t *start = w->bucket, *end = w->bucket + steps + 1;
    memset(start, 0, (size_t)(steps + 1) * sizeof *start);
    if (p->tail == NF_TAIL_TWO)
        signed_levels(stat, V, NF_TAIL_TWO, steps, m, inv_dh, h, level, start);
    else if (p->tail == NF_TAIL_UPPER)
        signed_levels(stat, V, NF_TAIL_UPPER, steps, m, inv_dh, h, level, start);
    else
        signed_levels(stat, V, NF_TAIL_LOWER, steps, m, inv_dh, h, level, start);
    level[V] = 0;   /* the graph's "no neighbour" */
    int conn = g->connectivity;
    int64_t at = 0;
    for (int k = steps; k >= 1; k--) {
        int64_t room = start[k] * (1 + conn);
        start[k] = end[k] = at;
        at += room;
    }

    /* the streams: voxel v as ~v, then its neighbours added before it */
    if (conn == 6)
        write_streams(V, level, g->nbr, 6, w->stream, end);
    else if (conn == 18)
        write_streams(V, level, g->nbr, 18, w->stream, end);
    else
        write_streams(V, level, g->nbr, 26, w->stream, end);
    const int32_t *stream = w->stream;

    /* the sweep, highest level first; a root r holds ~(its component) in
     * parent[r] */
    int32_t *parent = w->parent, *birth = w->birth;
    struct nf_tfce_tree_node *tree = w->tree;
    int32_t n_tree = 0;
    for (int k = steps; k >= 1; k--) {
        int32_t v = -1, rv = -1;
        for (int64_t e = start[k]; e < end[k]; e++) {
            int32_t x = stream[e];
            if (x < 0) {
                if (v >= 0 && rv < 0) {   /* the previous voxel met no component: a new one */
                    int32_t t = tree_add(tree, &n_tree, 1, k);
                    parent[v] = ~t;
                    if (births)
                        birth[v] = t;
                }
                v = ~x;
                rv = -1;
                continue;
            }
            int32_t r = uf_root(parent, x);
            if (rv < 0) {   /* v joins r's component */
                int32_t t = tree_continue(tree, &n_tree, ~parent[r], k);
                tree[t].size++;
                parent[r] = ~t;
                parent[v] = r;
                rv = r;
                if (births)
                    birth[v] = t;
                continue;
            }
            if (r == rv)
                continue;
            /* two components merge at level k: into one node formed at k (the
             * later one if both formed at k, so that parents come after their
             * children; the other's range is empty) */
            int32_t ca = ~parent[rv], cb = ~parent[r], t;
            int32_t sa = tree[ca].size, sb = tree[cb].size;
            if (tree[ca].level == k && tree[cb].level == k) {
                t = ca > cb ? ca : cb;
                tree[ca + cb - t].parent = t;
            } else if (tree[ca].level == k) {
                t = ca;
                tree[cb].parent = t;
            } else if (tree[cb].level == k) {
                t = cb;
                tree[ca].parent = t;
            } else {
                t = tree_add(tree, &n_tree, 0, k);
                tree[ca].parent = tree[cb].parent = t;
            }
            tree[t].size = sa + sb;
            int32_t big = sa >= sb ? rv : r;
            parent[big == rv ? r : rv] = big;
            parent[big] = ~t;
            rv = big;
        }
        if (v >= 0 && rv < 0) {
            int32_t t = tree_add(tree, &n_tree, 1, k);
            parent[v] = ~t;
            if (births)
                birth[v] = t;
        }
    }

    /* node values, roots first */
    const double *sp = p->size_pow;
    double *value = w->value;
    for (int32_t t = n_tree - 1; t >= 0; t--) {
        int32_t up_node = tree[t].parent;
        double below = up_node < 0 ? 0 : P[tree[up_node].level];
        value[t] = sp[tree[t].size] * (P[tree[t].level] - below) + (up_node < 0 ? 0 : value[up_node]);
    }
    return n_tree;
}

void nf_tfce_map(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat, float *out)
{
    int64_t V = p->graph->n_voxels;
    int32_t n_tree = tfce_sweep(p, w, stat, true);
    for (int64_t v = 0; v < V; v++) {
        int lv = n_tree ? w->level[v] : 0;
        float t = lv ? (float)w->value[w->birth[v]] : 0.0f;
        out[v] = lv >= 0 ? t : -t;
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
 * neighbours on the same side (w->size: a root's voxel count). */
static void cluster_forest(const struct nf_cluster_plan *p, struct nf_tfce_work *w, const float *stat)
{
    const struct nf_voxel_graph *g = p->graph;
    int64_t V = g->n_voxels;
    double T = p->threshold;
    bool up = p->tail != NF_TAIL_LOWER, down = p->tail != NF_TAIL_UPPER;
    int16_t *side = w->level;
    int32_t *parent = w->parent, *size = w->size;
    for (int64_t v = 0; v < V; v++) {
        double x = stat[v];
        int s = up && x > T && isfinite(x) ? 1 : down && x < -T && isfinite(x) ? -1 : 0;
        side[v] = (int16_t)s;
        if (!s)
            continue;
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
    int64_t V = p->graph->n_voxels;
    double T = p->threshold;
    cluster_forest(p, w, stat);
    /* masses summed per root in column order, as nf_clusters_label sums them */
    double *mass = w->value;
    for (int64_t v = 0; v < V; v++)
        if (w->level[v])
            mass[v] = 0;
    for (int64_t v = 0; v < V; v++)
        if (w->level[v])
            mass[uf_find(w->parent, (int32_t)v)] += fabs((double)stat[v]) - T;
    int64_t best_size = 0;
    double best_mass = 0;
    for (int64_t v = 0; v < V; v++)
        if (w->level[v] && w->parent[v] == v) {
            best_size = w->size[v] > best_size ? w->size[v] : best_size;
            best_mass = mass[v] > best_mass ? mass[v] : best_mass;
        }
    *max_size = best_size;
    *max_mass = best_mass;
}
