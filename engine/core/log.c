/* log.c — the run-time log on stderr: nf_log lines, nf_warn warnings (with a
 * hook the event stream uses) and one redrawn status line on a terminal,
 * serialised by one lock (util.h).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* ---- log ---- */
bool nf_log_quiet;
void (*nf_warn_hook)(const char *node, const char *msg);
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static bool status_shown;   /* a status line is on the terminal (under log_lock) */

/* Under log_lock: a log line goes on a line of its own. */
static void clear_status(void)
{
    if (status_shown) {
        fputs("\r\033[K", stderr);
        status_shown = false;
    }
}

void nf_log(const char *fmt, ...)
{
    if (nf_log_quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&log_lock);
    clear_status();
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_lock);
    va_end(ap);
}

void nf_warn(const char *node, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    clear_status();
    if (node && node[0])
        fprintf(stderr, "nlflow: warning: node '%s': %s\n", node, msg);
    else
        fprintf(stderr, "nlflow: warning: %s\n", msg);
    pthread_mutex_unlock(&log_lock);
    if (nf_warn_hook)
        nf_warn_hook(node, msg);
}

void nf_log_status(const char *line)
{
    pthread_mutex_lock(&log_lock);
    if (line) {
        fprintf(stderr, "\r\033[K%s", line);
        fflush(stderr);
        status_shown = true;
    } else {
        clear_status();
    }
    pthread_mutex_unlock(&log_lock);
}
