/* node.h — what a node type is: ports, a parameter table, and its functions.
 *
 * Each node kind lives in its folder nodes/<name>/ (its CPU and GPU paths, its
 * cost function, its headers) and ends with one `const struct nf_node_type
 * nf_node_<name>`; nodes/node_list.c lists them. A node includes this header
 * and engine/core, io/io.h and kernels/ headers only, never the engine's
 * phases (tests/check-layout.sh enforces it): what it needs of the engine is
 * declared here. The
 * parameter table is the single source of truth: validation, `nlflow nodes TYPE`,
 * schemas/pipeline.schema.json and docs/nodes/<type>.md are all driven by it.
 *
 * Contract of run(): it borrows run->in[] (never modifies them), and on success
 * stores owned references in run->out[] for every output port it produces. On
 * failure it sets run->err, returns a negative code and leaves run->out[] NULL
 * (the engine unrefs anything left there). Files it writes are written
 * atomically (temporary + rename, see util.h).
 */
#ifndef NF_NODE_H
#define NF_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/value.h"

/* ---- parameters ---- */
enum nf_ptype {
    NF_P_INT,        /* int64_t */
    NF_P_NUM,        /* double */
    NF_P_BOOL,       /* bool */
    NF_P_STR,        /* char * (owned by the params struct) */
    NF_P_PATH,       /* char *, relative to the pipeline file's folder once resolved */
    NF_P_ENUM,       /* int: index into choices[] */
    NF_P_NUM_LIST,   /* struct nf_num_list; a scalar is accepted as a 1-list */
    NF_P_STR_LIST,   /* struct nf_str_list; a scalar is accepted as a 1-list */
};
const char *nf_ptype_name(enum nf_ptype t);

struct nf_num_list { size_t n; double *v; };
struct nf_str_list { size_t n; char **v; };

enum {
    NF_PF_REQUIRED = 1u << 0,   /* no default: must be given */
    NF_PF_OPTIONAL = 1u << 1,   /* may be absent (NULL / empty list) */
    NF_PF_NOT_KEYED = 1u << 2,  /* not part of cache keys (load's path: the file's
                                   content is hashed instead) */
    NF_PF_SEED = 1u << 3,       /* an INT seed whose default -1 means settings.seed:
                                   the validator fills the setting in, so the key, the
                                   plan and the node all see the seed actually used */
    NF_PF_NAMED_LISTS = 1u << 4, /* STR_LIST: a map {name: item or [items]} is accepted
                                   too, each pair becoming the string "name = item, item"
                                   (ridge's bands) */
};

struct nf_param {
    const char *name;
    const char *help;
    enum nf_ptype type;
    size_t offset;              /* offsetof into the node's params struct */
    /* default: i for INT/BOOL/ENUM (index), d for NUM, s for STR/PATH ("" = NULL) */
    struct { int64_t i; double d; const char *s; } def;
    double min, max;            /* INT, NUM, and the elements of NUM_LIST */
    const char *const *choices; /* ENUM: NULL-terminated; INT: {choices[0]: n} is accepted
                                   as well as n (a keyed integer, e.g. reduce: {pca: 10}) */
    unsigned flags;
    int len_min, len_max;       /* NUM_LIST / STR_LIST lengths; 0 = no bound */
};

/* Table rows. `off` is the field's offsetof in the node's params struct (a
 * node usually writes `#define FIELD(f) offsetof(struct x_params, f)` above
 * its table); min == max == 0 means no range. The _F variants take flags
 * (NF_PF_*) before the help text. */
#define NF_PARAM_INT_F(name_, off, def_, min_, max_, flags_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_INT, .offset = (off), \
      .def = { .i = (def_) }, .min = (min_), .max = (max_), .flags = (flags_) }
#define NF_PARAM_INT(name_, off, def_, min_, max_, help_) \
    NF_PARAM_INT_F(name_, off, def_, min_, max_, 0, help_)
/* An integer also accepted as {key[0]: n} (predict's reduce: {pca: 10}). */
#define NF_PARAM_KEYED_INT(name_, off, key, def_, min_, max_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_INT, .offset = (off), \
      .def = { .i = (def_) }, .min = (min_), .max = (max_), .choices = (key) }
/* A seed: -1 (the default) means settings.seed. */
#define NF_PARAM_SEED(name_, off, max_, help_) \
    NF_PARAM_INT_F(name_, off, -1, -1, max_, NF_PF_SEED, help_)
#define NF_PARAM_NUM_F(name_, off, def_, min_, max_, flags_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_NUM, .offset = (off), \
      .def = { .d = (def_) }, .min = (min_), .max = (max_), .flags = (flags_) }
#define NF_PARAM_NUM(name_, off, def_, min_, max_, help_) \
    NF_PARAM_NUM_F(name_, off, def_, min_, max_, 0, help_)
#define NF_PARAM_BOOL(name_, off, def_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_BOOL, .offset = (off), \
      .def = { .i = (def_) } }
/* choices: NULL-terminated; def_ is an index into it. */
#define NF_PARAM_ENUM_F(name_, off, choices_, def_, flags_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_ENUM, .offset = (off), \
      .def = { .i = (def_) }, .choices = (choices_), .flags = (flags_) }
#define NF_PARAM_ENUM(name_, off, choices_, def_, help_) \
    NF_PARAM_ENUM_F(name_, off, choices_, def_, 0, help_)
/* def_: the default text, "" for none (NULL in the params struct). */
#define NF_PARAM_STR_F(name_, off, def_, flags_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_STR, .offset = (off), \
      .def = { .s = (def_) }, .flags = (flags_) }
#define NF_PARAM_STR(name_, off, def_, help_) NF_PARAM_STR_F(name_, off, def_, 0, help_)
#define NF_PARAM_PATH_F(name_, off, def_, flags_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_PATH, .offset = (off), \
      .def = { .s = (def_) }, .flags = (flags_) }
#define NF_PARAM_PATH(name_, off, def_, help_) NF_PARAM_PATH_F(name_, off, def_, 0, help_)
/* def_: "1,2,3", or "logspace:lo,hi,n" / "linspace:lo,hi,n"; min_/max_ bound
 * every element, len_min/len_max the length (0: no bound). */
#define NF_PARAM_NUM_LIST(name_, off, def_, min_, max_, len_min_, len_max_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_NUM_LIST, .offset = (off), \
      .def = { .s = (def_) }, .min = (min_), .max = (max_), \
      .len_min = (len_min_), .len_max = (len_max_) }
#define NF_PARAM_STR_LIST_F(name_, off, def_, len_min_, len_max_, flags_, help_) \
    { .name = (name_), .help = (help_), .type = NF_P_STR_LIST, .offset = (off), \
      .def = { .s = (def_) }, .flags = (flags_), .len_min = (len_min_), .len_max = (len_max_) }
#define NF_PARAM_END { .name = NULL }

/* ---- ports ---- */
enum {
    NF_PT_VOLUME = 1u << NF_KIND_VOLUME,
    NF_PT_MATRIX = 1u << NF_KIND_MATRIX,
    NF_PT_TABLE  = 1u << NF_KIND_TABLE,
    NF_PT_COLL   = 1u << NF_KIND_COLLECTION,   /* takes a whole collection as is */
    NF_PT_ANY    = NF_PT_VOLUME | NF_PT_MATRIX | NF_PT_TABLE | NF_PT_COLL,
};
enum {
    NF_PORT_OPTIONAL = 1u << 0,
    NF_PORT_STACK    = 1u << 1,   /* matrix port: a collection of 1×V maps is stacked */
    NF_PORT_VARIADIC = 1u << 2,   /* input: any number of named inputs (summarize) */
    NF_PORT_TABLE_AS_MATRIX = 1u << 3, /* matrix port also accepts a numeric table */
    NF_PORT_ON_DEMAND = 1u << 4,  /* output: computed only when a node consumes it
                                     (run->wanted); part of the cache key */
    NF_PORT_LAZY     = 1u << 5,   /* volume input: takes a volume left on disk (lazy,
                                     path set) and reads what it needs itself, as mask
                                     reads only its voxels; see nf_shape.can_be_lazy */
};
struct nf_port {
    const char *name;
    const char *help;
    unsigned types;       /* NF_PT_* accepted (inputs) or produced (outputs) */
    unsigned flags;
};
#define NF_PORT_END { NULL, NULL, 0, 0 }
/* Each node names its ports in two enums, <NODE>_IN_<PORT> ... <NODE>_N_IN and
 * <NODE>_OUT_<PORT> ... <NODE>_N_OUT, in table order; this compile-time check
 * (after the tables) keeps the count and the table together. */
#define NF_PORTS_MATCH(table, count) \
    _Static_assert(sizeof(table) / sizeof((table)[0]) == (size_t)(count) + 1, \
                   #table " must list " #count " ports, then NF_PORT_END")

/* ---- execution environment handed to run() ---- */
struct nf_env {
    const char *pipeline_file;   /* as given */
    const char *pipeline_dir;    /* folder of the pipeline file */
    const char *pipeline_name;
    const char *pipeline_hash;   /* hex hash of the pipeline text */
    const char *outputs_dir;     /* absolute or relative to cwd; created on demand */
    int threads;                 /* worker threads available to this node */
    uint64_t memory_budget;      /* bytes */
    uint64_t seed;               /* settings.seed */
    const struct nf_pipeline *pipeline;   /* the whole pipeline, opaque to nodes (sinks
                                             ask nf_node_input_source where their inputs
                                             came from); NULL in unit tests */
    /* How the run stands when a sink starts (the report's header): filled by
     * the executor for NF_NODE_SINK nodes only (known false otherwise). */
    struct nf_run_facts {
        bool known;
        double seconds;          /* since execution began (after planning) */
        size_t nodes;            /* nodes in the pipeline */
        size_t nodes_done;       /* finished before this sink started */
        size_t nodes_cached;     /* of those, served from the cache */
    } facts;
};

struct nf_node_inst;
struct nf_pipeline;

/* Checkpoints of a long run (permutation blocks, searchlight spheres): numbered
 * partial chunks committed to the cache as they finish, so that a killed run
 * resumes where it stopped. run->ckpt is NULL without a cache (then just
 * compute everything). Chunks belong to the run's cache key: a run with other
 * parameters or inputs never sees them. Results must not depend on whether
 * chunks were resumed. Chunks are dropped once the final result is stored. */
struct nf_checkpoint;
/* Indices committed so far (sorted; *indices owned by the caller, free it). */
int nf_ckpt_list(struct nf_checkpoint *ck, int64_t **indices, size_t *n, struct nf_error *err);
/* 1 and an owned copy in *data, 0 when absent (or corrupt), <0 error. */
int nf_ckpt_get(struct nf_checkpoint *ck, int64_t index, void **data, size_t *bytes,
                struct nf_error *err);
/* Commit chunk `index` (one transaction). A failure to write is not an error
 * for the node: the chunk is just not saved (and a warning said once). */
int nf_ckpt_put(struct nf_checkpoint *ck, int64_t index, const void *data, size_t bytes,
                struct nf_error *err);
/* How many chunks the run has in all, so that an interrupted run can say
 * "N of M chunks saved". NULL-safe. */
void nf_ckpt_total(struct nf_checkpoint *ck, int64_t total);
/* Parts (SLURM tasks, docs/hpc.md): a run may be asked for a share of its
 * chunks only; other tasks commit the rest and the engine merges them from
 * the checkpoints. nf_ckpt_skip: chunk number `ordinal` (0-based, in the
 * node's own order) belongs to another part, do not compute it.
 * nf_ckpt_partial: this run is a part, so every chunk it computes must be
 * committed (the last one too); its outputs are discarded. NULL-safe. */
bool nf_ckpt_skip(const struct nf_checkpoint *ck, int64_t ordinal);
bool nf_ckpt_partial(const struct nf_checkpoint *ck);

/* Progress of one run, as the engine reports it (progress.c): a redrawn line
 * on a terminal, plain lines at most every 5 s otherwise, JSON events at most
 * twice a second. NULL in tests and for the items of a mapped node (the
 * engine counts items instead). */
struct nf_progress;

struct nf_run {
    const struct nf_node_inst *node;  /* id, loc, params */
    const void *params;
    const struct nf_env *env;
    struct nf_value **in;        /* one per input port (NULL when not connected) */
    /* variadic inputs (summarize): names and values, n_extra entries */
    size_t n_extra;
    const char *const *extra_names;
    struct nf_value **extra_in;
    struct nf_value **out;       /* one per output port, filled by run() */
    struct nf_error *err;
    size_t item, n_items;        /* when mapped over a collection: which item */
    struct nf_checkpoint *ckpt;  /* NULL without a cache */
    const bool *wanted;          /* per output port: consumed by some node (NULL: all);
                                    NF_PORT_ON_DEMAND outputs are produced only if set */
    struct nf_progress *progress;/* NULL: not reported */
};
/* Is output port o of this run consumed downstream? */
static inline bool nf_run_wants(const struct nf_run *run, int o)
{
    return !run->wanted || run->wanted[o];
}

/* Interrupts. SIGINT/SIGTERM set a flag; a long run polls it between blocks
 * of work (well under a second apart: permutation tiles, sphere blocks, voxel
 * blocks), keeps the checkpoint chunks it finished, and returns
 * NF_FAIL(err, NF_EINTR, "interrupted") without outputs. Cheap (one load of
 * a sig_atomic_t); any thread; run may be NULL. */
bool nf_run_interrupted(const struct nf_run *run);

/* Report that `done` of `total` units (permutations, spheres, voxels) of the
 * run are finished. Any thread, any rate: the engine throttles. done may
 * start above 0 (resumed from checkpoints); `unit` is a plural noun. */
void nf_progress(const struct nf_run *run, int64_t done, int64_t total, const char *unit);

/* Shape resolution: given resolved input shapes (NF_KIND_NONE when unknown or not
 * connected) fill out[] for every output port. May read file headers, never
 * voxel data. Errors go to `err` with the node's location. */
struct nf_resolve {
    const struct nf_node_inst *node;
    const void *params;
    const struct nf_env *env;
    const struct nf_shape *in;    /* one per input port (after stacking/mapping) */
    size_t n_extra;
    const char *const *extra_names;
    const struct nf_shape *extra_in;
    struct nf_shape *out;         /* one per output port */
    struct nf_error *err;
    const bool *wanted;           /* per output port: consumed by some node (NULL: unknown),
                                     so that wiring a port a node will not make fails here */
};

/* The work of one run of a node (one item when mapped), from its resolved
 * shapes: what node_type.cost fills for the placement cost model
 * (plan/cost.h turns it into seconds on each device).
 *
 * FLOPs follow the node's algorithm (a multiply-add counts 2); bytes are what
 * each implementation moves through memory; transfers are the inputs that go
 * up and the outputs that come back. Estimates, not measurements: what
 * matters is their ratio between devices and their growth with the problem,
 * so that small problems (where the GPU's fixed setup and launches dominate)
 * stay on the CPU and large ones move. */
struct nf_cost {
    double flops;           /* arithmetic (a multiply-add counts 2) */
    double cpu_bytes;       /* memory traffic of the CPU implementation */
    double gpu_bytes;       /* device memory traffic of the GPU implementation */
    double transfer_bytes;  /* host <-> device copies */
    double launches;        /* kernel launches and synchronisations */
    double host_s;          /* seconds of host work on both paths (at 1 core) */
    /* the input a GPU run keeps on the device for later GPU nodes
     * (nf_gpu_resident): its port (-1: none) and its bytes, part of
     * transfer_bytes; a GPU node placed after another GPU node that keeps
     * the same value is not charged its upload */
    int resident_port;
    double resident_bytes;
};

struct nf_node_type {
    const char *name;
    const char *summary;          /* one line */
    const char *description;      /* a paragraph for docs */
    int version;                  /* bump when results change (cache keys) */
    const struct nf_param *params;
    size_t params_size;           /* sizeof the params struct */
    const struct nf_port *inputs;
    const struct nf_port *outputs;
    /* Cross-parameter checks after the table checks; NULL if none.
     * Report each problem with NF_DIAG against `loc`/`node`. */
    void (*check)(const void *params, const struct nf_loc *loc, const char *node,
                  struct nf_diags *d);
    int (*resolve)(struct nf_resolve *r);
    /* Peak working bytes of one run (one item when mapped), beyond its inputs
     * and outputs. NULL = 0. */
    uint64_t (*estimate)(const void *params, const struct nf_shape *in,
                         const struct nf_shape *out);
    int (*run_cpu)(struct nf_run *run);
    int (*run_gpu)(struct nf_run *run);   /* NULL: CPU only */
    /* Streaming reduction (optional). A node whose input port 0 takes a
     * collection may fold it item by item: when that collection comes from a
     * node mapped over subjects, and this node has no other input, the engine
     * feeds it each item in item order as soon as it is made, then drops the
     * item, so the collection never exists whole. fold_begin creates *state;
     * fold_item reads one item (borrowed, materialised); fold_end (always
     * called once begin succeeded, with ok false after a failure) fills
     * run->out[] when ok and frees the state. run->in is not used. */
    int (*fold_begin)(struct nf_run *run, void **state);
    int (*fold_item)(struct nf_run *run, void *state, const struct nf_value *item, size_t index);
    int (*fold_end)(struct nf_run *run, void *state, bool ok);
    /* Nodes that read files (load): the files the output will be read from,
     * in output order (*is_collection: one item per file), and the label each
     * item will carry (*labels may stay NULL: no labels). Their output keys
     * come from the files' content and labels, not from a cached result: such
     * nodes are never cached themselves. *paths and *labels are owned by the
     * caller (free each entry; both have n entries, *labels' may be NULL). */
    int (*input_files)(const void *params, char ***paths, char ***labels, size_t *n,
                       bool *is_collection, struct nf_error *err);
    /* File readers with an output read from one file of its own rather than
     * one item per input file (bids' participants table beside its per-run
     * collections): 1 and that file's path in *path (owned by the caller; the
     * file may be absent) for such an output `port`, 0 for outputs keyed by
     * input_files. Such an output is one value keyed by that file's content
     * alone, so that editing it changes no other output's keys (a new column
     * in participants.tsv reruns no first-level model). NULL: none. */
    int (*output_file)(const void *params, int port, char **path, struct nf_error *err);
    /* Whether a keyed parameter can matter given the others (ridge's seed
     * without shuffle cannot): parameters that cannot are left out of the
     * cache key, so that changing them (or settings.seed) reruns nothing.
     * NULL: every keyed parameter matters. */
    bool (*param_matters)(const void *params, const struct nf_param *p);
    /* Files a node reads on its own (not through an input port, e.g. simulate's
     * mask), whose content is part of its cache key: fills *paths (owned by the
     * caller; *n may be 0). NULL: none. */
    int (*key_files)(const void *params, const struct nf_env *env, char ***paths, size_t *n,
                     struct nf_error *err);
    unsigned flags;
    /* Work of one run (one item when mapped) from resolved shapes, for the
     * placement cost model (cost.h): fills *c and returns 1, or returns 0 when
     * the shapes are not known yet. NULL: no estimate (`auto` keeps the CPU). */
    int (*cost)(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                struct nf_cost *c);
    /* Checkpoint chunks of one run from resolved shapes (an upper bound is
     * fine), so that a SLURM stage can split a long run into parts
     * (nf_ckpt_skip). NULL or 0: one run is one unit of work. */
    int64_t (*chunks)(const void *params, const struct nf_shape *in, const struct nf_shape *out);
    /* What the node did, for the methods paragraph of a report: one or two
     * sentences in the past tense as a paper's methods section has them, with
     * the parameter values filled in ("Each subject's beta map was estimated
     * by ridge regression (alpha = 1) ..."). Owned by the caller (nf_malloc);
     * NULL when out of memory. NULL callback: the report uses `summary`. */
    char *(*methods)(const void *params);
};
enum {
    NF_NODE_SOURCE = 1u << 0,     /* reads files or generates data (no inputs) */
    NF_NODE_SINK   = 1u << 1,     /* writes files into outputs/ */
    NF_NODE_NO_MAP = 1u << 2,     /* never mapped over collections (takes them whole) */
    NF_NODE_LAZY_INPUTS = 1u << 3,/* reads lazy volumes itself (volume.lazy, path set),
                                     e.g. only the voxels it needs: the engine does not
                                     materialise them first */
    NF_NODE_GPU    = 1u << 4,     /* has a GPU implementation in CUDA builds (run_gpu is
                                     set only there): generated docs say so in every build */
    NF_NODE_GPU_PARTS = 1u << 5,  /* its GPU path honours nf_ckpt_skip too: a GPU-placed run
                                     may be split into parts (node_type.chunks) */
};

/* ---- what a node may ask about its own instance (node.c) ----
 * A node sees its instance (run->node, r->node) only through these: never
 * the pipeline struct. All are NULL-safe (tests run nodes without an
 * instance) and then answer as if nothing were known. */
/* Where the node is, for messages. */
const struct nf_loc *nf_node_loc(const struct nf_node_inst *node);
const char *nf_node_id(const struct nf_node_inst *node);
/* Give an error raised below a node (io, allocation) the node's location and
 * id unless it already has a location; returns rc. */
int nf_error_on_node(const struct nf_node_inst *node, struct nf_error *err, int rc);
/* Is input `port` wired to another node's output? (At plan time its shape may
 * still be unknown: NF_KIND_NONE in r->in[port] does not mean unwired.) */
bool nf_node_input_wired(const struct nf_node_inst *node, int port);
/* The shape the plan resolved for output `port`, or NULL when not planned
 * (no instance, or run outside a pipeline). */
const struct nf_shape *nf_node_planned_output(const struct nf_node_inst *node, int port);
/* Where the variadic input `key` (summarize's named inputs) comes from: the
 * producing node's id, type name and output port name, borrowed from the
 * pipeline (env->pipeline). false without a pipeline or such an input. */
struct nf_input_source {
    const char *node_id, *node_type, *port;
    const struct nf_node_type *type;
    const void *params;          /* the producing node's parameters (type->params layout) */
};
bool nf_node_input_source(const struct nf_node_inst *node, const struct nf_env *env, const char *key,
                          struct nf_input_source *src);

/* The pipeline's nodes in the order they run (topological), for sinks that
 * describe the whole run (the report's methods paragraph): 0 / false without
 * a pipeline (env->pipeline NULL). Borrowed from the pipeline. */
struct nf_node_info {
    const char *id;
    const struct nf_node_type *type;
    const void *params;
};
size_t nf_pipeline_size(const struct nf_env *env);
bool nf_pipeline_node(const struct nf_env *env, size_t i, struct nf_node_info *info);
/* The pipeline files the pipeline uses (`type: use`), for provenance: path,
 * content hash, the git commit of the work tree holding it (NULL outside one)
 * and the use node's id. 0 / false without a pipeline. */
struct nf_used_file_info {
    const char *path, *hash, *commit, *used_by;
};
size_t nf_pipeline_used_files(const struct nf_env *env);
bool nf_pipeline_used_file(const struct nf_env *env, size_t i, struct nf_used_file_info *info);

/* ---- registry (nodes/node_list.c lists the types; node.c looks them up) ---- */
/* NULL-terminated. */
extern const struct nf_node_type *const nf_node_types[];
const struct nf_node_type *nf_node_type_find(const char *name);
/* "did you mean 'load'? " for a mistyped node type name, or "" (suggest.h). */
void nf_node_type_suggest(const char *name, char *hint, size_t size);
int nf_port_index(const struct nf_port *ports, const char *name);
size_t nf_port_count(const struct nf_port *ports);

/* ---- parameter table helpers (lang/params.c) ---- */
struct nf_ynode;   /* parse tree node, yaml.h */
/* Fill every parameter with its default. */
void nf_params_defaults(const struct nf_node_type *t, void *params);
/* Free owned strings and lists inside params (not params itself). */
void nf_params_release(const struct nf_node_type *t, void *params);
const struct nf_param *nf_param_find(const struct nf_param *table, const char *name);
/* Default value as text (for docs/help), "" when none. */
void nf_param_default_text(const struct nf_param *p, char *buf, size_t size);
/* A parameter's value in a filled params struct as JSON text (strings
 * quoted, lists in brackets, unset optional values null); owned, NULL when
 * out of memory. */
char *nf_param_value_json(const struct nf_param *p, const void *params);
/* Is the value of p (a parameter of type t) in params its default? Unset
 * optional values are; false when out of memory. */
bool nf_param_is_default(const struct nf_node_type *t, const struct nf_param *p, const void *params);

#endif
