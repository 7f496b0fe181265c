/* pipeline.h — a validated pipeline: node instances, edges, settings, plan.
 *
 * Built by the phases in order: nf_pipeline_load (lang/validate.c) reads the
 * file, parses it into a YAML tree with marks (nf_yaml_parse, lang/ytree.c) and
 * turns that into a struct nf_pipeline, reporting every error;
 * nf_resolve_shapes (plan/shapes.c), nf_place (plan/place.c) and
 * nf_plan_memory (plan/plan.c) fill in the per-node plan; nf_execute
 * (run/exec.c) runs it.
 * The pipeline owns everything it points to; nf_pipeline_free releases it.
 */
#ifndef NF_PIPELINE_H
#define NF_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "node.h"
#include "core/value.h"

enum nf_device { NF_DEV_AUTO = 0, NF_DEV_CPU, NF_DEV_GPU };
const char *nf_device_name(enum nf_device d);

/* Special values of nf_edge.port. */
enum { NF_EDGE_VARIADIC = -1, NF_EDGE_AFTER = -2 };

struct nf_edge {
    int port;             /* input port index, NF_EDGE_VARIADIC, or NF_EDGE_AFTER
                             (ordering only: `after: [id]`, no data flows) */
    char *name;           /* the key in `in:` (port name or variadic key) */
    int src;              /* source node index */
    int src_port;         /* output port index of the source */
    struct nf_loc loc;
};

struct nf_node_inst {
    char *id;
    const struct nf_node_type *type;
    void *params;             /* the type's params struct, owned */
    struct nf_loc loc;        /* of the node's id key */
    struct nf_loc type_loc;
    struct nf_edge *edges;    /* inputs */
    size_t n_edges;
    enum nf_device device_req;    /* from `device:` or settings */
    size_t used_file;             /* 1 + index in the pipeline's used_files of the
                                     file this node comes from (`type: use`); 0: the
                                     pipeline file itself */
    /* filled by the planning phases */
    struct nf_shape *in_shape;    /* per input port, after stacking */
    struct nf_shape *extra_shape; /* per variadic edge */
    struct nf_shape *out_shape;   /* per output port */
    bool mapped;                  /* runs once per item of a collection input */
    size_t n_items;               /* when mapped */
    enum nf_device device;        /* placement result */
    double est_cpu_s, est_gpu_s;  /* the cost model's seconds of one run on each
                                     device (NAN: no estimate, or no GPU path) */
    uint64_t est_work;            /* working bytes of one run (one item) */
    uint64_t est_peak;            /* inputs + outputs + work of one run (shown by plan) */
    uint64_t est_task;            /* new memory one run allocates: copied inputs,
                                     output, work (the executor's admission) */
    uint64_t est_out;             /* bytes of all outputs */
    int concurrency;              /* items allowed in flight within the budget */
    int fold_into;                /* planned: a folding consumer fed item by item
                                     (index), or -1 */
    /* filled by the executor */
    double run_s;                 /* wall seconds from the node's start to its end
                                     (all items; 0 when skipped or cached) */
};

/* settings.executor (docs/hpc.md): where the nodes run. */
struct nf_executor_settings {
    bool slurm;               /* type: slurm (default: local) */
    char *partition, *account, *qos;   /* sbatch options, NULL: not given */
    char *time;               /* --time for every array, NULL: from the cost model */
    int64_t max_array_tasks;  /* tasks per array at most (default 1000) */
    int64_t max_concurrent;   /* the array's %N (0: no limit) */
    int64_t retries;          /* resubmissions of a failed unit (default 2) */
    int64_t cpus_per_task;    /* 0: 1 for per-item units, settings.threads (or 4) otherwise */
    double min_task_seconds;  /* pack small units up to this estimate (default 180) */
    double check_every;       /* seconds between squeue calls (default 30) */
    char **extra; size_t n_extra;   /* more sbatch options, verbatim */
};

struct nf_settings {
    struct nf_executor_settings executor;
    enum nf_device device;
    uint64_t memory;        /* bytes */
    int threads;            /* 0 = all cores */
    uint64_t seed;
    char *cache;            /* path or "off" */
    char *outputs;          /* folder, relative to the pipeline file */
};

struct nf_ynode;
/* A variable: `params:` text, or (bound by a use node's `with:`) a list or
 * mapping, `tree`, that replaces a value written as exactly "${name}". */
struct nf_var { char *name; char *value; struct nf_loc loc; bool used; struct nf_ynode *tree; };

/* A pipeline file brought in by a `type: use` node (engine/lang/use.c). Its
 * nodes are namespaced by the use node's id ("faces.glm"); its content hash is
 * part of their cache keys and of the provenance in results. */
/* The largest pipeline or used file read (a pipeline of 20,000 nodes is
 * about 2 MB), and how far `use:` may expand: files used in files used three
 * times each grow as 3^depth, so the nodes and the bytes read in all are
 * bounded too (lang/use.c). */
#define NF_PIPELINE_FILE_MAX ((size_t)16 << 20)
#define NF_USE_MAX_NODES 200000
#define NF_USE_MAX_BYTES ((size_t)256 << 20)

struct nf_used_file {
    const char *path;       /* as found (nf_intern'ed: error locations point into it) */
    char hash[33];          /* hex XXH3-128 of its text */
    char *commit;           /* HEAD of the git work tree holding it, or NULL */
    char *used_by;          /* the use node's (namespaced) id */
    struct nf_loc used_at;  /* where that node is */
};

struct nf_pipeline {
    char *file;             /* path as given */
    char *dir;              /* folder of the file */
    char *name;             /* `name:` or the file's stem */
    char hash[33];          /* hex XXH3-128 of the file text + overrides */
    struct nf_settings settings;
    struct nf_var *vars; size_t n_vars;
    struct nf_node_inst *nodes; size_t n_nodes;
    struct nf_used_file *used_files; size_t n_used_files;
    int *order;             /* topological order (indices into nodes) */
    uint64_t est_total_peak;
    char *outputs_dir;      /* settings.outputs resolved against dir */
};

/* Command-line overrides applied on top of the file. */
struct nf_overrides {
    char **set; size_t n_set;       /* "k=v" for params (vars) */
    int device;                     /* -1 = not given, else enum nf_device */
    int64_t memory;                 /* -1 = not given */
    int threads;                    /* -1 = not given */
};

struct nf_ynode;
/* Parse + validate. All problems are added to d; returns NULL when any error. */
struct nf_pipeline *nf_pipeline_load(const char *path, const struct nf_overrides *ov,
                                     struct nf_diags *d);
void nf_pipeline_free(struct nf_pipeline *p);
int nf_node_index(const struct nf_pipeline *p, const char *id);

/* Topological sort of nodes[] by edges; returns 0, or NF_EINVAL and reports the
 * cycle (listing its node ids) in d. Exposed for unit tests. */
int nf_toposort(struct nf_pipeline *p, struct nf_diags *d);

/* Planning phases (each reports into d and returns the first error code). */
int nf_resolve_shapes(struct nf_pipeline *p, struct nf_diags *d);
int nf_place(struct nf_pipeline *p, bool gpu_available, struct nf_diags *d);
/* Decide placement for one node: exposed for unit tests. */
enum nf_device nf_place_node(enum nf_device requested, enum nf_device pipeline_default,
                             bool node_has_gpu, bool gpu_available);
int nf_plan_memory(struct nf_pipeline *p, struct nf_diags *d);
/* The node that folds node ni's per-item output as it is made (see fold_* in
 * node.h), or -1: ni's outputs feed exactly one edge, into port 0 of a node
 * with fold functions and no other input. The caller checks that ni maps. */
int nf_fold_target(const struct nf_pipeline *p, size_t ni);
/* Bit o set when output port o of node ni feeds some edge. */
uint64_t nf_outputs_wanted(const struct nf_pipeline *p, size_t ni);
void nf_plan_print(const struct nf_pipeline *p, FILE *out);

/* The environment handed to the pipeline's nodes (resolve, run): its files,
 * settings and itself (node.c). */
struct nf_env;
void nf_pipeline_env(const struct nf_pipeline *p, struct nf_env *env);

struct nf_cache;
struct nf_exec_opts {
    int threads;            /* resolved worker count */
    bool json;              /* machine-readable events on stdout (--quiet is
                               nf_log_quiet, util.h: the one quiet switch) */
    struct nf_cache *cache; /* NULL: no caching */
    bool cache_strict;      /* a cache write failure fails the run */
    /* tests: each node that ran or was fetched hands its outputs (borrowed,
     * one per output port, NULL where not produced) here when it finishes */
    void (*on_outputs)(void *arg, size_t node, struct nf_value *const *out, size_t n_out);
    void *on_outputs_arg;
    /* A SLURM task (run/task.c) computes a share of one node: with `only`,
     * node only_node's runs r with only_runs[r] (NULL: all of them), and when
     * parts > 0 of its one run only the checkpoint chunks of part `part`
     * (nf_ckpt_skip). Nodes after it are skipped; a part's outputs are
     * discarded (its checkpoints are what it made). */
    bool only;
    size_t only_node;
    const bool *only_runs;
    int64_t part, parts;
};
/* Execute; returns 0 or a negative code with err set. */
int nf_execute(struct nf_pipeline *p, const struct nf_exec_opts *o, struct nf_error *err);

#endif
