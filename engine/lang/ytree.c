/* ytree.c — libyaml events to a marked tree (see ytree.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/util.h"
#include "ytree.h"

#define MAX_DEPTH 64

static struct nf_ynode *ynode_new(enum nf_ytype type, const yaml_mark_t *m, const char *file)
{
    struct nf_ynode *n = nf_calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->type = type;
    n->loc.file = file;
    n->loc.line = (int)m->line + 1;
    n->loc.col = (int)m->column + 1;
    return n;
}

void nf_ynode_free(struct nf_ynode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++) {
        nf_ynode_free(n->items[i]);
        if (n->keys)
            nf_ynode_free(n->keys[i]);
    }
    free(n->items);
    free(n->keys);
    free(n->value);
    free(n);
}

struct nf_ynode *nf_ynode_clone(const struct nf_ynode *n)
{
    struct nf_ynode *c = nf_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = *n;
    c->value = NULL;
    c->items = NULL;
    c->keys = NULL;
    c->n = 0;
    if (n->value && !(c->value = nf_strdup(n->value)))
        goto fail;
    if (n->n) {
        c->items = nf_calloc(n->n, sizeof *c->items);
        c->keys = n->keys ? nf_calloc(n->n, sizeof *c->keys) : NULL;
        if (!c->items || (n->keys && !c->keys))
            goto fail;
        for (size_t i = 0; i < n->n; i++) {
            c->n = i + 1;
            if (!(c->items[i] = nf_ynode_clone(n->items[i])) || (n->keys && !(c->keys[i] = nf_ynode_clone(n->keys[i]))))
                goto fail;
        }
    }
    return c;
fail:
    nf_ynode_free(c);
    return NULL;
}

static int ynode_append(struct nf_ynode *parent, struct nf_ynode *key, struct nf_ynode *val)
{
    struct nf_ynode **items = nf_realloc(parent->items, (parent->n + 1) * sizeof *items);
    if (!items)
        return -1;
    parent->items = items;
    if (parent->type == NF_Y_MAP) {
        struct nf_ynode **keys = nf_realloc(parent->keys, (parent->n + 1) * sizeof *keys);
        if (!keys)
            return -1;
        parent->keys = keys;
        keys[parent->n] = key;
    }
    items[parent->n++] = val;
    return 0;
}

/* Parse one node starting with the already-read event ev. */
/* A key twice in one mapping is an error (libyaml accepts it and the first
 * would win silently: a second `nodes:` could replace a file's analysis).
 * Sorted, so that a mapping of 20,000 nodes costs n log n. 0, or the error. */
static int key_order(const void *a, const void *b)
{
    const struct nf_ynode *x = *(const struct nf_ynode *const *)a, *y = *(const struct nf_ynode *const *)b;
    int c = strcmp(x->value, y->value);
    return c ? c : (x->loc.line != y->loc.line ? (x->loc.line < y->loc.line ? -1 : 1)
                                               : (x->loc.col < y->loc.col ? -1 : x->loc.col > y->loc.col));
}

static int duplicate_key(const struct nf_ynode *map, struct nf_error *err)
{
    if (map->n < 2)
        return 0;
    const struct nf_ynode **sorted = nf_malloc_array(map->n, sizeof *sorted);
    if (!sorted)
        return NF_FAIL(err, NF_ENOMEM, "out of memory parsing YAML");
    memcpy(sorted, map->keys, map->n * sizeof *sorted);
    qsort(sorted, map->n, sizeof *sorted, key_order);
    int rc = 0;
    for (size_t i = 1; i < map->n && rc == 0; i++)
        if (strcmp(sorted[i - 1]->value, sorted[i]->value) == 0)
            rc = NF_FAIL_AT(err, NF_ESYNTAX, &sorted[i]->loc, NULL, "duplicate key '%s' (first at line %d): a key "
                            "may appear once in a mapping", sorted[i]->value, sorted[i - 1]->loc.line);
    free(sorted);
    return rc;
}

static struct nf_ynode *parse_node(yaml_parser_t *p, yaml_event_t *ev, const char *file,
                                   int depth, struct nf_error *err);

/* Whether 0-based line `line` of the parser's input holds a "${". */
static bool line_has_variable(const yaml_parser_t *p, size_t line)
{
    const char *c = (const char *)p->input.string.start, *end = (const char *)p->input.string.end;
    for (size_t l = 0; c < end && l < line; c++)
        l += *c == '\n';
    for (; c + 1 < end && *c != '\n'; c++)
        if (c[0] == '$' && c[1] == '{')
            return true;
    return false;
}

static int next_event(yaml_parser_t *p, yaml_event_t *ev, const char *file, struct nf_error *err)
{
    if (yaml_parser_parse(p, ev))
        return 0;
    struct nf_loc loc = { file, (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1 };
    /* In a flow collection ({...} or [...]) an unquoted ${var} ends the
     * collection at its '}': libyaml then reports a missing ',' or '}', which
     * does not tell a user what to change. */
    const char *hint = "";
    bool in_flow = (p->context && strstr(p->context, "flow")) || (p->problem && strstr(p->problem, "flow"));
    if (in_flow && (line_has_variable(p, p->problem_mark.line) || line_has_variable(p, p->context_mark.line)))
        hint = "; inside { } or [ ], quote a value that uses ${...}, e.g. {path: \"${data}/bold.nii.gz\"}";
    if (p->context)
        NF_FAIL_AT(err, NF_ESYNTAX, &loc, NULL, "invalid YAML: %s %s%s", p->problem ? p->problem : "error",
                   p->context, hint);
    else
        NF_FAIL_AT(err, NF_ESYNTAX, &loc, NULL, "invalid YAML: %s%s", p->problem ? p->problem : "error", hint);
    return NF_ESYNTAX;
}

static struct nf_ynode *parse_node(yaml_parser_t *p, yaml_event_t *ev, const char *file,
                                   int depth, struct nf_error *err)
{
    struct nf_ynode *n = NULL, *key = NULL;
    yaml_event_t child;
    if (depth > MAX_DEPTH) {
        struct nf_loc loc = { file, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1 };
        NF_FAIL_AT(err, NF_ESYNTAX, &loc, NULL, "document nested too deeply (more than %d levels)", MAX_DEPTH);
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        n = ynode_new(NF_Y_SCALAR, &ev->start_mark, file);
        if (!n || !(n->value = nf_strndup((const char *)ev->data.scalar.value, ev->data.scalar.length)))
            goto oom;
        n->quoted = ev->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                    ev->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ||
                    ev->data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
                    ev->data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
        if (ev->data.scalar.anchor)
            goto anchor;
        return n;
    case YAML_ALIAS_EVENT: {
        struct nf_loc loc = { file, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1 };
        NF_FAIL_AT(err, NF_ESYNTAX, &loc, NULL, "YAML aliases (*%s) are not supported: write the value out",
                   (const char *)ev->data.alias.anchor);
        return NULL;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool is_map = ev->type == YAML_MAPPING_START_EVENT;
        n = ynode_new(is_map ? NF_Y_MAP : NF_Y_SEQ, &ev->start_mark, file);
        if (!n)
            goto oom;
        if ((is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor))
            goto anchor;
        for (;;) {
            if (next_event(p, &child, file, err) < 0)
                goto fail;
            if (child.type == YAML_SEQUENCE_END_EVENT || child.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&child);
                if (is_map && duplicate_key(n, err) != 0)
                    goto fail;
                return n;
            }
            struct nf_ynode *c = parse_node(p, &child, file, depth + 1, err);
            yaml_event_delete(&child);
            if (!c)
                goto fail;
            if (is_map) {
                if (!key) {
                    if (c->type != NF_Y_SCALAR) {
                        NF_FAIL_AT(err, NF_ESYNTAX, &c->loc, NULL, "mapping keys must be plain text");
                        nf_ynode_free(c);
                        goto fail;
                    }
                    key = c;
                    continue;
                }
                if (ynode_append(n, key, c) < 0) {
                    nf_ynode_free(c);
                    goto oom;
                }
                key = NULL;
            } else if (ynode_append(n, NULL, c) < 0) {
                nf_ynode_free(c);
                goto oom;
            }
        }
    }
    default: {
        struct nf_loc loc = { file, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1 };
        NF_FAIL_AT(err, NF_ESYNTAX, &loc, NULL, "unexpected YAML event");
        return NULL;
    }
    }
anchor:
    NF_FAIL_AT(err, NF_ESYNTAX, &n->loc, NULL, "YAML anchors (&name) are not supported: write the value out");
    goto fail;
oom:
    NF_FAIL(err, NF_ENOMEM, "out of memory parsing YAML");
fail:
    nf_ynode_free(key);
    nf_ynode_free(n);
    return NULL;
}

struct nf_ynode *nf_yaml_parse(const char *text, size_t len, const char *file, struct nf_error *err)
{
    yaml_parser_t p;
    yaml_event_t ev;
    struct nf_ynode *root = NULL;
    bool have_ev = false;
    if (!yaml_parser_initialize(&p)) {
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    for (;;) {
        if (next_event(&p, &ev, file, err) < 0)
            goto fail;
        have_ev = true;
        if (ev.type == YAML_STREAM_END_EVENT)
            break;
        if (ev.type == YAML_STREAM_START_EVENT || ev.type == YAML_DOCUMENT_START_EVENT ||
            ev.type == YAML_DOCUMENT_END_EVENT) {
            yaml_event_delete(&ev);
            have_ev = false;
            continue;
        }
        if (root) {
            struct nf_loc loc = { file, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1 };
            NF_FAIL_AT(err, NF_ESYNTAX, &loc, NULL, "more than one YAML document in the file");
            goto fail;
        }
        root = parse_node(&p, &ev, file, 0, err);
        yaml_event_delete(&ev);
        have_ev = false;
        if (!root)
            goto fail;
    }
    yaml_event_delete(&ev);
    yaml_parser_delete(&p);
    if (!root) {
        struct nf_loc loc = { file, 1, 1 };
        NF_FAIL_AT(err, NF_ESYNTAX, &loc, NULL, "the file is empty");
    }
    return root;
fail:
    if (have_ev)
        yaml_event_delete(&ev);
    yaml_parser_delete(&p);
    nf_ynode_free(root);
    return NULL;
}

struct nf_ynode *nf_ymap_get(const struct nf_ynode *map, const char *key)
{
    if (!map || map->type != NF_Y_MAP)
        return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->keys[i]->value, key) == 0)
            return map->items[i];
    return NULL;
}

const struct nf_ynode *nf_ypath(const struct nf_ynode *n, const char *path)
{
    char key[128];
    while (n && *path) {
        size_t len = strcspn(path, ".");
        snprintf(key, sizeof key, "%.*s", (int)len, path);
        path += len + (path[len] == '.');
        if (n->type == NF_Y_MAP) {
            n = nf_ymap_get(n, key);
        } else if (n->type == NF_Y_SEQ) {
            char *end;
            unsigned long i = strtoul(key, &end, 10);
            n = *end == '\0' && i < n->n ? n->items[i] : NULL;
        } else {
            n = NULL;
        }
    }
    return n;
}

double nf_ypath_num(const struct nf_ynode *n, const char *path)
{
    const struct nf_ynode *v = nf_ypath(n, path);
    char *end;
    if (!v || v->type != NF_Y_SCALAR || v->quoted || !v->value || !v->value[0])
        return NAN;
    double x = strtod(v->value, &end);
    return *end == '\0' ? x : NAN;
}

const char *nf_ypath_str(const struct nf_ynode *n, const char *path)
{
    const struct nf_ynode *v = nf_ypath(n, path);
    return v && v->type == NF_Y_SCALAR && v->quoted ? v->value : NULL;
}

void nf_ynode_describe(const struct nf_ynode *n, char *buf, size_t size)
{
    if (!n)
        snprintf(buf, size, "nothing");
    else if (n->type == NF_Y_MAP)
        snprintf(buf, size, "a mapping");
    else if (n->type == NF_Y_SEQ)
        snprintf(buf, size, "a list");
    else
        snprintf(buf, size, "'%.200s'", n->value);
}
