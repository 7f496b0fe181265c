/* files.c — paths (join, dirname, stem, mkdir -p, removing a scratch tree), atomic file output
 * (reserve/open, commit = fsync + rename, abort; the written-files sink the
 * executor records) and reading a whole file (util.h).
 */
#include <ctype.h>
#include <dirent.h>
#include <ftw.h>
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

#include "fault.h"
#include "util.h"

/* ---- paths ---- */
char *nf_path_join(const char *dir, const char *name)
{
    if (!name)
        return NULL;
    if (name[0] == '/' || !dir || !dir[0] || strcmp(dir, ".") == 0)
        return nf_strdup(name);
    size_t n = strlen(dir);
    return nf_asprintf("%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name);
}

char *nf_path_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return nf_strdup(".");
    if (slash == path)
        return nf_strdup("/");
    return nf_strndup(path, (size_t)(slash - path));
}

char *nf_path_stem(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    static const char *const exts[] = { ".nii.gz", ".nii", ".tsv", ".csv", ".npy",
                                        ".yaml", ".yml", ".txt", ".gz", NULL };
    for (int i = 0; exts[i]; i++) {
        size_t e = strlen(exts[i]);
        if (n > e && strcasecmp(base + n - e, exts[i]) == 0) {
            n -= e;
            break;
        }
    }
    return nf_strndup(base, n);
}

bool nf_path_has_suffix(const char *path, const char *suffix)
{
    size_t n = strlen(path), s = strlen(suffix);
    return n >= s && strcasecmp(path + n - s, suffix) == 0;
}

/* The last "sub-" entity starting a path component or following '_': the
 * file name beats its folders ("data/sub-01/func/bold.nii.gz" gives sub-01). */
char *nf_subject_entity(const char *path)
{
    const char *found = NULL;
    size_t found_len = 0;
    for (const char *p = strstr(path, "sub-"); p; p = strstr(p + 4, "sub-")) {
        if (p != path && p[-1] != '/' && p[-1] != '_')
            continue;
        size_t n = 0;
        while (isalnum((unsigned char)p[4 + n]))
            n++;
        if (n > 0) {
            found = p;
            found_len = 4 + n;
        }
    }
    return found ? nf_strndup(found, found_len) : NULL;
}

int nf_mkdirs(const char *dir, struct nf_error *err)
{
    char *tmp = nf_strdup(dir);
    int rc = 0;
    if (!tmp)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (char *p = tmp + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST) {
                rc = NF_FAIL(err, NF_EIO, "cannot create folder '%s': %s", tmp, strerror(errno));
                goto fail;
            }
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        rc = NF_FAIL(err, NF_EIO, "'%s' exists and is not a folder", dir);
fail:
    free(tmp);
    return rc;
}

/* ---- atomic output ---- */
static atomic_uint tmp_counter;

int nf_atomic_reserve(struct nf_atomic *a, const char *path, const char *tmp_suffix,
                      struct nf_error *err)
{
    memset(a, 0, sizeof *a);
    char *dir = nf_path_dirname(path);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    unsigned n = atomic_fetch_add(&tmp_counter, 1);
    a->path = nf_strdup(path);
    if (dir && a->path)
        a->tmp = nf_asprintf("%s/.%s.tmp%ld.%u%s", dir, base, (long)getpid(), n,
                             tmp_suffix ? tmp_suffix : "");
    free(dir);
    if (!a->path || !a->tmp) {
        nf_atomic_abort(a);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    return 0;
}

/* The writer's pid when `name` is one of nf_atomic_reserve's temporaries, else 0. */
static long temporary_owner(const char *name)
{
    if (name[0] != '.')
        return 0;
    for (const char *t = strstr(name, ".tmp"); t; t = strstr(t + 1, ".tmp")) {
        char *end;
        long pid = strtol(t + 4, &end, 10);
        if (pid > 0 && end != t + 4 && *end == '.' && isdigit((unsigned char)end[1]))
            return pid;
    }
    return 0;
}

static int swept;

static int sweep_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    long pid = flag == FTW_F && ftw->level <= 4 ? temporary_owner(path + ftw->base) : 0;
    if (pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH && unlink(path) == 0)
        swept++;
    return 0;
}

int nf_sweep_temporaries(const char *dir)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* nftw has no argument to carry */
    pthread_mutex_lock(&lock);
    swept = 0;
    if (dir)
        nftw(dir, sweep_entry, 16, FTW_PHYS);
    int n = swept;
    pthread_mutex_unlock(&lock);
    return n;
}

int nf_atomic_open(struct nf_atomic *a, const char *path, struct nf_error *err)
{
    int rc = nf_atomic_reserve(a, path, NULL, err);
    if (rc < 0)
        return rc;
    a->fp = fopen(a->tmp, "wb");
    if (!a->fp) {
        rc = NF_FAIL(err, NF_EIO, "cannot write '%s': %s", path, strerror(errno));
        nf_atomic_abort(a);
        return rc;
    }
    return 0;
}

static _Thread_local struct nf_written *written_sink;

void nf_written_begin(struct nf_written *w) { written_sink = w; }
void nf_written_end(void) { written_sink = NULL; }

void nf_written_release(struct nf_written *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->paths[i]);
    free(w->paths);
    memset(w, 0, sizeof *w);
}

static void written_add(const char *path)
{
    struct nf_written *w = written_sink;
    if (!w)
        return;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 8;
        char **p = nf_realloc(w->paths, cap * sizeof *p);
        if (!p)
            return;
        w->paths = p;
        w->cap = cap;
    }
    char *copy = nf_strdup(path);
    if (copy)
        w->paths[w->n++] = copy;
}

int nf_atomic_commit(struct nf_atomic *a, struct nf_error *err)
{
    int rc = 0;
    int injected = nf_write_fault();   /* tests: as if the disk were full */
    if (a->fp || injected) {
        bool bad = injected || ferror(a->fp) != 0;
        if (a->fp && fflush(a->fp) != 0)
            bad = true;
        if (!bad && fsync(fileno(a->fp)) != 0 && errno != EINVAL)
            bad = true;
        int saved = injected ? injected : errno;
        if (a->fp && fclose(a->fp) != 0)
            bad = true;
        a->fp = NULL;
        if (bad) {
            rc = NF_FAIL(err, NF_EIO, "cannot write '%s': %s", a->path,
                         strerror(saved ? saved : EIO));
            goto fail;
        }
    }
    nf_fault_point("file written, not yet renamed");
    if (rename(a->tmp, a->path) != 0) {
        rc = NF_FAIL(err, NF_EIO, "cannot write '%s': %s", a->path, strerror(errno));
        goto fail;
    }
    written_add(a->path);
    free(a->tmp);
    a->tmp = NULL;
    free(a->path);
    a->path = NULL;
    return 0;
fail:
    nf_atomic_abort(a);
    return rc;
}

void nf_atomic_abort(struct nf_atomic *a)
{
    if (a->fp)
        fclose(a->fp);
    if (a->tmp)
        unlink(a->tmp);
    free(a->tmp);
    free(a->path);
    memset(a, 0, sizeof *a);
}

int nf_write_file_atomic(const char *path, const char *text, size_t len, struct nf_error *err)
{
    return nf_rewrite_file_atomic(path, text, len, NULL, err);
}

int nf_rewrite_file_atomic(const char *path, const char *text, size_t len, const struct stat *like,
                           struct nf_error *err)
{
    struct nf_atomic a;
    int rc = nf_atomic_open(&a, path, err);
    if (rc < 0)
        return rc;
    if (len && fwrite(text, 1, len, a.fp) != len) {
        rc = NF_FAIL(err, NF_EIO, "cannot write '%s': %s", path, strerror(errno));
        nf_atomic_abort(&a);
        return rc;
    }
    if (like) {   /* the new file takes the old one's place: its mode and owner too */
        int fd = fileno(a.fp);
        if (fchmod(fd, like->st_mode & 07777) != 0 ||
            ((like->st_uid != geteuid() || like->st_gid != getegid()) && fchown(fd, like->st_uid, like->st_gid) != 0 &&
             fchmod(fd, like->st_mode & 0777 & ~(mode_t)07000) != 0)) {
            rc = NF_FAIL(err, NF_EIO, "cannot give the rewritten '%s' its mode and owner: %s", path, strerror(errno));
            nf_atomic_abort(&a);
            return rc;
        }
    }
    return nf_atomic_commit(&a, err);
}

char *nf_read_file(const char *path, size_t *len, struct nf_error *err)
{
    return nf_read_untrusted_file(path, SIZE_MAX / 2, NULL, false, len, err);   /* one reading loop */
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void nf_remove_tree(const char *dir)
{
    if (dir)
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int nf_folder_is_ours(const char *dir, const char *marker, char **found, struct nf_error *err)
{
    *found = NULL;
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? 1 : NF_FAIL(err, NF_EIO, "cannot read '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return NF_FAIL(err, NF_EIO, "'%s' is not a folder", dir);
    DIR *d = opendir(dir);
    if (!d)
        return NF_FAIL(err, NF_EIO, "cannot read the folder '%s': %s", dir, strerror(errno));
    char *first = NULL;
    bool marked = false, other = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        long writer = temporary_owner(e->d_name);
        size_t ml = strlen(marker);
        if (strcmp(e->d_name, marker) == 0 ||
            (writer && strncmp(e->d_name + 1, marker, ml) == 0 && strncmp(e->d_name + 1 + ml, ".tmp", 4) == 0)) {
            marked = true;   /* the marker, or the marker being written when its writer was killed */
        } else if (writer && writer != (long)getpid() && kill((pid_t)writer, 0) != 0 && errno == ESRCH) {
            continue;        /* what a killed writer left: not anyone's data */
        } else if (!other) {
            other = true;
            first = nf_strdup(e->d_name);
        }
    }
    closedir(d);
    if (marked || !other) {
        free(first);
        return 1;
    }
    if (!first)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    *found = first;
    return 0;
}

void nf_output_name_part(const char *s, char *out, size_t size)
{
    size_t n = 0;
    if (!size)
        return;
    for (; s && *s && n + 1 < size; s++) {
        unsigned char ch = (unsigned char)*s;
        out[n++] = (char)((isalnum(ch) || ch == '-' || ch == '_') ? ch : '-');
    }
    out[n] = '\0';
    if (n == 0)
        snprintf(out, size, "nlflow");
}

char *nf_read_text_file(const char *path, size_t max_bytes, const char *what, size_t *len, struct nf_error *err)
{
    return nf_read_untrusted_file(path, max_bytes, what, false, len, err);
}

char *nf_read_untrusted_file(const char *path, size_t max_bytes, const char *what, bool no_links, size_t *len,
                             struct nf_error *err)
{
    /* a FIFO's open must not wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (no_links ? O_NOFOLLOW : 0));
    if (fd < 0) {
        if (no_links && errno == ELOOP)
            NF_FAIL(err, NF_EIO, "%s '%s' is a symbolic link (not read)", what, path);
        else
            NF_FAIL(err, NF_EIO, "cannot read %s%s'%s': %s", what ? what : "", what ? " " : "", path,
                    strerror(errno));
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) != 0) {
        NF_FAIL(err, NF_EIO, "cannot read %s%s'%s': %s", what ? what : "", what ? " " : "", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        NF_FAIL(err, NF_EIO, "%s%s'%s' is not a regular file (%s)", what ? what : "", what ? " " : "", path,
                S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket"
                : "a device");
        goto fail;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        NF_FAIL(err, NF_EDATA, "%s%s'%s' is %lld bytes; at most %zu are read", what ? what : "", what ? " " : "",
                path, (long long)st.st_size, max_bytes);
        goto fail;
    }
    /* room for the size fstat gave and some (a file may grow), never more
       than one byte past the limit: reading that byte means too large */
    size_t cap = (size_t)st.st_size + 4096 < max_bytes + 1 ? (size_t)st.st_size + 4096 : max_bytes + 1, n = 0;
    if (!(buf = nf_malloc(cap + 1))) {
        NF_FAIL(err, NF_ENOMEM, "out of memory reading '%s'", path);
        goto fail;
    }
    for (;;) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            NF_FAIL(err, NF_EIO, "cannot read %s%s'%s': %s", what ? what : "", what ? " " : "", path,
                    strerror(errno));
            goto fail;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > max_bytes) {
            NF_FAIL(err, NF_EDATA, "%s%s'%s' is larger than %zu bytes", what ? what : "", what ? " " : "", path,
                    max_bytes);
            goto fail;
        }
        if (n == cap) {
            size_t ncap = cap * 2 < max_bytes + 1 ? cap * 2 : max_bytes + 1;
            char *nb = nf_realloc(buf, ncap + 1);
            if (!nb) {
                NF_FAIL(err, NF_ENOMEM, "out of memory reading '%s'", path);
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
    }
    close(fd);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
fail:
    free(buf);
    close(fd);
    return NULL;
}
