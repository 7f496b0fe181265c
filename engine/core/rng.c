/* rng.c — MT19937 and numpy RandomState's bounded draws, sign flips and
 * permutations, bit-identical to numpy 1.24's legacy generator (see rng.h). */
#include <math.h>
#include <stddef.h>

#include "rng.h"

/* Lazily: a permutation test seeds one generator per permutation and draws
 * only n numbers (n subjects) from it, so the state is initialised and twisted
 * one word at a time, as far as the draws need. Word i of a new generation
 * needs the old words i+1 and i+397 (mod 624; the latter already new for
 * i >= 227), which is the order of the reference twist loop, so the outputs are
 * the same bits as MT19937's. */
void nf_mt_seed(struct nf_mt19937 *s, uint32_t seed)
{
    s->mt[0] = seed;
    s->init = 1;
    s->mti = 0;
    s->ahead = NULL;
    s->n_ahead = s->used = 0;
    s->seed = seed;
}

void nf_mt_replay(struct nf_mt19937 *s, uint32_t seed, const uint32_t *ahead, int n_ahead)
{
    nf_mt_seed(s, seed);
    s->ahead = ahead;
    s->n_ahead = n_ahead;
}

static inline void init_upto(struct nf_mt19937 *s, int k)
{
    for (int i = s->init; i <= k; i++)
        s->mt[i] = 1812433253u * (s->mt[i - 1] ^ (s->mt[i - 1] >> 30)) + (uint32_t)i;
    if (k >= s->init)
        s->init = k + 1;
}

uint32_t nf_mt_next32(struct nf_mt19937 *s)
{
    if (s->ahead) {
        if (s->used < s->n_ahead)
            return s->ahead[s->used++];
        /* past the replayed outputs: the real generator, advanced as far */
        int skip = s->n_ahead;
        nf_mt_seed(s, s->seed);
        for (int i = 0; i < skip; i++)
            nf_mt_next32(s);
    }
    if (s->mti >= 624)
        s->mti = 0;
    int i = s->mti++;
    if (s->init < 624)
        init_upto(s, i + 397 < 624 ? i + 397 : 623);
    uint32_t y = (s->mt[i] & 0x80000000u) | (s->mt[i + 1 < 624 ? i + 1 : 0] & 0x7fffffffu);
    s->mt[i] = s->mt[i + 397 < 624 ? i + 397 : i - 227] ^ (y >> 1) ^ (y & 1u ? 0x9908b0dfu : 0u);
    y = s->mt[i];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

typedef uint32_t nf_v16u __attribute__((vector_size(64)));

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_mt_first_outputs(const uint32_t *seeds, int64_t lanes, int count, uint32_t *out)
{
    nf_v16u mt[624];
    if (count > 624)
        count = 624;
    /* output i reads words i, i + 1 and i + 397 (or the new i - 227) */
    const int need = count + 397 < 624 ? count + 397 : 624;
    for (int64_t g = 0; g < lanes; g += 16) {
        int L = lanes - g < 16 ? (int)(lanes - g) : 16;
        nf_v16u v = { 0 };
        for (int l = 0; l < L; l++)
            v[l] = seeds[g + l];
        mt[0] = v;
        for (int i = 1; i < need; i++) {
            v = 1812433253u * (v ^ (v >> 30)) + (uint32_t)i;
            mt[i] = v;
        }
        for (int i = 0; i < count; i++) {
            nf_v16u y = (mt[i] & 0x80000000u) | (mt[i + 1 < 624 ? i + 1 : 0] & 0x7fffffffu);
            nf_v16u t = mt[i + 397 < 624 ? i + 397 : i - 227] ^ (y >> 1) ^ (-(y & 1u) & 0x9908b0dfu);
            mt[i] = t;
            t ^= t >> 11;
            t ^= (t << 7) & 0x9d2c5680u;
            t ^= (t << 15) & 0xefc60000u;
            t ^= t >> 18;
            for (int l = 0; l < L; l++)
                out[(g + l) * count + i] = t[l];
        }
    }
}

uint32_t nf_mt_bounded(struct nf_mt19937 *s, uint32_t max)
{
    if (max == 0)
        return 0;
    uint32_t mask = max;   /* smallest 2^k - 1 >= max */
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    uint32_t v;
    while ((v = nf_mt_next32(s) & mask) > max)
        ;
    return v;
}

void nf_mt_seeds(uint32_t seed, uint32_t *out, int64_t n)
{
    struct nf_mt19937 s;
    nf_mt_seed(&s, seed);
    for (int64_t i = 0; i < n; i++)
        out[i] = nf_mt_bounded(&s, 2147483646u);   /* randint(2**31 - 1) */
}

void nf_mt_signs(struct nf_mt19937 *s, int8_t *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (nf_mt_next32(s) & 1u) ? -1 : 1;
}

void nf_mt_permutation(struct nf_mt19937 *s, int64_t *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)nf_mt_bounded(s, (uint32_t)i);
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

/* ---- splitmix64: small streams (simulate, fold shuffles) ---- */
uint64_t nf_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double nf_rand_uniform(uint64_t *state)
{
    return (double)(nf_splitmix64(state) >> 11) * 0x1.0p-53;
}

double nf_rand_normal(uint64_t *state)
{
    /* Box-Muller; one value per call keeps the stream simple to reproduce. */
    double u1 = nf_rand_uniform(state), u2 = nf_rand_uniform(state);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
