/* test_tfce.c — TFCE and cluster measures (nodes/permute/tfce.c) against a
 * direct implementation of their definitions written here in double: for each
 * threshold, connected components found by breadth-first search on the grid
 * itself (neighbours by squared distance, not the module's graph), sizes
 * raised to E, heights to H, summed per voxel. Random small grids with holes
 * in the mask, ties, values exactly on thresholds, one-signed, single-voxel,
 * empty and non-finite maps, for every connectivity and tail; the max-only
 * entries against the per-voxel ones bit for bit; cases worked out by hand;
 * bad options. Last, a timing print (no assertion) on a brain-sized mask. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/util.h"
#include "permute/permute_internal.h"   /* the node that uses tfce.h: both compile together */
#include "permute/tfce.h"
#include "tfce_ref.h"

/* ---- fixtures ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double uniform(void)
{
    return (double)(next_u64() >> 11) * 0x1p-53;
}

struct fixture {
    struct nf_geom *geom;
    struct nf_voxel_graph graph;
};

/* A geometry from an in-mask flag per grid cell (storage order, i fastest). */
static void fixture_init(struct fixture *f, int nx, int ny, int nz, const unsigned char *in, int connectivity)
{
    struct nf_grid grid = { .dim = { nx, ny, nz }, .pixdim = { 2, 2, 2 } };
    float *data = calloc((size_t)nx * ny * nz + 1, sizeof *data);
    assert_non_null(data);
    for (int c = 0; c < nx * ny * nz; c++)
        data[c] = in[c] ? 1.0f : 0.0f;
    f->geom = nf_geom_from_mask(&grid, data);
    free(data);
    assert_non_null(f->geom);
    struct nf_error err = { 0 };
    assert_int_equal(nf_voxel_graph_build(f->geom, connectivity, &f->graph, &err), 0);
}

static void fixture_release(struct fixture *f)
{
    nf_voxel_graph_release(&f->graph);
    nf_geom_unref(f->geom);
}

/* ---- the direct reference (tfce_ref.h), and clusters by flood fill ---- */

/* ---- comparisons ---- */

static const int connectivities[3] = { 6, 18, 26 };
static const int tails[3] = { NF_TAIL_TWO, NF_TAIL_UPPER, NF_TAIL_LOWER };

/* The module's TFCE of `stat` against the reference, every voxel within a
 * relative 1e-5 (exactly 0 where the reference is), and the max-only entry
 * equal to the largest |TFCE| bit for bit. */
static void check_tfce(const struct fixture *f, const float *stat, int tail, double E, double H, int steps)
{
    int64_t V = f->geom->n_voxels;
    struct nf_error err = { 0 };
    struct nf_tfce_plan plan;
    struct nf_tfce_work work;
    assert_int_equal(nf_tfce_plan_init(&plan, &f->graph, tail, E, H, steps, &err), 0);
    assert_int_equal(nf_tfce_work_init(&work, &f->graph, steps, &err), 0);
    float *got = malloc((size_t)(V + 1) * sizeof *got);
    double *want = malloc((size_t)(V + 1) * sizeof *want);
    assert_true(got && want);
    nf_tfce_map(&plan, &work, stat, got);
    ref_tfce(f->geom, stat, f->graph.connectivity, tail, E, H, steps, want);
    float top = 0;
    for (int64_t v = 0; v < V; v++) {
        if (!(fabs(got[v] - want[v]) <= 1e-5 * fabs(want[v])))
            fail_msg("connectivity %d tail %d E %g H %g steps %d voxel %lld: TFCE %.9g, definition %.9g",
                     f->graph.connectivity, tail, E, H, steps, (long long)v, got[v], want[v]);
        top = fabsf(got[v]) > top ? fabsf(got[v]) : top;
    }
    float max_only = nf_tfce_max(&plan, &work, stat);
    if (max_only != top)
        fail_msg("max-only %.9g, per-voxel max %.9g", max_only, top);
    free(got);
    free(want);
    nf_tfce_work_release(&work);
    nf_tfce_plan_release(&plan);
}

static void check_clusters(const struct fixture *f, const float *stat, int tail, double T)
{
    int64_t V = f->geom->n_voxels;
    struct nf_error err = { 0 };
    struct nf_cluster_plan plan;
    struct nf_tfce_work work;
    assert_int_equal(nf_cluster_plan_init(&plan, &f->graph, tail, T, &err), 0);
    assert_int_equal(nf_tfce_work_init(&work, &f->graph, 0, &err), 0);
    int32_t *ids = malloc((size_t)(V + 1) * sizeof *ids), *want_ids = malloc((size_t)(V + 1) * sizeof *ids);
    struct nf_cluster *cl = malloc((size_t)(V + 1) * sizeof *cl);
    struct ref_cluster *want = malloc((size_t)(V + 1) * sizeof *want);
    assert_true(ids && want_ids && cl && want);
    int64_t n = nf_clusters_label(&plan, &work, stat, ids, cl);
    int n_want = ref_clusters(f->geom, stat, f->graph.connectivity, tail, T, want_ids, want);
    assert_int_equal(n, n_want);
    for (int64_t v = 0; v < V; v++)
        if (ids[v] != want_ids[v])
            fail_msg("connectivity %d tail %d T %g voxel %lld: cluster %d, definition %d", f->graph.connectivity,
                     tail, T, (long long)v, ids[v], want_ids[v]);
    int64_t big = 0;
    double heavy = 0;
    for (int64_t c = 0; c < n; c++) {
        assert_int_equal(cl[c].sign, want[c].sign);
        assert_int_equal(cl[c].size, want[c].size);
        assert_true(fabs(cl[c].mass - want[c].mass) <= 1e-12 * (1 + want[c].mass));
        assert_true(cl[c].peak == want[c].peak);
        assert_int_equal(cl[c].peak_voxel, want[c].peak_voxel);
        big = cl[c].size > big ? cl[c].size : big;
        heavy = cl[c].mass > heavy ? cl[c].mass : heavy;
    }
    int64_t max_size = -1;
    double max_mass = -1;
    nf_clusters_max(&plan, &work, stat, &max_size, &max_mass);
    assert_int_equal(max_size, big);
    if (max_mass != heavy)
        fail_msg("max-only mass %.17g, largest labelled mass %.17g", max_mass, heavy);
    free(ids);
    free(want_ids);
    free(cl);
    free(want);
    nf_tfce_work_release(&work);
}

/* ---- tests ---- */

/* Voxels 0, 1, 2 on a line with 1, 2, 3; steps 3 (h = 1, 2, 3), E 0.5, H 2:
 *   h = 1: all three form one cluster of 3: each gains sqrt(3) * 1
 *   h = 2: voxels 1 and 2, a cluster of 2:  each gains sqrt(2) * 4
 *   h = 3: voxel 2 alone:                   it gains 1 * 9
 * TFCE = sqrt(3), sqrt(3) + 4 sqrt(2), sqrt(3) + 4 sqrt(2) + 9
 *      = 1.7320508, 7.3889050, 16.3889050. */
static void test_by_hand_line(void **state)
{
    (void)state;
    unsigned char in[3] = { 1, 1, 1 };
    struct fixture f;
    fixture_init(&f, 3, 1, 1, in, 6);
    struct nf_error err = { 0 };
    struct nf_tfce_work work;
    assert_int_equal(nf_tfce_work_init(&work, &f.graph, 3, &err), 0);
    const double want[3] = { sqrt(3), sqrt(3) + 4 * sqrt(2), sqrt(3) + 4 * sqrt(2) + 9 };
    const float up[3] = { 1, 2, 3 }, down[3] = { -1, -2, -3 };
    float out[3];
    struct { int tail; const float *stat; double sign; } cases[] = {
        { NF_TAIL_TWO, up, 1 },   { NF_TAIL_UPPER, up, 1 },  { NF_TAIL_LOWER, up, 0 },
        { NF_TAIL_TWO, down, -1 }, { NF_TAIL_UPPER, down, 0 }, { NF_TAIL_LOWER, down, -1 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct nf_tfce_plan plan;
        assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, cases[c].tail, 0.5, 2, 3, &err), 0);
        nf_tfce_map(&plan, &work, cases[c].stat, out);
        for (int v = 0; v < 3; v++)
            assert_float_equal(out[v], cases[c].sign * want[v], 1e-6);
        assert_float_equal(nf_tfce_max(&plan, &work, cases[c].stat), cases[c].sign != 0 ? want[2] : 0, 1e-6);
        nf_tfce_plan_release(&plan);
    }
    nf_tfce_work_release(&work);
    fixture_release(&f);
}

/* Two tails share one height: 2 and -4 on two separate voxels, steps 4
 * (h = 1, 2, 3, 4), E 1, H 1: the positive voxel reaches h = 1, 2 and gets
 * 1 + 2 = 3; the negative one reaches all four, -(1 + 2 + 3 + 4) = -10. */
static void test_by_hand_two_tails(void **state)
{
    (void)state;
    unsigned char in[3] = { 1, 0, 1 };
    struct fixture f;
    fixture_init(&f, 3, 1, 1, in, 26);
    struct nf_error err = { 0 };
    struct nf_tfce_plan plan;
    struct nf_tfce_work work;
    assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, NF_TAIL_TWO, 1, 1, 4, &err), 0);
    assert_int_equal(nf_tfce_work_init(&work, &f.graph, 4, &err), 0);
    const float stat[2] = { 2, -4 };
    float out[2];
    nf_tfce_map(&plan, &work, stat, out);
    assert_true(out[0] == 3.0f && out[1] == -10.0f);
    assert_true(nf_tfce_max(&plan, &work, stat) == 10.0f);
    nf_tfce_work_release(&work);
    nf_tfce_plan_release(&plan);
    fixture_release(&f);
}

/* A line of six: 3, 1.5, -2, -4, 2.5, 1.5 with T = 1.5 (1.5 itself is not
 * beyond T, as nilearn): positive clusters {0} (mass 1.5) and {4} (mass 1),
 * negative {2, 3} (mass 0.5 + 2.5 = 3, peak -4 at voxel 3). */
static void test_by_hand_clusters(void **state)
{
    (void)state;
    unsigned char in[6] = { 1, 1, 1, 1, 1, 1 };
    struct fixture f;
    fixture_init(&f, 6, 1, 1, in, 6);
    struct nf_error err = { 0 };
    struct nf_cluster_plan plan;
    struct nf_tfce_work work;
    assert_int_equal(nf_tfce_work_init(&work, &f.graph, 0, &err), 0);
    const float stat[6] = { 3, 1.5f, -2, -4, 2.5f, 1.5f };
    int32_t ids[6];
    struct nf_cluster cl[6];
    assert_int_equal(nf_cluster_plan_init(&plan, &f.graph, NF_TAIL_TWO, 1.5, &err), 0);
    assert_int_equal(nf_clusters_label(&plan, &work, stat, ids, cl), 3);
    const int32_t want_ids[6] = { 1, 0, 3, 3, 2, 0 };
    assert_memory_equal(ids, want_ids, sizeof ids);
    assert_true(cl[0].sign == 1 && cl[0].size == 1 && cl[0].mass == 1.5 && cl[0].peak == 3 && cl[0].peak_voxel == 0);
    assert_true(cl[1].sign == 1 && cl[1].size == 1 && cl[1].mass == 1.0 && cl[1].peak == 2.5f &&
                cl[1].peak_voxel == 4);
    assert_true(cl[2].sign == -1 && cl[2].size == 2 && cl[2].mass == 3.0 && cl[2].peak == -4 &&
                cl[2].peak_voxel == 3);
    int64_t size;
    double mass;
    nf_clusters_max(&plan, &work, stat, &size, &mass);
    assert_true(size == 2 && mass == 3.0);
    assert_int_equal(nf_cluster_plan_init(&plan, &f.graph, NF_TAIL_UPPER, 1.5, &err), 0);
    assert_int_equal(nf_clusters_label(&plan, &work, stat, ids, cl), 2);
    nf_clusters_max(&plan, &work, stat, &size, &mass);
    assert_true(size == 1 && mass == 1.5);
    assert_int_equal(nf_cluster_plan_init(&plan, &f.graph, NF_TAIL_LOWER, 1.5, &err), 0);
    assert_int_equal(nf_clusters_label(&plan, &work, stat, ids, cl), 1);
    assert_true(ids[2] == 1 && ids[3] == 1 && ids[0] == 0 && ids[4] == 0);
    nf_tfce_work_release(&work);
    fixture_release(&f);
}

/* The graph on a 3x3x3 grid with one cell out of the mask: every voxel has
 * as many neighbours as a count by distance over the mask finds, the centre
 * one fewer for 18 and 26 (the missing cell shares an edge with it), and the
 * slots ascend, "none" (n_voxels) last. */
static void test_graph(void **state)
{
    (void)state;
    unsigned char in[27];
    memset(in, 1, sizeof in);
    in[1] = 0;   /* (1, 0, 0) */
    for (int c = 0; c < 3; c++) {
        struct fixture f;
        fixture_init(&f, 3, 3, 3, in, connectivities[c]);
        const struct nf_voxel_graph *g = &f.graph;
        assert_int_equal(g->n_voxels, 26);
        for (int64_t v = 0; v < g->n_voxels; v++) {
            const int32_t *nb = g->nbr + v * g->connectivity;
            int count = 0;
            for (int j = 0; j < g->connectivity; j++) {
                if (j > 0)
                    assert_true(nb[j] > nb[j - 1] || (nb[j] == g->n_voxels && nb[j - 1] == g->n_voxels));
                count += nb[j] != g->n_voxels;
            }
            int64_t off = f.geom->index[v];
            int i = (int)(off % 3), j = (int)(off / 3 % 3), k = (int)(off / 9);
            int want = 0;
            for (int64_t w = 0; w < g->n_voxels; w++) {
                int64_t o = f.geom->index[w];
                int di = (int)(o % 3) - i, dj = (int)(o / 3 % 3) - j, dk = (int)(o / 9) - k;
                if (abs(di) <= 1 && abs(dj) <= 1 && abs(dk) <= 1 && neighbours(di, dj, dk, connectivities[c]))
                    want++;
            }
            assert_int_equal(count, want);
            if (off == 13)   /* the centre lost (1, 0, 0) from 18 and 26 */
                assert_int_equal(want, connectivities[c] == 6 ? 6 : connectivities[c] - 1);
        }
        fixture_release(&f);
    }
}

/* A random 7x6x5 mask with about a fifth of the cells out. */
static void random_mask(unsigned char *in, int cells, double hole)
{
    for (int c = 0; c < cells; c++)
        in[c] = uniform() >= hole;
}

enum map_kind { MAP_SMOOTH, MAP_TIES, MAP_ON_THRESHOLDS, MAP_NEAR_THRESHOLDS, MAP_NEGATIVE, MAP_NONFINITE };

/* Values for V voxels: continuous, integer ties, exact multiples of 0.5 up to
 * 4 (with steps 8 every threshold k * 0.5 is hit exactly), floats next to
 * k * (m / steps) for an inexact step, all negative, or a few NaN / inf. */
static void random_map(float *stat, int64_t V, enum map_kind kind, int steps)
{
    for (int64_t v = 0; v < V; v++) {
        double u = uniform();
        switch (kind) {
        case MAP_SMOOTH:
            stat[v] = (float)(6 * u - 3 + sin((double)v / 5));
            break;
        case MAP_TIES:
            stat[v] = (float)(floor(9 * u) - 4);
            break;
        case MAP_ON_THRESHOLDS:
            stat[v] = (float)(0.5 * floor(17 * u) - 4);
            break;
        case MAP_NEAR_THRESHOLDS:
            /* m = 1.3 is the largest |value|; the others round k * 1.3 / steps to float */
            stat[v] = (float)((u < 0.5 ? -1 : 1) * floor(uniform() * (steps + 1)) * (1.3 / steps));
            break;
        case MAP_NEGATIVE:
            stat[v] = (float)(-0.1 - 3 * u);
            break;
        case MAP_NONFINITE:
            stat[v] = u < 0.05 ? NAN : u < 0.08 ? INFINITY : u < 0.1 ? -INFINITY : (float)(4 * uniform() - 2);
            break;
        }
    }
    if (kind == MAP_NEAR_THRESHOLDS && V > 0)
        stat[next_u64() % (uint64_t)V] = 1.3f;
}

static void test_tfce_random_grids(void **state)
{
    (void)state;
    enum { NX = 7, NY = 6, NZ = 5, CELLS = NX * NY * NZ };
    const struct { double E, H; int steps; } opts[] = {
        { 0.5, 2, 100 }, { 0.5, 2, 8 }, { 1, 1, 7 }, { 2.0 / 3, 2, 1 }, { 0.5, 2, 3 },
    };
    const enum map_kind kinds[] = { MAP_SMOOTH, MAP_TIES, MAP_ON_THRESHOLDS, MAP_NEAR_THRESHOLDS, MAP_NEGATIVE,
                                    MAP_NONFINITE };
    unsigned char in[CELLS];
    float stat[CELLS];
    int n_checked = 0;
    for (int c = 0; c < 3; c++)
        for (int trial = 0; trial < 3; trial++) {
            random_mask(in, CELLS, trial == 0 ? 0.0 : 0.2 * trial);
            struct fixture f;
            fixture_init(&f, NX, NY, NZ, in, connectivities[c]);
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                int steps_for_map = kinds[k] == MAP_ON_THRESHOLDS ? 8 : 100;
                random_map(stat, f.geom->n_voxels, kinds[k], steps_for_map);
                for (int t = 0; t < 3; t++)
                    for (size_t o = 0; o < sizeof opts / sizeof opts[0]; o++) {
                        check_tfce(&f, stat, tails[t], opts[o].E, opts[o].H, opts[o].steps);
                        n_checked++;
                    }
            }
            fixture_release(&f);
        }
    assert_true(n_checked > 300);
}

/* Levels exactly at the thresholds: voxel 0 holds a value a next to some
 * h_k, a separate voxel 1 holds m (the height), so TFCE(0) = sum of h_k^H over
 * the thresholds a reaches. Values m j / 4 are floats while k (m / steps) in
 * double may round above or below them, so the first guess (a steps / m,
 * truncated) is off by one in both directions for some of them; the test
 * makes sure both happen. The module compares floats against the least
 * float at or above each h_k: the values one float below and above each
 * such value check that this is the same test as in double. */
static void test_levels_at_thresholds(void **state)
{
    (void)state;
    unsigned char in[3] = { 1, 0, 1 };
    struct fixture f;
    fixture_init(&f, 3, 1, 1, in, 6);
    struct nf_error err = { 0 };
    struct nf_tfce_work work;
    assert_int_equal(nf_tfce_work_init(&work, &f.graph, 1000, &err), 0);
    const int steps_list[] = { 4, 8, 12, 100, 1000 };
    int guess_high = 0, guess_low = 0, n = 0;
    for (size_t si = 0; si < sizeof steps_list / sizeof steps_list[0]; si++) {
        int steps = steps_list[si];
        struct nf_tfce_plan plan;
        assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, NF_TAIL_UPPER, 0.5, 1, steps, &err), 0);
        for (int trial = 0; trial < 400; trial++) {
            float m = (float)(0.1 + 10 * uniform());
            for (int j = 1; j <= 3; j++)
                for (int d = -1; d <= 1; d++) {
                    float a = m * (float)j / 4;
                    a = d < 0 ? nextafterf(a, 0) : d > 0 ? nextafterf(a, m) : a;
                    int L = 0;
                    double want = 0;
                    for (int k = 1; k <= steps; k++) {
                        double h = k == steps ? m : k * ((double)m / steps);
                        if ((double)a >= h) {
                            L = k;
                            want += h;
                        }
                    }
                    int guess = (int)(a * (float)(steps / (double)m));   /* tfce.c's first guess, in float */
                    guess_high += guess > L;
                    guess_low += guess < L;
                    const float stat[2] = { a, m };
                    float out[2];
                    nf_tfce_map(&plan, &work, stat, out);
                    if (!(fabs(out[0] - want) <= 1e-6 * want))
                        fail_msg("steps %d m %.9g a %.9g: TFCE %.9g, definition %.9g (level %d)", steps, m, a,
                                 out[0], want, L);
                    n++;
                }
        }
        nf_tfce_plan_release(&plan);
    }
    if (!guess_high || !guess_low)
        fail_msg("the cases never put the first guess of a level above (%d) or below (%d) the level", guess_high,
                 guess_low);
    (void)n;
    nf_tfce_work_release(&work);
    fixture_release(&f);
}

/* Degenerate masks and maps: one voxel, no voxel, subnormal values, all zero. */
static void test_tfce_degenerate(void **state)
{
    (void)state;
    unsigned char one[8] = { 0, 0, 0, 0, 0, 1, 0, 0 }, none[8] = { 0 };
    struct fixture f;
    fixture_init(&f, 2, 2, 2, one, 26);
    float stat[1] = { 2.5f };
    for (int t = 0; t < 3; t++) {
        check_tfce(&f, stat, tails[t], 0.5, 2, 100);
        stat[0] = -stat[0];
        check_tfce(&f, stat, tails[t], 0.5, 2, 100);
        check_clusters(&f, stat, tails[t], 1.0);
    }
    fixture_release(&f);

    fixture_init(&f, 2, 2, 2, none, 6);
    assert_int_equal(f.graph.n_voxels, 0);
    for (int t = 0; t < 3; t++) {
        check_tfce(&f, stat, tails[t], 0.5, 2, 100);
        check_clusters(&f, stat, tails[t], 0.0);
    }
    fixture_release(&f);

    /* maps of subnormal floats: steps / m overflows float (the first guess
     * of a level is then inf or NaN); H 0.5, so that the TFCE does not
     * underflow float */
    memset(one, 1, sizeof one);
    fixture_init(&f, 2, 2, 2, one, 6);
    for (int trial = 0; trial < 20; trial++) {
        float tiny[8];
        for (int v = 0; v < 8; v++)
            tiny[v] = (float)((uniform() - 0.4) * 1e-40);
        for (int t = 0; t < 3; t++)
            check_tfce(&f, tiny, tails[t], 0.5, 0.5, 100);
    }
    float zero[8] = { 0 };
    for (int t = 0; t < 3; t++) {
        check_tfce(&f, zero, tails[t], 0.5, 2, 100);
        check_clusters(&f, zero, tails[t], 0.0);
    }
    fixture_release(&f);
}

/* A workspace reused across maps (as in a permutation loop) gives what a
 * fresh one gives. */
static void test_workspace_reuse(void **state)
{
    (void)state;
    enum { NX = 7, NY = 6, NZ = 5, CELLS = NX * NY * NZ };
    unsigned char in[CELLS];
    random_mask(in, CELLS, 0.15);
    struct fixture f;
    fixture_init(&f, NX, NY, NZ, in, 18);
    int64_t V = f.geom->n_voxels;
    struct nf_error err = { 0 };
    struct nf_tfce_plan plan;
    struct nf_tfce_work used, fresh;
    assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, NF_TAIL_TWO, 0.5, 2, 100, &err), 0);
    assert_int_equal(nf_tfce_work_init(&used, &f.graph, 100, &err), 0);
    float a[CELLS], b[CELLS], out1[CELLS], out2[CELLS];
    random_map(a, V, MAP_SMOOTH, 100);
    random_map(b, V, MAP_TIES, 100);
    nf_tfce_map(&plan, &used, a, out1);
    nf_tfce_map(&plan, &used, b, out1);
    assert_int_equal(nf_tfce_work_init(&fresh, &f.graph, 100, &err), 0);
    nf_tfce_map(&plan, &fresh, b, out2);
    assert_memory_equal(out1, out2, (size_t)V * sizeof *out1);
    nf_tfce_work_release(&fresh);
    nf_tfce_work_release(&used);
    nf_tfce_plan_release(&plan);
    fixture_release(&f);
}

static void test_clusters_random_grids(void **state)
{
    (void)state;
    enum { NX = 7, NY = 6, NZ = 5, CELLS = NX * NY * NZ };
    unsigned char in[CELLS];
    float stat[CELLS];
    const enum map_kind kinds[] = { MAP_SMOOTH, MAP_TIES, MAP_ON_THRESHOLDS, MAP_NEGATIVE, MAP_NONFINITE };
    const double thresholds[] = { 0, 0.5, 1, 2.3 };
    for (int c = 0; c < 3; c++)
        for (int trial = 0; trial < 3; trial++) {
            random_mask(in, CELLS, 0.25 * trial);
            struct fixture f;
            fixture_init(&f, NX, NY, NZ, in, connectivities[c]);
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                random_map(stat, f.geom->n_voxels, kinds[k], 8);
                for (int t = 0; t < 3; t++)
                    for (size_t h = 0; h < sizeof thresholds / sizeof thresholds[0]; h++)
                        check_clusters(&f, stat, tails[t], thresholds[h]);
            }
            fixture_release(&f);
        }
}

/* Two threads, one plan, a workspace each, the same results as one thread. */
struct thread_job {
    const struct nf_tfce_plan *plan;
    const float *maps;
    int64_t V;
    int n_maps;
    float *max;
};
static void *thread_run(void *arg)
{
    struct thread_job *j = arg;
    struct nf_error err = { 0 };
    struct nf_tfce_work work;
    if (nf_tfce_work_init(&work, j->plan->graph, j->plan->steps, &err) != 0)
        return NULL;
    for (int i = 0; i < j->n_maps; i++)
        j->max[i] = nf_tfce_max(j->plan, &work, j->maps + (int64_t)i * j->V);
    nf_tfce_work_release(&work);
    return arg;
}

static void test_threads(void **state)
{
    (void)state;
    enum { NX = 7, NY = 6, NZ = 5, CELLS = NX * NY * NZ, MAPS = 16 };
    unsigned char in[CELLS];
    random_mask(in, CELLS, 0.1);
    struct fixture f;
    fixture_init(&f, NX, NY, NZ, in, 26);
    int64_t V = f.geom->n_voxels;
    struct nf_error err = { 0 };
    struct nf_tfce_plan plan;
    assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, NF_TAIL_TWO, 0.5, 2, 100, &err), 0);
    static float maps[MAPS * CELLS];
    for (int i = 0; i < MAPS; i++)
        random_map(maps + (int64_t)i * V, V, MAP_SMOOTH, 100);
    float one[MAPS], two[MAPS];
    struct thread_job all = { &plan, maps, V, MAPS, one };
    assert_non_null(thread_run(&all));
    struct thread_job half[2] = { { &plan, maps, V, MAPS / 2, two },
                                  { &plan, maps + (int64_t)(MAPS / 2) * V, V, MAPS / 2, two + MAPS / 2 } };
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        assert_int_equal(pthread_create(&th[t], NULL, thread_run, &half[t]), 0);
    for (int t = 0; t < 2; t++) {
        void *r;
        pthread_join(th[t], &r);
        assert_non_null(r);
    }
    assert_memory_equal(one, two, sizeof one);
    nf_tfce_plan_release(&plan);
    fixture_release(&f);
}

static void test_bad_options(void **state)
{
    (void)state;
    unsigned char in[8];
    memset(in, 1, sizeof in);
    struct fixture f;
    fixture_init(&f, 2, 2, 2, in, 6);
    struct nf_error err = { 0 };
    struct nf_voxel_graph g;
    assert_int_equal(nf_voxel_graph_build(f.geom, 8, &g, &err), NF_EINVAL);
    assert_non_null(strstr(err.msg, "connectivity must be 6, 18 or 26 (got 8)"));
    struct nf_tfce_plan plan;
    assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, NF_TAIL_TWO, 0.5, 2, 0, &err), NF_EINVAL);
    assert_non_null(strstr(err.msg, "steps must be 1 .. 10000 (got 0)"));
    assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, NF_TAIL_TWO, -1, 2, 100, &err), NF_EINVAL);
    assert_non_null(strstr(err.msg, "E and H must be finite and >= 0"));
    assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, 7, 0.5, 2, 100, &err), NF_EINVAL);
    struct nf_cluster_plan cp;
    assert_int_equal(nf_cluster_plan_init(&cp, &f.graph, NF_TAIL_TWO, -0.5, &err), NF_EINVAL);
    assert_non_null(strstr(err.msg, "threshold must be finite and >= 0 (got -0.5)"));
    assert_int_equal(nf_cluster_plan_init(&cp, &f.graph, NF_TAIL_TWO, NAN, &err), NF_EINVAL);
    /* a geometry whose offsets leave the grid */
    f.geom->index[3] = 99;
    assert_int_equal(nf_voxel_graph_build(f.geom, 6, &g, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "mask column 3: grid offset 99 is off the grid"));
    f.geom->index[3] = f.geom->index[2];
    assert_int_equal(nf_voxel_graph_build(f.geom, 6, &g, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "used twice"));
    fixture_release(&f);
}

/* ---- timing (printed, not asserted) ---- */

/* This thread's CPU seconds: the print is about the code, not about other
 * processes on the machine. */
static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* An ellipsoid of about 234k voxels in a 91x109x91 grid (a 2 mm brain) and
 * smooth noise maps (white noise box-filtered three times along each axis). */
static void test_speed(void **state)
{
    (void)state;
    const char *san = getenv("NLFLOW_SAN");
    int reps = san && *san ? 1 : 7;
    enum { NX = 91, NY = 109, NZ = 91 };
    int64_t cells = (int64_t)NX * NY * NZ;
    unsigned char *in = malloc((size_t)cells);
    float *field = malloc((size_t)cells * sizeof *field), *tmp = malloc((size_t)cells * sizeof *tmp);
    assert_true(in && field && tmp);
    for (int k = 0; k < NZ; k++)
        for (int j = 0; j < NY; j++)
            for (int i = 0; i < NX; i++) {
                double a = (i - 45) / 38.0, b = (j - 54) / 46.0, c = (k - 45) / 32.0;
                in[i + NX * (j + NY * k)] = a * a + b * b + c * c <= 1;
            }
    for (int conn_i = 0; conn_i < 3; conn_i += 2) {
        struct fixture f;
        fixture_init(&f, NX, NY, NZ, in, connectivities[conn_i]);
        int64_t V = f.geom->n_voxels;
        struct nf_error err = { 0 };
        struct nf_tfce_plan plan;
        struct nf_cluster_plan cplan;
        struct nf_tfce_work work;
        assert_int_equal(nf_tfce_plan_init(&plan, &f.graph, NF_TAIL_TWO, 0.5, 2, 100, &err), 0);
        assert_int_equal(nf_cluster_plan_init(&cplan, &f.graph, NF_TAIL_TWO, 2.3, &err), 0);
        assert_int_equal(nf_tfce_work_init(&work, &f.graph, 100, &err), 0);
        float *stat = malloc((size_t)V * sizeof *stat), *out = malloc((size_t)V * sizeof *out);
        assert_true(stat && out);
        double t_max[7], t_map[7], t_cl[7];
        for (int r = 0; r < reps; r++) {
            for (int64_t c = 0; c < cells; c++)
                field[c] = (float)(uniform() + uniform() + uniform() - 1.5);
            int64_t stride[3] = { 1, NX, (int64_t)NX * NY }, len[3] = { NX, NY, NZ };
            for (int pass = 0; pass < 3; pass++)
                for (int ax = 0; ax < 3; ax++) {
                    for (int64_t c = 0; c < cells; c++) {
                        int64_t pos = c / stride[ax] % len[ax];
                        double s = field[c], n = 1;
                        if (pos > 0) { s += field[c - stride[ax]]; n++; }
                        if (pos + 1 < len[ax]) { s += field[c + stride[ax]]; n++; }
                        tmp[c] = (float)(s / n);
                    }
                    memcpy(field, tmp, (size_t)cells * sizeof *field);
                }
            double sd = 0;
            for (int64_t v = 0; v < V; v++)
                sd += (double)field[f.geom->index[v]] * field[f.geom->index[v]];
            sd = sqrt(sd / (V ? V : 1));
            for (int64_t v = 0; v < V; v++)
                stat[v] = (float)(field[f.geom->index[v]] / sd);
            double t0 = cpu_seconds();
            volatile float m = nf_tfce_max(&plan, &work, stat);
            double t1 = cpu_seconds();
            nf_tfce_map(&plan, &work, stat, out);
            double t2 = cpu_seconds();
            int64_t size;
            double mass;
            nf_clusters_max(&cplan, &work, stat, &size, &mass);
            double t3 = cpu_seconds();
            (void)m;
            t_max[r] = t1 - t0;
            t_map[r] = t2 - t1;
            t_cl[r] = t3 - t2;
        }
        qsort(t_max, (size_t)reps, sizeof *t_max, cmp_double);
        qsort(t_map, (size_t)reps, sizeof *t_map, cmp_double);
        qsort(t_cl, (size_t)reps, sizeof *t_cl, cmp_double);
        printf("tfce speed (thread CPU time), %lld voxels, connectivity %d, median of %d smooth maps: "
               "max-only %.2f ms, per-voxel %.2f ms, clusters max %.2f ms\n", (long long)V, f.graph.connectivity, reps,
               1e3 * t_max[reps / 2], 1e3 * t_map[reps / 2], 1e3 * t_cl[reps / 2]);
        free(stat);
        free(out);
        nf_tfce_work_release(&work);
        nf_tfce_plan_release(&plan);
        fixture_release(&f);
    }
    free(in);
    free(field);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_hand_line),
        cmocka_unit_test(test_by_hand_two_tails),
        cmocka_unit_test(test_by_hand_clusters),
        cmocka_unit_test(test_graph),
        cmocka_unit_test(test_tfce_random_grids),
        cmocka_unit_test(test_levels_at_thresholds),
        cmocka_unit_test(test_tfce_degenerate),
        cmocka_unit_test(test_workspace_reuse),
        cmocka_unit_test(test_clusters_random_grids),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
