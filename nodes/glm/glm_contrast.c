/* glm_contrast.c — contrasts of the `glm` node written over the design's
 * column names ("faces - houses", "2*a - (b + c)", "(a + b)/2") or as weight
 * lists ("[1, -1, 0]"), turned into one weight per column. A name may end
 * in a bracketed level, "group[patient]", as group_design names the
 * indicator columns of a categorical variable.
 *
 * A recursive-descent parser over linear forms: every sub-expression is a
 * weight vector plus a constant, so that numbers may scale names (2*a, a*2,
 * a/2, -(b + c)) but a product of two names, a division by a name, or a
 * constant left over ("a - b + 1") is refused with the position it happened
 * at. Nesting is bounded so that a hostile string cannot exhaust the stack.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/alloc.h"

#include "glm.h"

#define MAX_DEPTH 64

/* A linear form: Σ w[j] column_j + c; `linear` when some column appears
 * (syntax-only mode has no w). */
struct form { double *w; double c; bool linear; };

struct parser {
    const char *text, *s;
    const char *const *cols;   /* NULL: syntax only */
    size_t k;
    int depth;
    char *why;
    size_t why_size;
    int rc;                    /* 0, NF_EINVAL (reason in why) or NF_ENOMEM */
};

static void fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct parser *p, const char *fmt, ...)
{
    if (p->rc)
        return;
    p->rc = NF_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(p->why, p->why_size, fmt, ap);
    va_end(ap);
    if (len >= 0 && (size_t)len < p->why_size)
        snprintf(p->why + len, p->why_size - (size_t)len, " (at character %td of \"%s\")",
                 p->s - p->text + 1, p->text);
}

static void skip_space(struct parser *p)
{
    while (isspace((unsigned char)*p->s))
        p->s++;
}

static bool form_init(struct parser *p, struct form *f)
{
    *f = (struct form){ 0 };
    if (p->cols && !(f->w = nf_calloc(p->k ? p->k : 1, sizeof *f->w))) {
        if (!p->rc)
            p->rc = NF_ENOMEM;
        return false;
    }
    return true;
}

static void form_scale(struct parser *p, struct form *f, double a)
{
    for (size_t j = 0; p->cols && j < p->k; j++)
        f->w[j] *= a;
    f->c *= a;
}

static void form_add(struct parser *p, struct form *f, const struct form *g, double sign)
{
    for (size_t j = 0; p->cols && j < p->k; j++)
        f->w[j] += sign * g->w[j];
    f->c += sign * g->c;
    f->linear = f->linear || g->linear;
}

static bool is_name_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool is_name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.'; }

/* Column names joined by ", " for messages. */
static void list_columns(const struct parser *p, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t j = 0; j < p->k && used + 1 < size; j++) {
        int len = snprintf(buf + used, size - used, "%s%s", j ? ", " : "", p->cols[j]);
        if (len < 0 || (size_t)len >= size - used) {
            snprintf(buf + (size > 5 ? size - 5 : 0), size > 5 ? 5 : size, "...");
            return;
        }
        used += (size_t)len;
    }
}

static void parse_sum(struct parser *p, struct form *f);

/* primary := number | name | '(' sum ')' | ('+'|'-') primary */
static void parse_primary(struct parser *p, struct form *f)
{
    skip_space(p);
    char c = *p->s;
    if (c == '+' || c == '-') {
        if (++p->depth > MAX_DEPTH) {
            fail(p, "more than %d signs or parentheses nested", MAX_DEPTH);
            return;
        }
        p->s++;
        parse_primary(p, f);
        if (c == '-')
            form_scale(p, f, -1);
        p->depth--;
        return;
    }
    if (c == '(') {
        if (++p->depth > MAX_DEPTH) {
            fail(p, "more than %d signs or parentheses nested", MAX_DEPTH);
            return;
        }
        p->s++;
        parse_sum(p, f);
        skip_space(p);
        if (!p->rc && *p->s != ')')
            fail(p, "'(' is not closed");
        if (!p->rc)
            p->s++;
        p->depth--;
        return;
    }
    if (isdigit((unsigned char)c) || c == '.') {
        char *end;
        double v = strtod(p->s, &end);
        if (end == p->s || !isfinite(v)) {
            fail(p, "a malformed number");
            return;
        }
        p->s = end;
        if (is_name_start(*p->s)) {
            fail(p, "a number directly followed by a name (write 2*a, not 2a)");
            return;
        }
        f->c = v;
        return;
    }
    if (is_name_start(c)) {
        const char *start = p->s;
        while (is_name_char(*p->s))
            p->s++;
        /* an indicator column of a categorical variable, named as group_design
           names them: "group[patient]" (the level is any text without ']') */
        if (*p->s == '[') {
            const char *close = strchr(p->s, ']');
            if (!close) {
                fail(p, "'[' without a closing ']' (a level is written name[level])");
                return;
            }
            p->s = close + 1;
        }
        size_t len = (size_t)(p->s - start);
        f->linear = true;
        if (!p->cols)
            return;
        for (size_t j = 0; j < p->k; j++)
            if (strlen(p->cols[j]) == len && strncmp(p->cols[j], start, len) == 0) {
                f->w[j] += 1;
                return;
            }
        char cols[768];
        list_columns(p, cols, sizeof cols);
        const char *at = p->s;
        p->s = start;
        fail(p, "'%.*s' is not a column of the design (columns: %s)", (int)len, start, cols);
        p->s = at;
        return;
    }
    if (c == '\0')
        fail(p, "the expression ends where a name, number or '(' was expected");
    else
        fail(p, "'%c' where a name, number or '(' was expected", c);
}

/* product := primary (('*' | '/') primary)*, one side of '*' a number and
 * the right side of '/' a nonzero number */
static void parse_product(struct parser *p, struct form *f)
{
    parse_primary(p, f);
    for (;;) {
        skip_space(p);
        char op = *p->s;
        if (p->rc || (op != '*' && op != '/'))
            return;
        p->s++;
        struct form g;
        if (!form_init(p, &g))
            return;
        const char *at = p->s;
        parse_primary(p, &g);
        if (!p->rc) {
            if (op == '/') {
                if (g.linear) {
                    p->s = at;
                    fail(p, "division by a column: only numbers may divide");
                } else if (g.c == 0) {
                    p->s = at;
                    fail(p, "division by zero");
                } else {
                    form_scale(p, f, 1 / g.c);
                }
            } else if (f->linear && g.linear) {
                p->s = at;
                fail(p, "a product of two columns: a contrast is a weighted sum of columns");
            } else if (g.linear) {
                double a = f->c;
                free(f->w);
                *f = g;
                g.w = NULL;
                form_scale(p, f, a);
            } else {
                form_scale(p, f, g.c);
            }
        }
        free(g.w);
    }
}

/* sum := product (('+' | '-') product)* */
static void parse_sum(struct parser *p, struct form *f)
{
    parse_product(p, f);
    for (;;) {
        skip_space(p);
        char op = *p->s;
        if (p->rc || (op != '+' && op != '-'))
            return;
        p->s++;
        struct form g;
        if (!form_init(p, &g))
            return;
        parse_product(p, &g);
        if (!p->rc)
            form_add(p, f, &g, op == '-' ? -1 : 1);
        free(g.w);
    }
}

/* "[w1, w2, ...]": weights in column order, at most k, zeros after. */
static void parse_vector(struct parser *p, double *w)
{
    p->s++;   /* '[' */
    size_t n = 0;
    for (;;) {
        skip_space(p);
        if (*p->s == ']' && n == 0)
            break;
        char *end;
        double v = strtod(p->s, &end);
        if (end == p->s || !isfinite(v)) {
            fail(p, "a weight list holds numbers only, separated by commas");
            return;
        }
        p->s = end;
        if (p->cols) {
            if (n >= p->k) {
                fail(p, "%zu weights or more for a design of %zu columns", n + 1, p->k);
                return;
            }
            w[n] = v;
        }
        n++;
        skip_space(p);
        if (*p->s == ',') {
            p->s++;
            continue;
        }
        if (*p->s == ']')
            break;
        fail(p, "',' or ']' expected in a weight list");
        return;
    }
    p->s++;
    skip_space(p);
    if (*p->s)
        fail(p, "text after the weight list");
    else if (n == 0)
        fail(p, "an empty weight list");
}

int glm_contrast_weights(const char *expr, const char *const *cols, size_t k, double *w, char *why,
                         size_t why_size)
{
    struct parser p = { .text = expr, .s = expr, .cols = cols, .k = cols ? k : 0, .why = why,
                        .why_size = why_size };
    if (why_size)
        why[0] = '\0';
    for (size_t j = 0; cols && j < k; j++)
        w[j] = 0;
    skip_space(&p);
    if (*p.s == '[') {
        parse_vector(&p, w);
        return p.rc;
    }
    struct form f;
    if (!form_init(&p, &f))
        return p.rc;
    parse_sum(&p, &f);
    skip_space(&p);
    if (!p.rc && *p.s)
        fail(&p, "'%c' where '+', '-', '*', '/' or the end was expected", *p.s);
    if (!p.rc && !f.linear) {
        p.s = expr;
        fail(&p, "no column in the expression: a contrast weighs the design's columns");
    }
    if (!p.rc && f.c != 0) {
        p.s = expr;
        fail(&p, "a constant term (%g) in the expression: a contrast is a weighted sum of columns only", f.c);
    }
    if (!p.rc && cols) {
        bool any = false;
        for (size_t j = 0; j < k; j++) {
            w[j] = f.w[j];
            any = any || f.w[j] != 0;
        }
        if (!any) {
            p.s = expr;
            fail(&p, "every weight cancels out (all zero)");
        }
    }
    free(f.w);
    return p.rc;
}

static char *trimmed(const char *s, size_t len)
{
    while (len && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    char *out = nf_malloc(len + 1);
    if (out) {
        memcpy(out, s, len);
        out[len] = '\0';
    }
    return out;
}

int glm_contrast_split(const char *text, char **name, char **expr, char *why, size_t why_size)
{
    *name = *expr = NULL;
    const char *eq = strchr(text, '=');
    if (!eq) {
        snprintf(why, why_size, "\"%s\" has no '=': write each contrast as \"name = expression\", "
                 "e.g. \"faces_vs_houses = faces - houses\"", text);
        return NF_EINVAL;
    }
    *name = trimmed(text, (size_t)(eq - text));
    *expr = trimmed(eq + 1, strlen(eq + 1));
    if (!*name || !*expr) {
        free(*name);
        free(*expr);
        *name = *expr = NULL;
        return NF_ENOMEM;
    }
    const char *why_not = NULL;
    if (!**name)
        why_not = "has no name before '='";
    else if (!**expr)
        why_not = "has no expression after '='";
    for (const char *c = *name; !why_not && *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
            why_not = "has a name with characters other than letters, digits, '_' and '-' (it names files)";
    if (why_not) {
        snprintf(why, why_size, "\"%s\" %s", text, why_not);
        free(*name);
        free(*expr);
        *name = *expr = NULL;
        return NF_EINVAL;
    }
    return 0;
}
