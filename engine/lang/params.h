/* params.h — filling a node's params struct from YAML through its parameter
 * table, and the per-type operations that keys.c and gen.c use too
 * (engine-internal; node.h has the table types). */
#ifndef NF_PARAMS_H
#define NF_PARAMS_H

#include "node.h"
#include "ytree.h"

struct nf_strbuf;   /* core/util.h */

/* Where a cache key's canonical bytes go (keys.c hashes them): an integer, a
 * double (-0 and +0 alike), a string (NULL differs from ""). */
struct nf_key_sink {
    void (*u64)(void *ctx, uint64_t v);
    void (*dbl)(void *ctx, double v);
    void (*str)(void *ctx, const char *s);
    void *ctx;
};

/* Everything that depends on a parameter's type, one row per enum nf_ptype.
 * `field` points at the parameter's field inside a params struct. */
struct nf_ptype_ops {
    const char *name;   /* "integer", "list of numbers", ... (help and docs) */
    void (*set_default)(const struct nf_param *p, void *field);
    void (*release)(void *field);   /* NULL: the field owns nothing */
    /* See nf_param_set. */
    int (*parse)(const struct nf_param *p, void *field, const struct nf_ynode *v,
                 const char *node, const char *base_dir, struct nf_diags *d);
    /* The default as text, "" when none (callers clear buf first). */
    void (*default_text)(const struct nf_param *p, char *buf, size_t size);
    /* The allowed values as docs show them (choices joined by sep, or a range). */
    void (*allowed_text)(const struct nf_param *p, const char *sep, char *buf, size_t size);
    /* The canonical bytes of the value, for cache keys. */
    void (*key)(const struct nf_param *p, const void *field, const struct nf_key_sink *k);
    /* The value as JSON, recorded with results. */
    void (*json)(const struct nf_param *p, const void *field, struct nf_strbuf *sb);
    /* The JSON-schema keywords after "description" (def: the default text). */
    void (*schema)(const struct nf_param *p, const char *def, struct nf_strbuf *sb);
};
/* NULL for a value outside enum nf_ptype. */
const struct nf_ptype_ops *nf_ptype_ops(enum nf_ptype t);
/* JSON schema of a string made only of ${var} references (gen.c, params.c). */
extern const char nf_schema_var_ref[];

/* Parse v into the field of p inside params. On error adds one diagnostic
 * (located at v, naming node) and returns NF_EINVAL; the field keeps its
 * previous value. `base_dir` resolves relative NF_P_PATH values. */
int nf_param_set(const struct nf_param *p, void *params, const struct nf_ynode *v,
                 const char *node, const char *base_dir, struct nf_diags *d);
/* Parse a number from a scalar: strict (whole string), finite. */
bool nf_parse_double(const char *s, double *out);
bool nf_parse_int64(const char *s, int64_t *out);
bool nf_parse_bool(const char *s, bool *out);

#endif
