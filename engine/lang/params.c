/* params.c — the generic half of every node's parameter table.
 *
 * A node declares its parameters once (struct nf_param rows, node.h); this
 * file sets defaults, parses YAML values into the params struct with type and
 * range checks, frees what it allocated, and renders defaults as text for
 * `nlflow nodes`, the JSON schema and docs/nodes/.
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

const char *nf_ptype_name(enum nf_ptype t)
{
    switch (t) {
    case NF_P_INT: return "integer";
    case NF_P_NUM: return "number";
    case NF_P_BOOL: return "boolean";
    case NF_P_STR: return "string";
    case NF_P_PATH: return "path";
    case NF_P_ENUM: return "choice";
    case NF_P_NUM_LIST: return "list of numbers";
    case NF_P_STR_LIST: return "list of strings";
    }
    return "?";
}

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

/* Parse "1,2,3" (a default written as text) into a list. */
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

/* A default written as text: "1,2,3", or "logspace:-2,4,20" / "linspace:0,1,5"
 * (the same values as writing {logspace: [-2, 4, 20]}, so the key is the same). */
static int num_list_from_text(const char *s, struct nf_num_list *out)
{
    out->n = 0;
    out->v = NULL;
    if (!s || !*s)
        return 0;
    if (strncmp(s, "logspace:", 9) == 0 || strncmp(s, "linspace:", 9) == 0) {
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

void nf_params_defaults(const struct nf_node_type *t, void *params)
{
    memset(params, 0, t->params_size);
    for (const struct nf_param *p = t->params; p && p->name; p++) {
        char *field = (char *)params + p->offset;
        switch (p->type) {
        case NF_P_INT: *(int64_t *)field = p->def.i; break;
        case NF_P_NUM: *(double *)field = p->def.d; break;
        case NF_P_BOOL: *(bool *)field = p->def.i != 0; break;
        case NF_P_ENUM: *(int *)field = (int)p->def.i; break;
        case NF_P_STR:
        case NF_P_PATH:
            *(char **)field = p->def.s && p->def.s[0] ? nf_strdup(p->def.s) : NULL;
            break;
        case NF_P_NUM_LIST:
            num_list_from_text(p->def.s, (struct nf_num_list *)field);
            break;
        case NF_P_STR_LIST: {
            struct nf_str_list *l = (struct nf_str_list *)field;
            l->n = 0;
            l->v = NULL;
            if (p->def.s && p->def.s[0] && (l->v = nf_calloc(1, sizeof *l->v)) &&
                (l->v[0] = nf_strdup(p->def.s)))
                l->n = 1;
            break;
        }
        }
    }
}

void nf_params_release(const struct nf_node_type *t, void *params)
{
    if (!params)
        return;
    for (const struct nf_param *p = t->params; p && p->name; p++) {
        char *field = (char *)params + p->offset;
        switch (p->type) {
        case NF_P_STR:
        case NF_P_PATH:
            free(*(char **)field);
            *(char **)field = NULL;
            break;
        case NF_P_NUM_LIST: {
            struct nf_num_list *l = (struct nf_num_list *)field;
            free(l->v);
            l->v = NULL;
            l->n = 0;
            break;
        }
        case NF_P_STR_LIST: {
            struct nf_str_list *l = (struct nf_str_list *)field;
            for (size_t i = 0; i < l->n; i++)
                free(l->v[i]);
            free(l->v);
            l->v = NULL;
            l->n = 0;
            break;
        }
        default:
            break;
        }
    }
}

void nf_param_default_text(const struct nf_param *p, char *buf, size_t size)
{
    buf[0] = '\0';
    if (p->flags & NF_PF_REQUIRED)
        return;
    switch (p->type) {
    case NF_P_INT: snprintf(buf, size, "%" PRId64, p->def.i); break;
    case NF_P_NUM:
        if (!isnan(p->def.d))
            snprintf(buf, size, "%g", p->def.d);
        break;
    case NF_P_BOOL: snprintf(buf, size, "%s", p->def.i ? "true" : "false"); break;
    case NF_P_ENUM: snprintf(buf, size, "%s", p->choices ? p->choices[p->def.i] : ""); break;
    case NF_P_NUM_LIST:
        if (p->def.s && (strncmp(p->def.s, "logspace:", 9) == 0 || strncmp(p->def.s, "linspace:", 9) == 0))
            snprintf(buf, size, "{%.8s: [%s]}", p->def.s, p->def.s + 9);
        else if (p->def.s && p->def.s[0])
            snprintf(buf, size, "[%s]", p->def.s);
        break;
    default:
        if (p->def.s)
            snprintf(buf, size, "%s", p->def.s);
    }
}

static void range_text(const struct nf_param *p, char *buf, size_t size)
{
    bool lo = isfinite(p->min) && p->min > -1e300, hi = isfinite(p->max) && p->max < 1e300;
    if (p->min == 0 && p->max == 0)
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
    if (p->min == 0 && p->max == 0)
        return true;   /* no range given */
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

/* {logspace: [lo, hi, n]} (10^lo .. 10^hi, numpy's logspace) or
 * {linspace: [lo, hi, n]} for a list of numbers. */
static int num_list_spaced(const struct nf_param *p, void *params, const struct nf_ynode *v,
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
    if (spaced_values(log, a[0], a[1], count, &list) < 0) {
        NF_DIAG(d, NF_ENOMEM, &v->loc, node, "out of memory");
        return NF_ENOMEM;
    }
    for (int64_t i = 0; i < count; i++) {
        if (!in_range(p, list.v[i])) {
            char what[160], range[96];
            range_text(p, range, sizeof range);
            snprintf(what, sizeof what, "values %s (value %lld is %g)", range, (long long)i + 1, list.v[i]);
            free(list.v);
            return bad(d, v, node, p, what);
        }
    }
    struct nf_num_list *dst = (struct nf_num_list *)((char *)params + p->offset);
    free(dst->v);
    *dst = list;
    return 0;
}

int nf_param_set(const struct nf_param *p, void *params, const struct nf_ynode *v,
                 const char *node, const char *base_dir, struct nf_diags *d)
{
    char *field = (char *)params + p->offset;
    double num;
    switch (p->type) {
    case NF_P_INT:
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
        *(int64_t *)field = (int64_t)num;
        return 0;
    case NF_P_NUM:
        if (parse_number(p, v, node, d, &num) < 0)
            return NF_EINVAL;
        *(double *)field = num;
        return 0;
    case NF_P_BOOL: {
        bool b;
        if (v->type == NF_Y_SCALAR && v->quoted && nf_parse_bool(v->value, &b))
            return bad_quoted(d, v, node, p, "true or false");
        if (v->type != NF_Y_SCALAR || v->quoted || !nf_parse_bool(v->value, &b))
            return bad(d, v, node, p, "true or false");
        *(bool *)field = b;
        return 0;
    }
    case NF_P_ENUM: {
        if (v->type == NF_Y_SCALAR)
            for (int i = 0; p->choices[i]; i++)
                if (strcmp(v->value, p->choices[i]) == 0) {
                    *(int *)field = i;
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
    case NF_P_STR:
    case NF_P_PATH: {
        if (v->type != NF_Y_SCALAR)
            return bad(d, v, node, p, p->type == NF_P_PATH ? "a file path" : "a string");
        if (p->type == NF_P_PATH && v->value[0] == '\0')
            return bad(d, v, node, p, "a file path");
        char *s = p->type == NF_P_PATH ? nf_path_join(base_dir, v->value) : nf_strdup(v->value);
        if (!s) {
            NF_DIAG(d, NF_ENOMEM, &v->loc, node, "out of memory");
            return NF_ENOMEM;
        }
        free(*(char **)field);
        *(char **)field = s;
        return 0;
    }
    case NF_P_NUM_LIST: {
        struct nf_num_list list = { 0, NULL };
        size_t n = v->type == NF_Y_SEQ ? v->n : 1;
        if (v->type == NF_Y_MAP)
            return num_list_spaced(p, params, v, node, d);
        if (check_len(p, n, v, node, d) < 0)
            return NF_EINVAL;
        list.v = nf_calloc(n ? n : 1, sizeof *list.v);
        if (!list.v) {
            NF_DIAG(d, NF_ENOMEM, &v->loc, node, "out of memory");
            return NF_ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
            const struct nf_ynode *item = v->type == NF_Y_SEQ ? v->items[i] : v;
            if (parse_number(p, item, node, d, &list.v[i]) < 0) {
                free(list.v);
                return NF_EINVAL;
            }
        }
        list.n = n;
        struct nf_num_list *dst = (struct nf_num_list *)field;
        free(dst->v);
        *dst = list;
        return 0;
    }
    case NF_P_STR_LIST: {
        struct nf_str_list list = { 0, NULL };
        size_t n = v->type == NF_Y_SEQ ? v->n : 1;
        if (v->type == NF_Y_MAP)
            return bad(d, v, node, p, "a list of strings");
        if (check_len(p, n, v, node, d) < 0)
            return NF_EINVAL;
        list.v = nf_calloc(n ? n : 1, sizeof *list.v);
        if (!list.v) {
            NF_DIAG(d, NF_ENOMEM, &v->loc, node, "out of memory");
            return NF_ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
            const struct nf_ynode *item = v->type == NF_Y_SEQ ? v->items[i] : v;
            if (item->type != NF_Y_SCALAR) {
                for (size_t j = 0; j < list.n; j++)
                    free(list.v[j]);
                free(list.v);
                return bad(d, item, node, p, "a string");
            }
            list.v[list.n++] = nf_strdup(item->value);
        }
        struct nf_str_list *dst = (struct nf_str_list *)field;
        for (size_t j = 0; j < dst->n; j++)
            free(dst->v[j]);
        free(dst->v);
        *dst = list;
        return 0;
    }
    }
    return NF_EBUG;
}
