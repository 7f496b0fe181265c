/* run_record.h — the record a node run leaves in the cache (engine-internal):
 * which outputs it made, item labels, and the files it wrote with their
 * content hashes (a table, stored under the run key; exec_cache.h).
 *
 * It depends on the store (cache.h) only, so that keys.c (does an earlier
 * run still stand?) and exec_cache.c (store and fetch runs) both build on it
 * without importing each other, and `cache verify` can check records the way
 * a fetch reads them.
 */
#ifndef NF_RUN_RECORD_H
#define NF_RUN_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"

/* The label results of run records carry (nf_cache_meta.label). */
#define NF_RUN_RECORD_LABEL "run record"

/* Columns of a record: what ("out", "label", "file"), port, index (-1 for a
 * single value, item count of a collection, item or file number), text (item
 * label or recorded path), hash (a written file's content). */
enum { NF_REC_WHAT, NF_REC_PORT, NF_REC_INDEX, NF_REC_TEXT, NF_REC_HASH, NF_REC_COLS };

struct nf_run_row {
    const char *what;
    int port;
    int64_t index;
    const char *text;
    char hash[33];
};

struct nf_value *nf_run_record_build(const struct nf_run_row *rows, size_t n, struct nf_error *err);
/* Is rec a record a fetch can read: the columns above, every cell present,
 * ports and indices whole numbers in range, file hashes valid? When not, why
 * says what is wrong. */
bool nf_run_record_check(const struct nf_value *rec, char *why, size_t why_size);

/* A written file as recorded: "@outputs/REL" inside outputs_dir (so that it is
 * checked where the current outputs folder is), else its absolute path. Owned. */
char *nf_run_recorded_path(const char *path, const char *outputs_dir);
/* Files the run wrote (rows "file" of a checked record) still in the current
 * outputs folder with the same content? 1 yes, 0 no (*stale, if given, owned:
 * the first that is not). */
int nf_run_files_match(struct nf_cache *c, const struct nf_table *t, const char *outputs_dir,
                       char **stale);
/* Does the run's record exist, read well, and are its written files in
 * `outputs_dir` as written? 1 yes, 0 no (then *stale, if given, is the first
 * file that is missing or changed, owned, or NULL when the record itself is
 * missing or damaged). */
int nf_run_valid(struct nf_cache *c, struct nf_key run, const char *outputs_dir, char **stale,
                 struct nf_error *err);

#endif
