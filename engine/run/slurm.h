/* slurm.h — the SLURM executor (engine-internal; docs/hpc.md).
 *
 * The coordinator (nf_slurm_run, behind `nlflow run --executor slurm`) turns
 * every node that must run and can run elsewhere into one stage: one job
 * array whose tasks each compute some units of it (items of a mapped node,
 * parts of a checkpointed run, or the whole run), chained to the arrays it
 * needs with --dependency=afterok, all submitted at once. Tasks
 * (nf_slurm_task, behind the hidden `nlflow task`) write one shard file per
 * unit (cache/shards.h) into <pipeline folder>/.nlflow/shards/<run>/<node>/;
 * the coordinator polls those folders, imports each shard into its own cache
 * (local disk, as for a local run), asks squeue at most every check_every
 * seconds about tasks that ended without a shard, resubmits their units
 * (retries), and when every stage is in, runs the pipeline locally: every
 * result is then fetched from the cache (or merged from its parts'
 * checkpoints) and the sinks write the outputs, byte for byte as a local run.
 */
#ifndef NF_SLURM_H
#define NF_SLURM_H

#include <stdbool.h>
#include <stdio.h>

#include "pipeline.h"
#include "cache/cache.h"

struct nf_slurm_opts {
    const char *exe;              /* absolute path of the nlflow binary the tasks run */
    char *const *set; size_t n_set;   /* --set values, handed to every task */
    bool detach;                  /* submit, record the jobs, and return */
    bool status_only;             /* `nlflow status`: import what arrived, report, submit nothing */
    const struct nf_exec_opts *exec;  /* the final local run (cache, threads, json) */
};

/* Run (or, with status_only, report on) the pipeline on SLURM. 0 when every
 * output is written (detach: when everything is submitted), else an error
 * (NF_EINTR: interrupted; the jobs were cancelled). */
int nf_slurm_run(struct nf_pipeline *p, const struct nf_slurm_opts *o, struct nf_error *err);

/* `plan --executor slurm`: the arrays a run would submit now (cache may be
 * NULL: then every node runs), without submitting anything. */
int nf_slurm_plan_print(struct nf_pipeline *p, struct nf_cache *cache, FILE *out, struct nf_error *err);

/* One array task: compute the units on line `index` of units_file for node
 * `node_id` of the pipeline whose hash must be `hash`, and write their
 * shards. */
struct nf_slurm_task_opts {
    const char *hash, *node_id, *units_file;
    long index;
    int threads;
};
int nf_slurm_task(struct nf_pipeline *p, const struct nf_slurm_task_opts *o, struct nf_error *err);

/* Shared by the coordinator and the task (slurm.c): the shard folder of a
 * pipeline (owned), its node's output port names (a per-thread table, up to
 * 64). */
char *nf_slurm_shard_root(const struct nf_pipeline *p);
const char *const *nf_slurm_port_names(const struct nf_node_inst *node, size_t *n);

#endif
