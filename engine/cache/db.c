/* db.c — the SQLite side of the result cache: errors that say what to do,
 * one statement helper (prepare, bind from a type string, step, finalize)
 * instead of that sequence written out at every query, best-effort writes
 * that never wait, transactions, and a busy handler that an interrupt stops.
 */
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache_internal.h"
#include "core/util.h"

void cache_lock(struct nf_cache *c) { pthread_mutex_lock(&c->lock); }
void cache_unlock(struct nf_cache *c) { pthread_mutex_unlock(&c->lock); }

/* SQLite's own words ("database or disk is full", "attempt to write a
 * readonly database", ...) plus what to do where that is not obvious. */
int db_error(struct nf_cache *c, struct nf_error *err, int rc, const char *what)
{
    const char *msg = c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
    if (!msg || !strcmp(msg, "not an error"))
        msg = sqlite3_errstr(rc);
    char hint[200] = "";
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        if (c->busy_timeout_ms > 0)
            snprintf(hint, sizeof hint, " (another process kept the cache busy for longer than %d ms)",
                     c->busy_timeout_ms);
        else
            snprintf(hint, sizeof hint, " (another process is writing to it)");
        break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        snprintf(hint, sizeof hint,
                 "; the cache file is damaged: `nlflow cache repair` keeps every intact "
                 "entry (or delete it: it holds only results that can be recomputed)");
        break;
    default:
        break;
    }
    int code = (rc & 0xff) == SQLITE_NOMEM ? NF_ENOMEM : NF_EIO;
    return NF_FAIL(err, code, "cache '%s': %s: %s%s", c->path, what, msg, hint);
}

int db_exec(struct nf_cache *c, const char *sql, const char *what, struct nf_error *err)
{
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : db_error(c, err, rc, what);
}

int db_prepare(struct nf_cache *c, const char *sql, sqlite3_stmt **st, struct nf_error *err)
{
    int rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return db_error(c, err, rc, "preparing a query");
    }
    return 0;
}

void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

const char *column_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

static int bind_args(struct nf_cache *c, sqlite3_stmt *st, const char *types, va_list ap,
                     struct nf_error *err)
{
    for (int i = 1; types && *types; types++, i++) {
        switch (*types) {
        case 't':
            bind_text(st, i, va_arg(ap, const char *));
            break;
        case 'i':
            sqlite3_bind_int64(st, i, va_arg(ap, int64_t));
            break;
        case 'b': {
            const void *p = va_arg(ap, const void *);
            int n = va_arg(ap, int);
            sqlite3_bind_blob(st, i, p, n, SQLITE_STATIC);
            break;
        }
        default:
            return NF_FAIL(err, NF_EBUG, "cache '%s': bad parameter type '%c'", c->path, *types);
        }
    }
    return 0;
}

static int prepare_bound(struct nf_cache *c, sqlite3_stmt **st, const char *sql, const char *types,
                         va_list ap, struct nf_error *err)
{
    int rc;
    NF_TRY(rc = db_prepare(c, sql, st, err));
    NF_TRY(rc = bind_args(c, *st, types, ap, err));
    return 0;
fail:
    sqlite3_finalize(*st);
    *st = NULL;
    return rc;
}

int db_run(struct nf_cache *c, const char *what, struct nf_error *err, const char *sql,
           const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, types);
    int rc = prepare_bound(c, &st, sql, types, ap, err);
    va_end(ap);
    if (rc == 0)
        rc = db_step_done(c, st, what, err);
    sqlite3_finalize(st);
    return rc;
}

int db_row(struct nf_cache *c, sqlite3_stmt **st, const char *what, struct nf_error *err,
           const char *sql, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    int rc = prepare_bound(c, st, sql, types, ap, err);
    va_end(ap);
    if (rc < 0)
        return rc;
    rc = sqlite3_step(*st);
    if (rc == SQLITE_ROW)
        return 1;
    rc = rc == SQLITE_DONE ? 0 : db_error(c, err, rc, what);
    sqlite3_finalize(*st);
    *st = NULL;
    return rc;
}

void db_try(struct nf_cache *c, const char *what, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    struct nf_error err = { 0 };
    va_list ap;
    int saved = c->busy_timeout_ms;
    c->busy_timeout_ms = 0;   /* the busy handler gives up at once */
    va_start(ap, types);
    int rc = prepare_bound(c, &st, sql, types, ap, &err);
    va_end(ap);
    if (rc == 0)
        rc = db_step_done(c, st, what ? what : "updating", &err);
    sqlite3_finalize(st);
    c->busy_timeout_ms = saved;
    if (rc < 0 && what && !c->warned_busy) {
        c->warned_busy = true;
        nf_warn(NULL, "%s; going on without it (results are still used and stored)", err.msg);
    }
}

/* Run a statement that returns no rows. */
int db_step_done(struct nf_cache *c, sqlite3_stmt *st, const char *what, struct nf_error *err)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return db_error(c, err, rc, what);
    sqlite3_reset(st);
    return 0;
}

static bool interrupted(const struct nf_cache *c)
{
    return c->interrupt && *c->interrupt;
}

/* Instead of sqlite3_busy_timeout: the same bounded wait, with pauses
 * growing from 1 to 100 ms, that an interrupt (Ctrl-C) ends at once. */
int db_busy_handler(void *arg, int n_calls)
{
    struct nf_cache *c = arg;
    if (n_calls == 0)
        c->busy_since = nf_now();
    if (interrupted(c) || c->busy_timeout_ms == 0 ||
        nf_now() - c->busy_since >= c->busy_timeout_ms / 1000.0)
        return 0;
    usleep(n_calls < 7 ? 1000u << n_calls : 100000u);
    return 1;
}

/* BEGIN IMMEDIATE takes the write lock now, so a transaction never fails
 * half-way for want of it. The busy handler waits inside it for up to the busy
 * timeout, but SQLite answers SQLITE_BUSY without waiting in a few cases (e.g.
 * while another connection recovers the WAL), so retry with a growing pause
 * until the same deadline. */
int tx_begin(struct nf_cache *c, struct nf_error *err)
{
    double deadline = nf_now() + c->busy_timeout_ms / 1000.0;
    useconds_t pause_us = 1000;
    for (;;) {
        int rc = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            return 0;
        int primary = rc & 0xff;
        if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || nf_now() >= deadline ||
            interrupted(c))
            return db_error(c, err, rc, "starting a write");
        usleep(pause_us);
        if (pause_us < 100000)
            pause_us *= 2;
    }
}

/* Roll back when a transaction is open (SQLite may already have rolled back
 * after SQLITE_FULL or SQLITE_IOERR). */
void tx_rollback(struct nf_cache *c)
{
    if (!sqlite3_get_autocommit(c->db))
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

int tx_commit(struct nf_cache *c, struct nf_error *err)
{
    int rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        return 0;
    rc = db_error(c, err, rc, "committing");
    tx_rollback(c);
    return rc;
}

int cache_grow(void *array_of, size_t n, size_t *cap, size_t elem, struct nf_error *err)
{
    if (n < *cap)
        return 0;
    size_t new_cap = *cap ? *cap * 2 : 64;
    void *old, *p;
    memcpy(&old, array_of, sizeof old);
    if (!(p = nf_realloc(old, new_cap * elem)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    memcpy(array_of, &p, sizeof p);
    *cap = new_cap;
    return 0;
}

int tx_end(struct nf_cache *c, int rc, struct nf_error *err)
{
    if (rc == 0)
        return tx_commit(c, err);
    tx_rollback(c);
    return rc;
}

int64_t now_s(void)
{
    return (int64_t)time(NULL);
}

int64_t now_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
