/* searchlight_testdata.h — the searchlight tests' data (test_searchlight.c,
 * test_gpu.c): grids whose mask keeps each voxel with some probability, noise
 * with a weak class signal. (Their reference solve is ref_solve.h's.)
 *
 * Header-only, for the unit tests: every function is static inline, so a test
 * that leaves some unused still builds under -Wall -Werror. Include it after
 * <cmocka.h> (the builders assert).
 */
#ifndef NF_TESTS_SEARCHLIGHT_TESTDATA_H
#define NF_TESTS_SEARCHLIGHT_TESTDATA_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/rng.h"
#include "core/util.h"
#include "core/value.h"

/* n rows of V voxels (row-major X), targets y, and each row's fold. */
struct sldata {
    struct nf_geom *geom;
    int64_t n, V, k, n_classes;
    float *X;
    double *y;
    int64_t *fold_of;
};

/* A grid with the affine M (3x4: linear part and translation) and a mask that
 * keeps each voxel with probability keep (all when keep >= 1). */
static inline struct nf_geom *sl_geom_affine(int64_t nx, int64_t ny, int64_t nz, const double M[3][4], double keep,
                                             uint64_t seed)
{
    struct nf_grid g = { .dim = { nx, ny, nz } };
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 4; b++)
            g.affine[a][b] = M[a][b];
        g.pixdim[a] = sqrt(M[0][a] * M[0][a] + M[1][a] * M[1][a] + M[2][a] * M[2][a]);
    }
    g.affine[3][3] = 1;
    g.sform_code = 1;
    int64_t nv = nx * ny * nz;
    float *mask = malloc((size_t)nv * sizeof *mask);
    uint64_t st = seed;
    for (int64_t v = 0; v < nv; v++)
        mask[v] = keep >= 1 || nf_rand_uniform(&st) < keep ? 1.0f : 0.0f;
    struct nf_geom *geom = nf_geom_from_mask(&g, mask);
    free(mask);
    assert_non_null(geom);
    return geom;
}

/* A 3 mm grid (origin elsewhere than 0) whose mask keeps each voxel with
 * probability keep: the edges and holes give spheres of every size. */
static inline struct nf_geom *sl_geom(int64_t nx, int64_t ny, int64_t nz, double keep, uint64_t seed)
{
    const double M[3][4] = { { 3, 0, 0, -10 }, { 0, 3, 0, -20 }, { 0, 0, 3, -30 } };
    return sl_geom_affine(nx, ny, nz, M, keep, seed);
}

/* Noise with voxel-specific offsets and scales (so that standardisation
 * matters), classes i mod n_classes (or a continuous target when
 * n_classes == 0), and a weak class signal on every third voxel. d takes
 * over g. */
static inline void sl_make(struct sldata *d, struct nf_geom *g, int64_t n, int64_t k, int64_t n_classes,
                           uint64_t seed)
{
    uint64_t st = seed;
    d->geom = g;
    d->n = n;
    d->V = g->n_voxels;
    d->k = k;
    d->n_classes = n_classes;
    d->X = malloc((size_t)(n * d->V) * sizeof *d->X);
    d->y = malloc((size_t)n * sizeof *d->y);
    d->fold_of = malloc((size_t)n * sizeof *d->fold_of);
    double *latent = malloc((size_t)n * sizeof *latent);
    for (int64_t i = 0; i < n; i++) {
        latent[i] = nf_rand_normal(&st);
        d->y[i] = n_classes ? (double)(i % n_classes) : 2.0 * latent[i] + 1.0;
        /* each fold holds every class */
        d->fold_of[i] = (i / (n_classes ? n_classes : 1)) % k;
    }
    for (int64_t v = 0; v < d->V; v++) {
        double off = 10 * nf_rand_normal(&st), sc = 0.5 + 3 * nf_rand_uniform(&st);
        for (int64_t i = 0; i < n; i++) {
            double sig = v % 3 ? 0 : n_classes ? 0.7 * (d->y[i] - (n_classes - 1) / 2.0) : 0.6 * latent[i];
            d->X[i * d->V + v] = (float)(off + sc * (nf_rand_normal(&st) + sig));
        }
    }
    free(latent);
}

static inline void sl_free(struct sldata *d)
{
    nf_geom_unref(d->geom);
    free(d->X);
    free(d->y);
    free(d->fold_of);
}

#endif
