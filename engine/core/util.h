/* util.h — small helpers shared by the engine and the nodes: a growable
 * string buffer (strbuf.c), paths, atomic file output and whole-file reads
 * (files.c), byte sizes and number formatting (format.c), clock and machine
 * facts (machine.c), the run-time log on stderr (log.c) and float-array
 * helpers (floats.c). It includes the allocator, alloc.h.
 *
 * Atomic output: nf_atomic_open() creates "<path>.tmp.<pid>.<n>" in the same
 * folder; nf_atomic_commit() fsyncs and renames it over <path>; nf_atomic_abort()
 * removes it. A failed or killed run therefore never leaves a half-written file
 * under its final name.
 */
#ifndef NF_UTIL_H
#define NF_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "alloc.h"
#include "error.h"

struct nf_strbuf { char *buf; size_t len, cap; bool oom; };
void nf_strbuf_init(struct nf_strbuf *sb);
void nf_strbuf_release(struct nf_strbuf *sb);
void nf_strbuf_addf(struct nf_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nf_strbuf_add(struct nf_strbuf *sb, const char *s, size_t n);
/* Append s as a JSON string literal (with quotes). */
void nf_strbuf_add_json_str(struct nf_strbuf *sb, const char *s);
/* Take ownership of the buffer ("" when empty); sb is reset. NULL on OOM. */
char *nf_strbuf_detach(struct nf_strbuf *sb);

/* Paths. Results are newly allocated. */
char *nf_path_join(const char *dir, const char *name);    /* name absolute -> copy of name */
char *nf_path_dirname(const char *path);
char *nf_path_stem(const char *path);                     /* "a/b.nii.gz" -> "b" */
bool nf_path_has_suffix(const char *path, const char *suffix);  /* case-insensitive */
/* The BIDS subject entity ("sub-01") of a path or label: "sub-" plus letters
 * and digits, starting a path component or following '_'; the last one wins
 * ("data/sub-01/func/sub-01_task-x_bold.nii.gz" and "sub-01_task-x" give
 * "sub-01"). NULL when there is none, or out of memory. */
char *nf_subject_entity(const char *path);
/* A user's text (a node's or the pipeline's name) as part of a file name
 * under settings.outputs: letters, digits, '-' and '_' kept, every other
 * byte '-' (so no '/', '..' or absolute path can take a file elsewhere);
 * "nlflow" when nothing is left. Every output file name made from a user's
 * text goes through it (summarize's prefix and item labels, report's page). */
void nf_output_name_part(const char *s, char *out, size_t size);
/* mkdir -p; 0 or NF_EIO with err naming the folder. */
int nf_mkdirs(const char *dir, struct nf_error *err);
/* May a writer that marks the folders it makes with the file `marker` write
 * into `dir`? 1: it does not exist, is empty, or holds the marker (the
 * writer's own); 0: it holds something else (someone's data: *found, owned,
 * names one entry in it); <0: not a folder, or unreadable (err says). */
int nf_folder_is_ours(const char *dir, const char *marker, char **found, struct nf_error *err);
/* The marker simulate leaves in a folder it made (a text file listing the
 * subjects it wrote): without it, simulate writes into no non-empty folder. */
#define NF_SIMULATE_MARKER ".nlflow-simulate"
/* Remove a folder and everything in it, best effort (scratch folders:
 * what cannot be removed stays; links are removed, not followed). */
void nf_remove_tree(const char *dir);

/* Atomic file output. */
struct nf_atomic { char *path; char *tmp; FILE *fp; };
int nf_atomic_open(struct nf_atomic *a, const char *path, struct nf_error *err);
/* The temporary path, for libraries that write by name (nifti). */
int nf_atomic_reserve(struct nf_atomic *a, const char *path, const char *tmp_suffix,
                      struct nf_error *err);
int nf_atomic_commit(struct nf_atomic *a, struct nf_error *err);
void nf_atomic_abort(struct nf_atomic *a);
/* Files committed by nf_atomic_commit in the calling thread are recorded in
 * *w between nf_written_begin(w) and nf_written_end() (the executor records
 * what each node wrote, so that a cached result can check its files). */
struct nf_written { char **paths; size_t n, cap; };
void nf_written_begin(struct nf_written *w);
void nf_written_end(void);
void nf_written_release(struct nf_written *w);
/* Remove the temporary files (nf_atomic_reserve's ".NAME.tmpPID.N...") that
 * processes no longer alive left under dir (a run killed with SIGKILL cannot
 * remove its own), down to a few folders deep; returns how many. */
int nf_sweep_temporaries(const char *dir);
/* Write a whole text file atomically. */
int nf_write_file_atomic(const char *path, const char *text, size_t len, struct nf_error *err);
/* The same, as a new version of an existing file: it keeps like's mode and
 * (where this process may set it) owner. */
struct stat;
int nf_rewrite_file_atomic(const char *path, const char *text, size_t len, const struct stat *like,
                           struct nf_error *err);
/* Read a whole file someone else may have written (a pipeline, a used file):
 * a regular file only (a FIFO, device or socket is refused without blocking
 * on it) of at most max_bytes; `what` names it in errors ("pipeline file").
 * NUL-terminated; *len excludes the NUL. */
char *nf_read_text_file(const char *path, size_t max_bytes, const char *what, size_t *len, struct nf_error *err);
/* The same for any bytes; with no_links a symbolic link is refused too (a
 * shard in a folder others can write to must not point elsewhere). */
char *nf_read_untrusted_file(const char *path, size_t max_bytes, const char *what, bool no_links, size_t *len,
                             struct nf_error *err);
/* Read a whole file (NUL-terminated; *len excludes the NUL): a regular file
 * of any size, through nf_read_untrusted_file's loop. */
char *nf_read_file(const char *path, size_t *len, struct nf_error *err);

/* "8GiB", "512MiB", "2G", "1000000" -> bytes; -1 when malformed. */
int64_t nf_parse_size(const char *s);
/* 1536 -> "1.5 KiB" */
void nf_format_size(uint64_t bytes, char *buf, size_t size);

/* Monotonic seconds. */
double nf_now(void);
/* Number of online CPUs (>= 1). */
int nf_cpu_count(void);
/* Physical memory in bytes (0 if unknown). */
uint64_t nf_physical_memory(void);
/* The CPU's model name from /proc/cpuinfo ("unknown" when absent). */
void nf_cpu_model(char *buf, size_t size);

/* Log to stderr; thread-safe. Level: 0 info, 1 warning. nf_log_quiet (--quiet, set
 * once by the command) silences info: it is the only quiet switch. */
extern bool nf_log_quiet;
void nf_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nf_warn(const char *node, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Also called with every warning (node may be NULL), outside the log's lock:
 * --json turns warnings into events (events.c). */
extern void (*nf_warn_hook)(const char *node, const char *msg);
/* A status line on a terminal (progress): drawn in place ("\r", erase line),
 * cleared by the next log line or by NULL. */
void nf_log_status(const char *line);

/* printf("%.9g", (double)f) into buf (at least 32 bytes), the same text,
 * without printf for the usual range (exact integer arithmetic, round half to
 * even as glibc); returns the length. 9 significant digits bring every float
 * back exactly. */
int nf_format_float_g9(float f, char *buf);
/* Decimal digits of a non-negative integer into buf (at least 21 bytes);
 * returns the length. */
int nf_format_uint(uint64_t x, char *buf);

/* The index of the first NaN or infinity in a[0..n), or -1 (a branch-free
 * scan, vectorised, over blocks). */
int64_t nf_first_nonfinite(const float *a, int64_t n);
/* The same, parts of a[] scanned by up to `threads` threads (one thread below
 * NF_SCAN_THREADS_MIN elements: starting threads would cost more): a whole
 * input checked at memory speed rather than one core's. */
enum { NF_SCAN_THREADS_MIN = 1 << 20 };
int64_t nf_first_nonfinite_threads(const float *a, int64_t n, int threads);

/* order[0..n) = the indices of keys sorted ascending, equal keys in index
 * order (a stable LSD radix sort on the floats' bits: O(n), no comparisons).
 * -0 sorts before +0; NaNs after +inf. 0, or NF_ENOMEM for its scratch. */
int nf_argsort_f32(const float *keys, int64_t n, int64_t *order);

#endif
