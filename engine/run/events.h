/* events.h — what a run tells the outside world while it runs
 * (engine-internal): interrupts (SIGINT/SIGTERM), progress of long nodes, and
 * the --json event stream (docs/events.md, schemas/events.schema.json).
 * Nodes see only nf_run_interrupted and nf_progress (node.h).
 */
#ifndef NF_EVENTS_H
#define NF_EVENTS_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "node.h"
#include "core/util.h"

/* ---- interrupts ---- */
/* 0, or the number of the first SIGINT/SIGTERM received. */
extern volatile sig_atomic_t nf_interrupted;
/* Catch SIGINT and SIGTERM: the first sets nf_interrupted (long nodes stop at
 * their next block), a second exits at once with status 130. */
void nf_interrupt_install(void);
/* Back to the default actions. */
void nf_interrupt_restore(void);
static inline bool nf_interrupt_pending(void)
{
    return nf_interrupted != 0;
}
/* "SIGINT", "SIGTERM", or "" when none came. */
const char *nf_interrupt_signal_name(void);

/* ---- JSON events (stdout, one object per line) ---- */
/* Set by `--json`: the functions below print nothing while it is false. */
extern bool nf_events_json;
/* Start the stream's clock ("t" of every event: seconds since this call) and,
 * with --json, route run-time warnings (nf_warn) into warning events. */
void nf_events_start(bool json);
/* {"event":"NAME","t":SECONDS ... — add fields with nf_strbuf_addf starting
 * with a comma, then nf_event_end writes the line (one write, under a lock,
 * flushed) and releases sb. */
void nf_event_begin(struct nf_strbuf *sb, const char *event);
void nf_event_end(struct nf_strbuf *sb);
/* ,"file":...,"line":N,"col":N for the parts of loc that are known. */
void nf_event_add_loc(struct nf_strbuf *sb, const struct nf_loc *loc);
/* An error event: phase is validate, plan or run. */
void nf_event_error(const struct nf_error *e, const char *phase);
/* The warnings of d from index first_warning on, then every error of d. */
void nf_event_diags(const struct nf_diags *d, size_t first_warning, const char *phase);

/* ---- progress ---- */
struct nf_progress {
    char id[64];
    const char *type;
    pthread_mutex_t lock;
    bool started;              /* first report seen: t0 and done0 set */
    double t0, last_json, last_line, last_tty;
    int64_t done0, done, total;
    char unit[32];
};
void nf_progress_init(struct nf_progress *pr, const char *node_id, const char *type);
/* The node is over: a terminal line it drew is cleared. */
void nf_progress_finish(struct nf_progress *pr);
void nf_progress_destroy(struct nf_progress *pr);

#endif
