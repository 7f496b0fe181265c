/* events.c — interrupts, progress and the --json event stream (events.h).
 *
 * Interrupts: the signal handler only stores the signal number, writes a short
 * message with write(2) and, on a second signal, leaves with _exit(130): all
 * async-signal-safe. Everything else (stopping nodes, saying how many chunks
 * were saved, exit status 130) happens in ordinary code that polls the flag.
 *
 * Progress: a node reports done/total whenever it likes; this file throttles
 * to what a person or a program wants to read: one redrawn line on a terminal
 * (at most 5 redraws a second), a plain line at most every 5 s when stderr is
 * a file or pipe, and JSON progress events at most twice a second per node.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "cache/exec_cache.h"

/* ---- interrupts ---- */

volatile sig_atomic_t nf_interrupted;

static void write_str(const char *s)
{
    size_t n = strlen(s);   /* strlen is async-signal-safe since POSIX.1-2008 */
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void on_interrupt(int sig)
{
    if (nf_interrupted) {
        write_str("\nnlflow: second interrupt: exiting now; finished checkpoint chunks are kept\n");
        _exit(130);
    }
    nf_interrupted = sig;
    write_str(sig == SIGTERM ? "\nnlflow: terminated: stopping at the next block of work; finished "
                               "checkpoint chunks are kept\n"
                             : "\nnlflow: interrupted: stopping at the next block of work; finished "
                               "checkpoint chunks are kept (Ctrl-C again to exit now)\n");
}

void nf_interrupt_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;   /* reads and sqlite calls go on; nodes poll the flag */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void nf_interrupt_restore(void)
{
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

const char *nf_interrupt_signal_name(void)
{
    int s = nf_interrupted;
    return s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : s ? "signal" : "";
}

bool nf_run_interrupted(const struct nf_run *run)
{
    (void)run;   /* one flag per process today; the run is there for per-run cancels */
    return nf_interrupted != 0;
}

void nf_ckpt_total(struct nf_checkpoint *ck, int64_t total)
{
    if (ck)
        ck->total = total;
}

/* ---- JSON events ---- */

bool nf_events_json;
static double events_t0;
static pthread_mutex_t event_lock = PTHREAD_MUTEX_INITIALIZER;

static void warn_event(const char *node, const char *msg)
{
    struct nf_strbuf sb;
    nf_event_begin(&sb, "warning");
    if (node && node[0]) {
        nf_strbuf_addf(&sb, ",\"node\":");
        nf_strbuf_add_json_str(&sb, node);
    }
    nf_strbuf_addf(&sb, ",\"message\":");
    nf_strbuf_add_json_str(&sb, msg);
    nf_event_end(&sb);
}

void nf_events_start(bool json)
{
    nf_events_json = json;
    events_t0 = nf_now();
    nf_warn_hook = json ? warn_event : NULL;
}

void nf_event_begin(struct nf_strbuf *sb, const char *event)
{
    nf_strbuf_init(sb);
    if (!nf_events_json)
        return;
    nf_strbuf_addf(sb, "{\"event\":\"%s\",\"t\":%.3f", event, nf_now() - events_t0);
}

void nf_event_end(struct nf_strbuf *sb)
{
    if (nf_events_json && sb->buf && !sb->oom) {
        nf_strbuf_addf(sb, "}\n");
        pthread_mutex_lock(&event_lock);
        fputs(sb->buf, stdout);
        fflush(stdout);
        pthread_mutex_unlock(&event_lock);
    }
    nf_strbuf_release(sb);
}

void nf_event_add_loc(struct nf_strbuf *sb, const struct nf_loc *loc)
{
    if (!loc || !loc->file)
        return;
    nf_strbuf_addf(sb, ",\"file\":");
    nf_strbuf_add_json_str(sb, loc->file);
    if (loc->line > 0)
        nf_strbuf_addf(sb, ",\"line\":%d", loc->line);
    if (loc->line > 0 && loc->col > 0)
        nf_strbuf_addf(sb, ",\"col\":%d", loc->col);
}

static void error_event(const struct nf_error *e, const char *event, const char *phase)
{
    struct nf_strbuf sb;
    nf_event_begin(&sb, event);
    if (!nf_events_json)
        return;
    if (phase)
        nf_strbuf_addf(&sb, ",\"phase\":\"%s\"", phase);
    if (strcmp(event, "error") == 0)
        nf_strbuf_addf(&sb, ",\"code\":\"%s\",\"exit_status\":%d", nf_err_name(e->code),
                       nf_err_exit_status(e->code));
    if (e->node[0]) {
        nf_strbuf_addf(&sb, ",\"node\":");
        nf_strbuf_add_json_str(&sb, e->node);
    }
    nf_event_add_loc(&sb, &e->loc);
    nf_strbuf_addf(&sb, ",\"message\":");
    nf_strbuf_add_json_str(&sb, e->msg);
    nf_event_end(&sb);
}

void nf_event_error(const struct nf_error *e, const char *phase)
{
    error_event(e, "error", phase);
}

void nf_event_diags(const struct nf_diags *d, size_t first_warning, const char *phase)
{
    if (!nf_events_json)
        return;
    for (size_t i = first_warning; i < d->n_warnings; i++)
        error_event(&d->warnings[i], "warning", phase);
    for (size_t i = 0; i < d->n; i++)
        error_event(&d->v[i], "error", phase);
}

/* ---- progress ---- */

void nf_progress_init(struct nf_progress *pr, const char *node_id, const char *type)
{
    memset(pr, 0, sizeof *pr);
    snprintf(pr->id, sizeof pr->id, "%s", node_id);
    pr->type = type;
    pthread_mutex_init(&pr->lock, NULL);
}

void nf_progress_destroy(struct nf_progress *pr)
{
    pthread_mutex_destroy(&pr->lock);
}

void nf_progress_finish(struct nf_progress *pr)
{
    pthread_mutex_lock(&pr->lock);
    bool drawn = pr->last_tty > 0;
    pr->last_tty = 0;
    pthread_mutex_unlock(&pr->lock);
    if (drawn)
        nf_log_status(NULL);
}

/* "7 s", "3 min 20 s", "2 h 5 min" */
static void format_eta(double s, char *buf, size_t size)
{
    long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(buf, size, "%ld s", t);
    else if (t < 3600)
        snprintf(buf, size, "%ld min %ld s", t / 60, t % 60);
    else
        snprintf(buf, size, "%ld h %ld min", t / 3600, t / 60 % 60);
}

static int stderr_tty = -1;   /* unknown until the first report */

void nf_progress(const struct nf_run *run, int64_t done, int64_t total, const char *unit)
{
    struct nf_progress *pr = run ? run->progress : NULL;
    if (!pr || total <= 0)
        return;
    double now = nf_now();
    pthread_mutex_lock(&pr->lock);
    if (!pr->started) {
        pr->started = true;
        pr->t0 = now;
        pr->done0 = done;
        pr->last_line = now;
        pr->last_json = -1;
        snprintf(pr->unit, sizeof pr->unit, "%s", unit ? unit : "steps");
    }
    if (done > pr->done)   /* reports from several threads may arrive out of order */
        pr->done = done;
    pr->total = total;
    done = pr->done;
    double dt = now - pr->t0;
    double rate = dt > 0.2 && done > pr->done0 ? (double)(done - pr->done0) / dt : 0;
    double eta = rate > 0 ? (double)(total - done) / rate : -1;
    double frac = (double)done / (double)total;
    if (nf_events_json && (pr->last_json < 0 || now - pr->last_json >= 0.5)) {
        pr->last_json = now;
        struct nf_strbuf sb;
        nf_event_begin(&sb, "progress");
        nf_strbuf_addf(&sb, ",\"node\":");
        nf_strbuf_add_json_str(&sb, pr->id);
        nf_strbuf_addf(&sb, ",\"type\":\"%s\",\"done\":%" PRId64 ",\"total\":%" PRId64
                       ",\"unit\":\"%s\",\"fraction\":%.4f", pr->type, done, total, pr->unit, frac);
        if (rate > 0)
            nf_strbuf_addf(&sb, ",\"rate\":%.3f,\"eta_s\":%.1f", rate, eta);
        else
            nf_strbuf_addf(&sb, ",\"rate\":null,\"eta_s\":null");
        nf_event_end(&sb);
    }
    if (!nf_log_quiet) {
        if (stderr_tty < 0)
            stderr_tty = isatty(STDERR_FILENO);
        char rate_s[48] = "", eta_s[48] = "";
        if (rate > 0) {
            snprintf(rate_s, sizeof rate_s, " %.0f/s", rate);
            format_eta(eta, eta_s + 5, sizeof eta_s - 5);
            memcpy(eta_s, " ETA ", 5);
        }
        if (stderr_tty && now - pr->last_tty >= 0.2 && done < total) {
            char line[256];
            pr->last_tty = now;
            snprintf(line, sizeof line, "[%s: %s] %d%% %" PRId64 "/%" PRId64 "%s%s", pr->id, pr->type,
                     (int)floor(frac * 100), done, total, rate_s, eta_s);
            nf_log_status(line);
        } else if (!stderr_tty && now - pr->last_line >= 5.0 && done < total) {
            pr->last_line = now;
            nf_log("nlflow: node '%s' (%s): %d%% %" PRId64 "/%" PRId64 " %s%s%s", pr->id, pr->type,
                   (int)floor(frac * 100), done, total, pr->unit, rate_s, eta_s);
        }
    }
    pthread_mutex_unlock(&pr->lock);
}
