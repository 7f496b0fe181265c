/* vars.c — pipeline variables: `params:`, --set and ${name} substitution.
 *
 * A pipeline file's `params:` are named scalars that nodes and settings refer
 * to as ${name}; --set overrides them from the command line, and a `use` node's
 * `with:` binds those of the file it uses (engine/lang/use.c). Substitution
 * happens on the YAML tree, before anything is typed, so a value reads the same
 * whether written out or substituted.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "suggest.h"
#include "vars.h"
#include "core/util.h"

static bool valid_var_name(const char *s)
{
    if (!(isalpha((unsigned char)*s) || *s == '_'))
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_'))
            return false;
    return true;
}

struct nf_var *nf_var_find(struct nf_pipeline *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->n_vars; i++)
        if (strlen(p->vars[i].name) == len && strncmp(p->vars[i].name, name, len) == 0)
            return &p->vars[i];
    return NULL;
}

/* The closest variable name to name[0..len), for "did you mean". */
static void var_suggest(const struct nf_pipeline *p, const char *name, size_t len, char *hint, size_t size)
{
    char word[128];
    struct nf_suggest sg;
    snprintf(word, sizeof word, "%.*s", (int)len, name);
    nf_suggest_init(&sg, word);
    for (size_t i = 0; i < p->n_vars; i++)
        nf_suggest_add(&sg, p->vars[i].name);
    nf_suggest_hint(&sg, hint, size);
}

static void var_list(const struct nf_pipeline *p, char *buf, size_t size)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (size_t i = 0; i < p->n_vars; i++)
        nf_strbuf_addf(&sb, "%s%s", i ? ", " : "", p->vars[i].name);
    snprintf(buf, size, "%s", sb.len ? sb.buf : "none");
    nf_strbuf_release(&sb);
}

/* Replace ${name} in every scalar below n (keys excluded). A scalar made only
 * of references ("${n}", "${a}${b}") is typed by the text it resolves to,
 * quoted or not: in a flow mapping ({cv: ${n}}) a reference must be quoted for
 * YAML's sake, and that quoting should not make it a string. A quoted literal
 * ("5") stays a string. */
void nf_vars_substitute(struct nf_pipeline *p, struct nf_ynode *n, const char *node, struct nf_diags *d)
{
    if (n->type != NF_Y_SCALAR) {
        for (size_t i = 0; i < n->n; i++)
            nf_vars_substitute(p, n->items[i], node, d);
        return;
    }
    if (!strstr(n->value, "${"))
        return;
    /* "${name}" alone, name bound to a list or mapping: the value becomes a copy of it */
    size_t len = strlen(n->value);
    struct nf_var *whole = n->value[0] == '$' && n->value[len - 1] == '}' && !strchr(n->value + 2, '$')
                           ? nf_var_find(p, n->value + 2, len - 3) : NULL;
    if (whole && whole->tree) {
        struct nf_ynode *copy = nf_ynode_clone(whole->tree);
        if (!copy)
            return;   /* out of memory: nf_pipeline_load says so */
        whole->used = true;
        free(n->value);
        *n = *copy;
        free(copy);
        return;
    }
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    const char *s = n->value;
    bool ok = true, literal_text = false;
    while (*s) {
        const char *open = strstr(s, "${");
        if (!open) {
            nf_strbuf_add(&sb, s, strlen(s));
            literal_text = true;
            break;
        }
        nf_strbuf_add(&sb, s, (size_t)(open - s));
        literal_text |= open > s;
        const char *close = strchr(open + 2, '}');
        if (!close) {
            NF_DIAG(d, NF_EINVAL, &n->loc, node, "unterminated '${' in '%s'", n->value);
            ok = false;
            break;
        }
        struct nf_var *v = nf_var_find(p, open + 2, (size_t)(close - open - 2));
        if (!v) {
            char names[512], hint[160];
            var_list(p, names, sizeof names);
            var_suggest(p, open + 2, (size_t)(close - open - 2), hint, sizeof hint);
            NF_DIAG(d, NF_EINVAL, &n->loc, node, "undefined variable '${%.*s}' (%sdefined in params: %s)",
                    (int)(close - open - 2), open + 2, hint, names);
            ok = false;
            s = close + 1;
            continue;
        }
        if (v->tree) {
            NF_DIAG(d, NF_EINVAL, &n->loc, node,
                    "'${%s}' is a %s: it can only stand alone as a whole value, not inside text ('%s')", v->name,
                    v->tree->type == NF_Y_MAP ? "mapping" : "list", n->value);
            ok = false;
            s = close + 1;
            continue;
        }
        v->used = true;
        nf_strbuf_add(&sb, v->value, strlen(v->value));
        s = close + 1;
    }
    if (ok && !sb.oom) {
        free(n->value);
        n->value = nf_strbuf_detach(&sb);
        if (!literal_text)
            n->quoted = false;
    }
    nf_strbuf_release(&sb);
}

void nf_vars_parse(struct nf_pipeline *p, const struct nf_ynode *params, bool trees,
                   const struct nf_overrides *ov, struct nf_diags *d)
{
    if (params && params->type != NF_Y_MAP) {
        NF_DIAG(d, NF_EINVAL, &params->loc, NULL, "'params' must be a mapping of name: value");
        params = NULL;
    }
    size_t n = params ? params->n : 0;
    p->vars = nf_calloc(n + (ov ? ov->n_set : 0) + 1, sizeof *p->vars);
    if (!p->vars)
        return;
    for (size_t i = 0; i < n; i++) {
        const struct nf_ynode *k = params->keys[i], *v = params->items[i];
        if (!valid_var_name(k->value)) {
            NF_DIAG(d, NF_EINVAL, &k->loc, NULL, "invalid variable name '%s' (expected letters, digits and _)", k->value);
            continue;
        }
        if (v->type != NF_Y_SCALAR && !trees) {
            NF_DIAG(d, NF_EINVAL, &v->loc, NULL, "variable '%s' must be a single value (got %s)", k->value,
                    v->type == NF_Y_MAP ? "a mapping" : "a list");
            continue;
        }
        if (nf_var_find(p, k->value, strlen(k->value))) {
            NF_DIAG(d, NF_EINVAL, &k->loc, NULL, "variable '%s' is defined twice", k->value);
            continue;
        }
        struct nf_var *var = &p->vars[p->n_vars];
        var->name = nf_strdup(k->value);
        var->value = nf_strdup(v->type == NF_Y_SCALAR ? v->value : "");
        var->tree = v->type == NF_Y_SCALAR ? NULL : nf_ynode_clone(v);
        var->loc = v->loc;
        if (!var->name || !var->value || (v->type != NF_Y_SCALAR && !var->tree)) {   /* out of memory */
            free(var->name);
            free(var->value);
            nf_ynode_free(var->tree);
            memset(var, 0, sizeof *var);
            return;
        }
        p->n_vars++;
    }
    for (size_t i = 0; ov && i < ov->n_set; i++) {
        const char *eq = strchr(ov->set[i], '=');
        if (!eq || eq == ov->set[i]) {
            NF_DIAG(d, NF_EUSAGE, NULL, NULL, "--set expects name=value (got '%s')", ov->set[i]);
            continue;
        }
        struct nf_var *var = nf_var_find(p, ov->set[i], (size_t)(eq - ov->set[i]));
        if (!var) {
            char names[512], hint[160];
            var_list(p, names, sizeof names);
            var_suggest(p, ov->set[i], (size_t)(eq - ov->set[i]), hint, sizeof hint);
            NF_DIAG(d, NF_EUSAGE, NULL, NULL, "--set %.*s: the pipeline has no such variable (%sparams: %s)",
                    (int)(eq - ov->set[i]), ov->set[i], hint, names);
            continue;
        }
        char *value = nf_strdup(eq + 1);
        if (!value)
            return;
        free(var->value);
        var->value = value;
    }
}
