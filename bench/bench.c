/* bench.c — `nlflow bench`: measure every condition of the selected domains,
 * each in a process of its own, next to its peer, and write one result file.
 *
 * The parent process never computes anything it reports. For each condition
 * it starts `/proc/self/exe bench --run-condition DOMAIN/NAME ...` twice: once
 * with --prepare to write the input files, then to measure: baseline RSS, setup
 * (not timed), one warm-up, N timed repetitions while a thread samples RSS
 * every 5 ms. That child prints one JSON line, which goes into the result file
 * as is ("measure"). Running each condition alone is what makes its peak RSS
 * (sampled, and getrusage's) its own, and not the high-water mark of whatever
 * ran before it in the same process. The parent then adds the derived figures:
 * GFLOP/s, % of the 2048³ SGEMM rate measured first in the same run, % of the
 * condition's shape-matched SGEMM (measured the same way, once per shape), and
 * the peer's time and the speedup over it.
 *
 * The result file bench/results/<host>.json also records the machine (CPU,
 * cores, memory, BLAS and its core type and threads, the OPENBLAS_* variables as
 * found: this harness never sets them), compiler, nlflow version and commit.
 * docs/performance.md is regenerated from all result files afterwards
 * (report.c). These machines are shared and noisy: medians, never one timing.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "pipeline.h"
#include "cache/cache.h"
#include "kernels/kernels.h"
#include "lang/params.h"
#include "lang/ytree.h"

#ifndef NF_VERSION
#define NF_VERSION "unknown"
#endif
#ifndef NF_GIT_COMMIT
#define NF_GIT_COMMIT "unknown"
#endif

#if defined(__clang__)
#define COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER "gcc " __VERSION__
#else
#define COMPILER __VERSION__
#endif

extern char **environ;

/* Peers run with the system interpreter, where Debian's python3-numpy etc. live. */
#define PEER_PYTHON "/usr/bin/python3"
enum { DEFAULT_REPS = 5, QUICK_REPS = 2, MAX_REPS = 1000, SAMPLE_PERIOD_NS = 5000000 };

static const char bench_usage[] =
    "usage: nlflow bench [--quick] [--domains LIST] [--conditions LIST] [--reps N]\n"
    "                    [--device cpu|gpu|all] [--threads N] [--out FILE] [--docs DIR] [--peers DIR]\n"
    "                    [--scratch DIR] [--report-only]\n"
    "\n"
    "Measures each benchmark condition in a process of its own (one warm-up, then N\n"
    "timed repetitions: median, min, max, GFLOP/s, % of this machine's SGEMM rate,\n"
    "peak RSS) next to its Python peer, writes a result file and regenerates\n"
    "DOCS/performance.md from every result file in the result file's folder.\n"
    "\n"
    "  --quick          tiny sizes, 2 repetitions: checks the wiring, not the speed\n"
    "  --domains LIST   comma-separated: sgemm, collection, ridge, bootstrap, predict, inference,\n"
    "                   firstlevel, cache, gpu\n"
    "                   (default: all; sgemm is always measured, it is the yardstick)\n"
    "  --conditions LIST  comma-separated parts of condition names (each without a comma):\n"
    "                   only the conditions whose name contains one of them (e.g. 'glm['\n"
    "                   for the glm rows, 'v=230000' for the whole-brain ones);\n"
    "                   give --out a file of its own, the report reads every result file\n"
    "  --reps N         timed repetitions per condition (default 5; a condition whose\n"
    "                   runs are short gets more, up to 50, to cover about 0.3 s)\n"
    "  --device D       cpu, gpu or all (default): which implementations to measure\n"
    "  --threads N      worker threads of the engine (default: all cores)\n"
    "  --out FILE       result file (default bench/results/HOST.json)\n"
    "  --docs DIR       regenerate DIR/performance.md and its plot; without it, only a\n"
    "                   full run (not --quick) whose result file goes into a source tree's\n"
    "                   bench/results/ regenerates that tree's docs/ (and --report-only docs/)\n"
    "  --peers DIR      the peer scripts (default: bench/peers of this source tree)\n"
    "  --scratch DIR    keep generated input data in DIR and reuse it (default: a\n"
    "                   temporary folder, deleted at the end)\n"
    "  --report-only    regenerate DOCS/performance.md from existing result files\n";

struct bench_opts {
    bool quick, report_only, prepare;
    int reps, threads;
    const char *device, *domains, *conditions, *out, *docs, *peers, *scratch;
    const char *run_condition;          /* child: DOMAIN/NAME */
    int64_t size[4];
    bool have_size;
};

static volatile sig_atomic_t bench_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    bench_interrupted = 1;
}

static int bench_usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "nlflow bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see 'nlflow bench --help')\n");
    return 2;
}

/* "a,b,c" -> size[]; false when malformed. */
static bool parse_size(const char *s, int64_t size[4])
{
    char *copy = nf_strdup(s), *save = NULL;
    int n = 0;
    bool ok = copy != NULL;
    for (char *tok = copy ? strtok_r(copy, ",x", &save) : NULL; tok && ok;
         tok = strtok_r(NULL, ",x", &save))
        ok = n < 4 && nf_parse_int64(tok, &size[n++]) && size[n - 1] > 0;
    free(copy);
    return ok && n > 0;
}

/* Every name of a comma list must be a domain; returns 0 or an exit status. */
static int check_domains(const char *list)
{
    char *copy = nf_strdup(list), *save = NULL;
    int status = 0;
    if (!copy)
        return 1;
    for (char *tok = strtok_r(copy, ",", &save); tok && !status; tok = strtok_r(NULL, ",", &save))
        if (!nf_bench_domain_find(tok)) {
            struct nf_strbuf known;
            nf_strbuf_init(&known);
            for (const struct nf_bench_domain *d = nf_bench_domains; d->name; d++)
                nf_strbuf_addf(&known, "%s%s", d == nf_bench_domains ? "" : ", ", d->name);
            fprintf(stderr, "nlflow bench: unknown domain '%s' (known: %s)\n", tok,
                    known.buf ? known.buf : "");
            nf_strbuf_release(&known);
            status = 2;
        }
    free(copy);
    return status;
}

static bool domain_selected(const struct bench_opts *o, const char *name)
{
    if (!o->domains || strcmp(name, "sgemm") == 0)
        return true;
    size_t len = strlen(name);
    for (const char *p = o->domains; (p = strstr(p, name)); p += len)
        if ((p == o->domains || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
            return true;
    return false;
}

static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = "all";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t num;
#define NEED_VALUE() do { if (!val) return bench_usage_error("option '%s' needs a value", a); i++; } while (0)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(bench_usage, stdout);
            return -1;
        } else if (strcmp(a, "--quick") == 0) {
            o->quick = true;
        } else if (strcmp(a, "--report-only") == 0) {
            o->report_only = true;
        } else if (strcmp(a, "--prepare") == 0) {
            o->prepare = true;
        } else if (strcmp(a, "--reps") == 0) {
            NEED_VALUE();
            if (!nf_parse_int64(val, &num) || num < 1 || num > MAX_REPS)
                return bench_usage_error("--reps must be an integer from 1 to 1000 (got '%s')", val);
            o->reps = (int)num;
        } else if (strcmp(a, "--threads") == 0) {
            NEED_VALUE();
            if (!nf_parse_int64(val, &num) || num < 1 || num > 4096)
                return bench_usage_error("--threads must be an integer from 1 to 4096 (got '%s')", val);
            o->threads = (int)num;
        } else if (strcmp(a, "--device") == 0) {
            NEED_VALUE();
            if (strcmp(val, "cpu") != 0 && strcmp(val, "gpu") != 0 && strcmp(val, "all") != 0)
                return bench_usage_error("--device must be cpu, gpu or all (got '%s')", val);
            o->device = val;
        } else if (strcmp(a, "--domains") == 0) {
            NEED_VALUE();
            int st = check_domains(val);
            if (st)
                return st;
            o->domains = val;
        } else if (strcmp(a, "--conditions") == 0) {
            NEED_VALUE();
            if (!*val || strspn(val, ",") == strlen(val))
                return bench_usage_error("--conditions needs at least one part of a condition name (got '%s')", val);
            o->conditions = val;
        } else if (strcmp(a, "--size") == 0) {
            NEED_VALUE();
            if (!parse_size(val, o->size))
                return bench_usage_error("--size must be up to 4 positive integers, e.g. 1,20000,1600 (got '%s')", val);
            o->have_size = true;
        } else if (strcmp(a, "--out") == 0) {
            NEED_VALUE();
            o->out = val;
        } else if (strcmp(a, "--docs") == 0) {
            NEED_VALUE();
            o->docs = val;
        } else if (strcmp(a, "--peers") == 0) {
            NEED_VALUE();
            o->peers = val;
        } else if (strcmp(a, "--scratch") == 0) {
            NEED_VALUE();
            o->scratch = val;
        } else if (strcmp(a, "--run-condition") == 0) {
            NEED_VALUE();
            o->run_condition = val;
        } else {
            return bench_usage_error("unknown option '%s'", a);
        }
#undef NEED_VALUE
    }
    if (!o->reps)
        o->reps = o->quick ? QUICK_REPS : DEFAULT_REPS;
    if (!o->threads)
        o->threads = nf_cpu_count();
    return 0;
}

/* ---- paths of a condition ---- */

static void add_size(struct nf_strbuf *sb, const int64_t size[4], const char *sep)
{
    for (int i = 0; i < 4 && size[i]; i++)
        nf_strbuf_addf(sb, "%s%" PRId64, i ? sep : "", size[i]);
}

/* scratch/DOMAIN/SIZE: shared by the conditions of a domain with equal size. */
static char *data_dir_of(const char *scratch, const char *domain, const int64_t size[4])
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "%s/%s/", scratch, domain);
    add_size(&sb, size, "x");
    return nf_strbuf_detach(&sb);
}

/* scratch/DOMAIN/work-NAME-SIZE, the name reduced to characters safe in paths. */
static char *work_dir_of(const char *scratch, const char *domain, const char *name,
                         const int64_t size[4])
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "%s/%s/work-", scratch, domain);
    for (const char *p = name; *p; p++) {
        char c = (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-", *p)
                  ? *p : '_');
        nf_strbuf_add(&sb, &c, 1);
    }
    nf_strbuf_addf(&sb, "-");
    add_size(&sb, size, "x");
    return nf_strbuf_detach(&sb);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void remove_tree(const char *dir)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the child: measure one condition ---- */

/* Resident bytes now. Plain read(): no stdio buffer, so the sampling thread
 * allocates nothing while it measures. */
static uint64_t rss_now(void)
{
    char buf[128];
    unsigned long long size = 0, resident = 0;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
        return 0;
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* A thread that records the largest RSS it sees until stopped. */
struct rss_sampler {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    uint64_t peak;
};

static void *rss_sampler_main(void *arg)
{
    struct rss_sampler *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        uint64_t r = rss_now();
        if (r > s->peak)
            s->peak = r;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += SAMPLE_PERIOD_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->wake, &s->lock, &until);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static int rss_sampler_start(struct rss_sampler *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->peak = rss_now();
    return pthread_create(&s->thread, NULL, rss_sampler_main, s) == 0 ? 0 : -1;
}

static uint64_t rss_sampler_stop(struct rss_sampler *s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    uint64_t last = rss_now();
    return last > s->peak ? last : s->peak;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts t in place. */
static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void add_num(struct nf_strbuf *sb, double x)
{
    if (isfinite(x))
        nf_strbuf_addf(sb, "%.10g", x);
    else
        nf_strbuf_addf(sb, "null");
}

/* Timed runs of one condition: at most MAX_REPS; short ones get more than
 * --reps (see child_measure). */
#define MAX_REPS 50
#define SHORT_COVER_S 0.3

static int child_measure(const struct nf_bench_ctx *ctx, int reps, struct nf_strbuf *out,
                         struct nf_error *err)
{
    const struct nf_bench_condition *c = ctx->cond;
    uint64_t baseline = rss_now(), after_setup, peak;
    double *times = calloc((size_t)(reps > MAX_REPS ? reps : MAX_REPS), sizeof *times);
    void *state = NULL;
    struct rss_sampler sampler;
    struct rusage ru;
    int rc = 0;

    if (!times)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    NF_TRY(rc = c->setup(ctx, &state, err));
    after_setup = rss_now();
    double t_warm = nf_now();
    NF_TRY(rc = c->run_once(state, err));   /* warm-up: caches, page cache, lazy init */
    t_warm = nf_now() - t_warm;
    /* a median of a few runs of a few ms is mostly the machine's noise: short
     * conditions run until the timed runs cover about SHORT_COVER_S (not in
     * --quick, whose 2 runs check the wiring) */
    if (reps >= 5 && reps < MAX_REPS && t_warm > 0 && t_warm * reps < SHORT_COVER_S) {
        double want = ceil(SHORT_COVER_S / t_warm);
        reps = want > MAX_REPS ? MAX_REPS : (int)want;
    }
    if (rss_sampler_start(&sampler) < 0) {
        rc = NF_FAIL(err, NF_EIO, "cannot start the RSS sampling thread");
        goto fail;
    }
    for (int r = 0; r < reps && rc == 0; r++) {
        double t0 = nf_now();
        rc = c->run_once(state, err);
        times[r] = nf_now() - t0;
    }
    peak = rss_sampler_stop(&sampler);
    NF_TRY(rc);
    getrusage(RUSAGE_SELF, &ru);

    /* In run order first; median() then sorts them, for min and max. */
    nf_strbuf_addf(out, "{\"times_s\": [");
    for (int r = 0; r < reps; r++) {
        nf_strbuf_addf(out, r ? ", " : "");
        add_num(out, times[r]);
    }
    nf_strbuf_addf(out, "], \"median_s\": ");
    add_num(out, median(times, reps));
    nf_strbuf_addf(out, ", \"min_s\": ");
    add_num(out, times[0]);
    nf_strbuf_addf(out, ", \"max_s\": ");
    add_num(out, times[reps - 1]);
    nf_strbuf_addf(out, ", \"reps\": %d, \"flops\": ", reps);
    add_num(out, c->flops ? c->flops(ctx) : 0);
    nf_strbuf_addf(out, ", \"bytes\": ");
    add_num(out, c->bytes ? c->bytes(ctx) : 0);
    nf_strbuf_addf(out, ", \"rss_baseline\": %" PRIu64 ", \"rss_after_setup\": %" PRIu64
                   ", \"rss_peak_sampled\": %" PRIu64 ", \"rss_peak_getrusage\": %" PRIu64,
                   baseline, after_setup, peak, (uint64_t)ru.ru_maxrss * 1024);
    if (c->describe)
        c->describe(ctx, state, out);
    nf_strbuf_addf(out, "}");
fail:
    if (c->teardown)
        c->teardown(state);
    free(times);
    return rc;
}

/* `--run-condition DOMAIN/NAME`: one JSON line on stdout, exit 0; or
 * {"error": ...} and exit 1. */
static int child_main(const struct bench_opts *o)
{
    const struct nf_bench_domain *dom = NULL;
    const struct nf_bench_condition *cond = NULL;
    struct nf_bench_ctx ctx = { 0 };
    struct nf_error err = { 0 };
    struct nf_strbuf out;
    char *data_dir = NULL, *work_dir = NULL;
    const char *slash = strchr(o->run_condition, '/');
    int rc = 0;

    nf_strbuf_init(&out);
    nf_log_quiet = true;
    if (slash) {
        char domain[64];
        snprintf(domain, sizeof domain, "%.*s", (int)(slash - o->run_condition), o->run_condition);
        dom = nf_bench_domain_find(domain);
        for (cond = dom ? dom->conditions : NULL; cond && cond->name; cond++)
            if (strcmp(cond->name, slash + 1) == 0)
                break;
    }
    if (!o->scratch || !cond || !cond->name) {
        rc = NF_FAIL(&err, NF_EUSAGE, "no condition '%s' (or no --scratch)", o->run_condition);
        goto fail;
    }
    ctx.cond = cond;
    memcpy(ctx.size, o->have_size ? o->size : cond->size, sizeof ctx.size);
    ctx.threads = o->threads;
    data_dir = data_dir_of(o->scratch, dom->name, ctx.size);
    work_dir = work_dir_of(o->scratch, dom->name, cond->name, ctx.size);
    if (!data_dir || !work_dir) {
        rc = NF_FAIL(&err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    ctx.data_dir = data_dir;
    ctx.work_dir = work_dir;
    NF_TRY(rc = nf_mkdirs(data_dir, &err));
    NF_TRY(rc = nf_mkdirs(work_dir, &err));
    if (o->prepare) {
        if (cond->prepare)
            NF_TRY(rc = cond->prepare(&ctx, &err));
        nf_strbuf_addf(&out, "{\"prepared\": true}");
    } else {
        NF_TRY(rc = child_measure(&ctx, o->reps, &out, &err));
    }
fail:
    if (rc < 0) {
        char msg[1400];
        nf_error_format(&err, msg, sizeof msg);
        nf_strbuf_release(&out);
        nf_strbuf_init(&out);
        nf_strbuf_addf(&out, "{\"error\": ");
        nf_strbuf_add_json_str(&out, msg);
        nf_strbuf_addf(&out, "}");
    }
    printf("%s\n", out.buf ? out.buf : "{\"error\": \"out of memory\"}");
    nf_strbuf_release(&out);
    free(data_dir);
    free(work_dir);
    return rc < 0 ? 1 : 0;
}

/* ---- the parent ---- */

/* Run argv[0] with argv, stdout captured into *out (owned); the exit status
 * (128 + signal when killed) in *status. -1 when it could not start. */
static int spawn_capture(char *const argv[], char **out, int *status)
{
    posix_spawn_file_actions_t fa;
    struct nf_strbuf sb;
    int fds[2];
    pid_t pid;
    char buf[4096];
    ssize_t got;

    *out = NULL;
    if (pipe(fds) != 0)
        return -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return -1;
    }
    nf_strbuf_init(&sb);
    while ((got = read(fds[0], buf, sizeof buf)) != 0) {
        if (got > 0)
            nf_strbuf_add(&sb, buf, (size_t)got);
        else if (errno != EINTR)
            break;
    }
    close(fds[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    *out = nf_strbuf_detach(&sb);
    return 0;
}

/* The last non-empty line of text, parsed; NULL when it is not a JSON object. */
static struct nf_ynode *parse_last_line(char *text, const char **line)
{
    size_t len = text ? strlen(text) : 0;
    struct nf_error err = { 0 };
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
        text[--len] = '\0';
    char *start = text ? strrchr(text, '\n') : NULL;
    start = start ? start + 1 : text;
    *line = start;
    if (!start || start[0] != '{')
        return NULL;
    struct nf_ynode *n = nf_yaml_parse(start, strlen(start), "json", &err);
    if (n && n->type != NF_Y_MAP) {
        nf_ynode_free(n);
        n = NULL;
    }
    return n;
}

struct matched_rate { int64_t mnk[3]; double gflops; };

struct bench_run {
    const struct bench_opts *o;
    char *self;                 /* this executable */
    char *scratch;
    char *peers;
    double sgemm_2048;          /* GFLOP/s, NAN until measured */
    struct matched_rate *rates;
    size_t n_rates;
    int failures;
    struct nf_strbuf json;      /* the result file */
};

/* A child result: the tree, the line itself (inside *text) and its text. */
struct child_result {
    char *text;
    const char *line;
    struct nf_ynode *tree;
    int status;
};

static void child_result_release(struct child_result *r)
{
    nf_ynode_free(r->tree);
    free(r->text);
    memset(r, 0, sizeof *r);
}

/* Start this program as a condition child; true when it printed a result. */
static bool run_child(struct bench_run *run, const struct nf_bench_domain *dom,
                      const struct nf_bench_condition *cond, const int64_t *size,
                      bool prepare, struct child_result *res)
{
    char target[256], reps[16], threads[16], size_arg[128] = "";
    struct nf_strbuf sb;
    char *argv[16];
    int n = 0;
    snprintf(target, sizeof target, "%s/%s", dom->name, cond->name);
    snprintf(reps, sizeof reps, "%d", run->o->reps);
    snprintf(threads, sizeof threads, "%d", run->o->threads);
    nf_strbuf_init(&sb);
    add_size(&sb, size, ",");
    snprintf(size_arg, sizeof size_arg, "%s", sb.buf ? sb.buf : "");
    nf_strbuf_release(&sb);
    argv[n++] = run->self;
    argv[n++] = "bench";
    argv[n++] = "--run-condition";
    argv[n++] = target;
    argv[n++] = "--scratch";
    argv[n++] = run->scratch;
    argv[n++] = "--reps";
    argv[n++] = reps;
    argv[n++] = "--threads";
    argv[n++] = threads;
    argv[n++] = "--size";
    argv[n++] = size_arg;
    if (prepare)
        argv[n++] = "--prepare";
    argv[n] = NULL;
    memset(res, 0, sizeof *res);
    if (spawn_capture(argv, &res->text, &res->status) < 0) {
        res->line = "could not start the measuring process";
        return false;
    }
    res->tree = parse_last_line(res->text, &res->line);
    return res->tree && res->status == 0;
}

/* Why a child failed, for the result file and the terminal. */
static void add_child_error(struct nf_strbuf *sb, const struct child_result *r)
{
    const char *msg = r->tree ? nf_ypath_str(r->tree, "error") : NULL;
    char fallback[64];
    if (!msg) {
        snprintf(fallback, sizeof fallback, "the measuring process exited with status %d", r->status);
        msg = fallback;
    }
    nf_strbuf_add_json_str(sb, msg);
    fprintf(stderr, "nlflow bench:   failed: %s\n", msg);
}

/* GFLOP/s of the shape-matched SGEMM, measured once per shape. */
static double matched_rate(struct bench_run *run, const int64_t mnk[3])
{
    for (size_t i = 0; i < run->n_rates; i++)
        if (!memcmp(run->rates[i].mnk, mnk, sizeof run->rates[i].mnk))
            return run->rates[i].gflops;
    const struct nf_bench_domain *dom = nf_bench_domain_find("sgemm");
    const struct nf_bench_condition *c = dom->conditions;
    while (c->name && !(c->runs & NF_BENCH_SHAPE))
        c++;
    int64_t size[4] = { mnk[0], mnk[1], mnk[2], 0 };
    struct child_result r = { 0 };
    double gflops = NAN;
    if (c->name && run_child(run, dom, c, size, false, &r))
        gflops = nf_ypath_num(r.tree, "flops") / nf_ypath_num(r.tree, "median_s") * 1e-9;
    child_result_release(&r);
    struct matched_rate *grown = realloc(run->rates, (run->n_rates + 1) * sizeof *grown);
    if (grown) {
        run->rates = grown;
        run->rates[run->n_rates].gflops = gflops;
        memcpy(run->rates[run->n_rates++].mnk, mnk, sizeof grown->mnk);
    }
    return gflops;
}

/* The peer of a condition, run side by side: ",\"peer\": {...}"; returns its
 * median seconds (NAN when it did not run). A missing interpreter, script or
 * Python package is "skipped", never a failure of the benchmark. */
static double run_peer(struct bench_run *run, const struct nf_bench_domain *dom,
                       const struct nf_bench_condition *cond, const int64_t *size)
{
    struct nf_strbuf *sb = &run->json;
    char *script = nf_path_join(run->peers, cond->peer);
    char *data_dir = data_dir_of(run->scratch, dom->name, size);
    char reps[16], threads[16];
    struct child_result r = { 0 };
    double seconds = NAN;
    const char *skipped = NULL;

    nf_strbuf_addf(sb, ",\n       \"peer\": {\"script\": ");
    nf_strbuf_add_json_str(sb, cond->peer);
    if (!script || !data_dir)
        skipped = "out of memory";
    else if (access(PEER_PYTHON, X_OK) != 0)
        skipped = "no " PEER_PYTHON;
    else if (access(script, R_OK) != 0)
        skipped = "peer script not found (see --peers)";
    if (!skipped) {
        snprintf(reps, sizeof reps, "%d", run->o->reps);
        snprintf(threads, sizeof threads, "%d", run->o->threads);
        char *argv[] = { PEER_PYTHON, script, "--data", data_dir, "--mode", (char *)cond->peer_mode,
                         "--reps", reps, "--threads", threads, NULL };
        if (spawn_capture(argv, &r.text, &r.status) < 0)
            skipped = "could not start " PEER_PYTHON;
        else
            r.tree = parse_last_line(r.text, &r.line);
    }
    if (skipped || (r.tree && nf_ypath_str(r.tree, "skipped"))) {
        const char *why = skipped ? skipped : nf_ypath_str(r.tree, "skipped");
        nf_strbuf_addf(sb, ", \"status\": \"skipped\", \"reason\": ");
        nf_strbuf_add_json_str(sb, why);
        fprintf(stderr, "nlflow bench:   peer skipped: %s\n", why);
    } else if (!r.tree || r.status != 0 || !isfinite(nf_ypath_num(r.tree, "median_s"))) {
        nf_strbuf_addf(sb, ", \"status\": \"failed\", \"reason\": \"exited with status %d\"", r.status);
        fprintf(stderr, "nlflow bench:   peer failed (exit status %d)\n", r.status);
    } else {
        seconds = nf_ypath_num(r.tree, "median_s");
        nf_strbuf_addf(sb, ", \"status\": \"ok\", \"result\": %s", r.line);
    }
    nf_strbuf_addf(sb, "}");
    child_result_release(&r);
    free(script);
    free(data_dir);
    return seconds;
}

static void add_ratio(struct nf_strbuf *sb, const char *key, double x)
{
    nf_strbuf_addf(sb, ", \"%s\": ", key);
    add_num(sb, x);
}

/* Measure one condition and append its JSON object. */
static void run_condition(struct bench_run *run, const struct nf_bench_domain *dom,
                          const struct nf_bench_condition *cond, bool first)
{
    struct nf_strbuf *sb = &run->json;
    struct child_result res = { 0 };
    struct nf_bench_ctx ctx = { .cond = cond, .threads = run->o->threads };
    memcpy(ctx.size, cond->size, sizeof ctx.size);

    fprintf(stderr, "nlflow bench: %s/%s ...\n", dom->name, cond->name);
    nf_strbuf_addf(sb, "%s\n      {\"name\": ", first ? "" : ",");
    nf_strbuf_add_json_str(sb, cond->name);
    nf_strbuf_addf(sb, ", \"device\": \"%s\", \"size\": [", cond->gpu ? "gpu" : "cpu");
    add_size(sb, cond->size, ", ");
    nf_strbuf_addf(sb, "]");
    if (cond->gpu) {
        char why[256];
        if (!nf_cuda_available(why, sizeof why)) {
            nf_strbuf_addf(sb, ", \"status\": \"skipped\", \"reason\": ");
            nf_strbuf_add_json_str(sb, why);
            nf_strbuf_addf(sb, "}");
            fprintf(stderr, "nlflow bench:   skipped: %s\n", why);
            return;
        }
    }
    if (cond->prepare && !run_child(run, dom, cond, cond->size, true, &res))
        goto failed;
    child_result_release(&res);
    if (!run_child(run, dom, cond, cond->size, false, &res))
        goto failed;

    double t = nf_ypath_num(res.tree, "median_s"), flops = nf_ypath_num(res.tree, "flops");
    double gflops = flops > 0 ? flops / t * 1e-9 : NAN;
    if (strcmp(dom->name, "sgemm") == 0 && isnan(run->sgemm_2048))
        run->sgemm_2048 = gflops;   /* the first sgemm row is the 2048³ yardstick */
    nf_strbuf_addf(sb, ", \"status\": \"ok\"");
    add_ratio(sb, "gflops", gflops);
    add_ratio(sb, "gbytes_per_s", nf_ypath_num(res.tree, "bytes") / t * 1e-9);
    add_ratio(sb, "sgemm_2048_ratio", gflops / run->sgemm_2048);
    fprintf(stderr, "nlflow bench:   median %.4g s (%.4g-%.4g)", t,
            nf_ypath_num(res.tree, "min_s"), nf_ypath_num(res.tree, "max_s"));
    if (isfinite(gflops))
        fprintf(stderr, ", %.3g GFLOP/s", gflops);
    fprintf(stderr, ", peak RSS %.1f MiB over a %.1f MiB baseline\n",
            (nf_ypath_num(res.tree, "rss_peak_sampled") - nf_ypath_num(res.tree, "rss_baseline")) / 1048576.0,
            nf_ypath_num(res.tree, "rss_baseline") / 1048576.0);
    if (cond->matched_sgemm) {
        int64_t mnk[3];
        cond->matched_sgemm(&ctx, mnk);
        double rate = matched_rate(run, mnk);
        nf_strbuf_addf(sb, ", \"matched_sgemm\": {\"m\": %" PRId64 ", \"n\": %" PRId64
                       ", \"k\": %" PRId64 ", \"gflops\": ", mnk[0], mnk[1], mnk[2]);
        add_num(sb, rate);
        nf_strbuf_addf(sb, "}");
        add_ratio(sb, "matched_sgemm_ratio", gflops / rate);
    }
    nf_strbuf_addf(sb, ",\n       \"measure\": %s", res.line);
    if (cond->peer) {
        double peer = run_peer(run, dom, cond, cond->size);
        add_ratio(sb, "speedup", peer / t);
        if (isfinite(peer))
            fprintf(stderr, "nlflow bench:   peer %.4g s: speedup %.2fx\n", peer, peer / t);
        /* the same peer time against the node alone and against a whole `nlflow run` */
        double node = nf_ypath_num(res.tree, "node_median_s"), whole = nf_ypath_num(res.tree, "process_median_s");
        if (isfinite(node))
            add_ratio(sb, "node_speedup", peer / node);
        if (isfinite(whole))
            add_ratio(sb, "process_speedup", peer / whole);
        if (isfinite(peer) && (isfinite(node) || isfinite(whole)))
            fprintf(stderr, "nlflow bench:   node %.4g s: %.2fx; whole process %.4g s: %.2fx\n", node, peer / node,
                    whole, peer / whole);
    }
    nf_strbuf_addf(sb, "}");
    child_result_release(&res);
    return;
failed:
    run->failures++;
    nf_strbuf_addf(sb, ", \"status\": \"failed\", \"error\": ");
    add_child_error(sb, &res);
    nf_strbuf_addf(sb, "}");
    child_result_release(&res);
}

/* Whether the condition's name contains one of --conditions' comma-separated parts (all do without it). */
static bool name_selected(const char *list, const char *name)
{
    if (!list)
        return true;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        for (const char *h = name; len && *h; h++)
            if (strncmp(h, p, len) == 0)
                return true;
        p += len + (p[len] == ',');
    }
    return false;
}

static bool condition_selected(const struct bench_opts *o, const struct nf_bench_domain *dom,
                               const struct nf_bench_condition *c)
{
    /* The 2048³ SGEMM is the yardstick: measured whatever --device and --conditions say. */
    bool yardstick = strcmp(dom->name, "sgemm") == 0 && c == dom->conditions;
    bool device = strcmp(o->device, "all") == 0 || (strcmp(o->device, "gpu") == 0) == c->gpu;
    return (c->runs & (o->quick ? NF_BENCH_QUICK : NF_BENCH_FULL)) &&
           (yardstick || (device && name_selected(o->conditions, c->name)));
}

static void run_domain(struct bench_run *run, const struct nf_bench_domain *dom, bool first)
{
    struct nf_strbuf *sb = &run->json;
    bool any = false;
    nf_strbuf_addf(sb, "%s\n    {\"name\": ", first ? "" : ",");
    nf_strbuf_add_json_str(sb, dom->name);
    nf_strbuf_addf(sb, ", \"summary\": ");
    nf_strbuf_add_json_str(sb, dom->summary);
    if (!dom->conditions) {
        char reason[96];
        snprintf(reason, sizeof reason, "not implemented yet (issue %d)", dom->issue);
        nf_strbuf_addf(sb, ", \"status\": \"skipped\", \"reason\": ");
        nf_strbuf_add_json_str(sb, reason);
        nf_strbuf_addf(sb, "}");
        fprintf(stderr, "nlflow bench: %s: skipped: %s\n", dom->name, reason);
        return;
    }
    for (const struct nf_bench_condition *c = dom->conditions; c->name; c++)
        any |= condition_selected(run->o, dom, c);
    if (!any) {
        nf_strbuf_addf(sb, ", \"status\": \"skipped\", \"reason\": \"no %s conditions\"}",
                       run->o->device);
        fprintf(stderr, "nlflow bench: %s: skipped: no %s conditions\n", dom->name, run->o->device);
        return;
    }
    nf_strbuf_addf(sb, ", \"size_label\": ");
    nf_strbuf_add_json_str(sb, dom->size_label);
    nf_strbuf_addf(sb, ", \"status\": \"measured\", \"conditions\": [");
    any = false;
    for (const struct nf_bench_condition *c = dom->conditions; c->name && !bench_interrupted; c++)
        if (condition_selected(run->o, dom, c)) {
            run_condition(run, dom, c, !any);
            any = true;
        }
    nf_strbuf_addf(sb, "]}");
}

static void add_key_str(struct nf_strbuf *sb, const char *key, const char *value)
{
    nf_strbuf_addf(sb, "\"%s\": ", key);
    if (value)
        nf_strbuf_add_json_str(sb, value);
    else
        nf_strbuf_addf(sb, "null");
}

/* The 1-minute load average: how busy the (shared) machine was around the run. */
static double load_average(void)
{
    double load;
    return getloadavg(&load, 1) == 1 ? load : NAN;
}

/* Who measured: everything needed to compare two result files fairly. */
static void add_machine(struct nf_strbuf *sb, const char *host, int argc, char **argv,
                        const struct bench_opts *o)
{
    static const char *const env_vars[] = { "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                             "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS" };
    char cpu[256], date[32], why[256], gpu[512];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    nf_cpu_model(cpu, sizeof cpu);
    if (nf_cuda_available(why, sizeof why))
        nf_cuda_describe(gpu, sizeof gpu);
    else
        snprintf(gpu, sizeof gpu, "none (%s)", why);

    nf_strbuf_addf(sb, "{\n  \"nlflow_bench\": 1,\n  ");
    add_key_str(sb, "date", date);
    nf_strbuf_addf(sb, ",\n  \"command\": ");
    struct nf_strbuf cmd;
    nf_strbuf_init(&cmd);
    nf_strbuf_addf(&cmd, "nlflow");
    for (int i = 0; i < argc; i++)
        nf_strbuf_addf(&cmd, " %s", argv[i]);
    nf_strbuf_add_json_str(sb, cmd.buf);
    nf_strbuf_release(&cmd);
    nf_strbuf_addf(sb, ",\n  \"host\": {");
    add_key_str(sb, "name", host);
    nf_strbuf_addf(sb, ", ");
    add_key_str(sb, "cpu", cpu);
    nf_strbuf_addf(sb, ", \"cores\": %d, \"memory_bytes\": %" PRIu64 ",\n           ",
                   nf_cpu_count(), nf_physical_memory());
    add_key_str(sb, "blas", nf_blas_name());
    nf_strbuf_addf(sb, ", ");
    add_key_str(sb, "blas_core", nf_blas_core());
    nf_strbuf_addf(sb, ", \"blas_threads\": %d,\n           \"env\": {", nf_blas_threads());
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++) {
        nf_strbuf_addf(sb, i ? ", " : "");
        add_key_str(sb, env_vars[i], getenv(env_vars[i]));
    }
    nf_strbuf_addf(sb, "},\n           ");
    add_key_str(sb, "compiler", COMPILER);
    nf_strbuf_addf(sb, ", ");
    add_key_str(sb, "gpu", gpu);
    nf_strbuf_addf(sb, "},\n  \"nlflow\": {");
    add_key_str(sb, "version", NF_VERSION);
    nf_strbuf_addf(sb, ", ");
    add_key_str(sb, "commit", NF_GIT_COMMIT);
    nf_strbuf_addf(sb, "},\n  \"options\": {\"quick\": %s, \"reps\": %d, \"device\": \"%s\", "
                   "\"threads\": %d},\n  \"load_average_start\": ", o->quick ? "true" : "false",
                   o->reps, o->device, o->threads);
    add_num(sb, load_average());
}

/* The folder of this executable's source tree's bench/peers, else ./bench/peers. */
static char *default_peers_dir(const char *self)
{
    char *bin = nf_path_dirname(self);
    char *dir = bin ? nf_asprintf("%s/../bench/peers", bin) : NULL;
    struct stat st;
    free(bin);
    if (dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return dir;
    free(dir);
    return nf_strdup("bench/peers");
}

/* The docs/ folder of the source tree whose bench/results/ is results_dir,
 * or NULL: a result file elsewhere regenerates no documentation unless asked
 * (--docs), so that a run into a scratch folder never rewrites a checkout's
 * docs/performance.md. Owned. */
static char *source_tree_docs(const char *results_dir)
{
    char *abs = nf_realpath(results_dir);
    char *bench = abs ? nf_path_dirname(abs) : NULL;
    char *tree = bench ? nf_path_dirname(bench) : NULL;
    char *docs = tree ? nf_path_join(tree, "docs") : NULL;
    struct stat st;
    bool ok = docs && strcmp(abs + strlen(bench), "/results") == 0 &&
              strcmp(bench + strlen(tree), strcmp(tree, "/") ? "/bench" : "bench") == 0 &&
              stat(docs, &st) == 0 && S_ISDIR(st.st_mode);
    free(abs);
    free(bench);
    free(tree);
    if (!ok) {
        free(docs);
        return NULL;
    }
    return docs;
}

static int parent_main(int argc, char **argv, const struct bench_opts *o)
{
    struct bench_run run = { .o = o, .sgemm_2048 = NAN };
    struct nf_error err = { 0 };
    char host[256] = "localhost", *out = NULL, *results_dir = NULL, *docs = NULL;
    bool own_scratch = false;
    int status = 0;

    gethostname(host, sizeof host - 1);
    out = o->out ? nf_strdup(o->out) : nf_asprintf("bench/results/%s.json", host);
    results_dir = out ? nf_path_dirname(out) : NULL;
    if (!out || !results_dir) {
        status = 1;
        goto done;
    }
    if (o->report_only)
        goto report;
    /* Now, not after a long run: a result folder that cannot be made. */
    if (nf_mkdirs(results_dir, &err) < 0)
        goto error;

    nf_strbuf_init(&run.json);
    run.self = realpath("/proc/self/exe", NULL);
    run.peers = o->peers ? nf_strdup(o->peers) : run.self ? default_peers_dir(run.self) : NULL;
    if (o->scratch) {
        run.scratch = nf_strdup(o->scratch);
        if (run.scratch && nf_mkdirs(run.scratch, &err) < 0)
            goto error;
    } else {
        const char *tmp = getenv("TMPDIR");
        run.scratch = nf_asprintf("%s/nlflow-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        own_scratch = run.scratch && mkdtemp(run.scratch);
        if (run.scratch && !own_scratch) {
            NF_FAIL(&err, NF_EIO, "cannot create a scratch folder '%s': %s", run.scratch, strerror(errno));
            goto error;
        }
    }
    if (!run.self || !run.peers || !run.scratch) {
        NF_FAIL(&err, NF_EIO, "cannot find this executable or allocate the scratch folder name");
        goto error;
    }
    fprintf(stderr, "nlflow bench: %s run, %d repetition%s, scratch %s\n", o->quick ? "quick" : "full",
            o->reps, o->reps == 1 ? "" : "s", run.scratch);

    signal(SIGINT, on_sigint);
    add_machine(&run.json, host, argc, argv, o);
    nf_strbuf_addf(&run.json, ",\n  \"domains\": [");
    bool first = true;
    for (const struct nf_bench_domain *d = nf_bench_domains; d->name && !bench_interrupted; d++)
        if (domain_selected(o, d->name)) {
            run_domain(&run, d, first);
            first = false;
        }
    nf_strbuf_addf(&run.json, "],\n  \"sgemm_2048_gflops\": ");
    add_num(&run.json, run.sgemm_2048);
    nf_strbuf_addf(&run.json, ",\n  \"load_average_end\": ");
    add_num(&run.json, load_average());
    nf_strbuf_addf(&run.json, "\n}\n");
    signal(SIGINT, SIG_DFL);
    if (bench_interrupted) {
        fprintf(stderr, "nlflow bench: interrupted; no result file written\n");
        status = 130;
        goto done;
    }
    if (run.json.oom) {
        NF_FAIL(&err, NF_ENOMEM, "out of memory");
        goto error;
    }
    if (nf_write_file_atomic(out, run.json.buf, run.json.len, &err) < 0)
        goto error;
    fprintf(stderr, "nlflow bench: results written to %s\n", out);
    status = run.failures ? 1 : 0;
report:
    docs = o->docs ? nf_strdup(o->docs) : o->report_only ? nf_strdup("docs") : o->quick ? NULL
                                                                            : source_tree_docs(results_dir);
    if (!docs) {
        fprintf(stderr, "nlflow bench: documentation left as it is (%s; --docs DIR regenerates "
                "DIR/performance.md)\n", o->quick ? "a --quick run" : "the result file is not in a source tree's "
                "bench/results/");
        goto done;
    }
    if (nf_bench_report(results_dir, docs, &err) < 0)
        goto error;
    fprintf(stderr, "nlflow bench: %s/performance.md regenerated from %s/*.json\n", docs, results_dir);
    goto done;
error:
    nf_error_print(&err);
    status = 1;
done:
    if (own_scratch)
        remove_tree(run.scratch);
    nf_strbuf_release(&run.json);
    free(run.rates);
    free(run.scratch);
    free(run.peers);
    free(run.self);
    free(results_dir);
    free(docs);
    free(out);
    return status;
}

int nf_bench_main(int argc, char **argv)
{
    struct bench_opts o;
    int st = parse_opts(argc, argv, &o);
    if (st)
        return st < 0 ? 0 : st;
    /* the SGEMM yardstick and the peers' shape-matched GEMMs use the BLAS's
     * own threads (nlflow starts with one, nf_blas_quiesce); nodes set theirs */
    nf_blas_set_threads(o.threads);
    if (o.run_condition)
        return child_main(&o);
    return parent_main(argc, argv, &o);
}

int nf_bench_run_pipeline(const char *path, int threads, bool with_cache, struct nf_error *err)
{
    return nf_bench_run_pipeline_node(path, threads, with_cache, NULL, NULL, err);
}

int nf_bench_run_pipeline_node(const char *path, int threads, bool with_cache, const char *node, double *node_s,
                               struct nf_error *err)
{
    struct nf_overrides ov = { .device = -1, .memory = -1, .threads = -1 };
    struct nf_diags d;
    struct nf_cache *cache = NULL;
    struct nf_pipeline *p;
    int rc;
    nf_diags_init(&d);
    nf_log_quiet = true;
    p = nf_pipeline_load(path, &ov, &d);
    if (!p || nf_resolve_shapes(p, &d) < 0 || nf_place(p, false, &d) < 0 ||
        nf_plan_memory(p, &d) < 0) {
        if (d.n > 0) {
            *err = d.v[0];
            rc = err->code;
        } else {
            rc = NF_FAIL(err, NF_EBUG, "'%s' did not plan, with no message", path);
        }
        goto fail;
    }
    if (with_cache) {
        char *cpath = nf_path_join(p->dir, p->settings.cache);
        struct nf_cache_opts co = { 0 };
        rc = cpath ? nf_cache_open(cpath, &co, &cache, err) : NF_FAIL(err, NF_ENOMEM, "out of memory");
        free(cpath);
        if (rc < 0)
            goto fail;
    }
    struct nf_exec_opts eo = { .threads = threads, .cache = cache };
    rc = nf_execute(p, &eo, err);
    for (size_t i = 0; rc == 0 && node && node_s && i < p->n_nodes; i++)
        if (strcmp(p->nodes[i].id, node) == 0)
            *node_s = p->nodes[i].run_s;
fail:
    nf_cache_close(cache);
    nf_diags_release(&d);
    nf_pipeline_free(p);
    return rc;
}

/* ---- conditions that time a pipeline file ---- */

static int write_pipeline_v(const struct nf_bench_ctx *ctx, const char *name, char **path, struct nf_error *err,
                            const char *nodes_fmt, va_list ap)
{
    struct nf_strbuf y;
    char *nodes = NULL;
    int rc = 0;
    nf_strbuf_init(&y);
    *path = nf_path_join(ctx->work_dir, "pipeline.yaml");
    if (vasprintf(&nodes, nodes_fmt, ap) < 0)
        nodes = NULL;
    nf_strbuf_addf(&y,
                   "nlflow: 1\n"
                   "name: %s\n"
                   "settings: {memory: %" PRIu64 ", threads: %d, outputs: out}\n"
                   "nodes:\n"
                   "%s",
                   name, nf_physical_memory() / 2, ctx->threads, nodes ? nodes : "");
    if (!*path || !nodes || y.oom)
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    else
        rc = nf_write_file_atomic(*path, y.buf, y.len, err);
    if (rc < 0) {
        free(*path);
        *path = NULL;
    }
    free(nodes);
    nf_strbuf_release(&y);
    return rc;
}

int nf_bench_write_pipeline(const struct nf_bench_ctx *ctx, const char *name, char **path, struct nf_error *err,
                            const char *nodes_fmt, ...)
{
    va_list ap;
    va_start(ap, nodes_fmt);
    int rc = write_pipeline_v(ctx, name, path, err, nodes_fmt, ap);
    va_end(ap);
    return rc;
}

/* Runs kept for a node's own times: the warm-up and up to this many timed;
 * whole-process runs after the timed ones: as many as the timed runs, at most
 * PROCESS_RUNS (a short condition's timed runs can number hundreds). */
enum { NODE_RUNS = MAX_REPS + 1, PROCESS_RUNS = 10 };

struct pipeline_state {
    char *pipeline;
    int threads;
    const char *node;           /* the node whose own time is kept; NULL: none */
    double node_s[NODE_RUNS];   /* its time per run, warm-up first */
    int n_runs;
};

static int pipeline_setup_v(const struct nf_bench_ctx *ctx, const char *name, const char *node, void **state,
                            struct nf_error *err, const char *nodes_fmt, va_list ap)
{
    struct pipeline_state *st = calloc(1, sizeof *st);
    if (!st)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    st->threads = ctx->threads;
    st->node = node;
    int rc = write_pipeline_v(ctx, name, &st->pipeline, err, nodes_fmt, ap);
    if (rc < 0) {
        nf_bench_pipeline_teardown(st);
        return rc;
    }
    *state = st;
    return 0;
}

int nf_bench_pipeline_setup(const struct nf_bench_ctx *ctx, const char *name, void **state, struct nf_error *err,
                            const char *nodes_fmt, ...)
{
    va_list ap;
    va_start(ap, nodes_fmt);
    int rc = pipeline_setup_v(ctx, name, NULL, state, err, nodes_fmt, ap);
    va_end(ap);
    return rc;
}

int nf_bench_pipeline_setup_node(const struct nf_bench_ctx *ctx, const char *name, const char *node, void **state,
                                 struct nf_error *err, const char *nodes_fmt, ...)
{
    va_list ap;
    va_start(ap, nodes_fmt);
    int rc = pipeline_setup_v(ctx, name, node, state, err, nodes_fmt, ap);
    va_end(ap);
    return rc;
}

int nf_bench_pipeline_run_once(void *state, struct nf_error *err)
{
    struct pipeline_state *st = state;
    double node_s = NAN;
    int rc = nf_bench_run_pipeline_node(st->pipeline, st->threads, false, st->node, &node_s, err);
    if (rc == 0 && st->node && st->n_runs < NODE_RUNS)
        st->node_s[st->n_runs++] = node_s;
    return rc;
}

/* One fresh `nlflow run --quiet --no-cache PIPELINE` of this executable, from
 * the exec to the exit: *wall_s, and *cpu_s its user + system time. Its stdout
 * and stderr go to /dev/null: this process's stdout is its JSON line. */
static int time_process_run(const char *pipeline, double *wall_s, double *cpu_s, struct nf_error *err)
{
    char *argv[] = { "nlflow", "run", "--quiet", "--no-cache", (char *)pipeline, NULL };
    posix_spawn_file_actions_t fa;
    struct rusage ru;
    pid_t pid;
    int ws = 0;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    double t0 = nf_now();
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return NF_FAIL(err, NF_EIO, "cannot start `nlflow run %s`: %s", pipeline, strerror(rc));
    while (wait4(pid, &ws, 0, &ru) < 0)
        if (errno != EINTR)
            return NF_FAIL(err, NF_EIO, "cannot wait for `nlflow run %s`: %s", pipeline, strerror(errno));
    *wall_s = nf_now() - t0;
    *cpu_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
             1e-6 * (double)ru.ru_stime.tv_usec;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return NF_FAIL(err, NF_EIO, "`nlflow run --no-cache %s` failed (status %d)", pipeline,
                       WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws));
    return 0;
}

/* ", \"KEY\": [t...]" in run order, then ", \"MEDIAN_KEY\": median". */
static void add_times(struct nf_strbuf *json, const char *key, const char *median_key, const double *t, int n)
{
    double sorted[NODE_RUNS];
    nf_strbuf_addf(json, ", \"%s\": [", key);
    for (int r = 0; r < n; r++) {
        nf_strbuf_addf(json, r ? ", " : "");
        add_num(json, t[r]);
    }
    memcpy(sorted, t, (size_t)n * sizeof *t);
    nf_strbuf_addf(json, "], \"%s\": ", median_key);
    add_num(json, median(sorted, n));
}

void nf_bench_pipeline_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    (void)ctx;
    struct pipeline_state *st = state;
    int timed = st->n_runs - 1;   /* the warm-up is not a timed run */
    if (st->node && timed >= 1)
        add_times(json, "node_times_s", "node_median_s", st->node_s + 1, timed);
    /* as many as the timed runs (the node's, or one when no node is kept) */
    int runs = timed < 1 ? 1 : timed > PROCESS_RUNS ? PROCESS_RUNS : timed;
    double wall[PROCESS_RUNS], cpu[PROCESS_RUNS];
    struct nf_error err = { 0 };
    for (int r = 0; r < runs; r++)
        if (time_process_run(st->pipeline, &wall[r], &cpu[r], &err) < 0) {
            char msg[1400];
            nf_error_format(&err, msg, sizeof msg);
            nf_strbuf_addf(json, ", \"process_error\": ");
            nf_strbuf_add_json_str(json, msg);
            return;
        }
    add_times(json, "process_times_s", "process_median_s", wall, runs);
    add_times(json, "process_cpu_s", "process_cpu_median_s", cpu, runs);
}

void nf_bench_pipeline_teardown(void *state)
{
    struct pipeline_state *st = state;
    if (!st)
        return;
    free(st->pipeline);
    free(st);
}
