/* exec_cache.h — the executor's use of the result cache (engine-internal).
 *
 * One run of a node (the node, or one item of a mapped node) has a run key
 * (keys.h). Its outputs are stored under H(run, port) (items of a collection
 * output under H(H(run, port), i)), and then a small run record under the run
 * key itself: which outputs exist, item labels, and the files the run wrote
 * with their content hashes. The record is written last, so its presence means
 * the whole run is there. A hit requires every output and every written file
 * (unchanged) to be present.
 */
#ifndef NF_EXEC_CACHE_H
#define NF_EXEC_CACHE_H

#include "cache.h"
#include "keys.h"
#include "run_record.h"   /* nf_run_valid */
#include "pipeline.h"
#include "core/util.h"

/* Outputs of one run from the cache: 1 hit (out[] filled, owned), 0 miss, <0
 * error. A run whose written files are not in `outputs_dir` (the current
 * outputs folder) as they were written is a miss. */
int nf_run_fetch(struct nf_cache *c, struct nf_key run, const char *outputs_dir, size_t n_out,
                 struct nf_value **out, struct nf_error *err);
/* The same, reading only what want(arg, port, item) accepts (item -1: a
 * single value; items of a collection that are not wanted stay NULL, ports
 * not wanted stay NULL). For SLURM tasks, which need one item of a collection. */
int nf_run_fetch_some(struct nf_cache *c, struct nf_key run, const char *outputs_dir, size_t n_out,
                      struct nf_value **out, bool (*want)(void *arg, int port, int64_t item), void *want_arg,
                      struct nf_error *err);
/* Store outputs and written files of one run, then its record. pipeline_path
 * (absolute, may be NULL) is recorded with each entry for `cache ls`; files
 * inside `outputs_dir` are recorded relative to it. */
int nf_run_store(struct nf_cache *c, struct nf_key run, const struct nf_node_inst *node,
                 const char *pipeline_hash, const char *pipeline_path, const char *outputs_dir,
                 size_t n_out, struct nf_value *const *out, const struct nf_written *written,
                 struct nf_error *err);
/* A checkpoint handle for one run (stack-allocated by the executor). */
struct nf_checkpoint {
    struct nf_cache *cache;
    struct nf_key key;
    bool warned;
    int64_t total;     /* chunks in all, from nf_ckpt_total (0: not said) */
    int64_t part, parts;   /* a SLURM task's share: chunks with ordinal % parts == part
                              (parts 0: every chunk) */
};

#endif
