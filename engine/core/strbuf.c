/* strbuf.c — a growable string buffer (struct nf_strbuf, util.h): printf-style
 * appends, JSON string literals; an allocation failure sets `oom` once and
 * later appends do nothing, so callers check once at the end.
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
