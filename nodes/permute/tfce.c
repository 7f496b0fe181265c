/* tfce.c — TFCE and cluster extent / mass of a statistic map over a mask's
 * voxel graph, one near-linear pass per map (definitions in tfce.h).
 *
 * TFCE: a voxel with value x on its side of the map reaches the thresholds
 * h_1 .. h_L(x) (L: its level, exactly the largest k with x >= h_k in double),
 * so only levels matter and the voxels are put in order by a counting sort on
 * the level (steps + 1 buckets), highest first. Voxels are then added level by
 * level into a union-find forest (union by size, path halving), each joined
 * with its already added neighbours on the same side. Once level k's voxels
 * are in, the components are exactly the clusters at h_k, and every member of
 * a component of s voxels gains s^E h_k^H. That sum is kept lazily in the
 * forest: a voxel's TFCE is the sum of `acc` along its path to the root, and a
 * root's acc counts its current size as if it lasted down to level 1 —
 * s^E P(k) with P(k) = sum of h_j^H for j <= k. When a component of size s
 * changes to size s' at level k, its root adds (s'^E - s^E) P(k); when root a
 * is attached under root b at level k, a's acc becomes (acc_a - s_a^E P(k)) -
 * (acc_b - s_b^E P(k)): what a's members gained above level k, less what b's
 * path will add that they never had. Path halving keeps path sums (a node
 * skipping its parent takes the parent's acc). At the end each voxel's TFCE
 * is acc(v) + TFCE(parent(v)), evaluated once per voxel with the parent first,
 * so the value is a function of the final forest alone and the max-only entry
 * (null maps) gets the same bits as the per-voxel one. The two signs of a
 * two-tailed map never share a component, so both are done in the same pass.
 * Cost: O(V α(V)) plus one pass over the neighbour lists, with no pow() per
 * map beyond the `steps` heights (s^E is a table in the plan).
 *
 * Clusters at one threshold T: the same forest without levels (voxels beyond T
 * joined with their earlier neighbours on the same side), then sizes, masses
 * and peaks summed per cluster in column order, so that the max-only entry
 * and the labelling sum each mass in the same order. Mass is nilearn's,
 * sum of (|stat| - T) over the cluster; FSL randomise -C instead clusters the
 * voxels >= T and sums the statistic itself (its mass is this mass plus
 * size * T).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/value.h"

#include "tfce.h"

struct nf_uf_node {
    double acc;            /* TFCE: this node's share of its path sum; clusters: a root's mass */
    int32_t parent;        /* itself at a root */
    int32_t size;          /* a root's voxel count; -1 once a TFCE value is final */
};

/* ---- the voxel graph ---- */

int nf_voxel_graph_build(const struct nf_geom *geom, int connectivity, struct nf_voxel_graph *g,
                         struct nf_error *err)
{
    memset(g, 0, sizeof *g);
    if (connectivity != 6 && connectivity != 18 && connectivity != 26)
        return NF_FAIL(err, NF_EINVAL, "connectivity must be 6, 18 or 26 (got %d)", connectivity);
    int64_t V = geom->n_voxels;
    if (V < 0 || V > INT32_MAX)
        return NF_FAIL(err, NF_EDATA, "a mask of %lld voxels is more than TFCE and clusters handle (2^31 - 1)",
                       (long long)V);
    int64_t nx = geom->grid.dim[0], ny = geom->grid.dim[1], nz = geom->grid.dim[2];
    size_t cells;
    if (nx < 1 || ny < 1 || nz < 1 || !nf_size_mul((size_t)nx, (size_t)ny, &cells) ||
        !nf_size_mul(cells, (size_t)nz, &cells))
        return NF_FAIL(err, NF_EDATA, "the mask's grid %lldx%lldx%lld has no voxels or too many",
                       (long long)nx, (long long)ny, (long long)nz);
    /* grid offset -> column, -1 outside the mask */
    int32_t *column = nf_malloc_array(cells, sizeof *column);
    g->first = nf_malloc_array((size_t)V + 1, sizeof *g->first);
    g->nbr = nf_malloc_array((size_t)V * (size_t)connectivity + 1, sizeof *g->nbr);
    if (!column || !g->first || !g->nbr) {
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
        g->first[c] = n;
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
    }
    g->first[V] = n;
    free(column);
    g->n_voxels = V;
    g->connectivity = connectivity;
    return 0;
}

void nf_voxel_graph_release(struct nf_voxel_graph *g)
{
    if (!g)
        return;
    free(g->first);
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
    w->order = nf_malloc_array(V, sizeof *w->order);
    w->node = nf_malloc_array(V, sizeof *w->node);
    w->bucket = nf_malloc_array((size_t)steps + 2, sizeof *w->bucket);
    w->height_sum = nf_malloc_array((size_t)steps + 1, sizeof *w->height_sum);
    if (!w->level || !w->order || !w->node || !w->bucket || !w->height_sum) {
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
    free(w->order);
    free(w->node);
    free(w->bucket);
    free(w->height_sum);
    memset(w, 0, sizeof *w);
}

/* ---- union-find ---- */

/* The root of x, halving the path; a node that skips its parent takes the
 * parent's acc, so every path sum stays the same. */
static inline int32_t uf_find(struct nf_uf_node *node, int32_t x)
{
    for (;;) {
        int32_t p = node[x].parent;
        if (p == x)
            return x;
        int32_t gp = node[p].parent;
        if (gp == p)
            return p;
        node[x].acc += node[p].acc;
        node[x].parent = gp;
        x = gp;
    }
}

/* ---- TFCE ---- */

/* The height of threshold k of a map whose tail height is m, as numpy's
 * linspace(0, m, steps + 1)[k] in double. */
static inline double threshold_at(int k, int steps, double m, double dh)
{
    return k == steps ? m : k * dh;
}

/* The largest k in 0 .. steps with a >= h_k (0 for NaN and values above m,
 * that is infinities): a first guess from a / dh, then corrected against the
 * thresholds themselves so that values exactly on a threshold count. */
static inline int level_of(double a, int steps, double m, double dh, double inv_dh)
{
    if (!(a >= dh && a <= m))   /* h_1 = dh */
        return 0;
    int k = (int)(a * inv_dh);
    if (k > steps)
        k = steps;
    while (k < steps && a >= threshold_at(k + 1, steps, m, dh))
        k++;
    while (k > 0 && a < threshold_at(k, steps, m, dh))
        k--;
    return k;
}

/* The tail's height of the map: the largest finite value on its side(s). */
static double tail_height(const float *stat, int64_t V, int tail)
{
    float hi = 0, lo = 0;
    for (int64_t v = 0; v < V; v++) {
        float x = stat[v];
        if (isfinite(x)) {
            hi = x > hi ? x : hi;
            lo = x < lo ? x : lo;
        }
    }
    double up = hi, down = -(double)lo;
    return tail == NF_TAIL_UPPER ? up : tail == NF_TAIL_LOWER ? down : (up > down ? up : down);
}

/* The sweep: levels, the counting sort, the forest with every root's acc
 * final. Returns how many voxels reach level 1 (their order in w->order). */
static int64_t tfce_sweep(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat)
{
    const struct nf_voxel_graph *g = p->graph;
    int64_t V = g->n_voxels;
    int steps = p->steps;
    int16_t *level = w->level;
    double m = tail_height(stat, V, p->tail);
    if (!(m > 0))
        return 0;
    double dh = m / steps, inv_dh = steps / m;

    /* heights: P(k) = sum of h_j^H for j <= k */
    double *P = w->height_sum;
    P[0] = 0;
    for (int k = 1; k <= steps; k++)
        P[k] = P[k - 1] + pow(threshold_at(k, steps, m, dh), p->H);

    /* levels, signed by side, and the counting sort (highest level first,
     * ascending column within a level) */
    int64_t *bucket = w->bucket;
    memset(bucket, 0, (size_t)(steps + 2) * sizeof *bucket);
    bool up = p->tail != NF_TAIL_LOWER, down = p->tail != NF_TAIL_UPPER;
    for (int64_t v = 0; v < V; v++) {
        double x = stat[v];
        int k = 0;
        if (up && x > 0)
            k = level_of(x, steps, m, dh, inv_dh);
        else if (down && x < 0)
            k = -level_of(-x, steps, m, dh, inv_dh);
        level[v] = (int16_t)k;
        bucket[steps - abs(k)]++;
    }
    int64_t n_in = V - bucket[steps];
    int64_t at = 0;
    for (int b = 0; b <= steps; b++) {
        int64_t c = bucket[b];
        bucket[b] = at;
        at += c;
    }
    int32_t *order = w->order;
    for (int64_t v = 0; v < V; v++)
        order[bucket[steps - abs(level[v])]++] = (int32_t)v;

    /* add the voxels level by level */
    struct nf_uf_node *node = w->node;
    const double *sp = p->size_pow;
    const int64_t *first = g->first;
    const int32_t *nbr = g->nbr;
    for (int64_t i = 0; i < n_in; i++) {
        int32_t v = order[i];
        int lv = level[v];
        int side = lv > 0 ? 1 : -1, k = lv * side;
        double Pk = P[k];
        node[v].acc = sp[1] * Pk;
        node[v].parent = v;
        node[v].size = 1;
        int32_t root = v;
        for (int64_t e = first[v]; e < first[v + 1]; e++) {
            int32_t u = nbr[e];
            int key = level[u] * side;
            /* added already: a higher level on this side, or this level and
             * an earlier column (the sort keeps columns ascending in a level) */
            if (key < k || (key == k && u > v))
                continue;
            int32_t r = uf_find(node, u);
            if (r == root)
                continue;
            int32_t big = root, small = r;
            if (node[r].size > node[root].size) {
                big = r;
                small = root;
            }
            int32_t sb = node[big].size, ss = node[small].size;
            node[small].acc = (node[small].acc - sp[ss] * Pk) - (node[big].acc - sp[sb] * Pk);
            node[small].parent = big;
            node[big].acc += (sp[sb + ss] - sp[sb]) * Pk;
            node[big].size = sb + ss;
            root = big;
        }
    }
    return n_in;
}

/* The final TFCE magnitude of voxel v, acc(v) + TFCE(parent(v)), with every
 * node on its path made final (size -1, acc its TFCE) on the way. */
static inline double tfce_value(struct nf_uf_node *node, int32_t v)
{
    if (node[v].size < 0)
        return node[v].acc;
    int32_t path[64];   /* union by size: depth <= log2(2^31) */
    int n = 0;
    int32_t x = v;
    while (node[x].size >= 0 && node[x].parent != x) {
        path[n++] = x;
        x = node[x].parent;
    }
    node[x].size = -1;   /* a root's value is its acc; a final node's already is */
    while (n > 0) {
        int32_t y = path[--n];
        node[y].acc += node[node[y].parent].acc;
        node[y].size = -1;
    }
    return node[v].acc;
}

void nf_tfce_map(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat, float *out)
{
    int64_t V = p->graph->n_voxels;
    int64_t n_in = tfce_sweep(p, w, stat);
    memset(out, 0, (size_t)V * sizeof *out);
    for (int64_t i = 0; i < n_in; i++) {
        int32_t v = w->order[i];
        float t = (float)tfce_value(w->node, v);
        out[v] = w->level[v] > 0 ? t : -t;
    }
}

float nf_tfce_max(const struct nf_tfce_plan *p, struct nf_tfce_work *w, const float *stat)
{
    int64_t n_in = tfce_sweep(p, w, stat);
    double best = 0;
    for (int64_t i = 0; i < n_in; i++) {
        double t = tfce_value(w->node, w->order[i]);
        best = t > best ? t : best;
    }
    return (float)best;
}

/* ---- clusters ---- */

/* Which voxels are beyond T (w->level: +1, -1, 0), joined with their earlier
 * neighbours on the same side; every node's acc zeroed. Returns how many. */
static int64_t cluster_forest(const struct nf_cluster_plan *p, struct nf_tfce_work *w, const float *stat)
{
    const struct nf_voxel_graph *g = p->graph;
    int64_t V = g->n_voxels, n_in = 0;
    double T = p->threshold;
    bool up = p->tail != NF_TAIL_LOWER, down = p->tail != NF_TAIL_UPPER;
    int16_t *side = w->level;
    struct nf_uf_node *node = w->node;
    for (int64_t v = 0; v < V; v++) {
        double x = stat[v];
        int s = up && x > T && isfinite(x) ? 1 : down && x < -T && isfinite(x) ? -1 : 0;
        side[v] = (int16_t)s;
        if (!s)
            continue;
        n_in++;
        node[v].acc = 0;
        node[v].parent = (int32_t)v;
        node[v].size = 1;
        int32_t root = (int32_t)v;
        for (int64_t e = g->first[v]; e < g->first[v + 1]; e++) {
            int32_t u = g->nbr[e];
            if (u > v)
                break;   /* neighbours are ascending: the rest come later */
            if (side[u] != s)
                continue;
            int32_t r = uf_find(node, u);
            if (r == root)
                continue;
            int32_t big = node[r].size > node[root].size ? r : root, small = big == r ? root : r;
            node[small].parent = big;
            node[big].size += node[small].size;
            root = big;
        }
    }
    return n_in;
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
            int32_t r = uf_find(w->node, (int32_t)v);
            if (!ids[r]) {
                ids[r] = (int32_t)++n;
                clusters[n - 1] = (struct nf_cluster){ .sign = s, .size = w->node[r].size, .mass = 0,
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
    struct nf_uf_node *node = w->node;
    /* masses summed per root in column order, as nf_clusters_label sums them */
    for (int64_t v = 0; v < V; v++)
        if (w->level[v])
            node[uf_find(node, (int32_t)v)].acc += fabs((double)stat[v]) - T;
    int64_t size = 0;
    double mass = 0;
    for (int64_t v = 0; v < V; v++)
        if (w->level[v] && node[v].parent == v) {
            size = node[v].size > size ? node[v].size : size;
            mass = node[v].acc > mass ? node[v].acc : mass;
        }
    *max_size = size;
    *max_mass = mass;
}
