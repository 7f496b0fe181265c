/* floats.c — whole-array float helpers: a stable O(n) radix argsort on the
 * floats' bits, and the first NaN or inf of an array, on one thread or on
 * several (util.h).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* Floats as unsigned keys in the same order: flip all bits of negatives, the
 * sign bit of the rest. */
static inline uint32_t f32_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

int nf_argsort_f32(const float *keys, int64_t n, int64_t *order)
{
    uint32_t *k = nf_malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *k);
    int64_t *tmp = nf_malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!k || !tmp) {
        free(k);
        free(tmp);
        return NF_ENOMEM;
    }
    uint32_t *k2 = k + (n > 0 ? n : 1);
    for (int64_t i = 0; i < n; i++) {
        k[i] = f32_key(keys[i]);
        order[i] = i;
    }
    /* four passes of 8 bits; a pass whose byte is the same for every key
     * (the exponent's high byte of p-values, say) is skipped */
    for (int shift = 0; shift < 32; shift += 8) {
        int64_t count[257] = { 0 };
        for (int64_t i = 0; i < n; i++)
            count[((k[i] >> shift) & 0xff) + 1]++;
        bool one_bucket = false;
        for (int b = 1; b <= 256; b++)
            one_bucket |= count[b] == n;
        if (one_bucket)
            continue;
        for (int b = 1; b <= 256; b++)
            count[b] += count[b - 1];
        for (int64_t i = 0; i < n; i++) {
            int64_t at = count[(k[i] >> shift) & 0xff]++;
            k2[at] = k[i];
            tmp[at] = order[i];
        }
        uint32_t *ks = k;
        k = k2;
        k2 = ks;
        memcpy(order, tmp, (size_t)n * sizeof *order);
    }
    free(k < k2 ? k : k2);
    free(tmp);
    return 0;
}

/* Whether any of a[0..n) has an all-ones exponent (NaN or inf). */
__attribute__((target_clones("avx512f", "avx2", "default")))
static bool any_nonfinite(const float *restrict a, int64_t n)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, a + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad != 0;
}

int64_t nf_first_nonfinite(const float *a, int64_t n)
{
    enum { BLOCK = 4096 };
    for (int64_t b = 0; b < n; b += BLOCK) {
        int64_t len = n - b < BLOCK ? n - b : BLOCK;
        if (any_nonfinite(a + b, len))
            for (int64_t i = b; i < b + len; i++)
                if (!isfinite(a[i]))
                    return i;
    }
    return -1;
}

struct scan_part {
    const float *a;
    int64_t begin, end, first;
};

static void *scan_part_run(void *arg)
{
    struct scan_part *p = arg;
    int64_t e = nf_first_nonfinite(p->a + p->begin, p->end - p->begin);
    p->first = e < 0 ? -1 : p->begin + e;
    return NULL;
}

int64_t nf_first_nonfinite_threads(const float *a, int64_t n, int threads)
{
    enum { MAX_PARTS = 64 };
    int parts = threads < 1 ? 1 : threads > MAX_PARTS ? MAX_PARTS : threads;
    if (n < NF_SCAN_THREADS_MIN || parts == 1)
        return nf_first_nonfinite(a, n);
    struct scan_part part[MAX_PARTS];
    pthread_t tid[MAX_PARTS];
    bool started[MAX_PARTS] = { false };
    for (int t = 0; t < parts; t++)
        part[t] = (struct scan_part){ a, n * t / parts, n * (t + 1) / parts, -1 };
    for (int t = 1; t < parts; t++)
        started[t] = pthread_create(&tid[t], NULL, scan_part_run, &part[t]) == 0;
    scan_part_run(&part[0]);
    for (int t = 1; t < parts; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            scan_part_run(&part[t]);   /* no thread: this one scans it */
    }
    for (int t = 0; t < parts; t++)   /* the first part with one holds the first */
        if (part[t].first >= 0)
            return part[t].first;
    return -1;
}
