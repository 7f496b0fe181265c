/* check-events.c — validates an `nlflow --json` event stream against
 * schemas/events.schema.json, so that make check needs no Python package.
 *
 *   check-events SCHEMA EVENTS [--require EVENT]...
 *
 * Every line of EVENTS must be one JSON object valid against the schema; each
 * --require'd event type must occur. Exit 0, or 1 naming the first bad line
 * and why. The schema is read with the engine's YAML parser (JSON is YAML) and
 * interpreted for the keywords it uses: type, const, enum, minimum, maximum,
 * pattern (POSIX ERE), properties, required, additionalProperties: false,
 * oneOf and local $ref. Anything else in a schema is refused, so that the
 * schema cannot silently grow a rule this checker ignores.
 */
#include <math.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/params.h"
#include "core/util.h"
#include "lang/ytree.h"

static const struct nf_ynode *root;

/* The JSON type of a parsed value: strings are quoted scalars in the parse. */
static const char *json_type(const struct nf_ynode *v)
{
    if (v->type == NF_Y_MAP)
        return "object";
    if (v->type == NF_Y_SEQ)
        return "array";
    if (v->quoted)
        return "string";
    if (strcmp(v->value, "true") == 0 || strcmp(v->value, "false") == 0)
        return "boolean";
    if (strcmp(v->value, "null") == 0)
        return "null";
    double d;
    if (!nf_parse_double(v->value, &d))
        return "?";
    return strpbrk(v->value, ".eE") ? "number" : "integer";
}

static bool type_is(const struct nf_ynode *v, const char *want)
{
    const char *t = json_type(v);
    return strcmp(t, want) == 0 || (strcmp(want, "number") == 0 && strcmp(t, "integer") == 0);
}

static bool same_scalar(const struct nf_ynode *a, const struct nf_ynode *b)
{
    return a->type == NF_Y_SCALAR && b->type == NF_Y_SCALAR && a->quoted == b->quoted &&
           strcmp(a->value, b->value) == 0;
}

static const struct nf_ynode *resolve_ref(const char *ref)
{
    if (strncmp(ref, "#/$defs/", 8) != 0)
        return NULL;
    return nf_ymap_get(nf_ymap_get(root, "$defs"), ref + 8);
}

/* 0 when v is valid against schema s, else 1 with why[] set. */
static int check(const struct nf_ynode *s, const struct nf_ynode *v, const char *path, char *why, size_t size)
{
    if (!s || s->type != NF_Y_MAP) {
        snprintf(why, size, "%s: the schema is not an object here", path);
        return 1;
    }
    for (size_t i = 0; i < s->n; i++) {
        const char *kw = s->keys[i]->value;
        const struct nf_ynode *a = s->items[i];
        if (strcmp(kw, "description") == 0 || strcmp(kw, "title") == 0 || strcmp(kw, "$schema") == 0 ||
            strcmp(kw, "$id") == 0 || strcmp(kw, "$defs") == 0) {
            continue;
        } else if (strcmp(kw, "$ref") == 0) {
            const struct nf_ynode *t = resolve_ref(a->value);
            if (!t) {
                snprintf(why, size, "%s: unresolved $ref %s", path, a->value);
                return 1;
            }
            if (check(t, v, path, why, size))
                return 1;
        } else if (strcmp(kw, "type") == 0) {
            bool ok = false;
            if (a->type == NF_Y_SEQ) {
                for (size_t k = 0; k < a->n && !ok; k++)
                    ok = type_is(v, a->items[k]->value);
            } else {
                ok = type_is(v, a->value);
            }
            if (!ok) {
                snprintf(why, size, "%s: is %s, not of the schema's type", path, json_type(v));
                return 1;
            }
        } else if (strcmp(kw, "const") == 0) {
            if (!same_scalar(a, v)) {
                snprintf(why, size, "%s: is not %s", path, a->value);
                return 1;
            }
        } else if (strcmp(kw, "enum") == 0) {
            bool ok = false;
            for (size_t k = 0; k < a->n && !ok; k++)
                ok = same_scalar(a->items[k], v);
            if (!ok) {
                snprintf(why, size, "%s: '%s' is not one of the allowed values", path,
                         v->type == NF_Y_SCALAR ? v->value : "(not a scalar)");
                return 1;
            }
        } else if (strcmp(kw, "minimum") == 0 || strcmp(kw, "maximum") == 0) {
            double x, bound = atof(a->value);
            if (v->type != NF_Y_SCALAR || v->quoted || !nf_parse_double(v->value, &x))
                continue;   /* applies to numbers only */
            if (kw[1] == 'i' ? x < bound : x > bound) {
                snprintf(why, size, "%s: %s is beyond the %s %s", path, v->value, kw, a->value);
                return 1;
            }
        } else if (strcmp(kw, "pattern") == 0) {
            if (!type_is(v, "string"))
                continue;
            regex_t re;
            if (regcomp(&re, a->value, REG_EXTENDED | REG_NOSUB) != 0) {
                snprintf(why, size, "%s: bad pattern %s", path, a->value);
                return 1;
            }
            int m = regexec(&re, v->value, 0, NULL, 0);
            regfree(&re);
            if (m != 0) {
                snprintf(why, size, "%s: '%s' does not match %s", path, v->value, a->value);
                return 1;
            }
        } else if (strcmp(kw, "required") == 0) {
            for (size_t k = 0; k < a->n; k++)
                if (v->type != NF_Y_MAP || !nf_ymap_get(v, a->items[k]->value)) {
                    snprintf(why, size, "%s: the field '%s' is missing", path, a->items[k]->value);
                    return 1;
                }
        } else if (strcmp(kw, "properties") == 0) {
            if (v->type != NF_Y_MAP)
                continue;
            const struct nf_ynode *extra = nf_ymap_get(s, "additionalProperties");
            for (size_t k = 0; k < v->n; k++) {
                char sub[256];
                snprintf(sub, sizeof sub, "%s.%s", path, v->keys[k]->value);
                const struct nf_ynode *ps = nf_ymap_get(a, v->keys[k]->value);
                if (!ps) {
                    if (extra && strcmp(extra->value ? extra->value : "", "false") == 0) {
                        snprintf(why, size, "%s: a field the schema does not know", sub);
                        return 1;
                    }
                    continue;
                }
                if (check(ps, v->items[k], sub, why, size))
                    return 1;
            }
        } else if (strcmp(kw, "additionalProperties") == 0) {
            continue;   /* with properties */
        } else if (strcmp(kw, "oneOf") == 0) {
            int matches = 0;
            char first[512] = "", w[512];
            for (size_t k = 0; k < a->n; k++) {
                if (check(a->items[k], v, path, w, sizeof w) == 0)
                    matches++;
                else if (!first[0] || strstr(w, "is not ") == NULL)
                    snprintf(first, sizeof first, "%s", w);   /* the closest: past the event name */
            }
            if (matches != 1) {
                if (matches)
                    snprintf(why, size, "%s: matches %d alternatives of oneOf", path, matches);
                else
                    snprintf(why, size, "%s: matches none of oneOf (%s)", path, first);
                return 1;
            }
        } else {
            snprintf(why, size, "%s: the schema keyword '%s' is not supported by check-events", path, kw);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: check-events SCHEMA EVENTS [--require EVENT]...\n");
        return 2;
    }
    struct nf_error err = { 0 };
    size_t len;
    char *text = nf_read_file(argv[1], &len, &err);
    struct nf_ynode *schema = text ? nf_yaml_parse(text, len, argv[1], &err) : NULL;
    free(text);
    if (!schema) {
        nf_error_print(&err);
        return 2;
    }
    root = schema;
    char *events = nf_read_file(argv[2], &len, &err);
    if (!events) {
        nf_error_print(&err);
        return 2;
    }
    int status = 0, n = 0;
    const char **want = calloc((size_t)argc, sizeof *want);
    bool *seen = calloc((size_t)argc, sizeof *seen);
    int n_want = 0;
    for (int i = 3; i + 1 < argc; i += 2)
        if (strcmp(argv[i], "--require") == 0)
            want[n_want++] = argv[i + 1];
    char *save = NULL;
    for (char *line = strtok_r(events, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        n++;
        char why[1024] = "";
        struct nf_error e = { 0 };
        struct nf_ynode *v = line[0] == '{' ? nf_yaml_parse(line, strlen(line), argv[2], &e) : NULL;
        if (!v) {
            fprintf(stderr, "%s:%d: not a JSON object: %s\n", argv[2], n, line);
            status = 1;
            break;
        }
        if (check(schema, v, "$", why, sizeof why)) {
            fprintf(stderr, "%s:%d: %s\n  %s\n", argv[2], n, why, line);
            status = 1;
        }
        const struct nf_ynode *ev = nf_ymap_get(v, "event");
        for (int k = 0; k < n_want && ev; k++)
            seen[k] |= ev->value && strcmp(ev->value, want[k]) == 0;
        nf_ynode_free(v);
        if (status)
            break;
    }
    for (int k = 0; k < n_want && status == 0; k++)
        if (!seen[k]) {
            fprintf(stderr, "%s: no '%s' event\n", argv[2], want[k]);
            status = 1;
        }
    if (status == 0 && n == 0) {
        fprintf(stderr, "%s: no events at all\n", argv[2]);
        status = 1;
    }
    if (status == 0)
        printf("%s: %d events valid\n", argv[2], n);
    free(events);
    free(want);
    free(seen);
    nf_ynode_free(schema);
    return status;
}
