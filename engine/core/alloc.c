/* alloc.c — the one allocator (see alloc.h): libc's malloc behind a
 * countdown that a test sets to make the k-th allocation fail, handed to
 * SQLite and zstd too, so that every error path taken on out-of-memory can be
 * exercised from the outside, one allocation at a time.
 *
 * This is the only file in engine/, nodes/ and cli/ that calls malloc,
 * calloc, realloc, strdup, strndup, vasprintf, realpath and posix_memalign
 * directly.
 */
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sqlite3.h>

#include "alloc.h"

static atomic_long alloc_calls;     /* every allocation attempt so far */
static atomic_long alloc_failures;  /* attempts that returned NULL */
static atomic_long fail_at;         /* the attempt that fails; 0: none */
static atomic_bool fail_persist;    /* ... and every later one */
static bool fail_trace;             /* print the failing call's stack */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static atomic_bool initialised;

static void print_stats(void)
{
    fprintf(stderr, "nlflow: allocations: %ld\n", atomic_load(&alloc_calls));
}

/* SQLite's allocator: a 16-byte header keeps the size (xSize) and the 8-byte
 * alignment SQLite needs. */
enum { SQLITE_HEADER = 16 };

static bool should_fail(void);

/* Every allocation's result passes here: NULL is a failure (injected or not). */
static void *counted(void *p)
{
    if (!p)
        atomic_fetch_add(&alloc_failures, 1);
    return p;
}

static void *sqlite_malloc(int n)
{
    if (n <= 0)
        return NULL;
    size_t *p = counted(should_fail() ? NULL : malloc((size_t)n + SQLITE_HEADER));
    if (!p)
        return NULL;
    p[0] = (size_t)n;
    return (char *)p + SQLITE_HEADER;
}

static void sqlite_free(void *p)
{
    if (p)
        free((char *)p - SQLITE_HEADER);
}

static void *sqlite_realloc(void *p, int n)
{
    if (!p)
        return sqlite_malloc(n);
    if (n <= 0)
        return NULL;
    size_t *q = counted(should_fail() ? NULL : realloc((char *)p - SQLITE_HEADER, (size_t)n + SQLITE_HEADER));
    if (!q)
        return NULL;
    q[0] = (size_t)n;
    return (char *)q + SQLITE_HEADER;
}

static int sqlite_size(void *p)
{
    return p ? (int)*(size_t *)((char *)p - SQLITE_HEADER) : 0;
}

static int sqlite_roundup(int n) { return (n + 7) & ~7; }
static int sqlite_init(void *app) { (void)app; return SQLITE_OK; }
static void sqlite_shutdown(void *app) { (void)app; }

static void read_environment(void)
{
    const char *s = getenv("NLFLOW_FAIL_ALLOC");
    if (s && *s) {
        char *end;
        long k = strtol(s, &end, 10);
        if (k > 0) {
            atomic_store(&fail_at, k);
            atomic_store(&fail_persist, *end == '+');
        }
    }
    const char *trace = getenv("NLFLOW_FAIL_ALLOC_TRACE");
    fail_trace = trace && *trace && strcmp(trace, "0") != 0;
    const char *stats = getenv("NLFLOW_ALLOC_STATS");
    if (stats && *stats && strcmp(stats, "0") != 0)
        atexit(print_stats);
    /* Fails (SQLITE_MISUSE) when SQLite was initialised already, e.g. by a
     * test that opened a database itself: SQLite then keeps libc's. */
    static const sqlite3_mem_methods methods = {
        sqlite_malloc, sqlite_free, sqlite_realloc, sqlite_size,
        sqlite_roundup, sqlite_init, sqlite_shutdown, NULL,
    };
    sqlite3_config(SQLITE_CONFIG_MALLOC, &methods);
    atomic_store(&initialised, true);
}

void nf_alloc_init(void)
{
    if (!atomic_load_explicit(&initialised, memory_order_acquire))
        pthread_once(&init_once, read_environment);
}

static bool should_fail(void)
{
    nf_alloc_init();
    long n = atomic_fetch_add(&alloc_calls, 1) + 1;
    long k = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (k <= 0 || n < k || (n > k && !atomic_load(&fail_persist)))
        return false;
    if (fail_trace) {
        void *frames[32];
        int depth = backtrace(frames, 32);
        char line[64];
        int len = snprintf(line, sizeof line, "nlflow: allocation %ld fails here:\n", n);
        if (write(STDERR_FILENO, line, (size_t)len) < 0) { /* best effort */ }
        backtrace_symbols_fd(frames, depth, STDERR_FILENO);
    }
    errno = ENOMEM;
    return true;
}

void nf_alloc_fail_at(long k, bool persist)
{
    nf_alloc_init();
    atomic_store(&fail_persist, persist);
    atomic_store(&fail_at, k > 0 ? atomic_load(&alloc_calls) + k : 0);
}

long nf_alloc_count(void) { return atomic_load(&alloc_calls); }
long nf_alloc_failures(void) { return atomic_load(&alloc_failures); }

void *nf_malloc(size_t n)
{
    return counted(should_fail() ? NULL : malloc(n ? n : 1));
}

void *nf_calloc(size_t n, size_t size)
{
    return counted(should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1));
}

void *nf_realloc(void *p, size_t n)
{
    return counted(should_fail() ? NULL : realloc(p, n ? n : 1));
}

void *nf_malloc_array(size_t n, size_t size)
{
    size_t bytes;
    return nf_size_mul(n, size, &bytes) ? nf_malloc(bytes) : NULL;
}

void *nf_realloc_array(void *p, size_t n, size_t size)
{
    size_t bytes;
    return nf_size_mul(n, size, &bytes) ? nf_realloc(p, bytes) : NULL;
}

char *nf_strdup(const char *s)
{
    return s ? counted(should_fail() ? NULL : strdup(s)) : NULL;
}

char *nf_strndup(const char *s, size_t n)
{
    return s ? counted(should_fail() ? NULL : strndup(s, n)) : NULL;
}

char *nf_vasprintf(const char *fmt, va_list ap)
{
    char *out = NULL;
    if (should_fail() || vasprintf(&out, fmt, ap) < 0)
        return counted(NULL);
    return out;
}

char *nf_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *out = nf_vasprintf(fmt, ap);
    va_end(ap);
    return out;
}

char *nf_realpath(const char *path)
{
    if (should_fail())
        return counted(NULL);
    char *out = realpath(path, NULL);
    return out || errno != ENOMEM ? out : counted(NULL);
}

void *nf_aligned_alloc(size_t align, size_t n)
{
    void *p = NULL;
    if (should_fail() || posix_memalign(&p, align, n ? n : 1) != 0)
        return counted(NULL);
    return p;
}

static float *alloc_floats(size_t n, bool zero)
{
    if (n > SIZE_MAX / sizeof(float) - 64)
        return NULL;
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    if (!bytes)
        bytes = 64;
    float *p = nf_aligned_alloc(64, bytes);
    if (p && zero)
        memset(p, 0, bytes);
    return p;
}

float *nf_alloc_floats(size_t n)
{
    return alloc_floats(n, true);
}

float *nf_alloc_floats_unfilled(size_t n)
{
    return alloc_floats(n, false);
}

void nf_free_aligned(void *p) { free(p); }

void nf_populate_for_write(void *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
    static atomic_bool unsupported;
    if (!p || n == 0 || atomic_load_explicit(&unsupported, memory_order_relaxed))
        return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = (uintptr_t)p & ~(page - 1);
    uintptr_t to = ((uintptr_t)p + n + page - 1) & ~(page - 1);
    if (madvise((void *)from, to - from, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
        atomic_store_explicit(&unsupported, true, memory_order_relaxed);
#else
    (void)p;
    (void)n;
#endif
}
void nf_free(void *p) { free(p); }

/* Steps of the background prefault: small enough that it stays just ahead
 * of the writer, large enough that the calls cost nothing. */
#define PREFAULT_STEP ((size_t)4 << 20)

static void *prefault_thread(void *arg)
{
    struct nf_prefault *pf = arg;
    for (size_t at = 0; at < pf->n && !atomic_load_explicit(&pf->stop, memory_order_relaxed);
         at += PREFAULT_STEP)
        nf_populate_for_write(pf->p + at, pf->n - at < PREFAULT_STEP ? pf->n - at : PREFAULT_STEP);
    return NULL;
}

void nf_prefault_begin(struct nf_prefault *pf, void *p, size_t n)
{
    pf->p = p;
    pf->n = n;
    atomic_store(&pf->stop, false);
    pf->running = p && n > 0 && pthread_create(&pf->thread, NULL, prefault_thread, pf) == 0;
}

void nf_prefault_end(struct nf_prefault *pf)
{
    if (!pf->running)
        return;
    atomic_store(&pf->stop, true);
    pthread_join(pf->thread, NULL);
    pf->running = false;
}

void *nf_zstd_alloc(void *opaque, size_t n)
{
    (void)opaque;
    return nf_malloc(n);
}

void nf_zstd_free(void *opaque, void *p)
{
    (void)opaque;
    free(p);
}
