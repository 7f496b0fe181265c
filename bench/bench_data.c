/* bench_data.c — input data shared by benchmark domains: masks of the voxels
 * nearest a grid's centre (the collection domain's blob), and the predict and
 * gpu domains' brain, an ellipsoid of exactly `voxels` voxels at 3 mm.
 * Deterministic, so that prepare() and flops() agree.
 */
#include <math.h>
#include <stdlib.h>

#include "bench.h"
#include "core/value.h"

struct voxel_rank {
    double dist2;
    int64_t index;
};

static int by_distance(const void *pa, const void *pb)
{
    const struct voxel_rank *a = pa, *b = pb;
    if (a->dist2 != b->dist2)
        return a->dist2 < b->dist2 ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;   /* ties: storage order */
}

float *nf_bench_centre_mask(const struct nf_grid *g, int64_t voxels, const double axes[3], struct nf_error *err)
{
    const int64_t nx = g->dim[0], ny = g->dim[1], n = nf_grid_nvox(g);
    struct voxel_rank *rank = malloc((size_t)n * sizeof *rank);
    float *mask = nf_alloc_floats((size_t)n);
    if (!rank || !mask) {
        free(rank);
        nf_free_aligned(mask);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    for (int64_t idx = 0; idx < n; idx++) {
        double d[3] = { (double)(idx % nx), (double)(idx / nx % ny), (double)(idx / nx / ny) };
        rank[idx].dist2 = 0;
        for (int a = 0; a < 3; a++) {
            double c = d[a] - (double)(g->dim[a] - 1) / 2.0;
            if (axes)
                c /= axes[a];
            rank[idx].dist2 += c * c;
        }
        rank[idx].index = idx;
    }
    qsort(rank, (size_t)n, sizeof *rank, by_distance);
    for (int64_t i = 0; i < voxels && i < n; i++)
        mask[rank[i].index] = 1.0f;
    free(rank);
    return mask;
}

/* ---- the brain ---- */

/* Semi-axes of the ellipsoid in voxels for `voxels` voxels, in the proportions
 * of a brain (left-right, anterior-posterior, inferior-superior). */
static void ellipsoid_axes(int64_t voxels, double axes[3])
{
    const double shape[3] = { 0.9, 1.1, 0.85 };
    double s = cbrt((double)voxels / (4.0 / 3.0 * M_PI * shape[0] * shape[1] * shape[2]));
    for (int a = 0; a < 3; a++)
        axes[a] = s * shape[a];
}

/* A tight grid around the ellipsoid, x flipped as in MNI space, the world
 * origin at the grid's centre. */
struct nf_grid nf_bench_brain_grid(int64_t voxels)
{
    double axes[3];
    struct nf_grid g = { 0 };
    ellipsoid_axes(voxels, axes);
    for (int a = 0; a < 3; a++) {
        g.dim[a] = 2 * (int64_t)ceil(axes[a]) + 5;
        g.pixdim[a] = NF_BENCH_BRAIN_MM;
        g.affine[a][a] = a == 0 ? -NF_BENCH_BRAIN_MM : NF_BENCH_BRAIN_MM;
        g.affine[a][3] = (a == 0 ? 1 : -1) * NF_BENCH_BRAIN_MM * (double)(g.dim[a] - 1) / 2.0;
    }
    g.affine[3][3] = 1;
    g.sform_code = g.qform_code = 1;
    return g;
}

float *nf_bench_brain_mask(const struct nf_grid *g, int64_t voxels, struct nf_error *err)
{
    double axes[3];
    ellipsoid_axes(voxels, axes);
    return nf_bench_centre_mask(g, voxels, axes, err);
}
