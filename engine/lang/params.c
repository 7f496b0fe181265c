/* params.c — the generic half of every node's parameter table.
 *
 * A node declares its parameters once (struct nf_param rows, node.h). All that
 * depends on a parameter's type is here, in one table of per-type operations
 * (struct nf_ptype_ops, params.h): the default, parsing a YAML value with type
 * and range checks, freeing, the default and the allowed values as text (for
 * `nlflow nodes` and docs/nodes/), the canonical bytes of a cache key, the
 * JSON value recorded with a result, and the JSON-schema fragment. The loops
 * over a table below, keys.c and gen.c only dispatch through it, so a new
 * type is one new row.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "params.h"
#include "suggest.h"
#include "core/util.h"

/* A string made only of ${var} references is accepted wherever nlflow takes
 * one: numbers, booleans and choices included (validate.c types such a value
 * by the text it resolves to, quoted or not). */
const char nf_schema_var_ref[] =
    "{\"type\": \"string\", \"pattern\": \"^(\\\\$\\\\{[A-Za-z_][A-Za-z0-9_]*\\\\})+$\"}";

/* ---- scalars from text ---- */

bool nf_parse_double(const char *s, double *out)
{
    char *end;
    if (!s || !*s)
        return false;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || errno == ERANGE || !isfinite(v))
        return false;
    *out = v;
    return true;
}

bool nf_parse_int64(const char *s, int64_t *out)
{
    char *end;
    if (!s || !*s)
        return false;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return false;
    *out = v;
    return true;
}

bool nf_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = { "true", "yes", "on", NULL };
    static const char *const no[] = { "false", "no", "off", NULL };
    for (int i = 0; yes[i]; i++)
        if (strcasecmp(s, yes[i]) == 0) { *out = true; return true; }
    for (int i = 0; no[i]; i++)
        if (strcasecmp(s, no[i]) == 0) { *out = false; return true; }
    return false;
}

const struct nf_param *nf_param_find(const struct nf_param *table, const char *name)
{
    for (const struct nf_param *p = table; p && p->name; p++)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

/* ---- lists of numbers ---- */

/* count values from lo to hi, evenly (numpy's linspace: start + i * step,
 * the last exactly hi), or 10^ of those (numpy's logspace). */
static int spaced_values(bool log, double lo, double hi, int64_t count, struct nf_num_list *out)
{
    out->n = 0;
    out->v = nf_calloc((size_t)(count > 0 ? count : 1), sizeof(double));
    if (!out->v)
        return -1;
    double step = count > 1 ? (hi - lo) / (double)(count - 1) : 0;
    for (int64_t i = 0; i < count; i++) {
        double t = i == count - 1 && count > 1 ? hi : lo + (double)i * step;
        out->v[i] = log ? pow(10.0, t) : t;
    }
    out->n = (size_t)count;
    return 0;
}

static bool is_spaced_text(const char *s)
{
    return s && (strncmp(s, "logspace:", 9) == 0 || strncmp(s, "linspace:", 9) == 0);
}

/* A default written as text: "1,2,3", or "logspace:-2,4,20" / "linspace:0,1,5"
 * (the same values as writing {logspace: [-2, 4, 20]}, so the key is the same). */
static int num_list_from_text(const char *s, struct nf_num_list *out)
{
    out->n = 0;
    out->v = NULL;
    if (!s || !*s)
        return 0;
    if (is_spaced_text(s)) {
        double lo = 0, hi = 0, n = 0;
        if (sscanf(s + 9, "%lf,%lf,%lf", &lo, &hi, &n) != 3)
            return -1;
        return spaced_values(s[1] == 'o', lo, hi, (int64_t)n, out);
    }
    size_t cap = 1;
    for (const char *c = s; *c; c++)
        cap += *c == ',';
    out->v = nf_calloc(cap, sizeof *out->v);
    if (!out->v)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        out->v[out->n++] = strtod(p, &end);
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p)   /* malformed default: stop */
            break;
    }
    return 0;
}

/* ---- ranges and diagnostics ---- */

static bool has_range(const struct nf_param *p)
{
    return !(p->min == 0 && p->max == 0);
}

static void range_text(const struct nf_param *p, char *buf, size_t size)
{
    bool lo = isfinite(p->min) && p->min > -1e300, hi = isfinite(p->max) && p->max < 1e300;
    if (!has_range(p))
        lo = hi = false;
    if (lo && hi)
        snprintf(buf, size, "between %g and %g", p->min, p->max);
    else if (lo)
        snprintf(buf, size, ">= %g", p->min);
    else if (hi)
        snprintf(buf, size, "<= %g", p->max);
    else
        buf[0] = '\0';
}

static bool in_range(const struct nf_param *p, double v)
{
    if (!has_range(p))
        return true;
    return v >= p->min && v <= p->max;
}

static int bad(struct nf_diags *d, const struct nf_ynode *v, const char *node,
               const struct nf_param *p, const char *expected)
{
    char got[256];
    nf_ynode_describe(v, got, sizeof got);
    NF_DIAG(d, NF_EINVAL, &v->loc, node, "parameter '%s' must be %s (got %s)", p->name, expected, got);
    return NF_EINVAL;
}

/* A quoted "5" is a string in YAML; saying only "got '5'" would puzzle. */
static int bad_quoted(struct nf_diags *d, const struct nf_ynode *v, const char *node,
                      const struct nf_param *p, const char *expected)
{
    NF_DIAG(d, NF_EINVAL, &v->loc, node,
            "parameter '%s' must be %s (got the quoted string '%.200s': write it without quotes)",
            p->name, expected, v->value);
    return NF_EINVAL;
}

static int out_of_memory(struct nf_diags *d, const struct nf_ynode *v, const char *node)
{
    NF_DIAG(d, NF_ENOMEM, &v->loc, node, "out of memory");
    return NF_ENOMEM;
}

static int parse_number(const struct nf_param *p, const struct nf_ynode *v, const char *node,
                        struct nf_diags *d, double *out)
{
    char expect[160], range[96];
    range_text(p, range, sizeof range);
    bool is_int = p->type == NF_P_INT;
    snprintf(expect, sizeof expect, "%s%s%s", is_int ? "an integer" : "a number",
             range[0] ? " " : "", range);
    double unused;
    if (v->type == NF_Y_SCALAR && v->quoted && nf_parse_double(v->value, &unused))
        return bad_quoted(d, v, node, p, expect);
    if (v->type != NF_Y_SCALAR || v->quoted)
        return bad(d, v, node, p, expect);
    if (is_int) {
        int64_t i;
        if (!nf_parse_int64(v->value, &i))
            return bad(d, v, node, p, expect);
        *out = (double)i;
    } else if (!nf_parse_double(v->value, out)) {
        return bad(d, v, node, p, expect);
    }
    if (!in_range(p, *out))
        return bad(d, v, node, p, expect);
    return 0;
}

static int check_len(const struct nf_param *p, size_t n, const struct nf_ynode *v,
                     const char *node, struct nf_diags *d)
{
    if ((p->len_min && n < (size_t)p->len_min) || (p->len_max && n > (size_t)p->len_max)) {
        if (p->len_min == p->len_max)
            NF_DIAG(d, NF_EINVAL, &v->loc, node, "parameter '%s' must have %d values (got %zu)",
                    p->name, p->len_min, n);
        else
            NF_DIAG(d, NF_EINVAL, &v->loc, node,
                    "parameter '%s' must have between %d and %d values (got %zu)",
                    p->name, p->len_min, p->len_max ? p->len_max : 1 << 30, n);
        return NF_EINVAL;
    }
    return 0;
}

/* The docs' "allowed" column for numbers: "1 to 10", ">= 0", or "". */
static void range_allowed(const struct nf_param *p, const char *sep, char *buf, size_t size)
{
    (void)sep;
    buf[0] = '\0';
    if (!has_range(p))
        return;
    bool lo = p->min > -1e300, hi = p->max < 1e300;
    if (lo && hi)
        snprintf(buf, size, "%g to %g", p->min, p->max);
    else if (lo)
        snprintf(buf, size, ">= %g", p->min);
    else if (hi)
        snprintf(buf, size, "<= %g", p->max);
}

/* A field of the params struct; the ops below get a pointer to it. */
#define FIELD_AS(type, field) (*(type *)(field))
#define CFIELD_AS(type, field) (*(const type *)(field))

static void text_default_text(const struct nf_param *p, char *buf, size_t size)
{
    if (p->def.s)
        snprintf(buf, size, "%s", p->def.s);
}

/* ---- integer ---- */

static void int_default(const struct nf_param *p, void *field)
{
    FIELD_AS(int64_t, field) = p->def.i;
}

static int int_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                     const char *node, const char *base_dir, struct nf_diags *d)
{
    (void)base_dir;
    double num;
    /* a keyed integer: {KEY: n}, KEY = choices[0] (predict's reduce: {pca: k}) */
    if (p->choices && v->type == NF_Y_MAP) {
        if (v->n != 1 || strcmp(v->keys[0]->value, p->choices[0]) != 0) {
            char what[96];
            snprintf(what, sizeof what, "an integer or {%s: integer}", p->choices[0]);
            return bad(d, v, node, p, what);
        }
        v = v->items[0];
    }
    if (parse_number(p, v, node, d, &num) < 0)
        return NF_EINVAL;
    FIELD_AS(int64_t, field) = (int64_t)num;
    return 0;
}

static void int_default_text(const struct nf_param *p, char *buf, size_t size)
{
    snprintf(buf, size, "%" PRId64, p->def.i);
}

static void int_key(const struct nf_param *p, const void *field, const struct nf_key_sink *k)
{
    (void)p;
    k->u64(k->ctx, (uint64_t)CFIELD_AS(int64_t, field));
}

static void int_json(const struct nf_param *p, const void *field, struct nf_strbuf *sb)
{
    (void)p;
    nf_strbuf_addf(sb, "%" PRId64, CFIELD_AS(int64_t, field));
}

/* INT and NUM: a number in range, or ${var}; a keyed INT also {KEY: n}. */
static void number_schema(const struct nf_param *p, const char *def, struct nf_strbuf *sb)
{
    nf_strbuf_addf(sb, ", \"anyOf\": [{\"type\": \"%s\"", p->type == NF_P_INT ? "integer" : "number");
    if (has_range(p) && p->min > -1e300)
        nf_strbuf_addf(sb, ", \"minimum\": %.17g", p->min);
    if (has_range(p) && p->max < 1e300)
        nf_strbuf_addf(sb, ", \"maximum\": %.17g", p->max);
    nf_strbuf_addf(sb, "}, %s", nf_schema_var_ref);
    if (p->type == NF_P_INT && p->choices) {   /* {KEY: n} */
        nf_strbuf_addf(sb, ", {\"type\": \"object\", \"additionalProperties\": false, \"required\": [");
        nf_strbuf_add_json_str(sb, p->choices[0]);
        nf_strbuf_addf(sb, "], \"properties\": {");
        nf_strbuf_add_json_str(sb, p->choices[0]);
        nf_strbuf_addf(sb, ": {\"anyOf\": [{\"type\": \"integer\"}, %s]}}}", nf_schema_var_ref);
    }
    nf_strbuf_addf(sb, "]");
    if (def[0])
        nf_strbuf_addf(sb, ", \"default\": %s", def);
}

/* ---- number ---- */

static void num_default(const struct nf_param *p, void *field)
{
    FIELD_AS(double, field) = p->def.d;
}

static int num_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                     const char *node, const char *base_dir, struct nf_diags *d)
{
    (void)base_dir;
    double num;
    if (parse_number(p, v, node, d, &num) < 0)
        return NF_EINVAL;
    FIELD_AS(double, field) = num;
    return 0;
}

static void num_default_text(const struct nf_param *p, char *buf, size_t size)
{
    if (!isnan(p->def.d))   /* NaN: optional, no default */
        snprintf(buf, size, "%g", p->def.d);
}

static void num_key(const struct nf_param *p, const void *field, const struct nf_key_sink *k)
{
    (void)p;
    k->dbl(k->ctx, CFIELD_AS(double, field));
}

static void num_json(const struct nf_param *p, const void *field, struct nf_strbuf *sb)
{
    (void)p;
    double d = CFIELD_AS(double, field);
    if (isfinite(d))
        nf_strbuf_addf(sb, "%.15g", d);
    else
        nf_strbuf_addf(sb, "null");
}

/* ---- boolean ---- */

static void bool_default(const struct nf_param *p, void *field)
{
    FIELD_AS(bool, field) = p->def.i != 0;
}

static int bool_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                      const char *node, const char *base_dir, struct nf_diags *d)
{
    (void)base_dir;
    bool b;
    if (v->type == NF_Y_SCALAR && v->quoted && nf_parse_bool(v->value, &b))
        return bad_quoted(d, v, node, p, "true or false");
    if (v->type != NF_Y_SCALAR || v->quoted || !nf_parse_bool(v->value, &b))
        return bad(d, v, node, p, "true or false");
    FIELD_AS(bool, field) = b;
    return 0;
}

static void bool_default_text(const struct nf_param *p, char *buf, size_t size)
{
    snprintf(buf, size, "%s", p->def.i ? "true" : "false");
}

static void bool_key(const struct nf_param *p, const void *field, const struct nf_key_sink *k)
{
    (void)p;
    k->u64(k->ctx, CFIELD_AS(bool, field));
}

static void bool_json(const struct nf_param *p, const void *field, struct nf_strbuf *sb)
{
    (void)p;
    nf_strbuf_addf(sb, "%s", CFIELD_AS(bool, field) ? "true" : "false");
}

static void bool_schema(const struct nf_param *p, const char *def, struct nf_strbuf *sb)
{
    (void)p;
    nf_strbuf_addf(sb, ", \"anyOf\": [{\"type\": \"boolean\"}, %s], \"default\": %s", nf_schema_var_ref, def);
}

/* ---- choice ---- */

static void enum_default(const struct nf_param *p, void *field)
{
    FIELD_AS(int, field) = (int)p->def.i;
}

static int enum_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                      const char *node, const char *base_dir, struct nf_diags *d)
{
    (void)base_dir;
    if (v->type == NF_Y_SCALAR)
        for (int i = 0; p->choices[i]; i++)
            if (strcmp(v->value, p->choices[i]) == 0) {
                FIELD_AS(int, field) = i;
                return 0;
            }
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "one of ");
    for (int i = 0; p->choices[i]; i++)
        nf_strbuf_addf(&sb, "%s%s", i ? ", " : "", p->choices[i]);
    const char *best = v->type == NF_Y_SCALAR ? nf_suggest_from(v->value, p->choices) : NULL;
    if (best) {   /* bad() appends "(got 'x')": the hint goes before it */
        char got[256];
        nf_ynode_describe(v, got, sizeof got);
        NF_DIAG(d, NF_EINVAL, &v->loc, node, "parameter '%s' must be %s (got %s; did you mean '%s'?)",
                p->name, sb.buf ? sb.buf : "one of the allowed values", got, best);
    } else {
        bad(d, v, node, p, sb.buf ? sb.buf : "one of the allowed values");
    }
    nf_strbuf_release(&sb);
    return NF_EINVAL;
}

static void enum_default_text(const struct nf_param *p, char *buf, size_t size)
{
    snprintf(buf, size, "%s", p->choices ? p->choices[p->def.i] : "");
}

static void enum_allowed(const struct nf_param *p, const char *sep, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; p->choices[i]; i++) {
        int n = snprintf(buf + used, size - used, "%s%s", i ? sep : "", p->choices[i]);
        if (n < 0 || (size_t)n >= size - used)
            break;
        used += (size_t)n;
    }
}

static void enum_key(const struct nf_param *p, const void *field, const struct nf_key_sink *k)
{
    k->str(k->ctx, p->choices[CFIELD_AS(int, field)]);
}

static void enum_json(const struct nf_param *p, const void *field, struct nf_strbuf *sb)
{
    nf_strbuf_add_json_str(sb, p->choices[CFIELD_AS(int, field)]);
}

static void enum_schema(const struct nf_param *p, const char *def, struct nf_strbuf *sb)
{
    nf_strbuf_addf(sb, ", \"anyOf\": [{\"enum\": [");
    for (int i = 0; p->choices[i]; i++) {
        nf_strbuf_addf(sb, "%s", i ? ", " : "");
        nf_strbuf_add_json_str(sb, p->choices[i]);
        /* an unquoted true/false choice (load's lazy) is a boolean to a
         * YAML reader; nlflow compares the text, so both are accepted */
        if (strcmp(p->choices[i], "true") == 0 || strcmp(p->choices[i], "false") == 0)
            nf_strbuf_addf(sb, ", %s", p->choices[i]);
    }
    nf_strbuf_addf(sb, "]}, %s], \"default\": ", nf_schema_var_ref);
    nf_strbuf_add_json_str(sb, def);
}

/* ---- string and path ---- */

static void str_default(const struct nf_param *p, void *field)
{
    FIELD_AS(char *, field) = p->def.s && p->def.s[0] ? nf_strdup(p->def.s) : NULL;
}

static void str_release(void *field)
{
    free(FIELD_AS(char *, field));
    FIELD_AS(char *, field) = NULL;
}

static int set_string(void *field, char *s, const struct nf_ynode *v, const char *node,
                      struct nf_diags *d)
{
    if (!s)
        return out_of_memory(d, v, node);
    free(FIELD_AS(char *, field));
    FIELD_AS(char *, field) = s;
    return 0;
}

static int str_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                     const char *node, const char *base_dir, struct nf_diags *d)
{
    (void)base_dir;
    if (v->type != NF_Y_SCALAR)
        return bad(d, v, node, p, "a string");
    return set_string(field, nf_strdup(v->value), v, node, d);
}

/* Relative to the pipeline file's folder. */
static int path_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                      const char *node, const char *base_dir, struct nf_diags *d)
{
    if (v->type != NF_Y_SCALAR || v->value[0] == '\0')
        return bad(d, v, node, p, "a file path");
    return set_string(field, nf_path_join(base_dir, v->value), v, node, d);
}

static void str_key(const struct nf_param *p, const void *field, const struct nf_key_sink *k)
{
    (void)p;
    k->str(k->ctx, CFIELD_AS(char *, field));
}

static void str_json(const struct nf_param *p, const void *field, struct nf_strbuf *sb)
{
    (void)p;
    const char *s = CFIELD_AS(char *, field);
    if (s)
        nf_strbuf_add_json_str(sb, s);
    else
        nf_strbuf_addf(sb, "null");
}

static void str_schema(const struct nf_param *p, const char *def, struct nf_strbuf *sb)
{
    (void)p;
    nf_strbuf_addf(sb, ", \"type\": \"string\"");
    if (def[0]) {
        nf_strbuf_addf(sb, ", \"default\": ");
        nf_strbuf_add_json_str(sb, def);
    }
}

/* ---- list of numbers ---- */

static void num_list_default(const struct nf_param *p, void *field)
{
    num_list_from_text(p->def.s, (struct nf_num_list *)field);
}

static void num_list_release(void *field)
{
    struct nf_num_list *l = field;
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static void num_list_replace(void *field, struct nf_num_list list)
{
    num_list_release(field);
    *(struct nf_num_list *)field = list;
}

/* {logspace: [lo, hi, n]} (10^lo .. 10^hi, numpy's logspace) or
 * {linspace: [lo, hi, n]} for a list of numbers. */
static int num_list_spaced(const struct nf_param *p, void *field, const struct nf_ynode *v,
                           const char *node, struct nf_diags *d)
{
    static const char expect[] = "a list of numbers, or {logspace: [lo, hi, n]} or {linspace: [lo, hi, n]}";
    if (v->n != 1 || (strcmp(v->keys[0]->value, "logspace") && strcmp(v->keys[0]->value, "linspace")))
        return bad(d, v, node, p, expect);
    bool log = v->keys[0]->value[1] == 'o';
    const struct nf_ynode *args = v->items[0];
    double a[3];
    int64_t count;
    if (args->type != NF_Y_SEQ || args->n != 3)
        return bad(d, args, node, p, "[lo, hi, n] after logspace/linspace");
    for (int i = 0; i < 3; i++)
        if (args->items[i]->type != NF_Y_SCALAR || args->items[i]->quoted ||
            !nf_parse_double(args->items[i]->value, &a[i]))
            return bad(d, args->items[i], node, p, "a number");
    count = (int64_t)a[2];
    if ((double)count != a[2] || count < 1 || count > 100000)
        return bad(d, args->items[2], node, p, "a count between 1 and 100000");
    if (log && (fabs(a[0]) > 300 || fabs(a[1]) > 300))
        return bad(d, args, node, p, "exponents between -300 and 300");
    if (check_len(p, (size_t)count, v, node, d) < 0)
        return NF_EINVAL;
    struct nf_num_list list;
    if (spaced_values(log, a[0], a[1], count, &list) < 0)
        return out_of_memory(d, v, node);
    for (int64_t i = 0; i < count; i++) {
        if (!in_range(p, list.v[i])) {
            char what[160], range[96];
            range_text(p, range, sizeof range);
            snprintf(what, sizeof what, "values %s (value %lld is %g)", range, (long long)i + 1, list.v[i]);
            free(list.v);
            return bad(d, v, node, p, what);
        }
    }
    num_list_replace(field, list);
    return 0;
}

/* The items of a list value (a sequence, or a scalar standing as a 1-list):
 * checks their number (*n) against the length bounds and allocates room for
 * them, elem bytes each (at least one element). NULL with *rc set to NF_EINVAL
 * or NF_ENOMEM and the diagnostic added. */
static void *list_items_alloc(const struct nf_param *p, const struct nf_ynode *v, const char *node,
                              struct nf_diags *d, size_t elem, size_t *n, int *rc)
{
    *n = v->type == NF_Y_SEQ ? v->n : 1;
    *rc = NF_EINVAL;
    if (check_len(p, *n, v, node, d) < 0)
        return NULL;
    void *items = nf_calloc(*n ? *n : 1, elem);
    if (!items)
        *rc = out_of_memory(d, v, node);
    return items;
}

/* Item i of a list value (v itself when it is a scalar). */
static const struct nf_ynode *list_item(const struct nf_ynode *v, size_t i)
{
    return v->type == NF_Y_SEQ ? v->items[i] : v;
}

/* A list, or a scalar as a 1-list, or {logspace|linspace: [lo, hi, n]}. */
static int num_list_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                          const char *node, const char *base_dir, struct nf_diags *d)
{
    (void)base_dir;
    struct nf_num_list list = { 0, NULL };
    size_t n;
    int rc;
    if (v->type == NF_Y_MAP)
        return num_list_spaced(p, field, v, node, d);
    if (!(list.v = list_items_alloc(p, v, node, d, sizeof *list.v, &n, &rc)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (parse_number(p, list_item(v, i), node, d, &list.v[i]) < 0) {
            free(list.v);
            return NF_EINVAL;
        }
    }
    list.n = n;
    num_list_replace(field, list);
    return 0;
}

static void num_list_default_text(const struct nf_param *p, char *buf, size_t size)
{
    if (is_spaced_text(p->def.s))
        snprintf(buf, size, "{%.8s: [%s]}", p->def.s, p->def.s + 9);
    else if (p->def.s && p->def.s[0])
        snprintf(buf, size, "[%s]", p->def.s);
}

static void num_list_key(const struct nf_param *p, const void *field, const struct nf_key_sink *k)
{
    (void)p;
    const struct nf_num_list *l = field;
    k->u64(k->ctx, l->n);
    for (size_t i = 0; i < l->n; i++)
        k->dbl(k->ctx, l->v[i]);
}

static void num_list_json(const struct nf_param *p, const void *field, struct nf_strbuf *sb)
{
    (void)p;
    const struct nf_num_list *l = field;
    nf_strbuf_addf(sb, "[");
    for (size_t i = 0; i < l->n; i++)
        nf_strbuf_addf(sb, "%s%.15g", i ? ", " : "", l->v[i]);
    nf_strbuf_addf(sb, "]");
}

/* A scalar or an array of `item`, with the length bounds. */
static void list_schema(const struct nf_param *p, const char *item, struct nf_strbuf *sb)
{
    nf_strbuf_addf(sb, ", \"anyOf\": [%s, {\"type\": \"array\", \"items\": %s", item, item);
    if (p->len_min)
        nf_strbuf_addf(sb, ", \"minItems\": %d", p->len_min);
    if (p->len_max)
        nf_strbuf_addf(sb, ", \"maxItems\": %d", p->len_max);
    nf_strbuf_addf(sb, "}");
}

static void num_list_schema(const struct nf_param *p, const char *def, struct nf_strbuf *sb)
{
    (void)def;   /* written as JSON below, not as the text of `nlflow nodes` */
    char number[256];
    snprintf(number, sizeof number, "{\"anyOf\": [{\"type\": \"number\"}, %s]}", nf_schema_var_ref);
    list_schema(p, number, sb);
    /* {logspace: [lo, hi, n]} or {linspace: ...} */
    nf_strbuf_addf(sb, ", {\"type\": \"object\", \"minProperties\": 1, \"maxProperties\": 1, "
                       "\"additionalProperties\": false, \"properties\": {"
                       "\"logspace\": {\"type\": \"array\", \"items\": %s, \"minItems\": 3, \"maxItems\": 3}, "
                       "\"linspace\": {\"type\": \"array\", \"items\": %s, \"minItems\": 3, \"maxItems\": 3}}}",
                   number, number);
    nf_strbuf_addf(sb, "]");
    if (is_spaced_text(p->def.s))
        nf_strbuf_addf(sb, ", \"default\": {\"%.8s\": [%s]}", p->def.s, p->def.s + 9);
    else if (p->def.s && p->def.s[0])
        nf_strbuf_addf(sb, ", \"default\": [%s]", p->def.s);
}

/* ---- list of strings ---- */

static void str_list_default(const struct nf_param *p, void *field)
{
    struct nf_str_list *l = field;
    l->n = 0;
    l->v = NULL;
    if (p->def.s && p->def.s[0] && (l->v = nf_calloc(1, sizeof *l->v)) &&
        (l->v[0] = nf_strdup(p->def.s)))
        l->n = 1;
}

static void str_list_release(void *field)
{
    struct nf_str_list *l = field;
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* {name: item or [items]} as the strings "name = item, item" (NF_PF_NAMED_LISTS). */
static int named_lists_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                             const char *node, struct nf_diags *d)
{
    struct nf_str_list list = { 0, NULL };
    if (check_len(p, v->n, v, node, d) < 0)
        return NF_EINVAL;
    if (!(list.v = nf_calloc(v->n ? v->n : 1, sizeof *list.v)))
        return out_of_memory(d, v, node);
    for (size_t i = 0; i < v->n; i++) {
        const struct nf_ynode *val = v->items[i];
        struct nf_strbuf sb;
        nf_strbuf_init(&sb);
        nf_strbuf_addf(&sb, "%s =", v->keys[i]->value);
        size_t m = val->type == NF_Y_SEQ ? val->n : 1;
        for (size_t j = 0; j < m; j++) {
            const struct nf_ynode *item = val->type == NF_Y_SEQ ? val->items[j] : val;
            if (item->type != NF_Y_SCALAR) {
                free(nf_strbuf_detach(&sb));
                str_list_release(&list);
                return bad(d, item, node, p, "a map of names to a string or a list of strings");
            }
            nf_strbuf_addf(&sb, "%s %s", j ? "," : "", item->value);
        }
        list.v[list.n++] = nf_strbuf_detach(&sb);
    }
    str_list_release(field);
    *(struct nf_str_list *)field = list;
    return 0;
}

static int str_list_parse(const struct nf_param *p, void *field, const struct nf_ynode *v,
                          const char *node, const char *base_dir, struct nf_diags *d)
{
    (void)base_dir;
    struct nf_str_list list = { 0, NULL };
    size_t n;
    int rc;
    if (v->type == NF_Y_MAP && (p->flags & NF_PF_NAMED_LISTS))
        return named_lists_parse(p, field, v, node, d);
    if (v->type == NF_Y_MAP)
        return bad(d, v, node, p, "a list of strings");
    if (!(list.v = list_items_alloc(p, v, node, d, sizeof *list.v, &n, &rc)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        const struct nf_ynode *item = list_item(v, i);
        if (item->type != NF_Y_SCALAR) {
            str_list_release(&list);
            return bad(d, item, node, p, "a string");
        }
        list.v[list.n++] = nf_strdup(item->value);
    }
    str_list_release(field);
    *(struct nf_str_list *)field = list;
    return 0;
}

static void str_list_key(const struct nf_param *p, const void *field, const struct nf_key_sink *k)
{
    (void)p;
    const struct nf_str_list *l = field;
    k->u64(k->ctx, l->n);
    for (size_t i = 0; i < l->n; i++)
        k->str(k->ctx, l->v[i]);
}

static void str_list_json(const struct nf_param *p, const void *field, struct nf_strbuf *sb)
{
    (void)p;
    const struct nf_str_list *l = field;
    nf_strbuf_addf(sb, "[");
    for (size_t i = 0; i < l->n; i++) {
        nf_strbuf_addf(sb, "%s", i ? ", " : "");
        nf_strbuf_add_json_str(sb, l->v[i]);
    }
    nf_strbuf_addf(sb, "]");
}

static void str_list_schema(const struct nf_param *p, const char *def, struct nf_strbuf *sb)
{
    (void)def;   /* no default in the schema: an absent list is empty */
    list_schema(p, "{\"type\": \"string\"}", sb);
    if (p->flags & NF_PF_NAMED_LISTS)
        nf_strbuf_addf(sb, ", {\"type\": \"object\", \"additionalProperties\": {\"anyOf\": ["
                           "{\"type\": [\"string\", \"number\"]}, {\"type\": \"array\", \"items\": "
                           "{\"type\": [\"string\", \"number\"]}}]}}");
    nf_strbuf_addf(sb, "]");
}

/* ---- the table ---- */

static const struct nf_ptype_ops ptype_ops[] = {
    [NF_P_INT] = { "integer", int_default, NULL, int_parse, int_default_text, range_allowed,
                   int_key, int_json, number_schema },
    [NF_P_NUM] = { "number", num_default, NULL, num_parse, num_default_text, range_allowed,
                   num_key, num_json, number_schema },
    [NF_P_BOOL] = { "boolean", bool_default, NULL, bool_parse, bool_default_text, range_allowed,
                    bool_key, bool_json, bool_schema },
    [NF_P_STR] = { "string", str_default, str_release, str_parse, text_default_text, range_allowed,
                   str_key, str_json, str_schema },
    [NF_P_PATH] = { "path", str_default, str_release, path_parse, text_default_text, range_allowed,
                    str_key, str_json, str_schema },
    [NF_P_ENUM] = { "choice", enum_default, NULL, enum_parse, enum_default_text, enum_allowed,
                    enum_key, enum_json, enum_schema },
    [NF_P_NUM_LIST] = { "list of numbers", num_list_default, num_list_release, num_list_parse,
                        num_list_default_text, range_allowed, num_list_key, num_list_json,
                        num_list_schema },
    [NF_P_STR_LIST] = { "list of strings", str_list_default, str_list_release, str_list_parse,
                        text_default_text, range_allowed, str_list_key, str_list_json,
                        str_list_schema },
};

const struct nf_ptype_ops *nf_ptype_ops(enum nf_ptype t)
{
    return (size_t)t < sizeof ptype_ops / sizeof ptype_ops[0] ? &ptype_ops[t] : NULL;
}

const char *nf_ptype_name(enum nf_ptype t)
{
    const struct nf_ptype_ops *ops = nf_ptype_ops(t);
    return ops ? ops->name : "?";
}

/* ---- a whole table ---- */

void nf_params_defaults(const struct nf_node_type *t, void *params)
{
    memset(params, 0, t->params_size);
    for (const struct nf_param *p = t->params; p && p->name; p++)
        nf_ptype_ops(p->type)->set_default(p, (char *)params + p->offset);
}

void nf_params_release(const struct nf_node_type *t, void *params)
{
    if (!params)
        return;
    for (const struct nf_param *p = t->params; p && p->name; p++)
        if (nf_ptype_ops(p->type)->release)
            nf_ptype_ops(p->type)->release((char *)params + p->offset);
}

void nf_param_default_text(const struct nf_param *p, char *buf, size_t size)
{
    buf[0] = '\0';
    if (p->flags & NF_PF_REQUIRED)
        return;
    nf_ptype_ops(p->type)->default_text(p, buf, size);
}

char *nf_param_value_json(const struct nf_param *p, const void *params)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_ptype_ops(p->type)->json(p, (const char *)params + p->offset, &sb);
    return nf_strbuf_detach(&sb);
}

bool nf_param_is_default(const struct nf_node_type *t, const struct nf_param *p, const void *params)
{
    void *defaults = nf_malloc(t->params_size ? t->params_size : 1);
    if (!defaults)
        return false;
    nf_params_defaults(t, defaults);
    char *value = nf_param_value_json(p, params), *def = nf_param_value_json(p, defaults);
    bool same = value && def && strcmp(value, def) == 0;
    free(value);
    free(def);
    nf_params_release(t, defaults);
    free(defaults);
    return same;
}

int nf_param_set(const struct nf_param *p, void *params, const struct nf_ynode *v,
                 const char *node, const char *base_dir, struct nf_diags *d)
{
    const struct nf_ptype_ops *ops = nf_ptype_ops(p->type);
    if (!ops)
        return NF_EBUG;
    return ops->parse(p, (char *)params + p->offset, v, node, base_dir, d);
}
