/* cache.h — the result cache: one SQLite file (WAL) holding every node result
 * as zstd-compressed, checksummed chunks, keyed by a content hash.
 *
 * Keys are XXH3-128 Merkle hashes computed by the engine (keys.c): a result's
 * key covers the node type and implementation version, the cache format
 * version, the canonical parameters and the keys of its inputs (files by
 * content), never paths. The store does not interpret keys.
 *
 * Atomicity: a result (its chunks and its row) is written in one transaction,
 * so a kill at any moment leaves either the whole result or nothing. A chunk
 * whose checksum does not match is reported and the result treated as a miss
 * (and deleted so that it is recomputed).
 *
 * Thread safety: one struct nf_cache may be used from several threads; calls
 * are serialised internally. Several processes may share one file: SQLite
 * locking with a busy timeout, plus leases (below) so that two runs do not
 * compute the same result at once.
 *
 * Ownership: values passed to put are borrowed; values returned by get are
 * owned by the caller (refcount 1).
 */
#ifndef NF_CACHE_H
#define NF_CACHE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "core/value.h"

/* Bump when the stored layout or the key recipe changes: old entries become
 * unreachable (and are collected by gc). */
#define NF_CACHE_FORMAT 2   /* 2: values carry what they hold (statistic, row names);
                               results name their port and pipeline file */

/* struct nf_key (a 128-bit content key) is defined in value.h.
 * 32 hex digits + NUL: */
void nf_key_hex(struct nf_key k, char out[33]);
int nf_key_parse(const char *hex, struct nf_key *out);
bool nf_key_equal(struct nf_key a, struct nf_key b);

struct nf_cache;

struct nf_cache_opts {
    bool strict;            /* fail instead of warning when the cache cannot be written */
    int busy_timeout_ms;    /* default 30000 */
    /* Stop waiting for a busy cache once *interrupt is set (the run's
     * interrupt flag; may be NULL). Best-effort writes never wait. */
    const volatile sig_atomic_t *interrupt;
};

/* Open or create the cache file (and its folder). Refuses network file systems
 * (NFS, CIFS/SMB, Lustre, GPFS, AFS, BeeGFS, ...) with a message that says why
 * (SQLite WAL needs a local disk) and what to do (--cache on a local disk, or
 * --no-cache). */
int nf_cache_open(const char *path, const struct nf_cache_opts *o, struct nf_cache **out,
                  struct nf_error *err);
void nf_cache_close(struct nf_cache *c);   /* NULL-safe */
const char *nf_cache_path(const struct nf_cache *c);

/* ---- results ---- */
/* Look up a result. Returns 1 and sets *out on a hit, 0 on a miss, negative on
 * an error. A corrupt entry (bad checksum, undecodable) is deleted, reported
 * through nf_warn, and reported as a miss. Updates the entry's last-used time
 * (for LRU gc). Collections are not stored as such: the engine stores items. */
int nf_cache_get(struct nf_cache *c, struct nf_key key, struct nf_value **out,
                 struct nf_error *err);
/* Is the result there (no decoding)? 1 yes, 0 no, <0 error. */
int nf_cache_has(struct nf_cache *c, struct nf_key key, struct nf_error *err);
/* Store a volume, matrix (with its geometry) or table under key, in one
 * transaction, with a description for `cache ls` (node type, node id, item
 * label) and the pipeline hash that produced it (pinning for gc). Storing a
 * key that exists is a no-op. Disk full / read-only: NF_EIO (the caller decides
 * whether that is fatal). */
struct nf_cache_meta {
    const char *node_type, *node_id, *label, *pipeline;
    const char *port;            /* output port name; NULL for run records */
    const char *pipeline_path;   /* absolute path of the pipeline file, or NULL */
};
int nf_cache_put(struct nf_cache *c, struct nf_key key, const struct nf_value *v,
                 const struct nf_cache_meta *meta, struct nf_error *err);

/* Remove a result (its chunks and row): a run whose outputs are damaged must
 * lose its record so that it is recomputed. Absent keys are fine. */
int nf_cache_forget(struct nf_cache *c, struct nf_key key, struct nf_error *err);

/* ---- file content hashes, memoised by (device, inode, size, mtime_ns) ---- */
/* Content hash of a file: from the memo when (dev, ino, size, mtime) match and
 * the file was not modified within 2 s of when it was hashed (mtime granularity
 * guard), else read and hashed (XXH3-128) and memoised. */
int nf_cache_file_hash(struct nf_cache *c, const char *path, struct nf_key *out,
                       struct nf_error *err);
/* Same without a cache (no memo): for --no-cache runs. */
int nf_file_hash(const char *path, struct nf_key *out, struct nf_error *err);
/* Handing hashes to SLURM tasks (run/slurm.c), so that a task does not read
 * every input file again. A memo entry as this machine sees the file: 1 when
 * the memo holds a trusted hash for it as it is now (size, mtime, when it was
 * hashed), 0 when not. */
struct nf_file_memo { int64_t size, mtime_ns, hashed_at; struct nf_key hash; };
int nf_cache_file_memo(struct nf_cache *c, const char *path, struct nf_file_memo *m, struct nf_error *err);
/* Take another machine's entry for the same (shared) file: stored under this
 * machine's device and inode when the file here has the same size and
 * modification time (1), else nothing (0: it will be hashed here). The
 * device number of a network mount differs between machines; size and
 * mtime_ns come from the file server and do not. */
int nf_cache_file_memo_adopt(struct nf_cache *c, const char *path, const struct nf_file_memo *m,
                             struct nf_error *err);

/* ---- what each node was computed from, for `plan --explain` ---- */
/* components: a JSON object text (the engine's description of the key
 * components: type, version, params, inputs, files). Keyed by (pipeline file
 * absolute path, node id); the last record wins. Best effort: it does not
 * wait for a busy cache and returns 0 even when it could not write (warned
 * about once per cache handle). */
int nf_cache_record_node(struct nf_cache *c, const char *pipeline_path, const char *node_id,
                         struct nf_key key, const char *components, struct nf_error *err);
/* Returns 1 and an owned copy of the components text (and key) when recorded,
 * 0 when not. */
int nf_cache_last_node(struct nf_cache *c, const char *pipeline_path, const char *node_id,
                       struct nf_key *key, char **components, struct nf_error *err);

/* ---- checkpoints: numbered partial chunks of a long node ---- */
/* Commit chunk `index` of the computation whose final result will have key
 * `key` (one transaction; overwrites an existing index). */
int nf_cache_ckpt_put(struct nf_cache *c, struct nf_key key, int64_t index, const void *data,
                      size_t bytes, struct nf_error *err);
/* Indices committed so far, sorted; *indices owned by the caller (free). */
int nf_cache_ckpt_list(struct nf_cache *c, struct nf_key key, int64_t **indices, size_t *n,
                       struct nf_error *err);
/* Read chunk `index`: 1 and owned *data on success, 0 when absent (or corrupt:
 * then it is deleted and reported), <0 error. */
int nf_cache_ckpt_get(struct nf_cache *c, struct nf_key key, int64_t index, void **data,
                      size_t *bytes, struct nf_error *err);
/* Drop all checkpoint chunks of key (after its final result is stored). */
int nf_cache_ckpt_drop(struct nf_cache *c, struct nf_key key, struct nf_error *err);

/* ---- leases: one process computes a result at a time ---- */
/* Try to take the lease on key for this process. Returns 1 when taken (or
 * already ours), 0 when a live process (same host: pid alive; other host:
 * heartbeat younger than 60 s) holds it, <0 on error. Leases of dead processes
 * are reclaimed. */
int nf_cache_lease(struct nf_cache *c, struct nf_key key, struct nf_error *err);
void nf_cache_release(struct nf_cache *c, struct nf_key key);
/* Refresh the heartbeat of every lease this process holds. */
void nf_cache_heartbeat(struct nf_cache *c);

/* ---- maintenance (nlflow cache ...) ---- */
struct nf_cache_entry {
    char key[33];
    char node_type[32], node_id[64], label[64];
    char kind[16];           /* volume, matrix, table */
    char shape[64];
    uint64_t bytes, stored;  /* uncompressed, compressed */
    int64_t created, used;   /* unix seconds */
    char port[64];           /* output port; "" when not recorded (run records, older entries) */
    char pipeline[33];       /* hash of the pipeline text that stored it, or "" */
    const char *pipeline_path;   /* absolute path of that pipeline file, or NULL when not
                                    recorded; valid during the callback only */
    bool run_record;         /* a run's record (which outputs and files it made), not an output */
};
/* Call fn for every result, most recently used first. */
int nf_cache_list(struct nf_cache *c, int (*fn)(const struct nf_cache_entry *e, void *arg),
                  void *arg, struct nf_error *err);
struct nf_cache_info {
    uint64_t n_results, n_chunks, n_ckpt_chunks, n_files, n_leases;
    uint64_t bytes, stored, file_bytes;   /* uncompressed, compressed, size on disk */
    int format;
};
int nf_cache_info(struct nf_cache *c, struct nf_cache_info *info, struct nf_error *err);
/* Re-check every result the way a run reads it (header fields against their
 * shape, chunk checksums, run records cell by cell) and every checkpoint;
 * report each corrupt one through fn (may be NULL) and delete it. *n_bad gets
 * the count. */
int nf_cache_verify(struct nf_cache *c, void (*fn)(const char *key_hex, const char *what, void *arg),
                    void *arg, uint64_t *n_bad, struct nf_error *err);
/* LRU: delete least-recently-used results until the stored size is at most
 * max_bytes (0 = no size limit), and results unused for more than
 * older_than_days (<0 = no age limit); never results pinned by a live lease or
 * produced by `keep_pipeline` (a pipeline hash, may be NULL) in a process that
 * is still running. Then VACUUM-free space reuse (incremental). */
int nf_cache_gc(struct nf_cache *c, uint64_t max_bytes, double older_than_days,
                const char *keep_pipeline, uint64_t *n_deleted, uint64_t *bytes_freed,
                struct nf_error *err);
/* What nf_cache_gc with these limits would delete (results and stored
 * bytes), deleting nothing. Results under a lease count as kept. */
int nf_cache_gc_preview(struct nf_cache *c, uint64_t max_bytes, double older_than_days,
                        uint64_t *n_deleted, uint64_t *bytes_freed, struct nf_error *err);

/* Rebuild a damaged cache file (`nlflow cache repair`): every result whose
 * row, header and chunks read back intact (checked as verify does) is copied
 * into a fresh file, which then replaces the old one (a rename: the old file
 * stays whole until then). Results that cannot be read are reported through
 * fn (may be NULL) and counted in *n_lost; file hashes and checkpoints are
 * not kept. No other process may use the cache meanwhile. */
int nf_cache_repair(const char *path, void (*fn)(const char *key_hex, const char *what, void *arg),
                    void *arg, uint64_t *n_kept, uint64_t *n_lost, struct nf_error *err);

/* `nlflow cache ls` (cache_ls.c): results grouped by pipeline file, node and
 * output port, with counts (items of collections), sizes stored and raw, and
 * last use. pipeline_path (absolute): only that pipeline's results; all: run
 * records too (hidden otherwise, and counted in the last line). */
struct nf_cache_ls_opts {
    const char *pipeline_path;
    bool all;
};
int nf_cache_ls_print(struct nf_cache *c, const struct nf_cache_ls_opts *o, FILE *out,
                      struct nf_error *err);
/* `nlflow cache gc` without limits: what it would remove under the usual
 * limits (unused for 30 days; each of several size caps), removing nothing. */
int nf_cache_gc_explain(struct nf_cache *c, FILE *out, struct nf_error *err);

/* ---- for tests and diagnostics ---- */
/* The name of a network file system ("NFS", "CIFS", "Lustre", ...) for a
 * statfs f_type, or NULL for a local one. */
const char *nf_cache_network_fs_name(unsigned long fs_magic);
/* 0 when a cache at `path` may live on a file system of type fs_magic; else
 * NF_EUSAGE with the message nf_cache_open gives (why, and what to do). */
int nf_cache_check_fs(const char *path, unsigned long fs_magic, struct nf_error *err);
/* Bytes of file content read by nf_cache_file_hash on this cache so far (a
 * memo hit reads none). */
uint64_t nf_cache_hashed_bytes(const struct nf_cache *c);
/* Testing aids, read from the environment by nf_cache_open:
 *   NLFLOW_CACHE_MAX_PAGES=N    PRAGMA max_page_count (16 KiB pages): disk full
 *   NLFLOW_CACHE_READONLY=1     open the file read-only
 *   NLFLOW_CACHE_FS_MAGIC=0x..  pretend the cache folder is on that file system */

#endif
