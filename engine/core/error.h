/* error.h — the one error type of nlflow.
 *
 * Every fallible function takes `struct nf_error *err` as its last argument,
 * returns 0 on success or a negative NF_E* code, and leaves *err untouched when it
 * succeeds (git's strbuf-err convention). The message names where the problem is
 * (pipeline file, line, column, node id) so that it can be printed as
 *     file:line:col: node 'id': what is wrong (got X, expected Y)
 * Validation collects many errors in a struct nf_diags and reports them together.
 */
#ifndef NF_ERROR_H
#define NF_ERROR_H

#include <stddef.h>
#include <stdarg.h>

/* X-macro: code, value, exit status, short name. Values are pinned. */
#define NF_ERR_MAP(XX)                                              \
    XX(NF_OK,       0, 0, "ok")                                     \
    XX(NF_ENOMEM,  -1, 1, "out of memory")                          \
    XX(NF_EIO,     -2, 1, "i/o error")                              \
    XX(NF_ESYNTAX, -3, 2, "syntax error")                           \
    XX(NF_EINVAL,  -4, 2, "invalid pipeline")                       \
    XX(NF_EUSAGE,  -5, 2, "usage error")                            \
    XX(NF_EDATA,   -6, 1, "invalid data")                           \
    XX(NF_ESHAPE,  -7, 1, "shape mismatch")                         \
    XX(NF_EBUDGET, -8, 1, "memory budget exceeded")                 \
    XX(NF_EINTR,   -9, 130, "interrupted")                          \
    XX(NF_EBUG,   -10, 1, "internal error")

enum nf_errcode {
#define NF__ENUM(name, val, exit_status, text) name = val,
    NF_ERR_MAP(NF__ENUM)
#undef NF__ENUM
};

/* A copy of s that lives until the process exits (for file names in
 * locations, which must outlive the pipeline that produced an error). NULL-safe. */
const char *nf_intern(const char *s);

/* Where in a pipeline file something is. line/col are 1-based; 0 = unknown. */
struct nf_loc {
    const char *file;   /* borrowed: an nf_intern()ed path, valid until exit */
    int line, col;
};

struct nf_error {
    int code;           /* NF_E*, 0 when no error */
    struct nf_loc loc;  /* file position, or {0} */
    char node[64];      /* node id, or "" */
    char msg[1024];     /* what is wrong, without location prefix */
    const char *src_file; int src_line;   /* where in nlflow's source it was raised */
};

const char *nf_err_name(int code);
int nf_err_exit_status(int code);

/* Set *err and return code. `loc` and `node` may be NULL. */
int nf_error_set(struct nf_error *err, int code, const struct nf_loc *loc,
                 const char *node, const char *src_file, int src_line,
                 const char *fmt, ...) __attribute__((format(printf, 7, 8)));
int nf_error_vset(struct nf_error *err, int code, const struct nf_loc *loc,
                  const char *node, const char *src_file, int src_line,
                  const char *fmt, va_list ap);

/* Raise an error with no location (runtime). Returns code. */
#define NF_FAIL(err, code, ...) \
    nf_error_set((err), (code), NULL, NULL, __FILE__, __LINE__, __VA_ARGS__)
/* Raise an error located in a pipeline file, on a node (node may be NULL). */
#define NF_FAIL_AT(err, code, loc, node, ...) \
    nf_error_set((err), (code), (loc), (node), __FILE__, __LINE__, __VA_ARGS__)

/* Forward a negative return code: `NF_TRY(rc = f(..., err));` jumps to fail. */
#define NF_TRY(expr) do { if ((expr) < 0) goto fail; } while (0)

/* Format `file:line:col: node 'id': msg` into buf (always NUL-terminated). */
void nf_error_format(const struct nf_error *err, char *buf, size_t size);
/* Print the formatted error plus a newline to stderr, prefixed "nlflow: error: "
 * only when there is no file location. */
void nf_error_print(const struct nf_error *err);

/* Prefix the message with context, e.g. "reading 'x.nii.gz': ". */
void nf_error_prefix(struct nf_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A list of diagnostics, for phases that report every problem at once. */
struct nf_diags {
    struct nf_error *v;
    size_t n, cap;
    size_t n_warnings;
    struct nf_error *warnings;
};

void nf_diags_init(struct nf_diags *d);
void nf_diags_release(struct nf_diags *d);
/* Append a copy of err (ignored when allocation fails: the first error is kept). */
void nf_diags_add(struct nf_diags *d, const struct nf_error *err);
#define NF_DIAG(d, code, loc, node, ...) do {                                   \
        struct nf_error nf__e = {0};                                           \
        nf_error_set(&nf__e, (code), (loc), (node), __FILE__, __LINE__, __VA_ARGS__); \
        nf_diags_add((d), &nf__e);                                             \
    } while (0)
void nf_diags_warn(struct nf_diags *d, const struct nf_error *w);
/* Print all errors in file order, then return the first code (0 if none). */
int nf_diags_print(const struct nf_diags *d);

/* Warnings at run time go through the log (stderr): nf_warn in core/util.h. */

#endif
