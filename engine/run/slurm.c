/* slurm.c — the SLURM executor's coordinator: stages as job arrays, shards
 * arriving, resubmission, status and plan (slurm.h has the overview,
 * slurm_task.c the task side, docs/hpc.md the user's view).
 *
 * Which nodes go to SLURM: every node whose keys are known before running,
 * that is not a file reader (load: rereading is cheaper than a job), not a
 * sink (it writes into the outputs folder; sinks are keyed by the pipeline)
 * and has no sink before it. Everything else runs on the coordinator in the
 * final local run. A stage is one such node with runs not yet in the cache;
 * its units are its runs (items), or, for a node that reports checkpoint
 * chunks (node_type.chunks) and has one run, parts of that run (chunks
 * ordinal % parts == part). Units are packed min_task_seconds to a task.
 *
 * Files, all under <pipeline folder>/.nlflow/shards/<first 16 hex digits of
 * the pipeline hash>/: <node>/<unit>.shard (results), jobs/ (the units file
 * and batch script of each submission), logs/ (SLURM's output per task),
 * jobs.tsv (node, unit, job id, task: what is in flight, so that a later
 * `nlflow run` or `nlflow status` adopts detached jobs) and coordinator.lock.
 * The folder is removed once the run has written its outputs.
 *
 * Resubmission: a task that ends (squeue: any final state, or gone) without
 * its shards failed; its units are submitted again (up to `retries` times)
 * and every stage after it that still waits is cancelled and submitted again
 * behind the new array (its afterok dependency could never be met). A task
 * still pending with reason DependencyNeverSatisfied is treated the same way
 * without counting a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "slurm.h"
#include "events.h"
#include "cache/keys.h"
#include "cache/run_record.h"
#include "cache/shards.h"
#include "core/util.h"

/* ---- units and stages ---- */

enum unit_state { U_WAITING, U_SUBMITTED, U_DONE };

struct unit {
    char name[40];            /* "run", "item-00003", "part-0001-of-0008" */
    size_t run;               /* run index */
    int64_t part;             /* -1: the whole run */
    enum unit_state state;
    int failures;
    long job;                 /* array job of its current submission */
    long failed_job;          /* the array whose task failed it last (0: none): its afterok never holds */
    long task;                /* its index in that array */
    char log[64];             /* "logs/<node>.<n>-%A_%a.log" pattern of that submission */
};

struct stage {
    size_t node;
    struct unit *units;
    size_t n_units, n_done;
    size_t n_said;            /* n_done when progress was last logged */
    int64_t parts;            /* > 0: the units are parts of run 0 */
    size_t per_task;          /* units packed into one array task */
    double unit_s;            /* the cost model's seconds per unit (NAN: unknown) */
    uint64_t mem_mib;
    int cpus;
    char time[32];
    bool resubmit_all;        /* its waiting jobs must be cancelled and submitted again */
};

struct coord {
    struct nf_pipeline *p;
    const struct nf_slurm_opts *o;
    struct nf_cache *cache;
    struct nf_node_keys *keys;
    char *root;               /* the shard folder of this run */
    struct stage *stages;
    size_t n_stages;
    int *stage_of;            /* per node: its stage, or -1 */
    bool *local;              /* per node: runs on the coordinator */
    int lock_fd;
    unsigned submissions;
    long *broken;             /* arrays with a task that failed: their afterok can never hold */
    size_t n_broken;
    long max_cpus;            /* of the partition's nodes (0: unknown) */
    uint64_t max_mem_mib;
};

static bool coord_can_shard(const struct coord *c, size_t ni)
{
    return !c->local[ni];
}

/* Nodes that must stay on the coordinator: file readers, sinks, nodes after
 * a sink, nodes whose keys are only known at run time. */
static void mark_local(struct coord *c)
{
    struct nf_pipeline *p = c->p;
    for (size_t oi = 0; oi < p->n_nodes; oi++) {
        size_t ni = (size_t)p->order[oi];
        const struct nf_node_inst *node = &p->nodes[ni];
        bool local = !c->keys[ni].known || c->keys[ni].reads_files || (node->type->flags & NF_NODE_SINK);
        for (size_t e = 0; e < node->n_edges && !local; e++) {
            size_t src = (size_t)node->edges[e].src;
            local = c->local[src] && !c->keys[src].reads_files;
        }
        c->local[ni] = local;
    }
}

/* Is run r of node ni in the cache (and whole)? */
static bool run_cached(struct coord *c, size_t ni, size_t r)
{
    struct nf_error e = { 0 };
    return c->cache && nf_run_valid(c->cache, c->keys[ni].runs[r], c->p->outputs_dir, NULL, &e) == 1;
}

/* Which nodes will compute: walking back from the ends as the executor does. */
static void find_needed(struct coord *c, bool *needed)
{
    struct nf_pipeline *p = c->p;
    for (size_t oi = p->n_nodes; oi-- > 0;) {
        size_t ni = (size_t)p->order[oi];
        const struct nf_node_keys *k = &c->keys[ni];
        bool all = k->known && !k->reads_files && c->cache;
        for (size_t r = 0; all && r < k->n_runs; r++)
            all = run_cached(c, ni, r);
        bool terminal = true, wanted = false;
        for (size_t j = 0; j < p->n_nodes; j++)
            for (size_t e = 0; e < p->nodes[j].n_edges; e++)
                if ((size_t)p->nodes[j].edges[e].src == ni) {
                    terminal = false;
                    wanted |= needed[j];
                }
        needed[ni] = (terminal || wanted || (p->nodes[ni].type->flags & NF_NODE_SINK)) && !all;
    }
}

static void format_minutes(double seconds, char *out, size_t size)
{
    long m = (long)ceil(seconds / 60);
    snprintf(out, size, "%ld:%02ld:00", m / 60, m % 60);
}

/* Size a stage: units per task, memory, CPUs and time. */
static void size_stage(struct coord *c, struct stage *s)
{
    const struct nf_executor_settings *ex = &c->p->settings.executor;
    const struct nf_node_inst *node = &c->p->nodes[s->node];
    size_t n = s->n_units;
    s->per_task = 1;
    if (s->parts == 0 && isfinite(s->unit_s) && s->unit_s > 0 && ex->min_task_seconds > 0)
        s->per_task = (size_t)ceil(ex->min_task_seconds / s->unit_s);
    if (s->per_task < 1)
        s->per_task = 1;
    if (s->per_task > n)
        s->per_task = n ? n : 1;
    size_t max_tasks = (size_t)ex->max_array_tasks;
    if ((n + s->per_task - 1) / s->per_task > max_tasks)
        s->per_task = (n + max_tasks - 1) / max_tasks;
    /* memory: one run's inputs, outputs and work, what it reads of the
     * nodes before it, the process itself; a quarter on top */
    double bytes = (double)node->est_peak;
    for (size_t e = 0; e < node->n_edges; e++)
        bytes += (double)c->p->nodes[node->edges[e].src].est_out;
    uint64_t mib = (uint64_t)(bytes * 1.25 / (1 << 20)) + 256;
    if (c->max_mem_mib && mib > c->max_mem_mib)
        mib = c->max_mem_mib;
    s->mem_mib = mib;
    long cpus = ex->cpus_per_task > 0 ? (long)ex->cpus_per_task
                : node->mapped ? 1 : c->p->settings.threads > 0 ? c->p->settings.threads : 4;
    if (c->max_cpus > 0 && cpus > c->max_cpus)
        cpus = c->max_cpus;
    s->cpus = (int)cpus;
    if (ex->time) {
        snprintf(s->time, sizeof s->time, "%s", ex->time);
    } else {
        /* the estimate is for one core at calibrated rates: three times it
         * plus five minutes, at least ten */
        double est = isfinite(s->unit_s) ? s->unit_s * (double)s->per_task : 600;
        double t = 3 * est + 300;
        format_minutes(t < 600 ? 600 : t, s->time, sizeof s->time);
    }
}

/* The stages a run needs now: nodes that go to SLURM with runs not in the
 * cache. */
static int build_stages(struct coord *c, struct nf_error *err)
{
    struct nf_pipeline *p = c->p;
    bool *needed = nf_calloc(p->n_nodes + 1, sizeof *needed);
    c->stages = nf_calloc(p->n_nodes + 1, sizeof *c->stages);
    c->stage_of = nf_calloc(p->n_nodes + 1, sizeof *c->stage_of);
    c->local = nf_calloc(p->n_nodes + 1, sizeof *c->local);
    if (!needed || !c->stages || !c->stage_of || !c->local) {
        free(needed);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    mark_local(c);
    find_needed(c, needed);
    for (size_t oi = 0; oi < p->n_nodes; oi++) {
        size_t ni = (size_t)p->order[oi];
        c->stage_of[ni] = -1;
        if (!needed[ni] || !coord_can_shard(c, ni))
            continue;
        const struct nf_node_inst *node = &p->nodes[ni];
        const struct nf_node_keys *k = &c->keys[ni];
        struct stage *s = &c->stages[c->n_stages];
        s->node = ni;
        s->unit_s = node->est_cpu_s;
        bool splits = node->type->chunks && k->n_runs == 1 &&   /* one run (or one item) */
                      (node->device != NF_DEV_GPU || (node->type->flags & NF_NODE_GPU_PARTS));
        int64_t chunks = splits ? node->type->chunks(node->params, node->in_shape, node->out_shape) : 0;
        if (chunks > 1) {
            /* parts of one run: as many as the packing asks, each at least a chunk */
            double chunk_s = isfinite(node->est_cpu_s) ? node->est_cpu_s / (double)chunks : NAN;
            int64_t per = 1;
            if (isfinite(chunk_s) && chunk_s > 0 && p->settings.executor.min_task_seconds > 0)
                per = (int64_t)ceil(p->settings.executor.min_task_seconds / chunk_s);
            if (per < 1)
                per = 1;
            int64_t parts = (chunks + per - 1) / per;
            if (parts > p->settings.executor.max_array_tasks)
                parts = p->settings.executor.max_array_tasks;
            s->parts = parts > 1 ? parts : 0;
            if (s->parts)
                s->unit_s = isfinite(chunk_s) ? chunk_s * (double)((chunks + parts - 1) / parts) : NAN;
        }
        size_t n = s->parts ? (size_t)s->parts : k->n_runs;
        s->units = nf_calloc(n + 1, sizeof *s->units);
        if (!s->units) {
            free(needed);
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        }
        for (size_t u = 0; u < n; u++) {
            struct unit *un = &s->units[s->n_units];
            un->part = s->parts ? (int64_t)u : -1;
            un->run = s->parts ? 0 : u;
            if (!s->parts && run_cached(c, ni, u))
                continue;
            if (s->parts)
                snprintf(un->name, sizeof un->name, "part-%04" PRId64 "-of-%04" PRId64, (int64_t)u, s->parts);
            else if (k->mapped)
                snprintf(un->name, sizeof un->name, "item-%05zu", u);
            else
                snprintf(un->name, sizeof un->name, "run");
            s->n_units++;
        }
        if (s->n_units == 0) {
            free(s->units);
            memset(s, 0, sizeof *s);
            continue;
        }
        size_stage(c, s);
        c->stage_of[ni] = (int)c->n_stages++;
    }
    free(needed);
    return 0;
}

static void stages_release(struct coord *c)
{
    for (size_t i = 0; c->stages && i < c->n_stages; i++)
        free(c->stages[i].units);
    free(c->stages);
    free(c->stage_of);
    free(c->local);
}

/* Is stage `up` before stage `down` (through any nodes)? */
static bool stage_before(const struct coord *c, size_t up_node, size_t down_node)
{
    const struct nf_pipeline *p = c->p;
    const struct nf_node_inst *node = &p->nodes[down_node];
    for (size_t e = 0; e < node->n_edges; e++) {
        size_t src = (size_t)node->edges[e].src;
        if (src == up_node || stage_before(c, up_node, src))
            return true;
    }
    return false;
}

char *nf_slurm_shard_root(const struct nf_pipeline *p)
{
    return nf_asprintf("%s/.nlflow/shards/%.16s", p->dir, p->hash);
}

static char *unit_shard_path(const struct coord *c, const struct stage *s, const struct unit *u)
{
    return nf_asprintf("%s/%s/%s%s", c->root, c->p->nodes[s->node].id, u->name, NF_SHARD_SUFFIX);
}

/* ---- running SLURM's commands ---- */

/* Run argv, its stdout (and stderr) into *out (owned, may be NULL).
 * Returns the exit status, or -1 when it could not be started. */
static int run_command(char *const *argv, char **out)
{
    int fd[2];
    if (out)
        *out = NULL;
    if (pipe(fd) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    char buf[4096];
    ssize_t got;
    while ((got = read(fd[0], buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR))
        if (got > 0)
            nf_strbuf_add(&sb, buf, (size_t)got);
    close(fd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (out)
        *out = nf_strbuf_detach(&sb);
    else
        nf_strbuf_release(&sb);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The largest CPU count and memory of the partition's nodes (sinfo). */
static void partition_limits(struct coord *c)
{
    const char *part = c->p->settings.executor.partition;
    char *argv[] = { "sinfo", "-h", "-o", "%c %m", part ? "-p" : NULL, (char *)part, NULL };
    char *out = NULL;
    if (run_command(argv, &out) == 0 && out) {
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
            long cpus = 0;
            unsigned long long mem = 0;
            if (sscanf(line, "%ld %llu", &cpus, &mem) == 2) {
                if (cpus > c->max_cpus)
                    c->max_cpus = cpus;
                if (mem > c->max_mem_mib)
                    c->max_mem_mib = mem;
            }
        }
    }
    free(out);
}

static void shell_quote(struct nf_strbuf *sb, const char *s)
{
    nf_strbuf_add(sb, "'", 1);
    for (; *s; s++) {
        if (*s == '\'')
            nf_strbuf_addf(sb, "'\\''");
        else
            nf_strbuf_add(sb, s, 1);
    }
    nf_strbuf_add(sb, "'", 1);
}

/* Cancel jobs (scancel by id); best effort. */
static void cancel_jobs(const long *jobs, size_t n)
{
    if (n == 0)
        return;
    char **argv = nf_calloc(n + 3, sizeof *argv);
    char (*ids)[24] = nf_calloc(n + 1, sizeof *ids);
    if (argv && ids) {
        argv[0] = "scancel";
        for (size_t i = 0; i < n; i++) {
            snprintf(ids[i], sizeof ids[i], "%ld", jobs[i]);
            argv[i + 1] = ids[i];
        }
        run_command(argv, NULL);
    }
    free(argv);
    free(ids);
}

/* Distinct job ids of the units of stage s in state U_SUBMITTED (or of
 * every stage when s is NULL). Owned array. */
static long *live_jobs(const struct coord *c, const struct stage *only, size_t *n)
{
    size_t cap = 0;
    for (size_t i = 0; i < c->n_stages; i++)
        cap += c->stages[i].n_units;
    long *jobs = nf_calloc(cap + 1, sizeof *jobs);
    *n = 0;
    if (!jobs)
        return NULL;
    for (size_t i = 0; i < c->n_stages; i++) {
        const struct stage *s = &c->stages[i];
        if (only && s != only)
            continue;
        for (size_t u = 0; u < s->n_units; u++) {
            if (s->units[u].state != U_SUBMITTED || s->units[u].job <= 0)
                continue;
            bool seen = false;
            for (size_t j = 0; j < *n && !seen; j++)
                seen = jobs[j] == s->units[u].job;
            if (!seen)
                jobs[(*n)++] = s->units[u].job;
        }
    }
    return jobs;
}

static bool job_broken(const struct coord *c, long job)
{
    for (size_t i = 0; i < c->n_broken; i++)
        if (c->broken[i] == job)
            return true;
    return false;
}

static void mark_broken(struct coord *c, long job)
{
    if (job <= 0 || job_broken(c, job))
        return;
    long *g = nf_realloc(c->broken, (c->n_broken + 1) * sizeof *g);
    if (g) {
        c->broken = g;
        c->broken[c->n_broken++] = job;
    }
}

/* Submit the units of stage s that are U_WAITING as one array. */
static int submit_stage(struct coord *c, struct stage *s, struct nf_error *err)
{
    const struct nf_executor_settings *ex = &c->p->settings.executor;
    const struct nf_node_inst *node = &c->p->nodes[s->node];
    size_t n_wait = 0;
    for (size_t u = 0; u < s->n_units; u++)
        n_wait += s->units[u].state == U_WAITING;
    if (n_wait == 0)
        return 0;
    size_t n_tasks = (n_wait + s->per_task - 1) / s->per_task;
    unsigned seq = c->submissions++;
    char *jobs_dir = nf_asprintf("%s/jobs", c->root), *logs_dir = nf_asprintf("%s/logs", c->root);
    char *units_path = nf_asprintf("%s/jobs/%s.%ld.%u.units", c->root, node->id, (long)time(NULL), seq);
    char *script_path = nf_asprintf("%s/jobs/%s.%ld.%u.sh", c->root, node->id, (long)time(NULL), seq);
    char *log_pattern = nf_asprintf("%s/logs/%s.%u-%%A_%%a.log", c->root, node->id, seq);
    struct nf_strbuf units, script, deps;
    nf_strbuf_init(&units);
    nf_strbuf_init(&script);
    nf_strbuf_init(&deps);
    char **argv = NULL;
    char *out = NULL;
    long *dep_jobs = NULL;
    int rc = 0;
    if (!jobs_dir || !logs_dir || !units_path || !script_path || !log_pattern) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(jobs_dir, err));
    NF_TRY(rc = nf_mkdirs(logs_dir, err));
    /* one line per array task: its units */
    size_t in_task = 0;
    for (size_t u = 0; u < s->n_units; u++) {
        if (s->units[u].state != U_WAITING)
            continue;
        nf_strbuf_addf(&units, "%s%s", in_task ? " " : "", s->units[u].name);
        if (++in_task == s->per_task) {
            nf_strbuf_add(&units, "\n", 1);
            in_task = 0;
        }
    }
    if (in_task)
        nf_strbuf_add(&units, "\n", 1);
    nf_strbuf_addf(&script, "#!/bin/sh\n# nlflow: node '%s' of %s, %zu units in %zu tasks\nexec ", node->id,
                   c->p->file, n_wait, n_tasks);
    shell_quote(&script, c->o->exe);
    nf_strbuf_addf(&script, " task ");
    char *abs = nf_realpath(c->p->file);
    shell_quote(&script, abs ? abs : c->p->file);
    free(abs);
    nf_strbuf_addf(&script, " --hash %s --node %s --units ", c->p->hash, node->id);
    shell_quote(&script, units_path);
    nf_strbuf_addf(&script, " --index \"$SLURM_ARRAY_TASK_ID\" --threads %d", s->cpus);
    for (size_t i = 0; i < c->o->n_set; i++) {
        nf_strbuf_addf(&script, " --set ");
        shell_quote(&script, c->o->set[i]);
    }
    nf_strbuf_add(&script, "\n", 1);
    if (units.oom || script.oom) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_write_file_atomic(units_path, units.buf, units.len, err));
    NF_TRY(rc = nf_write_file_atomic(script_path, script.buf, script.len, err));
    /* after: the arrays still in flight for stages before this one */
    size_t n_dep = 0;
    for (size_t i = 0; i < c->n_stages; i++) {
        struct stage *up = &c->stages[i];
        if (up == s || !stage_before(c, up->node, s->node))
            continue;
        size_t n = 0;
        long *j = live_jobs(c, up, &n);
        for (size_t k = 0; j && k < n; k++) {
            if (!job_broken(c, j[k])) {
                nf_strbuf_addf(&deps, "%s%ld", n_dep++ ? ":" : "afterok:", j[k]);
                continue;
            }
            /* an array with a failed task: wait for its live tasks one by one */
            for (size_t u = 0; u < up->n_units; u++) {
                const struct unit *un = &up->units[u];
                bool first = true;
                for (size_t v = 0; v < u && first; v++)
                    first = !(up->units[v].state == U_SUBMITTED && up->units[v].job == un->job &&
                              up->units[v].task == un->task);
                if (un->state == U_SUBMITTED && un->job == j[k] && first)
                    nf_strbuf_addf(&deps, "%s%ld_%ld", n_dep++ ? ":" : "afterok:", un->job, un->task);
            }
        }
        free(j);
    }
    char array[64], mem[32], cpus[32], name[96], tm[48];
    if (ex->max_concurrent > 0)
        snprintf(array, sizeof array, "--array=0-%zu%%%" PRId64, n_tasks - 1, ex->max_concurrent);
    else
        snprintf(array, sizeof array, "--array=0-%zu", n_tasks - 1);
    snprintf(mem, sizeof mem, "--mem=%" PRIu64 "M", s->mem_mib);
    snprintf(cpus, sizeof cpus, "--cpus-per-task=%d", s->cpus);
    snprintf(name, sizeof name, "--job-name=nlflow-%s", node->id);
    snprintf(tm, sizeof tm, "--time=%s", s->time);
    size_t cap = 16 + ex->n_extra, a = 0;
    argv = nf_calloc(cap, sizeof *argv);
    char *output = nf_asprintf("--output=%s", log_pattern);
    char *dependency = n_dep ? nf_asprintf("--dependency=%s", deps.buf) : NULL;
    char *partition = ex->partition ? nf_asprintf("--partition=%s", ex->partition) : NULL;
    char *account = ex->account ? nf_asprintf("--account=%s", ex->account) : NULL;
    char *qos = ex->qos ? nf_asprintf("--qos=%s", ex->qos) : NULL;
    if (argv && output) {
        argv[a++] = "sbatch";
        argv[a++] = "--parsable";
        argv[a++] = name;
        argv[a++] = array;
        argv[a++] = output;
        argv[a++] = mem;
        argv[a++] = cpus;
        argv[a++] = tm;
        if (partition) argv[a++] = partition;
        if (account) argv[a++] = account;
        if (qos) argv[a++] = qos;
        if (dependency) argv[a++] = dependency;
        for (size_t i = 0; i < ex->n_extra; i++)
            argv[a++] = ex->extra[i];
        argv[a++] = script_path;
    }
    int st = argv && output ? run_command(argv, &out) : -2;
    long job = 0;
    if (st == 0 && out)
        job = strtol(out, NULL, 10);
    free(output);
    free(dependency);
    free(partition);
    free(account);
    free(qos);
    if (st == -2) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (st != 0 || job <= 0) {
        char *nl = out ? strchr(out, '\n') : NULL;
        if (nl && nl[1] == 0)
            *nl = 0;
        rc = NF_FAIL_AT(err, NF_EIO, &node->loc, node->id, "sbatch failed for node '%s' (%s): %s", node->id,
                        st < 0 ? "could not run sbatch: is SLURM installed here?" : "exit status",
                        out && out[0] ? out : "no output");
        goto fail;
    }
    /* record the units' submission, and in jobs.tsv for a later coordinator */
    char *tsv = nf_asprintf("%s/jobs.tsv", c->root);
    FILE *f = tsv ? fopen(tsv, "a") : NULL;
    size_t task = 0;
    in_task = 0;
    for (size_t u = 0; u < s->n_units; u++) {
        struct unit *un = &s->units[u];
        if (un->state != U_WAITING)
            continue;
        un->state = U_SUBMITTED;
        un->job = job;
        un->task = (long)task;
        snprintf(un->log, sizeof un->log, "%u", seq);
        if (f)
            fprintf(f, "%s\t%s\t%ld\t%zu\t%u\n", node->id, un->name, job, task, seq);
        if (++in_task == s->per_task) {
            in_task = 0;
            task++;
        }
    }
    if (f)
        fclose(f);
    free(tsv);
    nf_log("nlflow: submitted node '%s': job array %ld, %zu task%s for %zu unit%s (--mem=%" PRIu64
           "M --cpus-per-task=%d --time=%s%s%s)", node->id, job, n_tasks, n_tasks == 1 ? "" : "s", n_wait,
           n_wait == 1 ? "" : "s", s->mem_mib, s->cpus, s->time, n_dep ? " --dependency=" : "",
           n_dep ? deps.buf : "");
fail:
    free(dep_jobs);
    free(out);
    free(argv);
    nf_strbuf_release(&units);
    nf_strbuf_release(&script);
    nf_strbuf_release(&deps);
    free(jobs_dir);
    free(logs_dir);
    free(units_path);
    free(script_path);
    free(log_pattern);
    return rc;
}

/* ---- shards arriving ---- */

const char *const *nf_slurm_port_names(const struct nf_node_inst *node, size_t *n)
{
    static _Thread_local const char *names[64];
    *n = 0;
    for (const struct nf_port *pt = node->type->outputs; pt && pt->name && *n < 64; pt++)
        names[(*n)++] = pt->name;
    return names;
}

/* Import the shard of unit u if it is there: 1 imported, 0 absent or
 * discarded (invalid: removed, the unit counts as failed), <0 error. */
static int import_unit(struct coord *c, struct stage *s, struct unit *u, struct nf_error *err)
{
    const struct nf_node_inst *node = &c->p->nodes[s->node];
    char *path = unit_shard_path(c, s, u);
    if (!path)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    struct stat st;
    if (stat(path, &st) != 0) {
        free(path);
        return 0;
    }
    struct nf_shard_head want = { c->p->hash, node->id, u->name, c->keys[s->node].runs[u->run],
                                  u->part < 0 ? 0 : u->part, u->part < 0 ? 0 : s->parts };
    char *abs = nf_realpath(c->p->file);
    struct nf_cache_meta meta = { node->type->name, node->id, NULL, c->p->hash, NULL, abs };
    char why[256];
    size_t n_ports;
    const char *const *names = nf_slurm_port_names(node, &n_ports);
    int rc = nf_shard_import(c->cache, path, &want, &meta, names, n_ports, true, why, sizeof why, err);
    free(abs);
    if (rc == 0) {
        nf_warn(node->id, "discarding the shard '%s': %s; its unit will be computed again", path, why);
        unlink(path);
        if (u->state == U_SUBMITTED)
            u->failures++;   /* its task ended well: what follows can still start (and computes the
                                unit itself), so nothing after it is cancelled */
        u->state = U_WAITING;
        u->job = 0;
    } else if (rc == 1) {
        u->state = U_DONE;
        s->n_done++;
    }
    free(path);
    return rc;
}

/* Import every shard that has arrived for units not done. Returns the number
 * imported or <0. */
static int import_arrived(struct coord *c, struct nf_error *err)
{
    int got = 0;
    for (size_t i = 0; i < c->n_stages; i++) {
        struct stage *s = &c->stages[i];
        if (s->n_done == s->n_units)
            continue;
        char *dir = nf_asprintf("%s/%s", c->root, c->p->nodes[s->node].id);
        DIR *d = dir ? opendir(dir) : NULL;
        free(dir);
        if (!d)
            continue;
        /* one readdir per stage, then only the units whose file is there */
        struct dirent *de;
        char **names = NULL;
        size_t n = 0, cap = 0;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.' || !nf_path_has_suffix(de->d_name, NF_SHARD_SUFFIX))
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                char **g = nf_realloc(names, cap * sizeof *g);
                if (!g)
                    break;
                names = g;
            }
            names[n++] = nf_strndup(de->d_name, strlen(de->d_name) - strlen(NF_SHARD_SUFFIX));
        }
        closedir(d);
        for (size_t u = 0; u < s->n_units; u++) {
            struct unit *un = &s->units[u];
            if (un->state == U_DONE)
                continue;
            bool there = false;
            for (size_t k = 0; k < n && !there; k++)
                there = names[k] && strcmp(names[k], un->name) == 0;
            if (!there)
                continue;
            int rc = import_unit(c, s, un, err);
            if (rc < 0) {
                for (size_t k = 0; k < n; k++)
                    free(names[k]);
                free(names);
                return rc;
            }
            got += rc;
        }
        for (size_t k = 0; k < n; k++)
            free(names[k]);
        free(names);
    }
    return got;
}

/* ---- squeue ---- */

enum task_state { T_UNKNOWN, T_ACTIVE, T_ENDED, T_NEVER };

struct task_report { long job, task; enum task_state state; char slurm_state[24]; };

static enum task_state classify(const char *state, const char *reason)
{
    static const char *const active[] = { "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                                          "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                                          "STAGE_OUT", "RESV_DEL_HOLD", NULL };
    if (strcmp(state, "PENDING") == 0 && strstr(reason, "DependencyNeverSatisfied"))
        return T_NEVER;
    for (int i = 0; active[i]; i++)
        if (strcmp(state, active[i]) == 0)
            return T_ACTIVE;
    return T_ENDED;
}

/* States of the tasks of the given array jobs. Tasks squeue does not list
 * have ended long ago (state T_UNKNOWN in the result: treated as ended). */
static struct task_report *query_tasks(const long *jobs, size_t n_jobs, size_t *n_out, bool *ok)
{
    *n_out = 0;
    *ok = false;
    if (n_jobs == 0) {
        *ok = true;
        return NULL;
    }
    struct nf_strbuf ids;
    nf_strbuf_init(&ids);
    for (size_t i = 0; i < n_jobs; i++)
        nf_strbuf_addf(&ids, "%s%ld", i ? "," : "", jobs[i]);
    char *argv[] = { "squeue", "-h", "-r", "--states=all", "-o", "%F|%K|%T|%r", "-j", ids.buf, NULL };
    char *out = NULL;
    int st = ids.oom ? -1 : run_command(argv, &out);
    nf_strbuf_release(&ids);
    struct task_report *r = NULL;
    size_t cap = 0;
    if (st == 0 && out) {
        *ok = true;
        for (char *save = NULL, *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            char state[24] = "", reason[128] = "";
            long job = 0, task = 0;
            if (sscanf(line, "%ld|%ld|%23[^|]|%127[^\n]", &job, &task, state, reason) < 3)
                continue;
            if (*n_out == cap) {
                cap = cap ? cap * 2 : 64;
                struct task_report *g = nf_realloc(r, cap * sizeof *g);
                if (!g)
                    break;
                r = g;
            }
            r[*n_out] = (struct task_report){ job, task, classify(state, reason), "" };
            snprintf(r[*n_out].slurm_state, sizeof r[*n_out].slurm_state, "%s", state);
            (*n_out)++;
        }
    } else if (st == 1 && out && strstr(out, "Invalid job id")) {
        *ok = true;   /* none of them is known any more: all ended */
    }
    free(out);
    return r;
}

/* ---- input file hashes, handed to the tasks ---- */

/* files.tsv: the content hash of every input file as the coordinator's memo
 * has it (hash, size, mtime_ns, hashed_at, absolute path), so that a task
 * need not read every input file of the pipeline again to compute keys: it
 * takes an entry only when the file it sees has the same size and mtime. */
static int write_file_hashes(struct coord *c, struct nf_error *err)
{
    struct nf_pipeline *p = c->p;
    struct nf_env env;
    struct nf_strbuf sb;
    nf_pipeline_env(p, &env);
    nf_strbuf_init(&sb);
    for (size_t ni = 0; ni < p->n_nodes; ni++) {
        const struct nf_node_type *t = p->nodes[ni].type;
        char **paths = NULL, **labels = NULL;
        size_t n = 0;
        bool coll = false;
        struct nf_error e = { 0 };
        if (t->input_files && t->input_files(p->nodes[ni].params, &paths, &labels, &n, &coll, &e) < 0)
            n = 0;
        if (!t->input_files && t->key_files && t->key_files(p->nodes[ni].params, &env, &paths, &n, &e) < 0)
            n = 0;
        for (size_t i = 0; i < n; i++) {
            struct nf_file_memo m;
            char *abs = paths[i] ? nf_realpath(paths[i]) : NULL, hex[33];
            if (abs && !strchr(abs, '\n') && !strchr(abs, '\t') && nf_cache_file_memo(c->cache, abs, &m, &e) == 1) {
                nf_key_hex(m.hash, hex);
                nf_strbuf_addf(&sb, "%s\t%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%s\n", hex, m.size, m.mtime_ns,
                               m.hashed_at, abs);
            }
            free(abs);
            free(paths[i]);
            if (labels)
                free(labels[i]);
        }
        free(paths);
        free(labels);
    }
    char *path = nf_asprintf("%s/files.tsv", c->root);
    int rc = sb.oom || !path ? NF_FAIL(err, NF_ENOMEM, "out of memory")
                             : nf_write_file_atomic(path, sb.buf ? sb.buf : "", sb.len, err);
    free(path);
    nf_strbuf_release(&sb);
    return rc;
}

/* ---- the coordinator ---- */

/* Units recorded in jobs.tsv by an earlier coordinator (detached): adopt
 * their job ids, so that what is still in flight is not submitted again. */
static void adopt_jobs(struct coord *c)
{
    char *tsv = nf_asprintf("%s/jobs.tsv", c->root);
    FILE *f = tsv ? fopen(tsv, "r") : NULL;
    free(tsv);
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char node[128], unit[48];
        long job, task;
        unsigned seq;
        if (sscanf(line, "%127[^\t]\t%47[^\t]\t%ld\t%ld\t%u", node, unit, &job, &task, &seq) != 5)
            continue;
        int ni = nf_node_index(c->p, node);
        if (ni < 0 || c->stage_of[ni] < 0)
            continue;
        struct stage *s = &c->stages[c->stage_of[ni]];
        for (size_t u = 0; u < s->n_units; u++)
            if (s->units[u].state != U_DONE && strcmp(s->units[u].name, unit) == 0) {
                s->units[u].state = U_SUBMITTED;
                s->units[u].job = job;
                s->units[u].task = task;
                snprintf(s->units[u].log, sizeof s->units[u].log, "%u", seq);
                if (seq >= c->submissions)
                    c->submissions = seq + 1;
            }
    }
    fclose(f);
}

static char *log_path(const struct coord *c, const struct stage *s, const struct unit *u)
{
    return nf_asprintf("%s/logs/%s.%s-%ld_%ld.log", c->root, c->p->nodes[s->node].id, u->log, u->job, u->task);
}

/* After squeue: units whose task ended without a shard failed; tasks that
 * can never start are cancelled. Sets *changed when something must be
 * submitted again. */
static int check_tasks(struct coord *c, bool *changed, struct nf_error *err)
{
    size_t n_jobs = 0, n_rep = 0;
    bool ok;
    long *jobs = live_jobs(c, NULL, &n_jobs);
    struct task_report *rep = query_tasks(jobs, n_jobs, &n_rep, &ok);
    int rc = 0;
    if (!ok) {
        nf_warn(NULL, "squeue did not answer; trying again later");
        goto fail;
    }
    /* first pick up shards that arrived since the last scan */
    NF_TRY(rc = import_arrived(c, err));
    long *never = nf_calloc(n_jobs + 1, sizeof *never);
    size_t n_never = 0;
    for (size_t i = 0; i < c->n_stages; i++) {
        struct stage *s = &c->stages[i];
        for (size_t u = 0; u < s->n_units; u++) {
            struct unit *un = &s->units[u];
            if (un->state != U_SUBMITTED)
                continue;
            enum task_state ts = T_UNKNOWN;
            const char *sl = "gone from squeue";
            for (size_t k = 0; k < n_rep; k++)
                if (rep[k].job == un->job && rep[k].task == un->task) {
                    ts = rep[k].state;
                    sl = rep[k].slurm_state;
                }
            if (ts == T_ACTIVE)
                continue;
            if (ts == T_NEVER) {   /* behind a failed array: cancel, submit again */
                bool seen = false;
                for (size_t k = 0; k < n_never && !seen; k++)
                    seen = never[k] == un->job;
                if (!seen && never)
                    never[n_never++] = un->job;
                mark_broken(c, un->job);
                un->failed_job = un->job;
                un->state = U_WAITING;
                un->job = 0;
                *changed = true;
                continue;
            }
            /* ended: its shard would have been imported above */
            char *log = log_path(c, s, un);
            mark_broken(c, un->job);
            un->failures++;
            nf_warn(c->p->nodes[s->node].id, "unit %s ended (%s) without its result (try %d of "
                    "%" PRId64 "); SLURM's log: %s", un->name, sl, un->failures,
                    c->p->settings.executor.retries + 1, log ? log : "?");
            if (un->failures > c->p->settings.executor.retries) {
                rc = NF_FAIL_AT(err, NF_EIO, &c->p->nodes[s->node].loc, c->p->nodes[s->node].id,
                                "node '%s': unit %s failed %d times on SLURM; see its log %s",
                                c->p->nodes[s->node].id, un->name, un->failures, log ? log : "?");
                free(log);
                free(never);
                goto fail;
            }
            free(log);
            un->failed_job = un->job;
            un->state = U_WAITING;
            un->job = 0;
            *changed = true;
        }
    }
    cancel_jobs(never, n_never);
    free(never);
fail:
    free(jobs);
    free(rep);
    return rc;
}

/* Submit whatever waits, in stage order; a stage after a resubmitted one has
 * its still-waiting tasks cancelled and submitted again behind the new array. */
static int submit_waiting(struct coord *c, struct nf_error *err)
{
    int rc = 0;
    for (size_t i = 0; i < c->n_stages; i++) {
        struct stage *s = &c->stages[i];
        for (size_t u = 0; u < s->n_units; u++)
            if (s->units[u].state == U_WAITING && s->units[u].failures > c->p->settings.executor.retries)
                return NF_FAIL_AT(err, NF_EIO, &c->p->nodes[s->node].loc, c->p->nodes[s->node].id,
                                  "node '%s': unit %s failed %d times on SLURM (its shards did not check out; "
                                  "see the warnings above)", c->p->nodes[s->node].id, s->units[u].name,
                                  s->units[u].failures);
        bool waits = false, broke = false;
        for (size_t u = 0; u < s->n_units; u++)
            if (s->units[u].state == U_WAITING) {
                waits = true;
                broke |= s->units[u].failed_job > 0;
                s->units[u].failed_job = 0;
            }
        if (!waits)
            continue;
        /* stages after it that wait behind an array with a failed task: their
         * afterok can never hold */
        for (size_t j = i + 1; j < c->n_stages && broke; j++) {
            struct stage *d = &c->stages[j];
            if (!stage_before(c, s->node, d->node))
                continue;
            size_t n = 0;
            long *jobs = live_jobs(c, d, &n);
            cancel_jobs(jobs, n);
            free(jobs);
            for (size_t u = 0; u < d->n_units; u++)
                if (d->units[u].state == U_SUBMITTED) {
                    d->units[u].state = U_WAITING;
                    d->units[u].job = 0;
                }
        }
        NF_TRY(rc = submit_stage(c, s, err));
    }
fail:
    return rc;
}

static bool all_done(const struct coord *c)
{
    for (size_t i = 0; i < c->n_stages; i++)
        if (c->stages[i].n_done < c->stages[i].n_units)
            return false;
    return true;
}

static void print_status(const struct coord *c, FILE *out)
{
    fprintf(out, "%-16s %-12s %8s %8s %8s %8s\n", "node", "units", "done", "in SLURM", "to submit", "failures");
    for (size_t i = 0; i < c->n_stages; i++) {
        const struct stage *s = &c->stages[i];
        size_t sub = 0, wait = 0;
        int fails = 0;
        for (size_t u = 0; u < s->n_units; u++) {
            sub += s->units[u].state == U_SUBMITTED;
            wait += s->units[u].state == U_WAITING;
            fails += s->units[u].failures;
        }
        char what[32];
        snprintf(what, sizeof what, "%zu %s", s->n_units, s->parts ? "parts" : c->keys[s->node].mapped ? "items" : "run");
        fprintf(out, "%-16s %-12s %8zu %8zu %8zu %8d\n", c->p->nodes[s->node].id, what, s->n_done, sub, wait, fails);
    }
    if (c->n_stages == 0)
        fprintf(out, "(nothing left to run on SLURM: `nlflow run` finishes it locally)\n");
}


static void sleep_s(double s)
{
    for (double t = 0; t < s && !nf_interrupt_pending(); t += 0.1) {
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

static int coord_open(struct coord *c, struct nf_pipeline *p, const struct nf_slurm_opts *o,
                      struct nf_cache *cache, struct nf_error *err)
{
    memset(c, 0, sizeof *c);
    c->p = p;
    c->o = o;
    c->cache = cache;
    c->lock_fd = -1;
    c->keys = nf_calloc(p->n_nodes + 1, sizeof *c->keys);
    c->root = nf_slurm_shard_root(p);
    if (!c->keys || !c->root)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int rc;
    NF_TRY(rc = nf_keys_plan(p, cache, c->keys, err));
    NF_TRY(rc = build_stages(c, err));
fail:
    return rc;
}

static void coord_close(struct coord *c)
{
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    for (size_t i = 0; c->keys && i < c->p->n_nodes; i++)
        nf_node_keys_release(&c->keys[i]);
    free(c->keys);
    stages_release(c);
    free(c->broken);
    free(c->root);
}

int nf_slurm_run(struct nf_pipeline *p, const struct nf_slurm_opts *o, struct nf_error *err)
{
    struct coord c;
    struct nf_cache *cache = o->exec->cache;
    int rc;
    if (!cache)
        return NF_FAIL(err, NF_EUSAGE, "the SLURM executor needs the result cache (shards are imported into "
                       "it): drop --no-cache / `cache: off`, or run with --executor local");
    NF_TRY(rc = coord_open(&c, p, o, cache, err));
    NF_TRY(rc = nf_mkdirs(c.root, err));
    {
        char *lock = nf_asprintf("%s/coordinator.lock", c.root);
        c.lock_fd = lock ? open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
        free(lock);
        if (c.lock_fd < 0 || flock(c.lock_fd, LOCK_EX | LOCK_NB) != 0) {
            rc = NF_FAIL(err, NF_EUSAGE, "another nlflow coordinator (run or status) is using '%s'; wait for it "
                         "or stop it", c.root);
            goto fail;
        }
    }
    partition_limits(&c);
    for (size_t i = 0; i < c.n_stages; i++)
        size_stage(&c, &c.stages[i]);
    if (!o->status_only)
        NF_TRY(rc = write_file_hashes(&c, err));
    adopt_jobs(&c);
    NF_TRY(rc = import_arrived(&c, err));
    for (size_t i = 0; i < c.n_stages; i++)
        c.stages[i].n_said = c.stages[i].n_done;
    if (o->status_only) {
        bool changed = false;
        if (!all_done(&c))
            NF_TRY(rc = check_tasks(&c, &changed, err));
        print_status(&c, stdout);
        rc = 0;
        goto fail;
    }
    if (c.n_stages)
        nf_log("nlflow: SLURM executor: %zu stage%s, shards in %s", c.n_stages, c.n_stages == 1 ? "" : "s",
               c.root);
    /* adopted jobs that ended while nobody watched: ask now */
    bool changed = false;
    if (!all_done(&c))
        NF_TRY(rc = check_tasks(&c, &changed, err));
    NF_TRY(rc = submit_waiting(&c, err));
    if (o->detach) {
        if (all_done(&c)) {
            nf_log("nlflow: nothing to submit; finishing locally");
        } else {
            size_t n = 0;
            long *jobs = live_jobs(&c, NULL, &n);
            nf_log("nlflow: detached: %zu job array%s in flight; `nlflow status %s` shows progress, `nlflow run "
                   "%s --executor slurm` collects the results and finishes", n, n == 1 ? "" : "s", p->file,
                   p->file);
            free(jobs);
            rc = 0;
            goto fail;
        }
    }
    double scan_every = p->settings.executor.check_every < 2 ? p->settings.executor.check_every : 2;
    double last_check = nf_now();
    while (!all_done(&c)) {
        if (nf_interrupt_pending()) {
            size_t n = 0;
            long *jobs = live_jobs(&c, NULL, &n);
            cancel_jobs(jobs, n);
            nf_log("nlflow: interrupted: cancelled %zu job array%s (scancel); shards already in are kept", n,
                   n == 1 ? "" : "s");
            free(jobs);
            rc = NF_FAIL(err, NF_EINTR, "interrupted");
            goto fail;
        }
        sleep_s(scan_every);
        int got;
        NF_TRY(got = import_arrived(&c, err));
        for (size_t i = 0; got > 0 && i < c.n_stages; i++) {
            struct stage *s = &c.stages[i];
            if (s->n_done > s->n_said) {
                s->n_said = s->n_done;
                nf_log("nlflow: node '%s': %zu of %zu %s in", p->nodes[s->node].id, s->n_done, s->n_units,
                       s->parts ? "parts" : c.keys[s->node].mapped ? "items" : "runs");
            }
        }
        bool resubmit = false;
        for (size_t i = 0; i < c.n_stages; i++)
            for (size_t u = 0; u < c.stages[i].n_units; u++)
                resubmit |= c.stages[i].units[u].state == U_WAITING;   /* a discarded shard */
        if (nf_now() - last_check >= p->settings.executor.check_every && !all_done(&c)) {
            last_check = nf_now();
            NF_TRY(rc = check_tasks(&c, &resubmit, err));
        }
        if (resubmit)
            NF_TRY(rc = submit_waiting(&c, err));
    }
    /* everything is in the cache: the local run fetches it and writes the outputs */
    NF_TRY(rc = nf_execute(p, o->exec, err));
    if (c.lock_fd >= 0) {
        close(c.lock_fd);
        c.lock_fd = -1;
    }
    nf_remove_tree(c.root);
fail:
    if (rc < 0 && rc != NF_EINTR && !o->detach && !o->status_only) {
        size_t n = 0;
        long *jobs = live_jobs(&c, NULL, &n);
        cancel_jobs(jobs, n);
        free(jobs);
    }
    coord_close(&c);
    return rc;
}

int nf_slurm_plan_print(struct nf_pipeline *p, struct nf_cache *cache, FILE *out, struct nf_error *err)
{
    struct coord c;
    struct nf_slurm_opts o = { 0 };
    int rc;
    NF_TRY(rc = coord_open(&c, p, &o, cache, err));
    partition_limits(&c);
    for (size_t i = 0; i < c.n_stages; i++)
        size_stage(&c, &c.stages[i]);
    fprintf(out, "\nSLURM job arrays (executor slurm; nothing submitted):\n");
    fprintf(out, "  %-16s %-14s %6s %9s %9s %6s %10s  %s\n", "node", "units", "tasks", "per task", "--mem",
            "--cpus", "--time", "after");
    for (size_t i = 0; i < c.n_stages; i++) {
        const struct stage *s = &c.stages[i];
        char what[40], after[256] = "";
        snprintf(what, sizeof what, "%zu %s", s->n_units, s->parts ? "parts" : c.keys[s->node].mapped ? "items" : "run");
        for (size_t j = 0; j < c.n_stages; j++)
            if (j != i && stage_before(&c, c.stages[j].node, s->node)) {
                size_t l = strlen(after);
                snprintf(after + l, sizeof after - l, "%s%s", l ? "," : "", p->nodes[c.stages[j].node].id);
            }
        size_t tasks = (s->n_units + s->per_task - 1) / s->per_task;
        char mem[32];
        snprintf(mem, sizeof mem, "%" PRIu64 "M", s->mem_mib);
        fprintf(out, "  %-16s %-14s %6zu %9zu %9s %6d %10s  %s\n", p->nodes[s->node].id, what, tasks, s->per_task,
                mem, s->cpus, s->time, after[0] ? after : "-");
    }
    if (c.n_stages == 0)
        fprintf(out, "  (none: everything that must run runs on the coordinator)\n");
    fprintf(out, "on the coordinator:");
    size_t n_local = 0;
    for (size_t oi = 0; oi < p->n_nodes; oi++) {
        size_t ni = (size_t)p->order[oi];
        if (c.local[ni])
            fprintf(out, "%s%s", n_local++ ? ", " : " ", p->nodes[ni].id);
    }
    fprintf(out, "%s\n", n_local ? " (file readers, sinks and what follows them)" : " nothing");
    fprintf(out, "shards: %s\n", c.root);
fail:
    coord_close(&c);
    return rc;
}
