/* test_rng.c — the MT19937 / RandomState port against nltools' own draws
 * (tests/data/nltools-rng-vectors.json, computed with numpy 1.24): the
 * per-permutation seeds, the sign flips and the shuffles must be identical. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "lang/params.h"
#include "core/rng.h"
#include "core/util.h"
#include "lang/ytree.h"

static struct nf_ynode *vectors;

static int64_t num(const struct nf_ynode *n)
{
    int64_t v = 0;
    assert_true(n && n->type == NF_Y_SCALAR && nf_parse_int64(n->value, &v));
    return v;
}

static void test_against_numpy(void **state)
{
    (void)state;
    const struct nf_ynode *cases = nf_ymap_get(vectors, "cases");
    assert_non_null(cases);
    assert_true(cases->n >= 2);
    int64_t checked = 0;
    for (size_t c = 0; c < cases->n; c++) {
        const struct nf_ynode *k = cases->items[c];
        uint32_t seed = (uint32_t)num(nf_ymap_get(k, "seed"));
        int64_t n_perm = num(nf_ymap_get(k, "n_permutations")), n = num(nf_ymap_get(k, "n"));
        const struct nf_ynode *seeds = nf_ymap_get(k, "seeds"), *signs = nf_ymap_get(k, "signs"),
                              *perms = nf_ymap_get(k, "permutations");
        uint32_t *got = calloc((size_t)n_perm, sizeof *got);
        int8_t *sg = calloc((size_t)n, 1);
        int64_t *pm = calloc((size_t)n, sizeof *pm);
        nf_mt_seeds(seed, got, n_perm);
        for (int64_t i = 0; i < n_perm; i++) {
            assert_int_equal(got[i], num(seeds->items[i]));
            struct nf_mt19937 s;
            nf_mt_seed(&s, got[i]);
            nf_mt_signs(&s, sg, n);
            for (int64_t j = 0; j < n; j++)
                assert_int_equal(sg[j], num(signs->items[i]->items[j]));
            nf_mt_seed(&s, got[i]);
            nf_mt_permutation(&s, pm, n);
            for (int64_t j = 0; j < n; j++)
                assert_int_equal(pm[j], num(perms->items[i]->items[j]));
            checked++;
        }
        free(got);
        free(sg);
        free(pm);
    }
    assert_true(checked >= 10);
}

/* The first outputs of MT19937 seeded with 5489 (the reference generator's
 * published sequence). */
static void test_reference_sequence(void **state)
{
    (void)state;
    struct nf_mt19937 s;
    nf_mt_seed(&s, 5489);
    assert_int_equal(nf_mt_next32(&s), 3499211612u);
    assert_int_equal(nf_mt_next32(&s), 581869302u);
    assert_int_equal(nf_mt_next32(&s), 3890346734u);
    for (int i = 3; i < 9999; i++)
        nf_mt_next32(&s);
    assert_int_equal(nf_mt_next32(&s), 4123659995u);   /* the 10000th output */
}

/* Generators seeded 16 at a time in vector lanes give the scalar
 * generator's outputs: any number of lanes (a partial last group), any count
 * up to a whole generation (the twist's three index ranges), and a replayed
 * generator continues past its precomputed outputs as the real one. */
static void test_lanes_and_replay(void **state)
{
    (void)state;
    enum { LANES = 37 };
    const int counts[] = { 1, 30, 226, 227, 228, 400, 623, 624 };
    uint32_t seeds[LANES];
    uint64_t st = 99;
    for (int l = 0; l < LANES; l++)
        seeds[l] = (uint32_t)nf_splitmix64(&st);
    seeds[0] = 0;
    seeds[1] = 0xffffffffu;
    uint32_t *out = malloc(sizeof(uint32_t) * LANES * 624);
    assert_non_null(out);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int lanes = 1; lanes <= LANES; lanes += lanes < 17 ? 15 : 20) {
            nf_mt_first_outputs(seeds, lanes, counts[c], out);
            for (int l = 0; l < lanes; l++) {
                struct nf_mt19937 s;
                nf_mt_seed(&s, seeds[l]);
                for (int j = 0; j < counts[c]; j++)
                    assert_int_equal(out[l * counts[c] + j], nf_mt_next32(&s));
            }
        }
    /* replay: the first 5 outputs ahead, then 1300 more (past two twists) */
    nf_mt_first_outputs(seeds + 2, 1, 5, out);
    struct nf_mt19937 a, b;
    nf_mt_replay(&a, seeds[2], out, 5);
    nf_mt_seed(&b, seeds[2]);
    for (int j = 0; j < 1305; j++)
        assert_int_equal(nf_mt_next32(&a), nf_mt_next32(&b));
    /* and the draws built on it: a shuffle that needs more than was replayed */
    int64_t p1[50], p2[50];
    nf_mt_first_outputs(seeds + 3, 1, 10, out);
    nf_mt_replay(&a, seeds[3], out, 10);
    nf_mt_seed(&b, seeds[3]);
    nf_mt_permutation(&a, p1, 50);
    nf_mt_permutation(&b, p2, 50);
    assert_memory_equal(p1, p2, sizeof p1);
    free(out);
}

static int setup(void **state)
{
    (void)state;
    const char *src = getenv("srcdir");
    char *path = nf_asprintf("%s/tests/data/nltools-rng-vectors.json", src ? src : ".");
    struct nf_error err = { 0 };
    size_t len = 0;
    char *text = nf_read_file(path, &len, &err);
    free(path);
    if (!text)
        return -1;
    vectors = nf_yaml_parse(text, len, "vectors", &err);
    free(text);
    return vectors ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    nf_ynode_free(vectors);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_numpy),
        cmocka_unit_test(test_reference_sequence),
        cmocka_unit_test(test_lanes_and_replay),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
