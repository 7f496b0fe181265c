/* error.c — formatting and collecting nlflow errors.
 *
 * The one error type (error.h) carries a code, a pipeline location, a node id
 * and a message; this file fills it, formats it as `file:line:col: node 'id':
 * message`, and keeps lists of diagnostics for phases that report every
 * problem of a file at once (validation).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "alloc.h"

/* Interned strings: a short list, since only pipeline file names go here. */
struct interned { struct interned *next; char s[]; };
static struct interned *interned_head;
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;

const char *nf_intern(const char *s)
{
    if (!s)
        return NULL;
    const char *found = NULL;
    pthread_mutex_lock(&intern_lock);
    for (struct interned *i = interned_head; i && !found; i = i->next)
        if (strcmp(i->s, s) == 0)
            found = i->s;
    if (!found) {
        size_t n = strlen(s) + 1;
        struct interned *i = nf_malloc(sizeof *i + n);
        if (i) {
            memcpy(i->s, s, n);
            i->next = interned_head;
            interned_head = i;
            found = i->s;
        }
    }
    pthread_mutex_unlock(&intern_lock);
    return found ? found : "?";
}

const char *nf_err_name(int code)
{
    switch (code) {
#define NF__NAME(name, val, exit_status, text) case val: return text;
    NF_ERR_MAP(NF__NAME)
#undef NF__NAME
    }
    return "unknown error";
}

int nf_err_exit_status(int code)
{
    switch (code) {
#define NF__EXIT(name, val, exit_status, text) case val: return exit_status;
    NF_ERR_MAP(NF__EXIT)
#undef NF__EXIT
    }
    return 1;
}

int nf_error_vset(struct nf_error *err, int code, const struct nf_loc *loc,
                  const char *node, const char *src_file, int src_line,
                  const char *fmt, va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    if (loc)
        err->loc = *loc;
    else
        memset(&err->loc, 0, sizeof err->loc);
    snprintf(err->node, sizeof err->node, "%s", node ? node : "");
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    err->src_file = src_file;
    err->src_line = src_line;
    return code;
}

int nf_error_set(struct nf_error *err, int code, const struct nf_loc *loc,
                 const char *node, const char *src_file, int src_line,
                 const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nf_error_vset(err, code, loc, node, src_file, src_line, fmt, ap);
    va_end(ap);
    return code;
}

void nf_error_prefix(struct nf_error *err, const char *fmt, ...)
{
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t np = strlen(prefix), no = strlen(old);
    if (np >= sizeof err->msg)
        np = sizeof err->msg - 1;
    if (np + no >= sizeof err->msg)
        no = sizeof err->msg - 1 - np;
    memcpy(err->msg, prefix, np);
    memcpy(err->msg + np, old, no);
    err->msg[np + no] = '\0';
}

void nf_error_format(const struct nf_error *err, char *buf, size_t size)
{
    size_t used = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
#define NF__PUT(...) do {                                                   \
        int n__ = snprintf(buf + used, size - used, __VA_ARGS__);           \
        if (n__ > 0) used += (size_t)n__ < size - used ? (size_t)n__ : size - used - 1; \
    } while (0)
    if (err->loc.file) {
        NF__PUT("%s:", err->loc.file);
        if (err->loc.line > 0) {
            NF__PUT("%d:", err->loc.line);
            if (err->loc.col > 0)
                NF__PUT("%d:", err->loc.col);
        }
        NF__PUT(" ");
    }
    if (err->node[0])
        NF__PUT("node '%s': ", err->node);
    NF__PUT("%s", err->msg);
#undef NF__PUT
}

void nf_error_print(const struct nf_error *err)
{
    char buf[2048];
    nf_error_format(err, buf, sizeof buf);
    if (err->loc.file)
        fprintf(stderr, "%s\n", buf);
    else
        fprintf(stderr, "nlflow: error: %s\n", buf);
}

void nf_diags_init(struct nf_diags *d)
{
    memset(d, 0, sizeof *d);
}

void nf_diags_release(struct nf_diags *d)
{
    free(d->v);
    free(d->warnings);
    nf_diags_init(d);
}

static void diags_push(struct nf_error **v, size_t *n, size_t *cap, const struct nf_error *e)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        struct nf_error *nv = nf_realloc(*v, ncap * sizeof *nv);
        if (!nv)
            return;   /* keep what we have: the first errors matter most */
        *v = nv;
        *cap = ncap;
    }
    (*v)[(*n)++] = *e;
}

void nf_diags_add(struct nf_diags *d, const struct nf_error *err)
{
    diags_push(&d->v, &d->n, &d->cap, err);
}

void nf_diags_warn(struct nf_diags *d, const struct nf_error *w)
{
    size_t cap = d->n_warnings;   /* grow one at a time: warnings are few */
    struct nf_error *nv = nf_realloc(d->warnings, (cap + 1) * sizeof *nv);
    if (!nv)
        return;
    d->warnings = nv;
    d->warnings[d->n_warnings++] = *w;
}

static int loc_cmp(const void *a, const void *b)
{
    const struct nf_error *x = a, *y = b;
    if (x->loc.line != y->loc.line)
        return x->loc.line < y->loc.line ? -1 : 1;
    if (x->loc.col != y->loc.col)
        return x->loc.col < y->loc.col ? -1 : 1;
    return 0;
}

static int loc_ptr_cmp(const void *a, const void *b)
{
    const struct nf_error *x = *(const struct nf_error *const *)a, *y = *(const struct nf_error *const *)b;
    int c = loc_cmp(x, y);
    return c ? c : (x < y ? -1 : x > y);   /* the order they were found in */
}

int nf_diags_print(const struct nf_diags *d)
{
    char buf[2048];
    for (size_t i = 0; i < d->n_warnings; i++) {
        nf_error_format(&d->warnings[i], buf, sizeof buf);
        fprintf(stderr, "%swarning: %s\n", d->warnings[i].loc.file ? "" : "nlflow: ", buf);
    }
    if (d->n == 0)
        return 0;
    /* Stable order by position so users read errors top to bottom: pointers
     * sorted with their index as the last key (a crafted file can make
     * tens of thousands of errors: n log n, never n^2 moves of whole errors) */
    const struct nf_error **sorted = nf_malloc_array(d->n, sizeof *sorted);
    for (size_t i = 0; sorted && i < d->n; i++)
        sorted[i] = &d->v[i];
    if (sorted)
        qsort(sorted, d->n, sizeof *sorted, loc_ptr_cmp);
    for (size_t i = 0; i < d->n; i++)
        nf_error_print(sorted ? sorted[i] : &d->v[i]);
    int code = d->v[0].code;
    free(sorted);
    return code;
}
