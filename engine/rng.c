/* rng.c — MT19937 and numpy RandomState's bounded draws, sign flips and
 * permutations, bit-identical to numpy 1.24's legacy generator (see rng.h). */
#include "rng.h"

void nf_mt_seed(struct nf_mt19937 *s, uint32_t seed)
{
    s->mt[0] = seed;
    for (int i = 1; i < 624; i++)
        s->mt[i] = 1812433253u * (s->mt[i - 1] ^ (s->mt[i - 1] >> 30)) + (uint32_t)i;
    s->mti = 624;
}

uint32_t nf_mt_next32(struct nf_mt19937 *s)
{
    if (s->mti >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (s->mt[k] & 0x80000000u) | (s->mt[(k + 1) % 624] & 0x7fffffffu);
            s->mt[k] = s->mt[(k + 397) % 624] ^ (y >> 1) ^ (y & 1u ? 0x9908b0dfu : 0u);
        }
        s->mti = 0;
    }
    uint32_t y = s->mt[s->mti++];
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
