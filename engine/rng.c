/* rng.c — MT19937 and numpy RandomState's bounded draws, sign flips and
 * permutations, bit-identical to numpy 1.24's legacy generator (see rng.h). */
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
