/* fmt.c — `nlflow fmt`: a pipeline file in canonical form, comments kept.
 *
 * A lab's pipelines live in git; two people who write the same analysis
 * should produce the same text, so diffs show changes of meaning only. The
 * canonical form: two-space indentation; top-level keys in the order nlflow,
 * name, requires, settings, params, inputs, outputs, nodes; in each node
 * type, path, with, in, after, device, then its parameters in the order of
 * the node type's table (unknown keys last, as written: validation reports
 * them); nodes, settings and params as written. The root, its keys' values
 * and every node are block mappings; any other mapping or list is written in
 * flow style ({a: b}, [a, b], nested) when it fits in 100 columns, in block
 * style otherwise. Scalars keep their text; quoted ones are written with
 * double quotes (quoting makes a string, so it is meaning), and a plain
 * scalar that flow style would misread gets quotes too. Comments stay with the key they precede (full-line
 * comments) or end (end-of-line comments); the comments before the first key
 * head the file; one blank line is kept where a key had one or more before it
 * (or before its comments). libyaml does not report comments: they are found
 * in the text, outside quotes, and attached by line to the keys that stand on
 * lines of their own in the output. Formatting is idempotent.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "node.h"
#include "core/util.h"
#include "ytree.h"

#define FLOW_WIDTH 100

struct comment {
    int line;
    bool full_line;       /* nothing but spaces before it */
    char *text;           /* from '#' to the end of the line, right-trimmed */
};

/* A key written on a line of its own, with the comments that go with it. */
struct anchor {
    const struct nf_ynode *key;
    struct nf_strbuf leading;   /* full-line comments before it, one per line, unindented */
    char *eol;                  /* its end-of-line comment */
    struct nf_strbuf after;     /* more end-of-line comments of lines it spans */
    bool blank_before;
};

struct fmt {
    const char *text;
    size_t len;
    int n_lines;
    const char **line_start;
    struct comment *comments;
    size_t n_comments;
    struct anchor *anchors;
    size_t n_anchors, cap_anchors;
    struct nf_strbuf header, trailer, out;
};

static const char *const top_order[] = { "nlflow", "name", "requires", "settings", "params", "inputs", "outputs",
                                         "nodes", NULL };
static const char *const node_order[] = { "type", "path", "with", "in", "after", "device", NULL };

enum ctx { CTX_ROOT, CTX_NODES, CTX_NODE, CTX_BLOCK, CTX_OTHER };

/* A plain scalar that would change meaning or break in flow style. */
static bool needs_quotes_in_flow(const char *s)
{
    return strpbrk(s, ",[]{}#") || strstr(s, ": ") || (s[0] && s[strlen(s) - 1] == ':');
}

static void add_scalar(struct nf_strbuf *sb, const struct nf_ynode *n, bool flow)
{
    if (!n->quoted && !(flow && needs_quotes_in_flow(n->value))) {
        nf_strbuf_addf(sb, "%s", n->value);
        return;
    }
    nf_strbuf_addf(sb, "\"");
    for (const char *c = n->value; *c; c++) {
        if (*c == '"' || *c == '\\')
            nf_strbuf_addf(sb, "\\%c", *c);
        else if (*c == '\n')
            nf_strbuf_addf(sb, "\\n");
        else if (*c == '\t')
            nf_strbuf_addf(sb, "\\t");
        else
            nf_strbuf_addf(sb, "%c", *c);
    }
    nf_strbuf_addf(sb, "\"");
}

/* The flow text of a collection. */
static void add_flow(struct nf_strbuf *sb, const struct nf_ynode *n)
{
    nf_strbuf_addf(sb, n->type == NF_Y_MAP ? "{" : "[");
    for (size_t i = 0; i < n->n; i++) {
        nf_strbuf_addf(sb, "%s", i ? ", " : "");
        if (n->type == NF_Y_MAP) {
            add_scalar(sb, n->keys[i], true);
            nf_strbuf_addf(sb, ": ");
        }
        if (n->items[i]->type == NF_Y_SCALAR)
            add_scalar(sb, n->items[i], true);
        else
            add_flow(sb, n->items[i]);
    }
    nf_strbuf_addf(sb, n->type == NF_Y_MAP ? "}" : "]");
}

/* Whether the value of `key` (at indentation `indent`, in context c) is
 * written in flow style. */
static bool is_flow(const struct nf_ynode *v, enum ctx c, const char *key, int indent)
{
    if (v->type == NF_Y_SCALAR || c == CTX_ROOT || c == CTX_NODES)
        return false;
    if (v->n == 0)
        return true;   /* {} or []: nothing else says "empty" */
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    add_flow(&sb, v);
    bool fits = indent + strlen(key) + 2 + sb.len <= FLOW_WIDTH;
    nf_strbuf_release(&sb);
    return fits;
}

/* The order in which a mapping's keys are written: an index array. */
static size_t *key_order(const struct nf_ynode *map, enum ctx c)
{
    size_t *order = nf_malloc((map->n + 1) * sizeof *order), k = 0;
    bool *taken = nf_calloc(map->n + 1, sizeof *taken);
    if (!order || !taken) {
        free(order);
        free(taken);
        return NULL;
    }
    const char *const *first = c == CTX_ROOT ? top_order : c == CTX_NODE ? node_order : NULL;
    for (int f = 0; first && first[f]; f++)
        for (size_t i = 0; i < map->n; i++)
            if (!taken[i] && strcmp(map->keys[i]->value, first[f]) == 0) {
                order[k++] = i;
                taken[i] = true;
            }
    const struct nf_ynode *type = c == CTX_NODE ? nf_ymap_get(map, "type") : NULL;
    const struct nf_node_type *t = type && type->type == NF_Y_SCALAR ? nf_node_type_find(type->value) : NULL;
    for (const struct nf_param *p = t ? t->params : NULL; p && p->name; p++)
        for (size_t i = 0; i < map->n; i++)
            if (!taken[i] && strcmp(map->keys[i]->value, p->name) == 0) {
                order[k++] = i;
                taken[i] = true;
            }
    for (size_t i = 0; i < map->n; i++)
        if (!taken[i])
            order[k++] = i;
    free(taken);
    return order;
}

static enum ctx child_ctx(enum ctx c, const char *key)
{
    if (c == CTX_ROOT)
        return strcmp(key, "nodes") == 0 ? CTX_NODES : CTX_BLOCK;
    return c == CTX_NODES ? CTX_NODE : CTX_OTHER;
}

/* Pass 1: every key that gets a line of its own, in file order of its line. */
static bool collect_anchors(struct fmt *f, const struct nf_ynode *n, enum ctx c, int indent)
{
    if (n->type == NF_Y_SCALAR)
        return true;
    for (size_t i = 0; i < n->n; i++) {
        const struct nf_ynode *v = n->items[i];
        const char *key = n->type == NF_Y_MAP ? n->keys[i]->value : "-";
        if (n->type == NF_Y_MAP) {
            if (f->n_anchors == f->cap_anchors) {
                size_t cap = f->cap_anchors ? 2 * f->cap_anchors : 64;
                struct anchor *a = nf_realloc(f->anchors, cap * sizeof *a);
                if (!a)
                    return false;
                f->anchors = a;
                f->cap_anchors = cap;
            }
            struct anchor *a = &f->anchors[f->n_anchors++];
            memset(a, 0, sizeof *a);
            a->key = n->keys[i];
            nf_strbuf_init(&a->leading);
            nf_strbuf_init(&a->after);
        }
        if (!is_flow(v, c, key, indent) && !collect_anchors(f, v, child_ctx(c, key), indent + 2))
            return false;
    }
    return true;
}

static int anchor_line_cmp(const void *a, const void *b)
{
    const struct anchor *x = a, *y = b;   /* by line, then column: keys that shared a line in flow style */
    if (x->key->loc.line != y->key->loc.line)
        return (x->key->loc.line > y->key->loc.line) - (x->key->loc.line < y->key->loc.line);
    return (x->key->loc.col > y->key->loc.col) - (x->key->loc.col < y->key->loc.col);
}

static struct anchor *anchor_of(struct fmt *f, const struct nf_ynode *key)
{
    size_t lo = 0, hi = f->n_anchors;
    while (lo < hi) {   /* anchors are sorted by line; keys share a line only in flow style */
        size_t mid = (lo + hi) / 2;
        if (f->anchors[mid].key->loc.line < key->loc.line)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < f->n_anchors && f->anchors[i].key->loc.line == key->loc.line; i++)
        if (f->anchors[i].key == key)
            return &f->anchors[i];
    return NULL;
}

static bool blank_line(const struct fmt *f, int line)
{
    if (line < 1 || line > f->n_lines)
        return false;
    for (const char *c = f->line_start[line - 1]; *c && *c != '\n'; c++)
        if (*c != ' ' && *c != '\t' && *c != '\r')
            return false;
    return true;
}

/* Finds the comments of the text (outside quotes) and the blank lines. */
static int scan_comments(struct fmt *f, struct nf_error *err)
{
    size_t cap = 0;
    for (int l = 0; l < f->n_lines; l++) {
        const char *s = f->line_start[l], *c = s;
        char quote = 0;
        for (; *c && *c != '\n'; c++) {
            if (quote) {
                if (*c == '\\' && quote == '"' && c[1] && c[1] != '\n')
                    c++;
                else if (*c == quote)
                    quote = 0;
                continue;
            }
            if ((*c == '"' || *c == '\'') && (c == s || strchr(" \t[{,:", c[-1])))
                quote = *c;
            else if (*c == '#' && (c == s || c[-1] == ' ' || c[-1] == '\t'))
                break;
            else if ((*c == '|' || *c == '>') && (c == s || c[-1] == ' ')) {
                const char *rest = c + 1 + strspn(c + 1, "+-0123456789");
                rest += strspn(rest, " \t\r");
                if ((*rest == '\n' || !*rest || *rest == '#') && c > s && strchr(": -", c[-1] == ' ' ? c[-2] : ' '))
                    return NF_FAIL_AT(err, NF_EUSAGE, &((struct nf_loc){ NULL, l + 1, (int)(c - s) + 1 }), NULL,
                                      "fmt does not rewrite block scalars (| or >): write the value on one line");
            }
        }
        if (*c != '#')
            continue;
        if (f->n_comments == cap) {
            cap = cap ? 2 * cap : 32;
            struct comment *v = nf_realloc(f->comments, cap * sizeof *v);
            if (!v)
                return NF_FAIL(err, NF_ENOMEM, "out of memory");
            f->comments = v;
        }
        size_t len = strcspn(c, "\n");
        while (len > 0 && (c[len - 1] == ' ' || c[len - 1] == '\t' || c[len - 1] == '\r'))
            len--;
        struct comment *cm = &f->comments[f->n_comments++];
        cm->line = l + 1;
        cm->full_line = strspn(s, " \t") == (size_t)(c - s);
        cm->text = nf_strndup(c, len);
        if (!cm->text)
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    return 0;
}

/* Each comment to its anchor: full-line ones to the next anchor below them
 * (those above the first key head the file), end-of-line ones to the last
 * anchor at or above their line. */
static void attach_comments(struct fmt *f)
{
    size_t a = 0;
    int first_line = f->n_anchors ? f->anchors[0].key->loc.line : f->n_lines + 1;
    for (size_t i = 0; i < f->n_comments; i++) {
        const struct comment *c = &f->comments[i];
        while (a < f->n_anchors && f->anchors[a].key->loc.line <= c->line)
            a++;
        if (c->full_line) {
            if (c->line < first_line)   /* the file's header, its paragraphs kept */
                nf_strbuf_addf(&f->header, "%s%s\n", f->header.len && blank_line(f, c->line - 1) ? "\n" : "",
                               c->text);
            else if (a < f->n_anchors)
                nf_strbuf_addf(&f->anchors[a].leading, "%s\n", c->text);
            else
                nf_strbuf_addf(&f->trailer, "%s\n", c->text);
        } else if (a > 0) {
            struct anchor *an = &f->anchors[a - 1];
            if (!an->eol && an->key->loc.line == c->line)
                an->eol = nf_strdup(c->text);
            else
                nf_strbuf_addf(&an->after, "%s\n", c->text);
        } else {
            nf_strbuf_addf(&f->header, "%s\n", c->text);
        }
    }
    /* a blank line before a key, or before the comments above it */
    for (size_t i = 0; i < f->n_anchors; i++) {
        struct anchor *an = &f->anchors[i];
        int line = an->key->loc.line - 1;
        while (line >= 1 && !blank_line(f, line)) {
            const char *s = f->line_start[line - 1];
            s += strspn(s, " \t");
            if (*s != '#')
                break;
            line--;
        }
        an->blank_before = blank_line(f, line) && line > first_line;
    }
}

static void add_comments(struct nf_strbuf *sb, const struct nf_strbuf *lines, int indent)
{
    for (const char *l = lines->buf; l && *l;) {
        size_t len = strcspn(l, "\n");
        nf_strbuf_addf(sb, "%*s%.*s\n", indent, "", (int)len, l);
        l += len + (l[len] == '\n');
    }
}

/* Pass 2: write n (a mapping or list) at `indent`. */
static void emit(struct fmt *f, const struct nf_ynode *n, enum ctx c, int indent, bool first_inline)
{
    struct nf_strbuf *sb = &f->out;
    size_t *order = n->type == NF_Y_MAP ? key_order(n, c) : NULL;
    if (n->type == NF_Y_MAP && !order) {
        sb->oom = true;
        return;
    }
    for (size_t k = 0; k < n->n; k++) {
        size_t i = order ? order[k] : k;
        const struct nf_ynode *v = n->items[i];
        const char *key = n->type == NF_Y_MAP ? n->keys[i]->value : "-";
        int ind = first_inline && k == 0 ? 0 : indent;
        struct anchor *an = n->type == NF_Y_MAP ? anchor_of(f, n->keys[i]) : NULL;
        if (an && an->blank_before && k > 0)
            nf_strbuf_addf(sb, "\n");
        if (an && an->leading.len) {
            add_comments(sb, &an->leading, ind);
            if (first_inline && k == 0)
                nf_strbuf_addf(sb, "%*s", indent, "");
        }
        if (n->type == NF_Y_MAP) {
            nf_strbuf_addf(sb, "%*s", ind, "");
            add_scalar(sb, n->keys[i], false);
            nf_strbuf_addf(sb, ":");
        } else {
            nf_strbuf_addf(sb, "%*s-", ind, "");
        }
        bool flow = is_flow(v, c, key, indent);
        if (v->type == NF_Y_SCALAR && v->value[0]) {
            nf_strbuf_addf(sb, " ");
            add_scalar(sb, v, false);
        } else if (v->type == NF_Y_SCALAR && v->quoted) {
            nf_strbuf_addf(sb, " \"\"");
        } else if (flow) {
            nf_strbuf_addf(sb, " ");
            add_flow(sb, v);
        }
        if (an && an->eol)
            nf_strbuf_addf(sb, "  %s", an->eol);
        bool inline_child = n->type == NF_Y_SEQ && v->type == NF_Y_MAP && !flow;
        if (!inline_child)
            nf_strbuf_addf(sb, "\n");
        else
            nf_strbuf_addf(sb, " ");
        if (an && an->after.len)
            add_comments(sb, &an->after, indent + 2);
        if (v->type != NF_Y_SCALAR && !flow)
            emit(f, v, child_ctx(c, key), indent + 2, inline_child);
    }
    free(order);
}

int nf_pipeline_format(const char *text, size_t len, const char *path, char **out, struct nf_error *err)
{
    struct fmt f = { .text = text, .len = len };
    struct nf_ynode *root = nf_yaml_parse(text, len, nf_intern(path), err);
    int rc = 0;
    *out = NULL;
    nf_strbuf_init(&f.header);
    nf_strbuf_init(&f.trailer);
    nf_strbuf_init(&f.out);
    if (!root)
        return err->code ? err->code : NF_FAIL(err, NF_ESYNTAX, "the file is empty");
    if (root->type != NF_Y_MAP) {
        rc = NF_FAIL_AT(err, NF_EINVAL, &root->loc, NULL, "a pipeline file must be a mapping");
        goto done;
    }
    for (size_t i = 0; i <= len; i++)
        f.n_lines += i == len ? (len > 0 && text[len - 1] != '\n') : text[i] == '\n';
    f.line_start = nf_calloc((size_t)f.n_lines + 1, sizeof *f.line_start);
    if (!f.line_start) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    for (int l = 0, pos = 0; l < f.n_lines; l++) {
        f.line_start[l] = text + pos;
        pos += (int)strcspn(text + pos, "\n") + 1;
    }
    if ((rc = scan_comments(&f, err)) < 0)
        goto done;
    if (!collect_anchors(&f, root, CTX_ROOT, 0)) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    qsort(f.anchors, f.n_anchors, sizeof *f.anchors, anchor_line_cmp);
    attach_comments(&f);
    if (f.header.len) {   /* and the blank line that separated it from the first key */
        int first = f.n_anchors ? f.anchors[0].key->loc.line : f.n_lines + 1;
        nf_strbuf_addf(&f.out, "%s%s", f.header.buf, blank_line(&f, first - 1) ? "\n" : "");
    }
    emit(&f, root, CTX_ROOT, 0, false);
    if (f.trailer.len)
        nf_strbuf_addf(&f.out, "%s", f.trailer.buf);
    if (f.out.oom || f.header.oom || f.trailer.oom) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    *out = nf_strbuf_detach(&f.out);
    if (!*out)
        *out = nf_strdup("");
done:
    for (size_t i = 0; i < f.n_anchors; i++) {
        nf_strbuf_release(&f.anchors[i].leading);
        nf_strbuf_release(&f.anchors[i].after);
        free(f.anchors[i].eol);
    }
    free(f.anchors);
    for (size_t i = 0; i < f.n_comments; i++)
        free(f.comments[i].text);
    free(f.comments);
    free(f.line_start);
    nf_strbuf_release(&f.header);
    nf_strbuf_release(&f.trailer);
    nf_strbuf_release(&f.out);
    nf_ynode_free(root);
    return rc;
}
