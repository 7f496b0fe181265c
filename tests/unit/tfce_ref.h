/* tfce_ref.h — TFCE by its definition in double, for the tests (test_tfce.c,
 * test_permute_tfce.c): for each threshold, connected components found by
 * breadth-first search on the grid itself (neighbours by squared distance,
 * not the module's graph), sizes raised to E, heights to H, summed per voxel.
 * Static functions: each test program includes its own copy. Needs cmocka,
 * math.h, stdbool, stdlib, string and the tfce.h / value.h declarations. */
#ifndef NF_TEST_TFCE_REF_H
#define NF_TEST_TFCE_REF_H

static bool neighbours(int di, int dj, int dk, int connectivity)
{
    int d2 = di * di + dj * dj + dk * dk;
    return d2 > 0 && d2 <= (connectivity == 6 ? 1 : connectivity == 18 ? 2 : 3);
}

/* Connected components of the grid cells with member[cell] set, by breadth-
 * first search; label[cell] = 1.. in the order of `visit` (cells), 0 for
 * non-members. Returns the number of components. */
static int bfs_label(int nx, int ny, int nz, const bool *member, int connectivity, const int64_t *visit,
                     int64_t n_visit, int *label, int64_t *queue)
{
    int64_t cells = (int64_t)nx * ny * nz;
    memset(label, 0, (size_t)cells * sizeof *label);
    int n = 0;
    for (int64_t q = 0; q < n_visit; q++) {
        int64_t start = visit[q];
        if (!member[start] || label[start])
            continue;
        n++;
        int64_t head = 0, tail = 0;
        queue[tail++] = start;
        label[start] = n;
        while (head < tail) {
            int64_t c = queue[head++];
            int i = (int)(c % nx), j = (int)(c / nx % ny), k = (int)(c / nx / ny);
            for (int di = -1; di <= 1; di++)
                for (int dj = -1; dj <= 1; dj++)
                    for (int dk = -1; dk <= 1; dk++) {
                        int a = i + di, b = j + dj, d = k + dk;
                        if (!neighbours(di, dj, dk, connectivity) || a < 0 || a >= nx || b < 0 || b >= ny ||
                            d < 0 || d >= nz)
                            continue;
                        int64_t e = a + (int64_t)nx * (b + (int64_t)ny * d);
                        if (member[e] && !label[e]) {
                            label[e] = n;
                            queue[tail++] = e;
                        }
                    }
        }
    }
    return n;
}

/* TFCE by its definition (tfce.h), every threshold labelled separately. */
static void ref_tfce(const struct nf_geom *geom, const float *stat, int connectivity, int tail, double E,
                     double H, int steps, double *out)
{
    int nx = (int)geom->grid.dim[0], ny = (int)geom->grid.dim[1], nz = (int)geom->grid.dim[2];
    int64_t cells = (int64_t)nx * ny * nz, V = geom->n_voxels;
    bool *member = calloc((size_t)cells, sizeof *member);
    int *label = calloc((size_t)cells, sizeof *label);
    int64_t *queue = calloc((size_t)cells, sizeof *queue);
    int64_t *count = calloc((size_t)cells + 1, sizeof *count);
    assert_true(member && label && queue && count);
    for (int64_t v = 0; v < V; v++)
        out[v] = 0;
    double m = 0;
    for (int64_t v = 0; v < V; v++) {
        double x = stat[v];
        if (!isfinite(x))
            continue;
        double a = tail == NF_TAIL_UPPER ? x : tail == NF_TAIL_LOWER ? -x : fabs(x);
        m = a > m ? a : m;
    }
    if (m > 0)
        for (int sign = 1; sign >= -1; sign -= 2) {
            if ((sign > 0 && tail == NF_TAIL_LOWER) || (sign < 0 && tail == NF_TAIL_UPPER))
                continue;
            for (int k = 1; k <= steps; k++) {
                double h = k == steps ? m : k * (m / steps);
                memset(member, 0, (size_t)cells * sizeof *member);
                for (int64_t v = 0; v < V; v++)
                    member[geom->index[v]] = isfinite(stat[v]) && sign * (double)stat[v] >= h;
                int n = bfs_label(nx, ny, nz, member, connectivity, geom->index, V, label, queue);
                memset(count, 0, (size_t)(n + 1) * sizeof *count);
                for (int64_t v = 0; v < V; v++)
                    count[label[geom->index[v]]]++;
                for (int64_t v = 0; v < V; v++) {
                    int l = label[geom->index[v]];
                    if (l)
                        out[v] += sign * pow((double)count[l], E) * pow(h, H);
                }
            }
        }
    free(member);
    free(label);
    free(queue);
    free(count);
}

/* Clusters by their definition (flood fill, bfs_label): voxels strictly
 * beyond T, positive clusters numbered first, each side by its first voxel
 * in column order; ids[v] the cluster of voxel v (0: none), cl: room for V. */
struct ref_cluster {
    int sign;
    int64_t size, peak_voxel;
    double mass;
    float peak;
};

static int ref_clusters(const struct nf_geom *geom, const float *stat, int connectivity, int tail, double T,
                        int32_t *ids, struct ref_cluster *cl)
{
    int nx = (int)geom->grid.dim[0], ny = (int)geom->grid.dim[1], nz = (int)geom->grid.dim[2];
    int64_t cells = (int64_t)nx * ny * nz, V = geom->n_voxels;
    bool *member = calloc((size_t)cells, sizeof *member);
    int *label = calloc((size_t)cells, sizeof *label);
    int64_t *queue = calloc((size_t)cells, sizeof *queue);
    assert_true(member && label && queue);
    int total = 0;
    for (int64_t v = 0; v < V; v++)
        ids[v] = 0;
    for (int sign = 1; sign >= -1; sign -= 2) {
        if ((sign > 0 && tail == NF_TAIL_LOWER) || (sign < 0 && tail == NF_TAIL_UPPER))
            continue;
        memset(member, 0, (size_t)cells * sizeof *member);
        for (int64_t v = 0; v < V; v++)
            member[geom->index[v]] = isfinite(stat[v]) && sign * (double)stat[v] > T;
        int n = bfs_label(nx, ny, nz, member, connectivity, geom->index, V, label, queue);
        for (int c = 0; c < n; c++)
            cl[total + c] = (struct ref_cluster){ .sign = sign, .peak_voxel = -1 };
        for (int64_t v = 0; v < V; v++) {
            int l = label[geom->index[v]];
            if (!l)
                continue;
            struct ref_cluster *c = &cl[total + l - 1];
            ids[v] = total + l;
            c->size++;
            c->mass += fabs((double)stat[v]) - T;
            if (c->peak_voxel < 0 || fabs(stat[v]) > fabs(c->peak)) {
                c->peak = stat[v];
                c->peak_voxel = v;
            }
        }
        total += n;
    }
    free(member);
    free(label);
    free(queue);
    return total;
}

#endif
