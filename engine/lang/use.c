/* use.c — pipeline files used by other pipeline files (`type: use`).
 *
 * A lab keeps its vetted analysis in one file and every project uses it:
 *
 *     faces:
 *       type: use
 *       path: first-level.yaml         # next to this file, or on NLFLOW_PATH
 *       with: {task: faces, fwhm: 6}   # binds the used file's params
 *       in: {bold: data.bold}          # connects its declared inputs
 *
 * The used file declares `inputs:` (names its nodes refer to as if they were
 * nodes) and `outputs:` (name: node.port). Expansion happens on the YAML trees,
 * before validation: the used file's nodes are moved into the pipeline under
 * namespaced ids ("faces.glm"), their references rewritten (a node of the used
 * file gets the prefix, an input becomes what the use node connects to it, a
 * reference to a use node's output becomes the node behind it), so every later
 * phase (validation, plans, cache keys, outputs) sees one ordinary graph, and
 * errors inside a used file point at its own lines. Use nodes may use files
 * that use others; a file that comes back to itself is a cycle. Each used
 * file's content hash goes into its nodes' cache keys (keys.c) and into the
 * provenance of results.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "pipeline.h"
#include "suggest.h"
#include "use.h"
#include "vars.h"
#include "core/util.h"
#include "ytree.h"

#define MAX_USE_DEPTH 16

/* One node of an expanded list: its key and body, moved out of their tree. */
struct expanded {
    struct nf_ynode *key, *body;
    size_t used_file;
};

struct node_list {
    struct expanded *v;
    size_t n, cap;
};

/* What a use node became. */
struct use_result {
    bool is_use, done, failed;
    struct node_list nodes;        /* its file's nodes, expanded */
    size_t n_out;
    char **out_name, **out_ref;    /* declared outputs and the refs behind them */
};

/* One file being expanded. */
struct scope {
    char *prefix;                  /* "" for the pipeline file, "faces." ... */
    struct nf_ynode *nodes;        /* its `nodes:` mapping */
    const struct nf_ynode *inputs; /* its declared `inputs:` (a used file), or NULL */
    char **bound;                  /* per declared input: the ref connected to it */
    struct use_result *uses;       /* per node of `nodes` */
    size_t used_file;              /* 1 + index in p->used_files; 0: the pipeline file */
};

struct ctx {
    struct nf_pipeline *p;
    struct nf_diags *d;
    struct nf_ynode **trees;       /* parsed used files, freed once expanded */
    size_t n_trees;
    char *stack[MAX_USE_DEPTH];    /* real paths of the files being expanded */
    int depth;
    size_t expanded_nodes;         /* use nodes and the nodes of the files they use, so far */
    size_t read_bytes;             /* text of used files read so far */
    bool too_large;                /* a limit was reached: expand nothing more */
    size_t limit_diag;             /* its error, the last one kept (what follows is its echo) */
};

static bool list_push(struct node_list *l, struct nf_ynode *key, struct nf_ynode *body, size_t used_file)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        struct expanded *v = nf_realloc(l->v, cap * sizeof *v);
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (struct expanded){ key, body, used_file };
    return true;
}

static void list_free(struct node_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        nf_ynode_free(l->v[i].key);
        nf_ynode_free(l->v[i].body);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static bool is_use_node(const struct nf_ynode *body)
{
    const struct nf_ynode *t = body && body->type == NF_Y_MAP ? nf_ymap_get(body, "type") : NULL;
    return t && t->type == NF_Y_SCALAR && strcmp(t->value, "use") == 0;
}

/* Names of a declared `inputs:` (a mapping name: description, or a list). */
static size_t inputs_count(const struct nf_ynode *in)
{
    return in && in->type != NF_Y_SCALAR ? in->n : 0;
}

static const char *input_name(const struct nf_ynode *in, size_t i)
{
    const struct nf_ynode *n = in->type == NF_Y_MAP ? in->keys[i] : in->items[i];
    return n->type == NF_Y_SCALAR ? n->value : "";
}

static int input_index(const struct nf_ynode *in, const char *name, size_t len)
{
    for (size_t i = 0; i < inputs_count(in); i++)
        if (strlen(input_name(in, i)) == len && strncmp(input_name(in, i), name, len) == 0)
            return (int)i;
    return -1;
}

static void names_text(char *const *names, size_t n, char *buf, size_t size)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (size_t i = 0; i < n; i++)
        nf_strbuf_addf(&sb, "%s%s", i ? ", " : "", names[i]);
    snprintf(buf, size, "%s", sb.len ? sb.buf : "none");
    nf_strbuf_release(&sb);
}

/* The ref a reference in scope s stands for in the expanded graph: 1 and an
 * owned *out; 0 when it names a use node not expanded yet; -1 when reported. */
static int resolve_ref(struct ctx *c, struct scope *s, const char *ref, const struct nf_loc *loc,
                       const char *who, char **out)
{
    const char *dot = strchr(ref, '.');
    size_t head = dot ? (size_t)(dot - ref) : strlen(ref);
    const char *rest = dot ? dot + 1 : NULL;
    *out = NULL;
    for (size_t i = 0; i < s->nodes->n; i++) {
        const struct nf_ynode *k = s->nodes->keys[i];
        if (!k || strlen(k->value) != head || strncmp(k->value, ref, head) != 0)
            continue;
        struct use_result *u = &s->uses[i];
        if (!u->is_use)
            break;
        if (u->failed)
            return -1;
        if (!u->done)
            return 0;
        char names[512];
        names_text(u->out_name, u->n_out, names, sizeof names);
        if (!rest) {
            NF_DIAG(c->d, NF_EINVAL, loc, who,
                    "'%s' uses another pipeline file: name one of its outputs as '%s.OUTPUT' (outputs: %s)",
                    ref, ref, names);
            return -1;
        }
        for (size_t o = 0; o < u->n_out; o++)
            if (u->out_name[o] && strcmp(u->out_name[o], rest) == 0) {
                *out = nf_strdup(u->out_ref[o]);
                return *out ? 1 : -1;
            }
        struct nf_suggest sg;
        char hint[160];
        nf_suggest_init(&sg, rest);
        for (size_t o = 0; o < u->n_out; o++)
            nf_suggest_add(&sg, u->out_name[o]);
        nf_suggest_hint(&sg, hint, sizeof hint);
        NF_DIAG(c->d, NF_EINVAL, loc, who, "'%.*s' has no output '%s' (%sits file declares outputs: %s)",
                (int)head, ref, rest, hint, names);
        return -1;
    }
    int k = input_index(s->inputs, ref, head);
    if (k >= 0) {
        if (rest) {
            NF_DIAG(c->d, NF_EINVAL, loc, who,
                    "'%.*s' is an input of this file: refer to it as '%.*s' (the node connected to it "
                    "gives one output)", (int)head, ref, (int)head, ref);
            return -1;
        }
        *out = nf_strdup(s->bound[k]);
        return *out ? 1 : -1;
    }
    /* a node of this file, or an unknown one (validation reports it by its full name) */
    *out = nf_asprintf("%s%s", s->prefix, ref);
    return *out ? 1 : -1;
}

/* A use node's `in:` references, resolved in the scope that holds it: 1 all
 * resolved (refs[i] per entry), 0 one waits for another use node, -1 reported. */
static int resolve_use_inputs(struct ctx *c, struct scope *s, const struct nf_ynode *in, const char *who,
                              char **refs)
{
    int rc = 1;
    for (size_t e = 0; in && e < in->n; e++) {
        const struct nf_ynode *ref = in->items[e];
        if (ref->type != NF_Y_SCALAR || !ref->value[0]) {
            NF_DIAG(c->d, NF_EINVAL, &ref->loc, who, "input '%s' must name a node as 'id' or 'id.port'",
                    in->keys[e]->value);
            rc = -1;
            continue;
        }
        int r = resolve_ref(c, s, ref->value, &ref->loc, who, &refs[e]);
        if (r < 0)
            rc = -1;
        else if (r == 0 && rc > 0)
            rc = 0;
    }
    return rc;
}

/* Where `path` (written in the file `from`) is: next to that file, else in one
 * of NLFLOW_PATH's folders. Owned, or NULL when nowhere. */
static char *find_used_file(const char *from, const char *path, struct nf_strbuf *looked)
{
    char *dir = from ? nf_path_dirname(from) : NULL;   /* NULL: its copy failed (out of memory) */
    char *here = dir ? nf_path_join(dir, path) : NULL;
    nf_strbuf_addf(looked, "%s", dir ? dir : ".");
    free(dir);
    if (here && access(here, R_OK) == 0)
        return here;
    free(here);
    if (path[0] == '/')
        return NULL;
    const char *env = getenv("NLFLOW_PATH");
    /* then where nlflow's own templates are: installed, or in the source tree of this build */
    char *search = nf_asprintf("%s%s%s:%s", env ? env : "", env && env[0] ? ":" : "", NF_PKGDATADIR,
                               NF_SOURCE_PIPELINES);
    for (const char *s = search; s && *s;) {
        const char *colon = strchr(s, ':');
        size_t len = colon ? (size_t)(colon - s) : strlen(s);
        if (len > 0) {
            char *folder = nf_strndup(s, len);
            char *cand = folder ? nf_path_join(folder, path) : NULL;
            nf_strbuf_addf(looked, ", %s", folder ? folder : "");
            free(folder);
            if (cand && access(cand, R_OK) == 0) {
                free(search);
                return cand;
            }
            free(cand);
        }
        s += len + (colon ? 1 : 0);
    }
    free(search);
    return NULL;
}

char *nf_use_find(const char *from, const char *path, char **looked)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    char *found = find_used_file(from, path, &sb);
    *looked = nf_strbuf_detach(&sb);
    return found;
}

/* HEAD's commit of the git work tree holding `file`, read from .git without
 * running git; NULL outside a work tree or when HEAD cannot be read. */
static char *git_head_commit(const char *file)
{
    char *dir = nf_realpath(file);
    char *commit = NULL;
    while (dir && strcmp(dir, "/") != 0 && !commit) {
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        *slash = '\0';
        char *dotgit = nf_asprintf("%s/.git", dir[0] ? dir : "");
        char *gitdir = NULL;
        size_t len = 0;
        struct nf_error err = { 0 };
        char *text = dotgit ? nf_read_file(dotgit, &len, &err) : NULL;
        if (text && strncmp(text, "gitdir: ", 8) == 0) {        /* a worktree or submodule */
            text[strcspn(text, "\n")] = '\0';
            gitdir = text[8] == '/' ? nf_strdup(text + 8) : nf_asprintf("%s/%s", dir, text + 8);
        } else if (dotgit && access(dotgit, X_OK) == 0) {
            gitdir = nf_strdup(dotgit);
        }
        free(text);
        free(dotgit);
        if (!gitdir)
            continue;
        char *head_path = nf_asprintf("%s/HEAD", gitdir);
        char *head = head_path ? nf_read_file(head_path, &len, &err) : NULL;
        if (head && strncmp(head, "ref: ", 5) == 0) {
            head[strcspn(head, "\n")] = '\0';
            char *ref_path = nf_asprintf("%s/%s", gitdir, head + 5);
            char *ref = ref_path ? nf_read_file(ref_path, &len, &err) : NULL;
            if (!ref) {   /* a worktree's branch lives in the main repository (commondir) */
                char *common_path = nf_asprintf("%s/commondir", gitdir);
                char *common = common_path ? nf_read_file(common_path, &len, &err) : NULL;
                if (common) {
                    common[strcspn(common, "\n")] = '\0';
                    char *alt = common[0] == '/' ? nf_asprintf("%s/%s", common, head + 5)
                                                 : nf_asprintf("%s/%s/%s", gitdir, common, head + 5);
                    ref = alt ? nf_read_file(alt, &len, &err) : NULL;
                    free(alt);
                }
                free(common);
                free(common_path);
            }
            if (ref) {
                ref[strcspn(ref, "\n")] = '\0';
                commit = strlen(ref) == 40 ? nf_strdup(ref) : NULL;
            }
            free(ref);
            free(ref_path);
        } else if (head) {
            head[strcspn(head, "\n")] = '\0';
            commit = strlen(head) == 40 ? nf_strdup(head) : NULL;   /* detached HEAD */
        }
        free(head);
        free(head_path);
        free(gitdir);
        break;
    }
    free(dir);
    return commit;
}

static int version_cmp(const char *a, const char *b)
{
    while (*a || *b) {
        long x = strtol(a, (char **)&a, 10), y = strtol(b, (char **)&b, 10);
        if (x != y)
            return x < y ? -1 : 1;
        a += *a == '.';
        b += *b == '.';
        if (!(*a >= '0' && *a <= '9') && !(*b >= '0' && *b <= '9'))
            break;
    }
    return 0;
}

int nf_requires_check(const struct nf_ynode *req, const char *version, struct nf_diags *d)
{
    if (!req)
        return 1;
    if (req->type != NF_Y_SCALAR || !req->value[0]) {
        NF_DIAG(d, NF_EINVAL, &req->loc, NULL, "'requires' must be a version condition such as \">=0.2\"");
        return -1;
    }
    /* comma-separated conditions, each OP VERSION with OP one of >= > <= < == (none: >=) */
    for (const char *s = req->value; *s;) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        char op[3] = "";
        size_t ol = strspn(s, "<>=!");
        if (ol > 2 || (ol && strncmp(s, ">=", ol) && strncmp(s, "<=", ol) && strncmp(s, "==", ol) &&
                       strncmp(s, ">", ol) && strncmp(s, "<", ol))) {
            NF_DIAG(d, NF_EINVAL, &req->loc, NULL,
                    "'requires: %s': unknown comparison '%.*s' (use >=, >, <=, <, ==)", req->value, (int)ol, s);
            return -1;
        }
        memcpy(op, s, ol);
        s += ol;
        while (*s == ' ')
            s++;
        size_t vl = strspn(s, "0123456789.");
        if (vl == 0 || !(s[0] >= '0' && s[0] <= '9')) {
            NF_DIAG(d, NF_EINVAL, &req->loc, NULL,
                    "'requires: %s': expected a version number after '%s' (like 0.2 or 1.0.3)", req->value,
                    op[0] ? op : "requires:");
            return -1;
        }
        char want[64];
        snprintf(want, sizeof want, "%.*s", (int)(vl < 63 ? vl : 63), s);
        s += vl;
        int c = version_cmp(version, want);
        bool ok = !op[0] || !strcmp(op, ">=") ? c >= 0 : !strcmp(op, ">") ? c > 0 : !strcmp(op, "<=") ? c <= 0
                  : !strcmp(op, "<") ? c < 0 : c == 0;
        if (!ok) {
            NF_DIAG(d, NF_EINVAL, &req->loc, NULL,
                    "this pipeline file requires nlflow %s, but this is nlflow %s: install a version that "
                    "matches", req->value, version);
            return 0;
        }
        if (*s && *s != ',' && *s != ' ') {
            NF_DIAG(d, NF_EINVAL, &req->loc, NULL, "'requires: %s': unexpected '%s'", req->value, s);
            return -1;
        }
    }
    return 1;
}

static int expand_scope(struct ctx *c, struct scope *s, const struct nf_ynode *outs, struct use_result *res,
                        const char *who);

static const char *const used_top_keys[] = { "nlflow", "name", "requires", "params", "inputs", "outputs",
                                             "nodes", NULL };

/* Checks the top of a used file; 0 when it can be expanded. */
static int check_used_file(struct ctx *c, const struct nf_ynode *root, const char *path)
{
    int rc = 0;
    struct nf_loc top = { nf_intern(path), 1, 1 };
    if (root->type != NF_Y_MAP) {
        NF_DIAG(c->d, NF_EINVAL, &root->loc, NULL, "a used pipeline file must be a mapping with 'nlflow: 1' and 'nodes'");
        return -1;
    }
    /* first of all, that it is a pipeline file: a path to any other file
       (a password file, a key) must not have its keys echoed in errors */
    const struct nf_ynode *version = nf_ymap_get(root, "nlflow");
    if (!version || version->type != NF_Y_SCALAR || strcmp(version->value, "1") != 0) {
        NF_DIAG(c->d, NF_EINVAL, version ? &version->loc : &top, NULL,
                "a used pipeline file needs 'nlflow: 1' (the pipeline format version this nlflow reads): "
                "is '%s' an nlflow pipeline file?", path);
        return -1;
    }
    const struct nf_ynode *req = nf_ymap_get(root, "requires");
    if (nf_requires_check(req, PACKAGE_VERSION, c->d) <= 0)
        return -1;
    for (size_t i = 0; i < root->n; i++) {
        const char *k = root->keys[i]->value;
        bool known = false;
        for (int j = 0; used_top_keys[j]; j++)
            known |= strcmp(k, used_top_keys[j]) == 0;
        if (strcmp(k, "settings") == 0) {
            NF_DIAG(c->d, NF_EINVAL, &root->keys[i]->loc, NULL,
                    "a used pipeline file cannot have 'settings' (they belong to the pipeline that runs it)");
            rc = -1;
        } else if (!known) {
            const char *best = nf_suggest_from(k, used_top_keys);
            char hint[160] = "";
            if (best)
                snprintf(hint, sizeof hint, "did you mean '%s'? ", best);
            NF_DIAG(c->d, NF_EINVAL, &root->keys[i]->loc, NULL,
                    "unknown top-level key '%s' in a used pipeline file (%sexpected nlflow, name, requires, "
                    "params, inputs, outputs, nodes)", k, hint);
            rc = -1;
        }
    }
    const struct nf_ynode *nodes = nf_ymap_get(root, "nodes");
    if (!nodes || nodes->type != NF_Y_MAP || nodes->n == 0) {
        NF_DIAG(c->d, NF_EINVAL, nodes ? &nodes->loc : &top, NULL,
                "'nodes' must be a non-empty mapping of node id to node");
        rc = -1;
    }
    const struct nf_ynode *in = nf_ymap_get(root, "inputs");
    if (in && in->type == NF_Y_SCALAR) {
        NF_DIAG(c->d, NF_EINVAL, &in->loc, NULL,
                "'inputs' must be a mapping of input name: description (or a list of names)");
        rc = -1;
    }
    for (size_t i = 0; i < inputs_count(in); i++) {
        const char *name = input_name(in, i);
        const struct nf_ynode *at = in->type == NF_Y_MAP ? in->keys[i] : in->items[i];
        if (!name[0] || strchr(name, '.'))
            NF_DIAG(c->d, NF_EINVAL, &at->loc, NULL, "invalid input name '%s' (letters, digits and _)", name);
        for (size_t j = 0; nodes && nodes->type == NF_Y_MAP && j < nodes->n; j++)
            if (strcmp(nodes->keys[j]->value, name) == 0) {
                NF_DIAG(c->d, NF_EINVAL, &at->loc, NULL,
                        "input '%s' has the name of a node of this file (line %d): rename one of them", name,
                        nodes->keys[j]->loc.line);
                rc = -1;
            }
    }
    const struct nf_ynode *outs = nf_ymap_get(root, "outputs");
    if (outs && outs->type != NF_Y_MAP) {
        NF_DIAG(c->d, NF_EINVAL, &outs->loc, NULL, "'outputs' must be a mapping of output name: node.port");
        rc = -1;
    }
    for (size_t i = 0; outs && outs->type == NF_Y_MAP && i < outs->n; i++)
        if (outs->items[i]->type != NF_Y_SCALAR || !outs->items[i]->value[0]) {
            NF_DIAG(c->d, NF_EINVAL, &outs->items[i]->loc, NULL, "output '%s' must name a node as 'id' or 'id.port'",
                    outs->keys[i]->value);
            rc = -1;
        }
    return rc;
}

/* Binds the used file's params: its own defaults, then `with:`. */
static int bind_params(struct ctx *c, const struct nf_ynode *params, const struct nf_ynode *with,
                       const char *who, const char *path)
{
    int rc = 0;
    nf_vars_parse(c->p, params, true, NULL, c->d);
    if (with && with->type != NF_Y_MAP) {
        NF_DIAG(c->d, NF_EINVAL, &with->loc, who, "'with' must map the used file's params to values");
        return -1;
    }
    for (size_t i = 0; with && i < with->n; i++) {
        const char *name = with->keys[i]->value;
        struct nf_var *v = nf_var_find(c->p, name, strlen(name));
        if (!v) {
            struct nf_strbuf sb;
            struct nf_suggest sg;
            char hint[160];
            nf_strbuf_init(&sb);
            nf_suggest_init(&sg, name);
            for (size_t j = 0; j < c->p->n_vars; j++) {
                nf_strbuf_addf(&sb, "%s%s", j ? ", " : "", c->p->vars[j].name);
                nf_suggest_add(&sg, c->p->vars[j].name);
            }
            nf_suggest_hint(&sg, hint, sizeof hint);
            NF_DIAG(c->d, NF_EINVAL, &with->keys[i]->loc, who, "'%s' has no param '%s' (%sparams: %s)", path,
                    name, hint, sb.len ? sb.buf : "none");
            nf_strbuf_release(&sb);
            rc = -1;
            continue;
        }
        if (with->items[i]->type != NF_Y_SCALAR) {   /* a list or mapping, for "${name}" alone */
            nf_ynode_free(v->tree);
            v->tree = nf_ynode_clone(with->items[i]);
            if (!v->tree)
                return -1;
            v->loc = with->items[i]->loc;
            continue;
        }
        char *value = nf_strdup(with->items[i]->value);
        if (!value)
            return -1;
        free(v->value);
        v->value = value;
        nf_ynode_free(v->tree);
        v->tree = NULL;
        v->loc = with->items[i]->loc;
    }
    return rc;
}

/* Drops a used file's variables and puts the pipeline's back. */
static void restore_vars(struct nf_pipeline *p, struct nf_var *saved, size_t n_saved)
{
    for (size_t k = 0; k < p->n_vars; k++) {
        free(p->vars[k].name);
        free(p->vars[k].value);
        nf_ynode_free(p->vars[k].tree);
    }
    free(p->vars);
    p->vars = saved;
    p->n_vars = n_saved;
}

/* Expands the use node i of scope s: 1 done (or failed and reported), 0 when
 * it waits for another use node of the same file. */
static int expand_use(struct ctx *c, struct scope *s, size_t i)
{
    struct use_result *u = &s->uses[i];
    const struct nf_ynode *key = s->nodes->keys[i], *body = s->nodes->items[i];
    char *who = nf_asprintf("%s%s", s->prefix, key->value);
    const struct nf_ynode *in = nf_ymap_get(body, "in"), *path = nf_ymap_get(body, "path");
    const struct nf_ynode *with = nf_ymap_get(body, "with");
    char **refs = NULL, *found = NULL, *real = NULL, *text = NULL;
    struct nf_ynode *root = NULL;
    struct scope child = { 0 };
    struct nf_var *saved_vars = c->p->vars;
    size_t saved_n = c->p->n_vars;
    bool vars_swapped = false;
    int rc = 1;
    u->failed = true;   /* until it is done */
    if (!who || c->too_large)
        goto out;   /* a limit was reached (and said) elsewhere: nothing more is read */
    if (in && in->type != NF_Y_MAP) {
        NF_DIAG(c->d, NF_EINVAL, &in->loc, who, "'in' must map the used file's inputs to node ids, e.g. {bold: data}");
        goto out;
    }
    refs = nf_calloc((in ? in->n : 0) + 1, sizeof *refs);
    if (!refs)
        goto out;
    int r = resolve_use_inputs(c, s, in, who, refs);
    if (r == 0) {
        u->failed = false;
        rc = 0;
        goto out;
    }
    bool bad = r < 0;
    for (size_t k = 0; k < body->n; k++) {
        const char *name = body->keys[k]->value;
        if (strcmp(name, "type") && strcmp(name, "path") && strcmp(name, "with") && strcmp(name, "in")) {
            NF_DIAG(c->d, NF_EINVAL, &body->keys[k]->loc, who,
                    "unknown key '%s' in a use node (keys: type, path, with, in)", name);
            bad = true;
        }
    }
    if (!path || path->type != NF_Y_SCALAR || !path->value[0]) {
        NF_DIAG(c->d, NF_EINVAL, path ? &path->loc : &key->loc, who,
                "a use node needs 'path:' (the pipeline file it uses)");
        goto out;
    }
    struct nf_strbuf looked;
    nf_strbuf_init(&looked);
    found = find_used_file(key->loc.file, path->value, &looked);
    if (!found) {
        NF_DIAG(c->d, NF_EINVAL, &path->loc, who, "cannot find pipeline file '%s' (looked in %s%s)", path->value,
                looked.buf ? looked.buf : ".",
                getenv("NLFLOW_PATH") && getenv("NLFLOW_PATH")[0] ? "" : "; NLFLOW_PATH is not set");
        nf_strbuf_release(&looked);
        goto out;
    }
    nf_strbuf_release(&looked);
    real = nf_realpath(found);
    for (int k = 0; real && k < c->depth; k++)
        if (c->stack[k] && strcmp(c->stack[k], real) == 0) {
            struct nf_strbuf sb;
            nf_strbuf_init(&sb);
            for (int j = k; j < c->depth; j++)
                nf_strbuf_addf(&sb, "%s -> ", c->stack[j]);
            NF_DIAG(c->d, NF_EINVAL, &path->loc, who, "pipeline files use each other in a cycle: %s%s",
                    sb.buf ? sb.buf : "", real);
            nf_strbuf_release(&sb);
            goto out;
        }
    if (!real || c->depth == MAX_USE_DEPTH) {
        NF_DIAG(c->d, NF_EINVAL, &path->loc, who, "pipeline files use each other more than %d deep",
                MAX_USE_DEPTH);
        c->too_large = real != NULL;   /* said once: every other path down there would say it again */
        c->limit_diag = c->d->n - 1;
        goto out;
    }
    size_t len = 0;
    struct nf_error err = { 0 };
    text = nf_read_text_file(found, NF_PIPELINE_FILE_MAX, "used file", &len, &err);
    if (!text) {
        NF_DIAG(c->d, err.code == NF_ENOMEM ? NF_ENOMEM : NF_EINVAL, &path->loc, who, "%s", err.msg);
        goto out;
    }
    c->read_bytes += len;
    if (c->read_bytes > NF_USE_MAX_BYTES) {
        NF_DIAG(c->d, NF_EINVAL, &path->loc, who, "the files used through use: hold more than %zu MiB of text in "
                "all (a file used many times over, by files used many times?)", NF_USE_MAX_BYTES >> 20);
        c->too_large = true;
        c->limit_diag = c->d->n - 1;
        goto out;
    }
    root = nf_yaml_parse(text, len, nf_intern(found), &err);
    if (!root) {
        nf_diags_add(c->d, &err);
        goto out;
    }
    /* recorded before checking, so errors inside it are told where it is used */
    struct nf_used_file *uf = nf_realloc(c->p->used_files, (c->p->n_used_files + 1) * sizeof *uf);
    if (!uf)
        goto out;
    c->p->used_files = uf;
    uf = &uf[c->p->n_used_files++];
    memset(uf, 0, sizeof *uf);
    uf->path = nf_intern(found);
    XXH128_hash_t h = XXH3_128bits(text, len);
    snprintf(uf->hash, sizeof uf->hash, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
    uf->commit = git_head_commit(found);
    uf->used_by = nf_strdup(who);
    uf->used_at = key->loc;
    child.used_file = c->p->n_used_files;
    if (check_used_file(c, root, found) < 0 || bad)
        goto out;

    child.inputs = nf_ymap_get(root, "inputs");
    child.nodes = nf_ymap_get(root, "nodes");
    c->expanded_nodes += 1 + (child.nodes ? child.nodes->n : 0);
    if (c->expanded_nodes > NF_USE_MAX_NODES) {
        NF_DIAG(c->d, NF_EINVAL, &path->loc, who, "use: expands to more than %d nodes (a file used many times "
                "over, by files used many times?): nlflow stops here", NF_USE_MAX_NODES);
        c->too_large = true;
        c->limit_diag = c->d->n - 1;
        goto out;
    }
    child.bound = nf_calloc(inputs_count(child.inputs) + 1, sizeof *child.bound);
    child.prefix = nf_asprintf("%s%s.", s->prefix, key->value);
    if (!child.bound || !child.prefix)
        goto out;
    for (size_t e = 0; in && e < in->n; e++) {
        const char *name = in->keys[e]->value;
        int k = input_index(child.inputs, name, strlen(name));
        if (k < 0) {
            char names[512];
            struct nf_strbuf sb;
            nf_strbuf_init(&sb);
            for (size_t j = 0; j < inputs_count(child.inputs); j++)
                nf_strbuf_addf(&sb, "%s%s", j ? ", " : "", input_name(child.inputs, j));
            snprintf(names, sizeof names, "%s", sb.len ? sb.buf : "none");
            nf_strbuf_release(&sb);
            NF_DIAG(c->d, NF_EINVAL, &in->keys[e]->loc, who, "'%s' declares no input '%s' (inputs: %s)", found,
                    name, names);
            bad = true;
            continue;
        }
        child.bound[k] = refs[e];
        refs[e] = NULL;
    }
    for (size_t k = 0; k < inputs_count(child.inputs); k++)
        if (!child.bound[k]) {
            NF_DIAG(c->d, NF_EINVAL, &key->loc, who, "input '%s' of '%s' is not connected (in: {%s: NODE})",
                    input_name(child.inputs, k), found, input_name(child.inputs, k));
            bad = true;
        }
    if (bad)
        goto out;

    /* the used file's ${} are its own params, bound by `with:` */
    c->p->vars = NULL;
    c->p->n_vars = 0;
    vars_swapped = true;
    if (bind_params(c, nf_ymap_get(root, "params"), with, who, found) < 0)
        bad = true;   /* expanded all the same, so that errors inside it are seen too */
    for (size_t k = 0; k < child.nodes->n; k++) {
        char *id = nf_asprintf("%s%s", child.prefix, child.nodes->keys[k]->value);
        nf_vars_substitute(c->p, child.nodes->items[k], id, c->d);
        free(id);
    }
    struct nf_ynode *outs = nf_ymap_get(root, "outputs");
    if (outs)
        nf_vars_substitute(c->p, outs, who, c->d);
    restore_vars(c->p, saved_vars, saved_n);
    vars_swapped = false;

    c->stack[c->depth++] = real;
    int er = expand_scope(c, &child, outs, u, who);
    c->depth--;
    if (er < 0)
        goto out;
    if (!bad) {
        u->done = true;
        u->failed = false;
    }
out:
    if (vars_swapped)
        restore_vars(c->p, saved_vars, saved_n);
    for (size_t e = 0; refs && in && e < in->n; e++)
        free(refs[e]);
    free(refs);
    for (size_t k = 0; child.bound && k < inputs_count(child.inputs); k++)
        free(child.bound[k]);
    free(child.bound);
    free(child.prefix);
    free(child.uses);
    if (root) {   /* kept until the whole expansion ends: the child's nodes moved out of it */
        struct nf_ynode **t = nf_realloc(c->trees, (c->n_trees + 1) * sizeof *t);
        if (t) {
            c->trees = t;
            c->trees[c->n_trees++] = root;
        } else {
            nf_ynode_free(root);
        }
    }
    free(text);
    free(real);
    free(found);
    free(who);
    return rc;
}

/* Rewrites one reference scalar of a node body in place. */
static void rewrite_scalar(struct ctx *c, struct scope *s, struct nf_ynode *ref, const char *who)
{
    char *to = NULL;
    if (ref->type != NF_Y_SCALAR || !ref->value[0])
        return;   /* validation says what is wrong with it */
    int rc = resolve_ref(c, s, ref->value, &ref->loc, who, &to);
    if (rc == 1) {
        free(ref->value);
        ref->value = to;
    } else {
        ref->reported = true;
    }
}

/* `after: faces` where faces is a use node: after every node of it. */
static void rewrite_after(struct ctx *c, struct scope *s, struct nf_ynode *after, const char *who)
{
    size_t n = after->type == NF_Y_SEQ ? after->n : 1;
    for (size_t e = 0; e < n; e++) {
        struct nf_ynode *ref = after->type == NF_Y_SEQ ? after->items[e] : after;
        if (ref->type != NF_Y_SCALAR)
            continue;
        size_t use = SIZE_MAX;
        for (size_t i = 0; i < s->nodes->n; i++)
            if (s->nodes->keys[i] && s->uses[i].is_use && strcmp(s->nodes->keys[i]->value, ref->value) == 0)
                use = i;
        if (use == SIZE_MAX) {
            rewrite_scalar(c, s, ref, who);
            continue;
        }
        const struct node_list *l = &s->uses[use].nodes;
        if (!s->uses[use].done || l->n == 0)
            continue;   /* its own errors are reported */
        /* the first of its nodes stands in the scalar, the others are appended */
        free(ref->value);
        ref->value = nf_strdup(l->v[0].key->value);
        if (after->type != NF_Y_SEQ)
            continue;
        for (size_t k = 1; k < l->n; k++) {
            struct nf_ynode *item = nf_calloc(1, sizeof *item);
            struct nf_ynode **items = nf_realloc(after->items, (after->n + 1) * sizeof *items);
            if (!item || !items) {
                free(item);
                if (items)
                    after->items = items;
                return;
            }
            item->type = NF_Y_SCALAR;
            item->loc = ref->loc;
            item->value = nf_strdup(l->v[k].key->value);
            after->items = items;
            after->items[after->n++] = item;
        }
    }
}

/* Expands the nodes of one file into res->nodes and resolves its declared
 * outputs (outs) into res->out_*; -1 when anything in it failed. */
static int expand_scope(struct ctx *c, struct scope *s, const struct nf_ynode *outs, struct use_result *res,
                        const char *who)
{
    struct node_list *out = &res->nodes;
    struct nf_ynode *nodes = s->nodes;
    s->uses = nf_calloc(nodes->n + 1, sizeof *s->uses);
    if (!s->uses)
        return -1;
    for (size_t i = 0; i < nodes->n; i++)
        s->uses[i].is_use = is_use_node(nodes->items[i]);
    /* a use node may take another's outputs: expand those it waits for first */
    for (bool progress = true; progress;) {
        progress = false;
        for (size_t i = 0; i < nodes->n; i++)
            if (s->uses[i].is_use && !s->uses[i].done && !s->uses[i].failed)
                progress |= expand_use(c, s, i) != 0;
    }
    for (size_t i = 0; i < nodes->n; i++)
        if (s->uses[i].is_use && !s->uses[i].done && !s->uses[i].failed) {
            NF_DIAG(c->d, NF_EINVAL, &nodes->keys[i]->loc, nodes->keys[i]->value,
                    "use nodes take each other's outputs in a cycle");
            s->uses[i].failed = true;
        }
    int rc = 0;
    for (size_t i = 0; i < nodes->n; i++) {
        struct use_result *u = &s->uses[i];
        if (u->is_use) {
            for (size_t k = 0; k < u->nodes.n; k++)
                if (!list_push(out, u->nodes.v[k].key, u->nodes.v[k].body, u->nodes.v[k].used_file)) {
                    nf_ynode_free(u->nodes.v[k].key);
                    nf_ynode_free(u->nodes.v[k].body);
                    rc = -1;
                }
            free(u->nodes.v);
            memset(&u->nodes, 0, sizeof u->nodes);
            continue;
        }
        struct nf_ynode *key = nodes->keys[i], *body = nodes->items[i];
        char *id = nf_asprintf("%s%s", s->prefix, key->value);
        if (!id) {
            rc = -1;   /* out of memory: on to the clean-up below, which frees the used files' nodes */
            break;
        }
        if (s->prefix[0] && strchr(key->value, '.'))
            NF_DIAG(c->d, NF_EINVAL, &key->loc, id, "invalid node id ('.' separates a used file's name "
                    "from its nodes)");
        if (body->type == NF_Y_MAP) {
            struct nf_ynode *in = nf_ymap_get(body, "in"), *after = nf_ymap_get(body, "after");
            for (size_t e = 0; in && in->type == NF_Y_MAP && e < in->n; e++)
                rewrite_scalar(c, s, in->items[e], id);
            if (after && after->type != NF_Y_MAP)
                rewrite_after(c, s, after, id);
        }
        if (s->prefix[0]) {
            free(key->value);
            key->value = id;
        } else {
            free(id);
        }
        if (!list_push(out, key, body, s->used_file)) {
            rc = -1;
            break;
        }
        nodes->keys[i] = NULL;   /* moved */
        nodes->items[i] = NULL;
    }
    size_t n_out = outs && outs->type == NF_Y_MAP ? outs->n : 0;
    res->out_name = nf_calloc(n_out + 1, sizeof *res->out_name);
    res->out_ref = nf_calloc(n_out + 1, sizeof *res->out_ref);
    if (!res->out_name || !res->out_ref)
        rc = -1;
    for (size_t o = 0; rc == 0 && o < n_out; o++) {
        char *ref = NULL;
        if (resolve_ref(c, s, outs->items[o]->value, &outs->items[o]->loc, who, &ref) <= 0) {
            rc = -1;
            continue;
        }
        res->out_name[res->n_out] = nf_strdup(outs->keys[o]->value);
        res->out_ref[res->n_out++] = ref;
    }
    for (size_t i = 0; i < nodes->n; i++) {
        struct use_result *u = &s->uses[i];
        list_free(&u->nodes);
        for (size_t o = 0; o < u->n_out; o++) {
            free(u->out_name[o]);
            free(u->out_ref[o]);
        }
        free(u->out_name);
        free(u->out_ref);
        if (u->is_use && !u->done)
            rc = -1;
    }
    return rc;
}

struct nf_ynode *nf_uses_expand(struct nf_pipeline *p, struct nf_ynode *nodes, size_t **used_file,
                                struct nf_diags *d)
{
    struct ctx c = { .p = p, .d = d };
    struct scope top = { .prefix = "", .nodes = nodes };
    struct use_result res = { 0 };
    struct nf_ynode *map = NULL;
    c.stack[c.depth++] = nf_realpath(p->file);
    expand_scope(&c, &top, NULL, &res, NULL);
    free(top.uses);
    free(res.out_name);
    free(res.out_ref);
    struct node_list l = res.nodes;
    if (c.too_large) {   /* the limit's error alone, and nothing of what was expanded */
        if (d->n > c.limit_diag + 1)
            d->n = c.limit_diag + 1;
        list_free(&l);
        *used_file = NULL;
        for (size_t i = 0; i < c.n_trees; i++)
            nf_ynode_free(c.trees[i]);
        free(c.trees);
        free(c.stack[0]);
        return NULL;
    }
    map = nf_calloc(1, sizeof *map);
    *used_file = nf_calloc(l.n + 1, sizeof **used_file);
    if (map) {
        map->type = NF_Y_MAP;
        map->loc = nodes->loc;
        map->keys = nf_calloc(l.n + 1, sizeof *map->keys);
        map->items = nf_calloc(l.n + 1, sizeof *map->items);
    }
    if (!map || !map->keys || !map->items || !*used_file) {
        list_free(&l);
        nf_ynode_free(map);
        free(*used_file);
        *used_file = NULL;
        map = NULL;
    } else {
        for (size_t i = 0; i < l.n; i++) {
            map->keys[i] = l.v[i].key;
            map->items[i] = l.v[i].body;
            (*used_file)[i] = l.v[i].used_file;
        }
        map->n = l.n;
        free(l.v);
    }
    for (size_t i = 0; i < c.n_trees; i++)
        nf_ynode_free(c.trees[i]);
    free(c.trees);
    free(c.stack[0]);
    return map;
}

void nf_uses_annotate(const struct nf_pipeline *p, struct nf_diags *d, size_t from)
{
    for (size_t i = from; i < d->n; i++) {
        struct nf_error *e = &d->v[i];
        const struct nf_used_file *best = NULL;
        for (size_t u = 0; u < p->n_used_files; u++) {
            const struct nf_used_file *uf = &p->used_files[u];
            if (!e->loc.file || strcmp(e->loc.file, uf->path) != 0)
                continue;
            size_t n = uf->used_by ? strlen(uf->used_by) : 0;
            bool mine = n && strncmp(e->node, uf->used_by, n) == 0 && e->node[n] == '.';
            if (!best || mine)
                best = uf;
            if (mine)
                break;
        }
        if (!best)
            continue;
        size_t len = strlen(e->msg);
        snprintf(e->msg + len, sizeof e->msg - len, " (in '%s', used by node '%s' at %s:%d:%d)", best->path,
                 best->used_by ? best->used_by : "?", best->used_at.file ? best->used_at.file : "?",
                 best->used_at.line, best->used_at.col);
    }
}
