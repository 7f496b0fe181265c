/* alloc.h — the one allocator of nlflow, which a test can make fail.
 *
 * Every allocation in engine/, nodes/ and cli/ goes through these functions
 * (the call sites were converted by a script; a plain malloc there is a bug).
 * They return NULL on failure (callers report NF_ENOMEM) and their memory is
 * released with plain free(): the allocator is libc's, with a countdown in
 * front of it.
 *
 * Fault injection (SQLite's faultsim, libuv's OOM test): NLFLOW_FAIL_ALLOC=k,
 * read once at the first allocation, makes the k-th allocation of the process
 * fail (counted over all threads); NLFLOW_FAIL_ALLOC=k+ makes the k-th and
 * every later one fail. NLFLOW_ALLOC_STATS=1 prints the number of
 * allocations at exit, so a test knows how far to count. Unit tests use
 * nf_alloc_fail_at() instead.
 *
 * Reach: SQLite's allocations come here too (sqlite3_config(SQLITE_CONFIG_MALLOC)
 * in nf_alloc_init(), which must run before SQLite initialises), and so do
 * zstd's (the cache creates its contexts with nf_zstd_alloc/nf_zstd_free as
 * ZSTD_customMem). Out of reach: OpenBLAS (its buffers are mmap-ed
 * internally), libnifti (plain calloc inside nifti_image_read/write; no hook),
 * libyaml 0.2.5 (yaml_malloc is internal, no allocator hook), zlib inside
 * libnifti, and libc's own (stdio buffers, qsort).
 */
#ifndef NF_ALLOC_H
#define NF_ALLOC_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* malloc(0), calloc(0, x) and realloc(p, 0) return a 1-byte block, never
 * NULL, so NULL always means out of memory. */
void *nf_malloc(size_t n);
void *nf_calloc(size_t n, size_t size);
void *nf_realloc(void *p, size_t n);
/* n * size bytes, NULL (as out of memory) when the product overflows. */
void *nf_malloc_array(size_t n, size_t size);
void *nf_realloc_array(void *p, size_t n, size_t size);
char *nf_strdup(const char *s);           /* NULL-safe: NULL -> NULL */
char *nf_strndup(const char *s, size_t n);
char *nf_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *nf_vasprintf(const char *fmt, va_list ap);
/* realpath(path, NULL): NULL when path cannot be resolved (errno says why,
 * ENOMEM when the allocation failed). */
char *nf_realpath(const char *path);
/* align a power of two, a multiple of sizeof(void *); release with free(). */
void *nf_aligned_alloc(size_t align, size_t n);
/* 64-byte aligned float buffer for kernels, zeroed; free with nf_free_aligned. */
float *nf_alloc_floats(size_t n);
/* The same, not zeroed: for a caller that writes every element before any
 * is read (a fresh block from the kernel is zero anyway; this skips a pass). */
float *nf_alloc_floats_unfilled(size_t n);
void nf_free_aligned(void *p);
void nf_free(void *p);
/* Fault in the pages under p .. p + n for writing, in one system call
 * (MADV_POPULATE_WRITE), before a thread writes them: a fresh 276 MB matrix
 * took 67,000 page-fault exceptions when first touched, one per 4 KiB page.
 * Contents are unchanged (pages already there stay as they are, so a page
 * shared with a neighbour's range is safe). Best effort: on a kernel without
 * it (before 5.14) the writes fault the pages in as before. */
void nf_populate_for_write(void *p, size_t n);
/* nf_populate_for_write on another thread, a few MiB at a time from the
 * start, while this one fills the block in the same direction (inflating
 * a 1 GB .nii.gz spent half its time in page faults on the thread doing
 * the work). Harmless when the writer overtakes it. End it before the block
 * is freed or moved (nf_prefault_end stops it and waits). Without a thread
 * it does nothing. */
struct nf_prefault {
    char *p;
    size_t n;
    _Atomic bool stop;
    bool running;
    pthread_t thread;
};
void nf_prefault_begin(struct nf_prefault *pf, void *p, size_t n);
void nf_prefault_end(struct nf_prefault *pf);

/* Checked size arithmetic: false when the result does not fit. */
static inline bool nf_size_mul(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool nf_size_add(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* zstd's ZSTD_customMem callbacks (opaque unused). */
void *nf_zstd_alloc(void *opaque, size_t n);
void nf_zstd_free(void *opaque, void *p);

/* Read the environment and hand SQLite this allocator; idempotent and
 * thread-safe. Called by the CLI at start-up and by the cache before it
 * opens a database. */
void nf_alloc_init(void);
/* Test API: fail the k-th allocation from now (k >= 1; every later one too
 * when persist), or none (k = 0). Overrides the environment. */
void nf_alloc_fail_at(long k, bool persist);
/* Allocations so far (every call, failed or not). */
long nf_alloc_count(void);
/* Allocations that failed so far. Like SQLite's db->mallocFailed, a phase
 * that builds a large structure from many small allocations (the pipeline
 * loader) compares this before and after instead of threading an error out
 * of every strdup: any failure in between makes its result suspect. */
long nf_alloc_failures(void);

#endif
