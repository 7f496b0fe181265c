/* fault.c — the k-th write fails (see fault.h): a countdown shared by the
 * atomic file writer (util.c) and a SQLite VFS that forwards every call to
 * the default VFS and fails xWrite/xTruncate/xSync when the countdown says
 * so, as a full or broken disk would. SQLite's own test VFSs work the same
 * way (src/test_vfs.c); a full tmpfs would need root and a mount.
 */
#include <errno.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sqlite3.h>

#include "fault.h"
#include "switches.h"

static atomic_long write_calls;
static long fail_write_at;         /* 0: off */
static int fail_errno = ENOSPC;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void print_stats(void)
{
    fprintf(stderr, "nlflow: writes: %ld\n", atomic_load(&write_calls));
}

int nf_write_fault(void)
{
    nf_fault_init();
    long n = atomic_fetch_add(&write_calls, 1) + 1;
    return fail_write_at > 0 && n == fail_write_at ? fail_errno : 0;
}

/* ---- the VFS: a file is our header followed by the real VFS's file ---- */
struct fault_file {
    sqlite3_file base;
    sqlite3_file *real;
};

static sqlite3_vfs *real_vfs;

static int sqlite_code(int err) { return err == ENOSPC ? SQLITE_FULL : SQLITE_IOERR_WRITE; }
#define REAL(f) (((struct fault_file *)(f))->real)

static int ff_close(sqlite3_file *f) { return REAL(f)->pMethods->xClose(REAL(f)); }
static int ff_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    return REAL(f)->pMethods->xRead(REAL(f), buf, n, off);
}
static int ff_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    int err = nf_write_fault();
    return err ? sqlite_code(err) : REAL(f)->pMethods->xWrite(REAL(f), buf, n, off);
}
static int ff_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    int err = nf_write_fault();
    return err ? SQLITE_IOERR_TRUNCATE : REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int ff_sync(sqlite3_file *f, int flags)
{
    int err = nf_write_fault();
    return err ? SQLITE_IOERR_FSYNC : REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int ff_size(sqlite3_file *f, sqlite3_int64 *size) { return REAL(f)->pMethods->xFileSize(REAL(f), size); }
static int ff_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int ff_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int ff_check_lock(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int ff_control(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int ff_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int ff_device(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int ff_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **out)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), page, size, extend, out);
}
static int ff_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void ff_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int ff_shm_unmap(sqlite3_file *f, int del) { return REAL(f)->pMethods->xShmUnmap(REAL(f), del); }
static int ff_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **out)
{
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, out);
}
static int ff_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods fault_io = {
    3, ff_close, ff_read, ff_write, ff_truncate, ff_sync, ff_size, ff_lock, ff_unlock,
    ff_check_lock, ff_control, ff_sector, ff_device, ff_shm_map, ff_shm_lock,
    ff_shm_barrier, ff_shm_unmap, ff_fetch, ff_unfetch,
};

static int ff_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    (void)vfs;
    struct fault_file *ff = (struct fault_file *)f;
    ff->real = (sqlite3_file *)(ff + 1);
    int rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out_flags);
    /* SQLite calls xClose only when pMethods is set */
    ff->base.pMethods = ff->real->pMethods ? &fault_io : NULL;
    return rc;
}

static int ff_delete(sqlite3_vfs *v, const char *name, int sync) { (void)v; return real_vfs->xDelete(real_vfs, name, sync); }
static int ff_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    (void)v;
    return real_vfs->xAccess(real_vfs, name, flags, out);
}
static int ff_full_path(sqlite3_vfs *v, const char *name, int n, char *out)
{
    (void)v;
    return real_vfs->xFullPathname(real_vfs, name, n, out);
}
static void *ff_dl_open(sqlite3_vfs *v, const char *name) { (void)v; return real_vfs->xDlOpen(real_vfs, name); }
static void ff_dl_error(sqlite3_vfs *v, int n, char *msg) { (void)v; real_vfs->xDlError(real_vfs, n, msg); }
static void (*ff_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    (void)v;
    return real_vfs->xDlSym(real_vfs, h, sym);
}
static void ff_dl_close(sqlite3_vfs *v, void *h) { (void)v; real_vfs->xDlClose(real_vfs, h); }
static int ff_random(sqlite3_vfs *v, int n, char *out) { (void)v; return real_vfs->xRandomness(real_vfs, n, out); }
static int ff_sleep(sqlite3_vfs *v, int us) { (void)v; return real_vfs->xSleep(real_vfs, us); }
static int ff_time(sqlite3_vfs *v, double *out) { (void)v; return real_vfs->xCurrentTime(real_vfs, out); }
static int ff_last_error(sqlite3_vfs *v, int n, char *out) { (void)v; return real_vfs->xGetLastError(real_vfs, n, out); }
static int ff_time64(sqlite3_vfs *v, sqlite3_int64 *out) { (void)v; return real_vfs->xCurrentTimeInt64(real_vfs, out); }

static sqlite3_vfs fault_vfs = {
    2, 0, 0, NULL, "nlflow-fault", NULL,
    ff_open, ff_delete, ff_access, ff_full_path, ff_dl_open, ff_dl_error, ff_dl_sym,
    ff_dl_close, ff_random, ff_sleep, ff_time, ff_last_error, ff_time64,
    NULL, NULL, NULL,
};

static void read_environment(void)
{
    const char *s = getenv("NLFLOW_FAIL_WRITE");
    if (s && *s) {
        char *end;
        fail_write_at = strtol(s, &end, 10);
        if (fail_write_at < 0)
            fail_write_at = 0;
        if (*end == ':' && strcasecmp(end + 1, "eio") == 0)
            fail_errno = EIO;
    }
    const char *stats = getenv("NLFLOW_WRITE_STATS");
    bool counting = stats && *stats && strcmp(stats, "0") != 0;
    if (counting)
        atexit(print_stats);
    if (fail_write_at > 0 || counting) {
        real_vfs = sqlite3_vfs_find(NULL);
        if (real_vfs) {
            fault_vfs.szOsFile = (int)sizeof(struct fault_file) + real_vfs->szOsFile;
            fault_vfs.mxPathname = real_vfs->mxPathname;
            sqlite3_vfs_register(&fault_vfs, 1);
        }
    }
}

void nf_fault_init(void)
{
    pthread_once(&init_once, read_environment);
}

/* A kill at the N-th dangerous point (NLFLOW_KILL_AT, core/switches.h): tests
 * of resuming after a crash. */
void nf_fault_point(const char *where)
{
    static atomic_long calls;
    long kill_at = nf_switches()->kill_at;
    if (kill_at == 0)
        return;
    long n = atomic_fetch_add(&calls, 1) + 1;
    if (n == kill_at) {
        if (nf_switches()->kill_verbose)
            fprintf(stderr, "nlflow: fault injection: killed at point %ld (%s)\n", n, where);
        raise(SIGKILL);
    }
}
