/* util.c — string buffers, paths, atomic file output, sizes,
 * clocks, logging and a small deterministic RNG (see util.h).
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

#include "fault.h"
#include "util.h"
#include "switches.h"

/* ---- strbuf ---- */
void nf_strbuf_init(struct nf_strbuf *sb) { memset(sb, 0, sizeof *sb); }

void nf_strbuf_release(struct nf_strbuf *sb)
{
    free(sb->buf);
    nf_strbuf_init(sb);
}

static bool strbuf_grow(struct nf_strbuf *sb, size_t extra)
{
    if (sb->oom)
        return false;
    if (sb->len + extra + 1 <= sb->cap)
        return true;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *nb = nf_realloc(sb->buf, cap);
    if (!nb) {
        sb->oom = true;
        return false;
    }
    sb->buf = nb;
    sb->cap = cap;
    return true;
}

void nf_strbuf_add(struct nf_strbuf *sb, const char *s, size_t n)
{
    if (!strbuf_grow(sb, n))
        return;
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

void nf_strbuf_addf(struct nf_strbuf *sb, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0 && strbuf_grow(sb, (size_t)n)) {
        vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap2);
        sb->len += (size_t)n;
    }
    va_end(ap2);
}

void nf_strbuf_add_json_str(struct nf_strbuf *sb, const char *s)
{
    nf_strbuf_add(sb, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': nf_strbuf_add(sb, "\\\"", 2); break;
        case '\\': nf_strbuf_add(sb, "\\\\", 2); break;
        case '\n': nf_strbuf_add(sb, "\\n", 2); break;
        case '\t': nf_strbuf_add(sb, "\\t", 2); break;
        case '\r': nf_strbuf_add(sb, "\\r", 2); break;
        default:
            if (*p < 0x20)
                nf_strbuf_addf(sb, "\\u%04x", *p);
            else
                nf_strbuf_add(sb, (const char *)p, 1);
        }
    }
    nf_strbuf_add(sb, "\"", 1);
}

char *nf_strbuf_detach(struct nf_strbuf *sb)
{
    if (sb->oom) {
        nf_strbuf_release(sb);
        return NULL;
    }
    char *out = sb->buf ? sb->buf : nf_strdup("");
    nf_strbuf_init(sb);
    return out;
}

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
    struct nf_atomic a;
    int rc = nf_atomic_open(&a, path, err);
    if (rc < 0)
        return rc;
    if (len && fwrite(text, 1, len, a.fp) != len) {
        rc = NF_FAIL(err, NF_EIO, "cannot write '%s': %s", path, strerror(errno));
        nf_atomic_abort(&a);
        return rc;
    }
    return nf_atomic_commit(&a, err);
}

char *nf_read_file(const char *path, size_t *len, struct nf_error *err)
{
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!fp) {
        NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *nb = nf_realloc(buf, ncap);
            if (!nb) {
                NF_FAIL(err, NF_ENOMEM, "out of memory reading '%s'", path);
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp)) {
                NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
                goto fail;
            }
            break;
        }
    }
    fclose(fp);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
fail:
    fclose(fp);
    free(buf);
    return NULL;
}

/* ---- sizes ---- */
int64_t nf_parse_size(const char *s)
{
    if (!s)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || isinf(v))
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    static const struct { const char *suffix; double mult; } units[] = {
        { "", 1 }, { "b", 1 },
        { "k", 1e3 }, { "kb", 1e3 }, { "kib", 1024.0 },
        { "m", 1e6 }, { "mb", 1e6 }, { "mib", 1048576.0 },
        { "g", 1e9 }, { "gb", 1e9 }, { "gib", 1073741824.0 },
        { "t", 1e12 }, { "tb", 1e12 }, { "tib", 1099511627776.0 },
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            double bytes = v * units[i].mult;
            if (bytes > 9.2e18)
                return -1;
            return (int64_t)bytes;
        }
    }
    return -1;
}

void nf_format_size(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%" PRIu64 " B", bytes);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
}

double nf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int nf_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

uint64_t nf_physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

void nf_cpu_model(char *buf, size_t size)
{
    char line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(buf, size, "unknown");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon += strspn(colon + 1, " \t") + 1;
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(buf, size, "%s", colon);
            break;
        }
    }
    if (f)
        fclose(f);
}

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

/* ---- fault injection ---- */
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

/* ---- RNG ---- */
uint64_t nf_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double nf_rand_uniform(uint64_t *state)
{
    return (double)(nf_splitmix64(state) >> 11) * 0x1.0p-53;
}

double nf_rand_normal(uint64_t *state)
{
    /* Box-Muller; one value per call keeps the stream simple to reproduce. */
    double u1 = nf_rand_uniform(state), u2 = nf_rand_uniform(state);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Floats as unsigned keys in the same order: flip all bits of negatives, the
 * sign bit of the rest. */
static inline uint32_t f32_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

int nf_argsort_f32(const float *keys, int64_t n, int64_t *order)
{
    uint32_t *k = nf_malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *k);
    int64_t *tmp = nf_malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!k || !tmp) {
        free(k);
        free(tmp);
        return NF_ENOMEM;
    }
    uint32_t *k2 = k + (n > 0 ? n : 1);
    for (int64_t i = 0; i < n; i++) {
        k[i] = f32_key(keys[i]);
        order[i] = i;
    }
    /* four passes of 8 bits; a pass whose byte is the same for every key
     * (the exponent's high byte of p-values, say) is skipped */
    for (int shift = 0; shift < 32; shift += 8) {
        int64_t count[257] = { 0 };
        for (int64_t i = 0; i < n; i++)
            count[((k[i] >> shift) & 0xff) + 1]++;
        bool one_bucket = false;
        for (int b = 1; b <= 256; b++)
            one_bucket |= count[b] == n;
        if (one_bucket)
            continue;
        for (int b = 1; b <= 256; b++)
            count[b] += count[b - 1];
        for (int64_t i = 0; i < n; i++) {
            int64_t at = count[(k[i] >> shift) & 0xff]++;
            k2[at] = k[i];
            tmp[at] = order[i];
        }
        uint32_t *ks = k;
        k = k2;
        k2 = ks;
        memcpy(order, tmp, (size_t)n * sizeof *order);
    }
    free(k < k2 ? k : k2);
    free(tmp);
    return 0;
}

/* Whether any of a[0..n) has an all-ones exponent (NaN or inf). */
__attribute__((target_clones("avx512f", "avx2", "default")))
static bool any_nonfinite(const float *restrict a, int64_t n)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, a + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad != 0;
}

int64_t nf_first_nonfinite(const float *a, int64_t n)
{
    enum { BLOCK = 4096 };
    for (int64_t b = 0; b < n; b += BLOCK) {
        int64_t len = n - b < BLOCK ? n - b : BLOCK;
        if (any_nonfinite(a + b, len))
            for (int64_t i = b; i < b + len; i++)
                if (!isfinite(a[i]))
                    return i;
    }
    return -1;
}

int nf_format_uint(uint64_t x, char *buf)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + x % 10);
        x /= 10;
    } while (x);
    for (int i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
    return n;
}

/* round(q + rem/den) half to even, for den > 0 */
static unsigned __int128 round_half_even(unsigned __int128 q, unsigned __int128 rem, unsigned __int128 den)
{
    unsigned __int128 twice = rem * 2;
    if (twice > den || (twice == den && (q & 1)))
        q++;
    return q;
}

/* The 9 significant digits of |m| 2^e scaled by 10^k (rounded half to even),
 * or 0 when out of the exact range. */
static uint64_t scaled_digits(uint64_t m, int e, int k)
{
    unsigned __int128 p5 = 1;
    int ak = k < 0 ? -k : k;
    if (ak > 44)
        return 0;
    for (int i = 0; i < ak; i++)
        p5 *= 5;
    if (k >= 0) {   /* m 5^k 2^(k+e) */
        unsigned __int128 num = (unsigned __int128)m * p5;
        int s = k + e;
        if (s >= 0)
            return s > 40 ? 0 : (uint64_t)(num << s);
        if (s <= -127)
            return 0;
        unsigned __int128 den = (unsigned __int128)1 << -s;
        return (uint64_t)round_half_even(num >> -s, num & (den - 1), den);
    }
    /* m 2^(e-|k|) / 5^|k| */
    int t = e - ak;
    unsigned __int128 num = m, den = p5;
    if (t >= 0) {
        if (t > 100)
            return 0;
        num <<= t;
    } else {
        if (-t > 60)
            return 0;
        den <<= -t;
    }
    return (uint64_t)round_half_even(num / den, num % den, den);
}

int nf_format_float_g9(float f, char *buf)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    int bexp = (int)((u >> 23) & 0xff);
    uint64_t m = u & 0x7fffffu;
    int n = 0;
    if (bexp == 0xff)   /* inf, nan: as printf */
        return snprintf(buf, 32, "%.9g", (double)f);
    if (u >> 31)
        buf[n++] = '-';
    if (bexp == 0 && m == 0) {
        buf[n++] = '0';
        buf[n] = 0;
        return n;
    }
    int e;
    if (bexp == 0) {
        e = -149;
    } else {
        m |= 0x800000u;
        e = bexp - 150;
    }
    double a = fabs((double)f);
    int X = (int)floor(log10(a));
    /* X: the decimal exponent, from log10 and corrected by the digit count */
    uint64_t d = 0;
    for (int tries = 0; tries < 3; tries++) {
        d = scaled_digits(m, e, 8 - X);
        if (!d)
            return snprintf(buf, 32, "%.9g", (double)f);
        if (d > 1000000000u) {
            X++;
            continue;
        }
        if (d == 1000000000u) {   /* rounded up to the next power of ten */
            d = 100000000u;
            X++;
        } else if (d < 100000000u) {
            X--;
            continue;
        }
        break;
    }
    if (d < 100000000u || d >= 1000000000u)
        return snprintf(buf, 32, "%.9g", (double)f);
    char dig[10];
    for (int i = 8; i >= 0; i--) {
        dig[i] = (char)('0' + d % 10);
        d /= 10;
    }
    int last = 8;   /* the last significant digit kept (trailing zeros go) */
    while (last > 0 && dig[last] == '0')
        last--;
    if (X < -4 || X >= 9) {
        buf[n++] = dig[0];
        if (last > 0) {
            buf[n++] = '.';
            for (int i = 1; i <= last; i++)
                buf[n++] = dig[i];
        }
        buf[n++] = 'e';
        buf[n++] = X < 0 ? '-' : '+';
        int ax = X < 0 ? -X : X;
        if (ax < 10)
            buf[n++] = '0';
        n += nf_format_uint((uint64_t)ax, buf + n);
        return n;
    }
    if (X >= 0) {
        for (int i = 0; i <= X; i++)
            buf[n++] = dig[i];
        if (last > X) {
            buf[n++] = '.';
            for (int i = X + 1; i <= last; i++)
                buf[n++] = dig[i];
        }
    } else {
        buf[n++] = '0';
        buf[n++] = '.';
        for (int i = 0; i < -X - 1; i++)
            buf[n++] = '0';
        for (int i = 0; i <= last; i++)
            buf[n++] = dig[i];
    }
    buf[n] = 0;
    return n;
}
