/* cli.c — the `nlflow` command line: run, plan, validate, nodes, schema,
 * simulate, devices, report (rebuild.c) and bench (in bench/). It strings the engine phases
 * together (parse/validate -> shapes -> place -> memory plan -> execute), maps
 * errors to exit statuses (0 ok, 1 runtime failure, 2 invalid pipeline or
 * usage, 130 interrupted) and keeps stdout for results (plans, JSON events)
 * and stderr for logs.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "cache/cache.h"
#include "plan/cost.h"
#include "core/alloc.h"
#include "lang/use.h"
#include "run/failed_run.h"
#include "run/events.h"
#include "run/slurm.h"
#include "lang/fmt.h"
#include "lang/gen.h"
#include "cache/keys.h"
#include "io/io.h"
#include "kernels/kernels.h"
#include "lang/params.h"
#include "pipeline.h"
#include "core/util.h"
#include "init.h"
#include "rebuild.h"

#ifndef NF_VERSION
#define NF_VERSION "0.1.0"
#endif
#ifndef NF_GIT_COMMIT
#define NF_GIT_COMMIT "unknown"
#endif

static const char usage_text[] =
    "usage: nlflow <command> [options]\n"
    "\n"
    "commands:\n"
    "  run PIPELINE.yaml [options]     validate, plan and run a pipeline\n"
    "  plan PIPELINE.yaml [options]    dry run: shapes, memory and device of every node\n"
    "  validate PIPELINE.yaml          check a pipeline and its input files (headers only)\n"
    "  status PIPELINE.yaml            SLURM runs: what has arrived, what is in flight (docs/hpc.md)\n"
    "  nodes [TYPE] [--markdown]       node reference, from the parameter tables\n"
    "  init [--bids DIR] [options]     write a starting pipeline file for a BIDS dataset (or a\n"
    "                                  commented template): --derivatives DIR, --template NAME,\n"
    "                                  --output FILE (default pipeline.yaml, never replaced; - = stdout)\n"
    "  fmt [--check] PIPELINE.yaml...  rewrite pipeline files in canonical form, comments kept;\n"
    "                                  --check: change nothing, exit 1 if one is not canonical\n"
    "  schema                          print the JSON schema of pipeline files\n"
    "  simulate --out DIR [options]    write a simulated data set (NIfTI + TSV)\n"
    "  simulate --bids DIR [options]   write a task data set: BIDS + fMRIPrep-like derivatives\n"
    "  devices [--calibrate]           CPU, BLAS kernel and GPU of this machine; --calibrate\n"
    "                                  measures their rates for device: auto (docs/gpu.md)\n"
    "  cache ls|info|verify|gc|repair  inspect and maintain the result cache\n"
    "  report RESULTS_DIR [options]    rebuild a run's HTML report from its outputs folder\n"
    "                                  (summary.json and the files it lists)\n"
    "  bench [--quick] [options]       benchmarks next to their peers -> bench/results/,\n"
    "                                  docs/performance.md (see 'nlflow bench --help')\n"
    "\n"
    "run/plan options:\n"
    "  --set NAME=VALUE   override a variable from the pipeline's params (repeatable)\n"
    "  --device cpu|gpu|auto   --memory SIZE (e.g. 8GiB)   --threads N (0 = all cores)\n"
    "  --json             machine-readable events on stdout, one JSON object a line\n"
    "                     (docs/events.md); validate/plan then print their text on stderr\n"
    "  --quiet            no progress lines on stderr\n"
    "  --cache PATH       result cache (default: settings.cache, .nlflow/cache.db beside the pipeline)\n"
    "  --no-cache         compute everything, store nothing\n"
    "  --strict-cache     fail when the cache cannot be written (default: warn and go on)\n"
    "  --explain          (plan) per node: cached, will run, and why\n"
    "  --executor local|slurm   where nodes run (default: settings.executor, else local); with\n"
    "                     slurm, plan shows the job arrays and run submits them (docs/hpc.md)\n"
    "  --detach           (run on SLURM) submit, then exit; a later run or status collects\n"
    "\n"
    "cache commands:  nlflow cache ls [--pipeline FILE] [--all] | info | verify | gc [--max-size SIZE]\n"
    "                 [--older-than DAYS]   (each with [--cache PATH]; gc without a limit removes\n"
    "                 nothing and says what each limit would remove) | repair (rebuild a damaged\n"
    "                 cache file from its intact entries)\n"
    "\n"
    "report options:\n"
    "  --output FILE      the page (default RESULTS_DIR/<name>_report.html; replaced if there)\n"
    "  --summary FILE     which summary, when the folder holds several *_summary.json\n"
    "  --title TEXT  --threshold X  --template FILE|none   as the report node's parameters\n"
    "  --quiet\n"
    "\n"
    "simulate options:\n"
    "  --out DIR  --subjects N  --images N  --features N  --seed N  --voxel-size MM\n"
    "  --mask auto|synthetic|PATH  --effect-size X  --noise X\n"
    "  --bids DIR: a two-condition task (faces, houses), --runs N per subject (default 2);\n"
    "    defaults 4 subjects x 80 volumes, 3 mm, faces > houses = 2 in a 9 mm sphere at (15, -20, 10)\n"
    "  DIR must be new, empty, or a folder simulate made (it rewrites it, removing the subjects it\n"
    "    wrote before); --force writes into any folder\n"
    "\n"
    "exit status: 0 success, 1 runtime failure, 2 invalid pipeline or usage, 130 interrupted\n";

/* A usage error is an nf_error like any other; it is printed with a pointer
 * to --help instead of the "error:" prefix. Returns the exit status. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    struct nf_error err = { 0 };
    va_list ap;
    va_start(ap, fmt);
    nf_error_vset(&err, NF_EUSAGE, NULL, NULL, __FILE__, __LINE__, fmt, ap);
    va_end(ap);
    fprintf(stderr, "nlflow: %s\n(see 'nlflow --help')\n", err.msg);
    return nf_err_exit_status(err.code);
}

/* Print err and return the exit status it calls for. */
static int fail_with(const struct nf_error *err)
{
    nf_error_print(err);
    return nf_err_exit_status(err->code);
}

/* --memory: a plain decimal number (no sign, hex or exponent: "0x10" and
 * "1e-9GiB" are typos, not budgets) with an optional unit, at least 1 MiB;
 * -1 otherwise. */
static int64_t parse_memory_option(const char *s)
{
    const char *p = s;
    while (*p >= '0' && *p <= '9')
        p++;
    if (p == s)
        return -1;
    if (*p == '.') {
        const char *frac = ++p;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == frac)
            return -1;
    }
    while (*p == ' ')
        p++;
    if (*p && !((*p | 32) >= 'a' && (*p | 32) <= 'z'))   /* a unit, or nothing */
        return -1;
    int64_t bytes = nf_parse_size(s);
    return bytes >= (int64_t)1 << 20 ? bytes : -1;
}

/* --threads: digits only ("4", not " 4" or "+4"). */
static bool parse_threads_option(const char *s, int64_t *out)
{
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return *s && nf_parse_int64(s, out);
}

struct cli_opts {
    const char *pipeline;
    struct nf_overrides ov;
    bool json, quiet, markdown, explain;
    const char *cache_path;
    bool no_cache, strict_cache;
    int executor;             /* --executor: -1 not given, 0 local, 1 slurm */
    bool detach;              /* --detach (run on SLURM) */
    bool task;                /* the hidden `task` command: its options below */
    const char *task_hash, *task_node, *task_units;
    long task_index;
};

/* Parse options shared by run/plan/validate/status/task. Returns 0 or an
 * exit status. */
static int parse_run_opts(int argc, char **argv, struct cli_opts *o, bool task)
{
    memset(o, 0, sizeof *o);
    o->task = task;
    o->executor = -1;
    o->task_index = -1;
    o->ov.device = -1;
    o->ov.memory = -1;
    o->ov.threads = -1;
    o->ov.set = nf_calloc((size_t)argc + 1, sizeof(char *));
    if (!o->ov.set) {
        struct nf_error err = { 0 };
        NF_FAIL(&err, NF_ENOMEM, "out of memory");
        return fail_with(&err);
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE() do { if (!val) return usage_error("option '%s' needs a value", a); i++; } while (0)
        if (strcmp(a, "--set") == 0) {
            NEED_VALUE();
            o->ov.set[o->ov.n_set++] = argv[i];
        } else if (strncmp(a, "--set=", 6) == 0) {
            o->ov.set[o->ov.n_set++] = argv[i] + 6;
        } else if (strcmp(a, "--device") == 0) {
            NEED_VALUE();
            if (strcmp(val, "cpu") == 0) o->ov.device = NF_DEV_CPU;
            else if (strcmp(val, "gpu") == 0) o->ov.device = NF_DEV_GPU;
            else if (strcmp(val, "auto") == 0) o->ov.device = NF_DEV_AUTO;
            else return usage_error("--device must be cpu, gpu or auto (got '%s')", val);
        } else if (strcmp(a, "--memory") == 0) {
            NEED_VALUE();
            o->ov.memory = parse_memory_option(val);
            if (o->ov.memory <= 0)
                return usage_error("--memory must be a size of at least 1MiB such as 8GiB or 512MiB "
                                   "(got '%s')", val);
        } else if (strcmp(a, "--threads") == 0) {
            NEED_VALUE();
            int64_t t;
            if (!parse_threads_option(val, &t) || t < 0 || t > 4096)
                return usage_error("--threads must be an integer between 0 and 4096 (got '%s')", val);
            o->ov.threads = (int)t;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            o->quiet = true;
        } else if (strcmp(a, "--explain") == 0) {
            o->explain = true;
        } else if (strcmp(a, "--cache") == 0) {
            NEED_VALUE();
            o->cache_path = val;
        } else if (strcmp(a, "--no-cache") == 0) {
            o->no_cache = true;
        } else if (strcmp(a, "--strict-cache") == 0) {
            o->strict_cache = true;
        } else if (strcmp(a, "--executor") == 0) {
            NEED_VALUE();
            if (strcmp(val, "local") == 0) o->executor = 0;
            else if (strcmp(val, "slurm") == 0) o->executor = 1;
            else return usage_error("--executor must be local or slurm (got '%s')", val);
        } else if (strcmp(a, "--detach") == 0) {
            o->detach = true;
        } else if (strcmp(a, "--hash") == 0 && o->task) {
            NEED_VALUE();
            o->task_hash = val;
        } else if (strcmp(a, "--node") == 0 && o->task) {
            NEED_VALUE();
            o->task_node = val;
        } else if (strcmp(a, "--units") == 0 && o->task) {
            NEED_VALUE();
            o->task_units = val;
        } else if (strcmp(a, "--index") == 0 && o->task) {
            NEED_VALUE();
            int64_t ix;
            if (!parse_threads_option(val, &ix) || ix > 10000000)
                return usage_error("--index must be an array task index (got '%s'; is SLURM_ARRAY_TASK_ID set?)", val);
            o->task_index = (long)ix;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown option '%s'", a);
        } else if (!o->pipeline) {
            o->pipeline = a;
        } else {
            return usage_error("unexpected argument '%s' (one pipeline file at a time)", a);
        }
#undef NEED_VALUE
    }
    if (!o->pipeline)
        return usage_error("%s", "missing the pipeline file");
    if (o->task && (!o->task_hash || !o->task_node || !o->task_units || o->task_index < 0))
        return usage_error("%s", "task needs --hash, --node, --units and --index (it is run by SLURM jobs "
                           "that `nlflow run --executor slurm` submits)");
    return 0;
}

enum stop_after { STOP_VALIDATE, STOP_PLAN, STOP_RUN, STOP_STATUS, STOP_TASK };

/* The cache file of a run: --cache, else settings.cache beside the pipeline;
 * NULL when disabled (--no-cache, cache: off). Owned. */
static char *cache_file(const struct nf_pipeline *p, const struct cli_opts *o)
{
    if (o->no_cache || (!o->cache_path && strcmp(p->settings.cache, "off") == 0))
        return NULL;
    return o->cache_path ? nf_strdup(o->cache_path) : nf_path_join(p->dir, p->settings.cache);
}

/* Open the cache for a run. A cache that cannot be used is a warning (the run
 * goes on without it) unless --strict-cache; a cache on a network file system
 * is refused. Returns 0, or -1 with *status set. */
static int open_cache(const struct nf_pipeline *p, const struct cli_opts *o, struct nf_cache **out,
                      int *status)
{
    struct nf_error err = { 0 };
    char *path = cache_file(p, o);
    *out = NULL;
    if (!path)
        return 0;
    struct nf_cache_opts co = { .strict = o->strict_cache, .interrupt = &nf_interrupted };
    int rc = nf_cache_open(path, &co, out, &err);
    free(path);
    if (rc == 0)
        return 0;
    if (o->strict_cache || err.code == NF_EINVAL || err.code == NF_EUSAGE) {
        *status = fail_with(&err);
        return -1;
    }
    char buf[1200];
    nf_error_format(&err, buf, sizeof buf);
    nf_warn(NULL, "%s; running without the cache", buf);
    return 0;
}

/* plan --explain: per node, cached / will run / stale and why. */
static int explain(const struct nf_pipeline *p, const struct cli_opts *o, FILE *out)
{
    struct nf_error err = { 0 };
    struct nf_cache *cache = NULL;
    char *path = cache_file(p, o);
    struct nf_node_keys *keys = nf_calloc(p->n_nodes + 1, sizeof *keys);
    int status = 0;
    if (!keys) {
        free(path);
        NF_FAIL(&err, NF_ENOMEM, "out of memory");
        return fail_with(&err);
    }
    if (path && access(path, F_OK) == 0) {
        struct nf_cache_opts co = { 0 };
        if (nf_cache_open(path, &co, &cache, &err) < 0) {
            status = fail_with(&err);
            goto done;
        }
    }
    if (nf_keys_plan(p, cache, keys, &err) < 0) {
        status = fail_with(&err);
        goto done;
    }
    fprintf(out, "\ncache: %s\n", cache ? nf_cache_path(cache) : path ? "(none yet: every node will run)" : "(disabled)");
    nf_explain_print(p, cache, keys, out);
done:
    for (size_t i = 0; i < p->n_nodes; i++)
        nf_node_keys_release(&keys[i]);
    free(keys);
    nf_cache_close(cache);
    free(path);
    return status;
}

/* plan --executor slurm: the job arrays a run would submit. */
static int plan_slurm(struct nf_pipeline *p, const struct cli_opts *o, FILE *out)
{
    struct nf_error err = { 0 };
    struct nf_cache *cache = NULL;
    char *path = cache_file(p, o);
    int status = 0;
    if (path && access(path, F_OK) == 0) {
        struct nf_cache_opts co = { 0 };
        if (nf_cache_open(path, &co, &cache, &err) < 0) {
            free(path);
            return fail_with(&err);
        }
    }
    if (nf_slurm_plan_print(p, cache, out, &err) < 0)
        status = fail_with(&err);
    nf_cache_close(cache);
    free(path);
    return status;
}

/* --json: the first event of a command. */
static void run_start_event(const struct cli_opts *o, const struct nf_pipeline *p, enum stop_after stop)
{
    struct nf_strbuf sb;
    nf_event_begin(&sb, "run_start");
    if (!nf_events_json)
        return;
    nf_strbuf_addf(&sb, ",\"command\":\"%s\",\"pipeline\":",
                   stop == STOP_RUN ? "run" : stop == STOP_PLAN ? "plan" : "validate");
    nf_strbuf_add_json_str(&sb, o->pipeline);
    if (p) {
        nf_strbuf_addf(&sb, ",\"name\":");
        nf_strbuf_add_json_str(&sb, p->name);
        nf_strbuf_addf(&sb, ",\"pipeline_hash\":\"%s\",\"nodes\":%zu", p->hash, p->n_nodes);
    } else {
        nf_strbuf_addf(&sb, ",\"name\":null,\"pipeline_hash\":null,\"nodes\":null");
    }
    nf_strbuf_addf(&sb, ",\"nlflow_version\":\"%s\",\"nlflow_commit\":\"%s\"", NF_VERSION, NF_GIT_COMMIT);
    nf_event_end(&sb);
}

/* --json: the last event of a command. */
static void run_end_event(int status, double seconds, const struct nf_pipeline *p, bool wrote)
{
    struct nf_strbuf sb;
    nf_event_begin(&sb, "run_end");
    if (!nf_events_json)
        return;
    nf_strbuf_addf(&sb, ",\"status\":%d,\"seconds\":%.6f,\"interrupted\":%s,\"outputs\":", status, seconds,
                   status == 130 ? "true" : "false");
    if (p && wrote)
        nf_strbuf_add_json_str(&sb, p->outputs_dir);
    else
        nf_strbuf_addf(&sb, "null");
    nf_event_end(&sb);
}

static int run_pipeline(struct cli_opts *o, enum stop_after stop)
{
    struct nf_diags d;
    struct nf_error err = { 0 };
    struct nf_cache *cache = NULL;
    int status = 0;
    const char *phase = "validate";
    bool wrote = false;
    size_t warned = 0;   /* warnings already sent as events */
    double t0 = nf_now();
    /* with --json, stdout holds only events: the text of validate/plan goes to stderr */
    FILE *text = o->json ? stderr : stdout;
    nf_diags_init(&d);
    nf_log_quiet = o->quiet;
    nf_events_start(o->json);
    long failures_before = nf_alloc_failures();
    struct nf_pipeline *p = nf_pipeline_load(o->pipeline, &o->ov, &d);
    run_start_event(o, p, stop);
    if (!p)
        goto invalid;
    /* Shapes come from file headers only: validate runs them too, so that every
     * check that needs no voxel data (files, globs, grids, columns, row counts,
     * references between parameters and inputs) is part of `validate`. */
    if (nf_resolve_shapes(p, &d) < 0)
        goto invalid;
    nf_event_diags(&d, 0, phase);   /* its warnings (printed on stderr below) */
    warned = d.n_warnings;
    if (stop == STOP_VALIDATE) {
        nf_diags_print(&d);
        fprintf(text, "%s: valid (%zu node%s)\n", o->pipeline, p->n_nodes, p->n_nodes == 1 ? "" : "s");
        goto done;
    }
    phase = "plan";
    char why[256];
    bool gpu = nf_cuda_available(why, sizeof why);
    if (nf_place(p, gpu, &d) < 0 || nf_plan_memory(p, &d) < 0)
        goto invalid;
    nf_diags_print(&d);   /* warnings */
    nf_event_diags(&d, warned, phase);
    nf_diags_release(&d);
    nf_diags_init(&d);
    bool slurm = o->executor >= 0 ? o->executor == 1 : p->settings.executor.slurm;
    if (stop == STOP_PLAN) {
        nf_plan_print(p, text);
        if (o->explain)
            status = explain(p, o, text);
        if (slurm && status == 0)
            status = plan_slurm(p, o, text);
        goto done;
    }
    if (stop == STOP_TASK) {
        nf_interrupt_install();
        struct nf_slurm_task_opts to = { o->task_hash, o->task_node, o->task_units, o->task_index,
                                         p->settings.threads };
        int rc = nf_slurm_task(p, &to, &err);
        if (rc < 0) {
            nf_error_print(&err);
            status = nf_err_exit_status(rc);
        }
        goto done;
    }
    phase = "run";
    if (open_cache(p, o, &cache, &status) < 0)
        goto done;
    int threads = p->settings.threads > 0 ? p->settings.threads : nf_cpu_count();
    struct nf_exec_opts eo = { .threads = threads, .json = o->json,
                               .cache = cache, .cache_strict = o->strict_cache };
    for (size_t i = 0; i < p->n_nodes; i++)
        wrote |= (p->nodes[i].type->flags & NF_NODE_SINK) != 0;
    t0 = nf_now();
    /* what a run killed with SIGKILL could not clean up */
    nf_sweep_temporaries(p->outputs_dir);
    /* caught until the process ends, so that a second Ctrl-C while the cache
     * closes still says what it does */
    nf_interrupt_install();
    int rc;
    if (slurm || stop == STOP_STATUS) {
        char *exe = nf_realpath("/proc/self/exe");
        struct nf_slurm_opts so = { exe ? exe : "nlflow", o->ov.set, o->ov.n_set, o->detach,
                                    stop == STOP_STATUS, &eo };
        if (!cache) {
            NF_FAIL(&err, NF_EUSAGE, "the SLURM executor (and `nlflow status`) needs the result cache: "
                    "drop --no-cache / `cache: off`, or run with --executor local");
            rc = NF_EUSAGE;
        } else {
            rc = nf_slurm_run(p, &so, &err);
        }
        free(exe);
        wrote = wrote && !o->detach && stop != STOP_STATUS;
    } else {
        rc = nf_execute(p, &eo, &err);
    }
    if (rc == 0 && stop == STOP_STATUS)
        goto done;
    if (rc < 0 && stop != STOP_STATUS && !(slurm && o->detach)) {
        /* what the outputs folder holds is an earlier run's: its summaries say so */
        struct nf_error why = err;
        if (rc == NF_EINTR)
            snprintf(why.msg, sizeof why.msg, "interrupted (%s)", nf_interrupt_signal_name());
        nf_outputs_mark_failed(p->outputs_dir, &why);
    }
    if (rc == NF_EINTR) {
        fprintf(stderr, "nlflow: interrupted (%s) after %.2f s; nothing partial was stored as a result; "
                "rerun to resume\n", nf_interrupt_signal_name(), nf_now() - t0);
        nf_event_error(&err, phase);
        status = nf_err_exit_status(rc);
        wrote = false;
        goto done;
    }
    if (rc < 0) {
        nf_error_print(&err);
        nf_event_error(&err, phase);
        status = nf_err_exit_status(rc);
        wrote = false;
        goto done;
    }
    if (slurm && o->detach)
        ;   /* the coordinator said what is in flight */
    else if (wrote)
        nf_log("nlflow: done in %.2f s; results are in %s/", nf_now() - t0, p->outputs_dir);
    else
        nf_log("nlflow: done in %.2f s", nf_now() - t0);
    goto done;
invalid:
    if (nf_alloc_failures() != failures_before) {
        /* what was found after an allocation failed may be its echo (a
           column list that could not be copied): one honest error instead */
        nf_diags_release(&d);
        nf_diags_init(&d);
        NF_DIAG(&d, NF_ENOMEM, NULL, NULL, "out of memory (while checking the pipeline: %s)", phase);
    }
    status = nf_diags_print(&d);
    nf_event_diags(&d, warned, phase);
    /* Everything found before execution is a problem of the pipeline as
     * written (or of its settings): exit 2, nothing was computed; out of
     * memory is not the pipeline's fault (exit 1). */
    status = nf_err_exit_status(status == NF_ENOMEM ? NF_ENOMEM : NF_EINVAL);
done:
    nf_cache_close(cache);
    run_end_event(status, nf_now() - t0, p, wrote && status == 0);
    nf_diags_release(&d);
    nf_pipeline_free(p);
    return status;
}

static int cmd_nodes(int argc, char **argv)
{
    bool markdown = false;
    const char *name = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--markdown") == 0)
            markdown = true;
        else if (argv[i][0] == '-')
            return usage_error("unknown option '%s'", argv[i]);
        else
            name = argv[i];
    }
    if (name) {
        const struct nf_node_type *t = nf_node_type_find(name);
        if (!t) {
            char hint[160];
            nf_node_type_suggest(name, hint, sizeof hint);
            return usage_error("unknown node type '%s' (%ssee 'nlflow nodes')", name, hint);
        }
        if (markdown)
            nf_gen_node_markdown(t, stdout);
        else
            nf_gen_node_help(t, stdout);
        return 0;
    }
    for (size_t i = 0; nf_node_types[i]; i++)
        printf("%-12s %s\n", nf_node_types[i]->name, nf_node_types[i]->summary);
    return 0;
}

static void cpu_model(char *buf, size_t size)
{
    snprintf(buf, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                colon++;
                while (*colon == ' ')
                    colon++;
                colon[strcspn(colon, "\n")] = '\0';
                snprintf(buf, size, "%s", colon);
            }
            break;
        }
    if (f)
        fclose(f);
}

/* The placement rates in use (calibrated or default), and --calibrate: measure
 * them and store them for `device: auto` (cost.h). */
static int devices_rates(bool calibrate)
{
    struct nf_rates r;
    struct nf_error err = { 0 };
    char *path = nf_rates_path();
    int status = 0, loaded = nf_rates_load(path, &r, &err);
    if (loaded < 0) {
        nf_error_print(&err);
        memset(&err, 0, sizeof err);
    }
    bool known = !calibrate && nf_cuda_available(NULL, 0) && nf_rates_this_gpu(&r);
    if (calibrate) {
        double gflops, hbm, pcie, setup;
        fprintf(stderr, "nlflow: measuring the CPU (SGEMM 2048^3, a 256 MiB copy) ...\n");
        nf_calibrate_cpu(&r);
        fprintf(stderr, "nlflow: measuring the GPU ...\n");
        if (nf_cuda_calibrate(&gflops, &hbm, &pcie, &setup, &err) == 0) {
            r.gpu_gflops = gflops;
            r.gpu_gbs = hbm;
            if (pcie > 0)
                r.pcie_gbs = pcie;
            if (setup > 0)
                r.gpu_setup_s = setup;
            r.gpu_measured = true;
        } else {
            printf("gpu rates: not measured (%s)\n", err.msg);
        }
        if (nf_rates_save(path, &r, &err) < 0) {
            status = fail_with(&err);
        } else {
            printf("rates stored in %s\n", path);
        }
    }
    printf("placement rates (%s): cpu %.1f GFLOP/s, %.1f GB/s; gpu %.0f GFLOP/s, %.0f GB/s, PCIe %.1f GB/s, "
           "setup %.2f s\n",
           r.cpu_measured && r.gpu_measured ? "calibrated"
           : r.cpu_measured  ? (known ? "cpu calibrated, gpu as measured on this model" : "cpu calibrated, gpu defaults")
           : r.gpu_measured  ? "gpu calibrated, cpu defaults"
           : known           ? "gpu as measured on this model, cpu defaults; see --calibrate"
                             : "defaults; see --calibrate",
           r.cpu_gflops, r.cpu_gbs, r.gpu_gflops, r.gpu_gbs, r.pcie_gbs, r.gpu_setup_s);
    free(path);
    return status;
}

static int cmd_devices(int argc, char **argv)
{
    char cpu[256], why[512], mem[32];
    bool calibrate = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--calibrate") == 0)
            calibrate = true;
        else
            return usage_error("unknown devices option '%s'", argv[i]);
    }
    cpu_model(cpu, sizeof cpu);
    nf_format_size(nf_physical_memory(), mem, sizeof mem);
    printf("cpu: %s, %d cores online, %s memory\n", cpu, nf_cpu_count(), mem);
    printf("blas: %s\n", nf_blas_name());
    printf("blas kernel: %s (threads %d)\n", nf_blas_core(), nf_blas_threads());
    const char *ct = getenv("OPENBLAS_CORETYPE"), *l2 = getenv("OPENBLAS_L2_SIZE");
    printf("environment: OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s\n", ct ? ct : "(unset)", l2 ? l2 : "(unset)");
    if (nf_cuda_available(why, sizeof why)) {
        char desc[512];
        nf_cuda_describe(desc, sizeof desc);
        printf("gpu: %s\n", desc);
    } else {
        printf("gpu: none (%s)\n", why);
    }
    return devices_rates(calibrate);
}

/* `nlflow simulate`: a one-node pipeline written to a temporary file, so that
 * the options go through exactly the validation a pipeline file gets. */
static int cmd_simulate(int argc, char **argv)
{
    static const struct { const char *opt, *param; } map[] = {
        { "--subjects", "subjects" }, { "--images", "images" }, { "--features", "features" },
        { "--seed", "seed" }, { "--voxel-size", "voxel_size" }, { "--mask", "mask" },
        { "--effect-size", "effect_size" }, { "--noise", "noise" }, { "--runs", "runs" },
    };
    /* --bids: a task data set for first-level pipelines, small enough for tests;
     * options given on the command line win over these */
    static const struct { const char *param, *value; } bids_defaults[] = {
        { "subjects", "4" }, { "images", "80" }, { "voxel_size", "3" }, { "mask", "synthetic" },
        { "roi_center", "[15, -20, 10]" }, { "roi_radius", "9" }, { "effect_size", "2" },
    };
    bool given[sizeof map / sizeof map[0]] = { false };
    const char *bids = NULL;
    bool force = false;
    struct nf_strbuf sb;
    struct nf_error err = { 0 };
    const char *out = NULL;
    int status = 0;
    char tmpl[] = "/tmp/nlflow-simulate-XXXXXX";
    char *yaml = NULL, *abs_out = NULL;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "nlflow: 1\nname: simulate\nnodes:\n  simulate:\n    type: simulate\n");
    for (int i = 0; i < argc; i++) {
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--out") == 0 && val) {
            out = val;
            i++;
            continue;
        }
        if (strcmp(argv[i], "--bids") == 0 && val) {
            bids = val;
            i++;
            continue;
        }
        if (strcmp(argv[i], "--force") == 0) {
            force = true;
            continue;
        }
        bool found = false;
        for (size_t k = 0; k < sizeof map / sizeof map[0] && !found; k++)
            if (strcmp(argv[i], map[k].opt) == 0) {
                if (!val)
                    return usage_error("option '%s' needs a value", argv[i]);
                double num;
                nf_strbuf_addf(&sb, "    %s: ", map[k].param);
                if (nf_parse_double(val, &num))
                    nf_strbuf_addf(&sb, "%s\n", val);   /* plain: typed by the table */
                else {
                    nf_strbuf_add_json_str(&sb, val);  /* JSON strings are YAML strings */
                    nf_strbuf_addf(&sb, "\n");
                }
                found = true;
                given[k] = true;
                i++;
            }
        if (!found) {
            nf_strbuf_release(&sb);
            return usage_error("unknown simulate option '%s'", argv[i]);
        }
    }
    if (!out == !bids) {
        nf_strbuf_release(&sb);
        return usage_error("%s", bids ? "simulate takes --out DIR or --bids DIR, not both"
                                      : "simulate needs --out DIR (or --bids DIR)");
    }
    if (bids) {
        for (size_t d = 0; d < sizeof bids_defaults / sizeof bids_defaults[0]; d++) {
            bool set = false;
            for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
                set |= given[k] && strcmp(map[k].param, bids_defaults[d].param) == 0;
            if (!set)
                nf_strbuf_addf(&sb, "    %s: %s\n", bids_defaults[d].param, bids_defaults[d].value);
        }
        out = bids;
    }
    if (!force) {   /* someone's data: not a byte of it is written */
        char *found = NULL;
        int rc = nf_folder_is_ours(out, NF_SIMULATE_MARKER, &found, &err);
        if (rc == 0) {
            fprintf(stderr, "nlflow: simulate: '%s' is not empty (it holds '%s') and nlflow simulate did not make "
                    "it (no %s in it): nothing was written. Choose a new or empty folder, or add --force to "
                    "write into this one anyway\n", out, found, NF_SIMULATE_MARKER);
            free(found);
            nf_strbuf_release(&sb);
            return 2;
        }
        if (rc < 0) {
            nf_strbuf_release(&sb);
            return fail_with(&err);
        }
    } else {
        nf_strbuf_addf(&sb, "    overwrite: true\n");
    }
    if (nf_mkdirs(out, &err) < 0) {
        status = fail_with(&err);
        goto fail;
    }
    abs_out = nf_realpath(out);
    if (!abs_out) {
        NF_FAIL(&err, NF_EIO, "cannot resolve '%s': %s", out, strerror(errno));
        status = fail_with(&err);
        goto fail;
    }
    nf_strbuf_addf(&sb, bids ? "    bids: " : "    write: ");
    nf_strbuf_add_json_str(&sb, abs_out);
    nf_strbuf_addf(&sb, "\n");
    int fd = mkstemp(tmpl);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        NF_FAIL(&err, NF_EIO, "cannot write '%s': %s", tmpl, strerror(errno));
        status = fail_with(&err);
        if (fd >= 0) {
            close(fd);
            unlink(tmpl);
        }
        goto fail;
    }
    fputs(sb.buf, f);
    fclose(f);
    yaml = tmpl;
    {
        struct cli_opts o;
        char *args[] = { yaml };
        if ((status = parse_run_opts(1, args, &o, false)) != 0)
            goto fail;
        status = run_pipeline(&o, STOP_RUN);
        free(o.ov.set);
        if (status == 0)
            printf("simulated data set written to %s\n", abs_out);
    }
fail:
    if (yaml)
        unlink(yaml);
    free(abs_out);
    nf_strbuf_release(&sb);
    return status;
}

/* `nlflow report RESULTS_DIR`: the report of a run made before, rebuilt from
 * its outputs folder by a generated pipeline (rebuild.c) that runs like any
 * other, without a cache; only a finished page is put in place. */
static int cmd_report(int argc, char **argv)
{
    struct nf_rebuild_opts ro = { 0 };
    struct nf_rebuild rb;
    struct nf_error err = { 0 };
    bool quiet = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        const char **dest = strcmp(a, "--output") == 0 ? &ro.output : strcmp(a, "--summary") == 0 ? &ro.summary
                            : strcmp(a, "--title") == 0 ? &ro.title : strcmp(a, "--threshold") == 0 ? &ro.threshold
                            : strcmp(a, "--template") == 0 ? &ro.template_path : NULL;
        if (dest) {
            if (!val)
                return usage_error("option '%s' needs a value", a);
            *dest = val;
            i++;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = true;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown report option '%s'", a);
        } else if (!ro.results) {
            ro.results = a;
        } else {
            return usage_error("unexpected argument '%s' (one results folder at a time)", a);
        }
    }
    double threshold;
    if (!ro.results)
        return usage_error("%s", "report needs the outputs folder of a run (nlflow report RESULTS_DIR)");
    if (ro.threshold && (!nf_parse_double(ro.threshold, &threshold) || !(threshold >= 0)))
        return usage_error("--threshold must be a number of at least 0 (got '%s')", ro.threshold);
    nf_log_quiet = quiet;
    if (nf_rebuild_prepare(&ro, &rb, &err) < 0) {
        nf_rebuild_release(&rb);
        return fail_with(&err);
    }
    struct cli_opts o;
    char *args[] = { rb.pipeline, "--no-cache", "--quiet" };   /* its progress is a detail: one line at the end */
    int status = parse_run_opts(3, args, &o, false);
    if (status == 0)
        status = run_pipeline(&o, STOP_RUN);
    free(o.ov.set);
    nf_log_quiet = quiet;
    if (status == 0 && nf_rebuild_finish(&rb, &err) < 0)
        status = fail_with(&err);
    nf_rebuild_release(&rb);
    return status;
}

static void print_bad(const char *key, const char *what, void *arg)
{
    (void)arg;
    printf("corrupt: %s: %s (removed; it will be recomputed)\n", key, what);
}

/* `nlflow init`: init.c finds what the dataset has; the text is formatted
 * (so it is canonical) and written to a file that did not exist. */
static int cmd_init(int argc, char **argv)
{
    struct nf_init_opts io = { 0 };
    const char *output = "pipeline.yaml";
    struct nf_error err = { 0 };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        const char **dest = strcmp(a, "--bids") == 0 ? &io.bids : strcmp(a, "--derivatives") == 0 ? &io.derivatives
                            : strcmp(a, "--template") == 0 ? &io.template_name
                            : strcmp(a, "--output") == 0 || strcmp(a, "-o") == 0 ? &output : NULL;
        if (!dest)
            return usage_error("unknown init option '%s' (init [--bids DIR] [--derivatives DIR] [--template NAME] "
                               "[--output FILE])", a);
        if (!val)
            return usage_error("option '%s' needs a value", a);
        *dest = val;
        i++;
    }
    if (io.template_name && (strchr(io.template_name, '/') || !io.template_name[0]))
        return usage_error("--template takes a template's name (first-level), not a path (got '%s')",
                           io.template_name);
    bool to_stdout = strcmp(output, "-") == 0;
    if (!to_stdout && access(output, F_OK) == 0)
        return usage_error("'%s' exists: nlflow init does not replace files (--output FILE)", output);
    {   /* the templates the file will use must be found from where it is written */
        const char *names[] = { io.template_name ? io.template_name : "first-level", "group" };
        for (size_t t = 0; t < sizeof names / sizeof *names; t++) {
            char *rel = nf_asprintf("templates/%s.yaml", names[t]), *looked = NULL;
            char *found = rel ? nf_use_find(to_stdout ? "./pipeline.yaml" : output, rel, &looked) : NULL;
            if (rel && !found) {
                int st = usage_error("--template %s: no %s beside %s, on NLFLOW_PATH or among nlflow's own "
                                     "templates (looked in %s)", names[t], rel, to_stdout ? "." : output,
                                     looked ? looked : ".");
                free(rel);
                free(looked);
                return st;
            }
            free(rel);
            free(looked);
            free(found);
        }
    }
    char *text = NULL, *canon = NULL;
    if (nf_init_pipeline(&io, &text, &err) < 0 ||
        nf_pipeline_format(text, strlen(text), output, &canon, &err) < 0) {
        free(text);
        return fail_with(&err);
    }
    free(text);
    int status = 0;
    if (to_stdout)
        fputs(canon, stdout);
    else if (nf_write_file_atomic(output, canon, strlen(canon), &err) < 0)
        status = fail_with(&err);
    else
        nf_log("wrote %s: check it with `nlflow plan %s`", output, output);
    free(canon);
    return status;
}

/* fmt's rewrite: into the file a link points at (the link stays a link),
 * with the file's mode and owner, atomically. */
static int rewrite_in_place(const char *path, const char *text, struct nf_error *err)
{
    char *target = nf_realpath(path);
    struct stat st;
    int rc;
    if (!target)
        rc = NF_FAIL(err, NF_EIO, "cannot resolve '%s': %s", path, strerror(errno));
    else if (stat(target, &st) != 0 || !S_ISREG(st.st_mode))
        rc = NF_FAIL(err, NF_EIO, "'%s' is not a regular file: fmt rewrites only pipeline files", path);
    else
        rc = nf_rewrite_file_atomic(target, text, strlen(text), &st, err);
    free(target);
    return rc;
}

/* `nlflow fmt [--check] FILE...`: canonical form (engine/lang/fmt.c). A file
 * is replaced atomically and only when its text changes; with --check nothing
 * is written and the files that would change are listed (exit 1). */
static int cmd_fmt(int argc, char **argv)
{
    bool check = false;
    int n_files = 0, status = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0)
            check = true;
        else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("unknown fmt option '%s' (fmt [--check] PIPELINE.yaml...)", argv[i]);
        else
            n_files++;
    }
    if (n_files == 0)
        return usage_error("%s", "fmt needs pipeline files (nlflow fmt [--check] PIPELINE.yaml...)");
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0)
            continue;
        struct nf_error err = { 0 };
        size_t len = 0;
        char *text = nf_read_text_file(argv[i], NF_PIPELINE_FILE_MAX, "pipeline file", &len, &err), *canon = NULL;
        if (!text || nf_pipeline_format(text, len, argv[i], &canon, &err) < 0) {
            if (!text)
                err.code = NF_EUSAGE;
            int st = fail_with(&err);
            status = status ? status : st;
        } else if (strlen(canon) != len || memcmp(canon, text, len) != 0) {
            if (check) {
                printf("%s: not in canonical form (nlflow fmt %s)\n", argv[i], argv[i]);
                status = status ? status : 1;
            } else if (rewrite_in_place(argv[i], canon, &err) < 0) {
                int st = fail_with(&err);
                status = status ? status : st;
            } else {
                nf_log("formatted %s", argv[i]);
            }
        }
        free(text);
        free(canon);
    }
    return status;
}

/* nlflow cache ls|info|verify|gc */
static int cmd_cache(int argc, char **argv)
{
    const char *path = ".nlflow/cache.db", *action = NULL, *pipeline = NULL;
    bool all = false, path_given = false;
    int64_t max_size = 0;
    double older = -1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--cache") == 0 && val) {
            path = val;
            path_given = true;
            i++;
        } else if (strcmp(a, "--pipeline") == 0 && val) {
            pipeline = val;
            i++;
        } else if (strcmp(a, "--all") == 0) {
            all = true;
        } else if (strcmp(a, "--max-size") == 0 && val) {
            max_size = nf_parse_size(val);
            if (max_size < 0)
                return usage_error("--max-size must be a size such as 20GiB (got '%s')", val);
            i++;
        } else if (strcmp(a, "--older-than") == 0 && val) {
            if (!nf_parse_double(val, &older) || older < 0)
                return usage_error("--older-than must be a number of days (got '%s')", val);
            i++;
        } else if (a[0] == '-') {
            return usage_error("unknown or incomplete cache option '%s'", a);
        } else if (!action) {
            action = a;
        } else {
            return usage_error("unexpected argument '%s'", a);
        }
    }
    if (!action || (strcmp(action, "ls") && strcmp(action, "info") && strcmp(action, "verify") &&
                    strcmp(action, "gc") && strcmp(action, "repair")))
        return usage_error("cache needs one of ls, info, verify, gc, repair (got '%s')",
                           action ? action : "nothing");
    if ((pipeline || all) && strcmp(action, "ls") != 0)
        return usage_error("%s", "--pipeline and --all are options of 'cache ls'");
    /* ls --pipeline FILE: that pipeline's results, in the cache beside it
     * unless --cache says otherwise */
    char *pipeline_abs = NULL, *beside = NULL;
    if (pipeline) {
        if (!(pipeline_abs = nf_realpath(pipeline))) {
            struct nf_error err = { 0 };
            NF_FAIL(&err, NF_EIO, "cannot find pipeline '%s': %s", pipeline, strerror(errno));
            return fail_with(&err);
        }
        if (!path_given) {
            char *dir = nf_path_dirname(pipeline_abs);
            beside = dir ? nf_path_join(dir, ".nlflow/cache.db") : NULL;
            free(dir);
            if (beside)
                path = beside;
        }
    }
    struct nf_error err = { 0 };
    struct nf_cache *c = NULL;
    struct nf_cache_opts co = { 0 };
    int status = 0;
    if (access(path, F_OK) != 0) {
        NF_FAIL(&err, NF_EIO, "no cache at '%s' (use --cache PATH)", path);
        free(pipeline_abs);
        free(beside);
        return fail_with(&err);
    }
    if (strcmp(action, "repair") == 0) {   /* the file may not even open */
        uint64_t kept = 0, lost = 0;
        if (nf_cache_repair(path, print_bad, NULL, &kept, &lost, &err) < 0)
            goto fail;
        printf("repair: kept %llu result%s, lost %llu\n", (unsigned long long)kept,
               kept == 1 ? "" : "s", (unsigned long long)lost);
    } else if (nf_cache_open(path, &co, &c, &err) < 0) {
        goto fail;
    } else if (strcmp(action, "ls") == 0) {
        struct nf_cache_ls_opts lo = { .pipeline_path = pipeline_abs, .all = all };
        if (nf_cache_ls_print(c, &lo, stdout, &err) < 0)
            goto fail;
    } else if (strcmp(action, "gc") == 0 && max_size == 0 && older < 0) {
        if (nf_cache_gc_explain(c, stdout, &err) < 0)
            goto fail;
    } else if (strcmp(action, "info") == 0) {
        struct nf_cache_info info;
        char a[32], b[32], f[32];
        if (nf_cache_info(c, &info, &err) < 0)
            goto fail;
        nf_format_size(info.bytes, a, sizeof a);
        nf_format_size(info.stored, b, sizeof b);
        nf_format_size(info.file_bytes, f, sizeof f);
        printf("cache: %s (format %d)\n", nf_cache_path(c), info.format);
        printf("results: %llu (%s of data stored as %s, ratio %.2f)\n", (unsigned long long)info.n_results,
               a, b, info.stored ? (double)info.bytes / (double)info.stored : 0.0);
        printf("chunks: %llu, checkpoint chunks: %llu, file hashes: %llu, leases: %llu\n",
               (unsigned long long)info.n_chunks, (unsigned long long)info.n_ckpt_chunks,
               (unsigned long long)info.n_files, (unsigned long long)info.n_leases);
        printf("size on disk: %s\n", f);
    } else if (strcmp(action, "verify") == 0) {
        uint64_t bad = 0;
        if (nf_cache_verify(c, print_bad, NULL, &bad, &err) < 0)
            goto fail;
        printf("%s: %llu corrupt result%s\n", bad ? "verify found problems" : "verify: clean",
               (unsigned long long)bad, bad == 1 ? "" : "s");
        status = bad ? 1 : 0;
    } else {
        uint64_t n = 0, freed = 0;
        char f[32];
        if (nf_cache_gc(c, (uint64_t)max_size, older, NULL, &n, &freed, &err) < 0)
            goto fail;
        nf_format_size(freed, f, sizeof f);
        printf("gc: removed %llu result%s, freed %s\n", (unsigned long long)n, n == 1 ? "" : "s", f);
    }
    nf_cache_close(c);
    free(pipeline_abs);
    free(beside);
    return status;
fail:
    status = fail_with(&err);
    nf_cache_close(c);
    free(pipeline_abs);
    free(beside);
    return status;
}

int main(int argc, char **argv)
{
    /* Big buffers (subjects, matrices) are mmapped and given back to the
     * system when freed; glibc's default raises this threshold after the first
     * large free, after which a streamed run's freed subjects stay resident. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    nf_alloc_init();   /* NLFLOW_FAIL_ALLOC and SQLite's allocator, once */
    nf_blas_quiesce();
    if (argc < 2) {
        fputs(usage_text, stderr);
        return nf_err_exit_status(NF_EUSAGE);
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("nlflow %s (commit %s)\n", NF_VERSION, NF_GIT_COMMIT);
        return 0;
    }
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "plan") == 0 || strcmp(cmd, "validate") == 0 ||
        strcmp(cmd, "status") == 0 || strcmp(cmd, "task") == 0) {
        struct cli_opts o;
        bool task = strcmp(cmd, "task") == 0;
        int st = parse_run_opts(argc - 2, argv + 2, &o, task);
        if (st == 0)
            st = run_pipeline(&o, task ? STOP_TASK : cmd[0] == 'r' ? STOP_RUN : cmd[0] == 'p' ? STOP_PLAN
                                  : cmd[1] == 't' ? STOP_STATUS : STOP_VALIDATE);
        free(o.ov.set);
        return st;
    }
    if (strcmp(cmd, "init") == 0)
        return cmd_init(argc - 2, argv + 2);
    if (strcmp(cmd, "fmt") == 0)
        return cmd_fmt(argc - 2, argv + 2);
    if (strcmp(cmd, "nodes") == 0)
        return cmd_nodes(argc - 2, argv + 2);
    if (strcmp(cmd, "schema") == 0) {
        nf_gen_schema(stdout);
        return 0;
    }
    if (strcmp(cmd, "gen-docs") == 0) {
        if (argc < 3)
            return usage_error("%s", "gen-docs needs the project root folder");
        struct nf_error err = { 0 };
        return nf_gen_all(argv[2], &err) < 0 ? fail_with(&err) : 0;
    }
    if (strcmp(cmd, "devices") == 0)
        return cmd_devices(argc - 2, argv + 2);
    if (strcmp(cmd, "cache") == 0)
        return cmd_cache(argc - 2, argv + 2);
    if (strcmp(cmd, "simulate") == 0)
        return cmd_simulate(argc - 2, argv + 2);
    if (strcmp(cmd, "report") == 0)
        return cmd_report(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0)
        return nf_bench_main(argc - 1, argv + 1);
    return usage_error("unknown command '%s'", cmd);
}
