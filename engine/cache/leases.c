/* leases.c — one process computes a result at a time: a lease row records
 * (pid, host, heartbeat) per result key, so that the lease of a process that
 * died is reclaimed without anyone deleting a lock file (cache.h).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cache_internal.h"

/* Same host: the pid decides (kill(pid, 0): ESRCH = gone, EPERM = alive but
 * another user's). Another host: its heartbeat, which a live process refreshes. */
bool lease_alive(const struct nf_cache *c, int64_t pid, const char *host, int64_t heartbeat,
                 int64_t now)
{
    if (strcmp(host, c->host) == 0) {
        if (pid <= 0 || pid > INT_MAX)
            return false;
        return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
    }
    return now - heartbeat < LEASE_STALE_S;
}

int nf_cache_lease(struct nf_cache *c, struct nf_key key, struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    int rc;
    int64_t now = now_s(), me = (int64_t)getpid();
    nf_key_hex(key, hex);
    cache_lock(c);
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_row(c, &st, "taking a lease", err,
                       "SELECT pid, host, heartbeat FROM leases WHERE key = ?1", "t", hex));
    if (rc == 1) {
        int64_t pid = sqlite3_column_int64(st, 0);
        const char *host = column_text(st, 1);
        bool mine = pid == me && strcmp(host, c->host) == 0;
        if (!mine && lease_alive(c, pid, host, sqlite3_column_int64(st, 2), now)) {
            NF_TRY(rc = tx_commit(c, err));
            rc = 0;
            goto fail;
        }
    }
    /* free, ours already, or held by a dead process: (re)claim it */
    NF_TRY(rc = db_run(c, "taking a lease", err,
                       "INSERT OR REPLACE INTO leases(key, pid, host, heartbeat) VALUES(?1, ?2, ?3, ?4)",
                       "titi", hex, me, c->host, now));
    NF_TRY(rc = tx_commit(c, err));
    rc = 1;
fail:
    if (rc < 0)
        tx_rollback(c);
    sqlite3_finalize(st);
    cache_unlock(c);
    return rc;
}

/* release and heartbeat cannot fail usefully: a lease left behind is
 * reclaimed once this process is gone. Release waits for a busy cache (others
 * may be waiting for the lease); a heartbeat does not (the next one retries). */
void nf_cache_release(struct nf_cache *c, struct nf_key key)
{
    char hex[33];
    struct nf_error ignored = { 0 };
    nf_key_hex(key, hex);
    cache_lock(c);
    db_run(c, "releasing a lease", &ignored,
           "DELETE FROM leases WHERE key = ?1 AND pid = ?2 AND host = ?3", "tit", hex,
           (int64_t)getpid(), c->host);
    cache_unlock(c);
}

void nf_cache_heartbeat(struct nf_cache *c)
{
    cache_lock(c);
    db_try(c, "refreshing leases", "UPDATE leases SET heartbeat = ?1 WHERE pid = ?2 AND host = ?3",
           "iit", now_s(), (int64_t)getpid(), c->host);
    cache_unlock(c);
}
