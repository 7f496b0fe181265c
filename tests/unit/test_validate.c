/* test_validate.c — unit tests of the helping side of validation: the
 * "did you mean" edit distance and its thresholds (engine/lang/suggest.c), how
 * ${var} references are typed (quoted or not), `cache: false`, and that the
 * generated JSON schema accepts what nlflow accepts. The schema check runs a
 * small JSON Schema validator written here for exactly the keywords gen.c
 * emits (an unknown keyword fails the test, so it cannot silently pass), over
 * the example pipelines and pipelines that use ${var} in numbers, booleans,
 * choices, lists and settings; it must also reject a few bad ones.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "lang/params.h"
#include "pipeline.h"
#include "lang/suggest.h"
#include "core/util.h"
#include "lang/ytree.h"

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-validate-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static struct nf_pipeline *load_text(const char *text, struct nf_diags *d)
{
    char *path = nf_asprintf("%s/p.yaml", tmpdir);
    struct nf_error err = { 0 };
    assert_int_equal(nf_write_file_atomic(path, text, strlen(text), &err), 0);
    nf_diags_init(d);
    struct nf_pipeline *p = nf_pipeline_load(path, NULL, d);
    free(path);
    return p;
}

static bool diags_contain(const struct nf_diags *d, const char *needle)
{
    for (size_t i = 0; i < d->n; i++)
        if (strstr(d->v[i].msg, needle))
            return true;
    return false;
}

/* ---- suggestions ---- */

static void test_edit_distance(void **state)
{
    (void)state;
    assert_int_equal(nf_edit_distance("load", "load"), 0);
    assert_int_equal(nf_edit_distance("laod", "load"), 1);          /* swap of neighbours */
    assert_int_equal(nf_edit_distance("lod", "load"), 1);           /* deletion */
    assert_int_equal(nf_edit_distance("loads", "load"), 1);         /* insertion */
    assert_int_equal(nf_edit_distance("standardise", "standardize"), 1);
    assert_int_equal(nf_edit_distance("x", "X"), 0);                /* case folded */
    assert_int_equal(nf_edit_distance("", "abc"), 3);
    assert_int_equal(nf_edit_distance("kitten", "sitting"), 3);
    assert_int_equal(nf_edit_distance("ca", "abc"), 3);             /* OSA, not full Damerau (2) */
    char longer[100];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    assert_true(nf_edit_distance(longer, "a") > 2);
}

static void test_suggest(void **state)
{
    (void)state;
    static const char *const types[] = { "load", "mask", "moments", "permute", "predict", "ridge", NULL };
    assert_string_equal(nf_suggest_from("laod", types), "load");
    assert_string_equal(nf_suggest_from("premute", types), "permute");
    assert_null(nf_suggest_from("load", types));          /* an exact match is not unknown */
    assert_null(nf_suggest_from("summary", types));       /* nothing close */
    static const char *const ports[] = { "X", "Y", "groups", NULL };
    assert_string_equal(nf_suggest_from("y", ports), "Y");   /* case only */
    assert_null(nf_suggest_from("z", ports));             /* one letter: no guessing */
    assert_null(nf_suggest_from("ab", ports));
    static const char *const devices[] = { "auto", "cpu", "gpu", NULL };
    assert_string_equal(nf_suggest_from("tpu", devices), "cpu");   /* ties: the first */
    assert_null(nf_suggest_from("tp", devices));          /* 2 letters: only case */
    /* length 6: two edits allowed; length 5: one */
    static const char *const words[] = { "subject", "session", NULL };
    assert_string_equal(nf_suggest_from("subjct", words), "subject");
    assert_null(nf_suggest_from("sbjct", words));
    assert_string_equal(nf_suggest_from("sesion", words), "session");
    /* the closest wins over an earlier, farther one */
    static const char *const near[] = { "alphas", "alpha", NULL };
    assert_string_equal(nf_suggest_from("alpah", near), "alpha");
    char hint[64];
    struct nf_suggest sg;
    nf_suggest_init(&sg, "colums");
    nf_suggest_add(&sg, "path");
    nf_suggest_add(&sg, "columns");
    assert_string_equal(nf_suggest_hint(&sg, hint, sizeof hint), "did you mean 'columns'? ");
    nf_suggest_init(&sg, "zzz");
    nf_suggest_add(&sg, "columns");
    assert_string_equal(nf_suggest_hint(&sg, hint, sizeof hint), "");
}

/* ---- typing of ${var} and settings ---- */

static void test_quoted_variable_typed(void **state)
{
    (void)state;
    struct nf_diags d;
    struct nf_pipeline *p = load_text("nlflow: 1\n"
                                      "params: {n: 4, big: 12}\n"
                                      "nodes:\n"
                                      "  sim: {type: simulate, subjects: \"${n}\", images: \"${big}${n}\", mask: synthetic}\n",
                                      &d);
    assert_int_equal(d.n, 0);
    assert_non_null(p);
    nf_pipeline_free(p);
    nf_diags_release(&d);
    /* a quoted literal stays a string, and the message says so; text around
     * a reference keeps the value a string as well */
    p = load_text("nlflow: 1\n"
                  "params: {n: 4}\n"
                  "nodes:\n"
                  "  sim: {type: simulate, subjects: \"4\", images: \"${n}0\", mask: synthetic}\n",
                  &d);
    assert_null(p);
    assert_true(diags_contain(&d, "parameter 'subjects' must be an integer between 1 and 10000 "
                                  "(got the quoted string '4': write it without quotes)"));
    assert_true(diags_contain(&d, "parameter 'images' must be an integer"));
    nf_diags_release(&d);
}

static void test_cache_boolean(void **state)
{
    (void)state;
    static const struct { const char *yaml, *want; } cases[] = {
        { "false", "off" }, { "off", "off" }, { "no", "off" }, { "true", ".nlflow/cache.db" },
        { "\"off\"", "off" }, { "my/cache.db", "my/cache.db" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct nf_diags d;
        char *text = nf_asprintf("nlflow: 1\nsettings: {cache: %s}\nnodes:\n"
                                 "  sim: {type: simulate, mask: synthetic}\n", cases[i].yaml);
        struct nf_pipeline *p = load_text(text, &d);
        assert_non_null(p);
        assert_string_equal(p->settings.cache, cases[i].want);
        nf_pipeline_free(p);
        nf_diags_release(&d);
        free(text);
    }
}

/* ---- a JSON Schema validator for the keywords gen.c uses ---- */

enum jtype { J_NULL, J_BOOL, J_INT, J_NUM, J_STR, J_ARR, J_OBJ };

/* A YAML value's JSON type, as a YAML 1.1 reader (PyYAML, most editors'
 * default) types an unquoted scalar. */
static enum jtype jtype_of(const struct nf_ynode *n)
{
    if (n->type == NF_Y_MAP)
        return J_OBJ;
    if (n->type == NF_Y_SEQ)
        return J_ARR;
    if (n->quoted)
        return J_STR;
    static const char *const bools[] = { "true", "false", "yes", "no", "on", "off", NULL };
    for (int i = 0; bools[i]; i++)
        if (strcasecmp(n->value, bools[i]) == 0)
            return J_BOOL;
    if (!n->value[0] || strcmp(n->value, "~") == 0 || strcmp(n->value, "null") == 0)
        return J_NULL;
    int64_t i;
    double x;
    if (nf_parse_int64(n->value, &i))
        return J_INT;
    if (nf_parse_double(n->value, &x))
        return J_NUM;
    return J_STR;
}

static bool type_matches(const char *name, enum jtype t)
{
    if (strcmp(name, "number") == 0)
        return t == J_INT || t == J_NUM;
    static const char *const names[] = { "null", "boolean", "integer", "", "string", "array", "object" };
    return strcmp(name, names[t]) == 0;
}

static bool bool_value(const struct nf_ynode *n)
{
    return strcasecmp(n->value, "true") == 0 || strcasecmp(n->value, "yes") == 0 ||
           strcasecmp(n->value, "on") == 0;
}

/* Equality of two scalars as JSON values. */
static bool json_equal(const struct nf_ynode *a, const struct nf_ynode *b)
{
    enum jtype ta = jtype_of(a), tb = jtype_of(b);
    if (ta == J_BOOL || tb == J_BOOL)
        return ta == tb && bool_value(a) == bool_value(b);
    if ((ta == J_INT || ta == J_NUM) && (tb == J_INT || tb == J_NUM)) {
        double x, y;
        return nf_parse_double(a->value, &x) && nf_parse_double(b->value, &y) && x == y;
    }
    return ta == tb && a->type == NF_Y_SCALAR && strcmp(a->value, b->value) == 0;
}

static bool pattern_matches(const char *pattern, const char *text)
{
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    bool ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static double num(const struct nf_ynode *n)
{
    double x = 0;
    assert_true(n->type == NF_Y_SCALAR && nf_parse_double(n->value, &x));
    return x;
}

static bool valid(const struct nf_ynode *root, const struct nf_ynode *schema, const struct nf_ynode *v);

static bool valid_all(const struct nf_ynode *root, const struct nf_ynode *list, const struct nf_ynode *v,
                      size_t *n_valid)
{
    *n_valid = 0;
    for (size_t i = 0; i < list->n; i++)
        *n_valid += valid(root, list->items[i], v);
    return true;
}

static bool valid(const struct nf_ynode *root, const struct nf_ynode *schema, const struct nf_ynode *v)
{
    assert_int_equal(schema->type, NF_Y_MAP);
    enum jtype t = jtype_of(v);
    for (size_t k = 0; k < schema->n; k++) {
        const char *key = schema->keys[k]->value;
        const struct nf_ynode *s = schema->items[k];
        size_t n_valid;
        if (strcmp(key, "$ref") == 0) {
            assert_true(strncmp(s->value, "#/$defs/", 8) == 0);
            const struct nf_ynode *target = nf_ymap_get(nf_ymap_get(root, "$defs"), s->value + 8);
            assert_non_null(target);
            if (!valid(root, target, v))
                return false;
        } else if (strcmp(key, "type") == 0) {
            bool any = false;
            if (s->type == NF_Y_SEQ)
                for (size_t i = 0; i < s->n; i++)
                    any |= type_matches(s->items[i]->value, t);
            else
                any = type_matches(s->value, t);
            if (!any)
                return false;
        } else if (strcmp(key, "enum") == 0) {
            bool any = false;
            for (size_t i = 0; i < s->n && v->type == NF_Y_SCALAR; i++)
                any |= json_equal(s->items[i], v);
            if (!any)
                return false;
        } else if (strcmp(key, "const") == 0) {
            if (v->type != NF_Y_SCALAR || !json_equal(s, v))
                return false;
        } else if (strcmp(key, "anyOf") == 0) {
            if (valid_all(root, s, v, &n_valid) && n_valid == 0)
                return false;
        } else if (strcmp(key, "oneOf") == 0) {
            if (valid_all(root, s, v, &n_valid) && n_valid != 1)
                return false;
        } else if (strcmp(key, "pattern") == 0) {
            if (t == J_STR && !pattern_matches(s->value, v->value))
                return false;
        } else if (strcmp(key, "minimum") == 0 || strcmp(key, "maximum") == 0) {
            if (t == J_INT || t == J_NUM) {
                double x = num(v), bound = num(s);
                if (key[1] == 'i' ? x < bound : x > bound)
                    return false;
            }
        } else if (strcmp(key, "items") == 0) {
            for (size_t i = 0; t == J_ARR && i < v->n; i++)
                if (!valid(root, s, v->items[i]))
                    return false;
        } else if (strcmp(key, "minItems") == 0 || strcmp(key, "maxItems") == 0 ||
                   strcmp(key, "minProperties") == 0 || strcmp(key, "maxProperties") == 0) {
            bool applies = strstr(key, "Items") ? t == J_ARR : t == J_OBJ;
            if (applies && (key[1] == 'i' ? (double)v->n < num(s) : (double)v->n > num(s)))
                return false;
        } else if (strcmp(key, "required") == 0) {
            for (size_t i = 0; t == J_OBJ && i < s->n; i++)
                if (!nf_ymap_get(v, s->items[i]->value))
                    return false;
        } else if (strcmp(key, "properties") == 0) {
            for (size_t i = 0; t == J_OBJ && i < v->n; i++) {
                const struct nf_ynode *sub = nf_ymap_get(s, v->keys[i]->value);
                if (sub && !valid(root, sub, v->items[i]))
                    return false;
            }
        } else if (strcmp(key, "additionalProperties") == 0) {
            const struct nf_ynode *props = nf_ymap_get(schema, "properties");
            for (size_t i = 0; t == J_OBJ && i < v->n; i++) {
                if (nf_ymap_get(props, v->keys[i]->value))
                    continue;
                if (s->type == NF_Y_SCALAR ? !bool_value(s) : !valid(root, s, v->items[i]))
                    return false;
            }
        } else if (strcmp(key, "propertyNames") == 0) {
            const struct nf_ynode *pat = nf_ymap_get(s, "pattern");
            assert_true(pat && s->n == 1);
            for (size_t i = 0; t == J_OBJ && i < v->n; i++)
                if (!pattern_matches(pat->value, v->keys[i]->value))
                    return false;
        } else {
            static const char *const notes[] = { "description", "default", "$comment", "$schema", "$id",
                                                 "title", "$defs", NULL };
            bool note = false;
            for (int i = 0; notes[i]; i++)
                note |= strcmp(key, notes[i]) == 0;
            if (!note)
                fail_msg("schema keyword '%s' is not known to this test's validator: teach it", key);
        }
    }
    return true;
}

static struct nf_ynode *parse_file(const char *path)
{
    size_t len = 0;
    struct nf_error err = { 0 };
    char *text = nf_read_file(path, &len, &err);
    if (!text)
        fail_msg("cannot read %s: %s", path, err.msg);
    struct nf_ynode *n = nf_yaml_parse(text, len, path, &err);
    if (!n)
        fail_msg("cannot parse %s: %s", path, err.msg);
    free(text);
    return n;
}

static bool schema_accepts(const struct nf_ynode *schema, const char *yaml)
{
    struct nf_error err = { 0 };
    struct nf_ynode *doc = nf_yaml_parse(yaml, strlen(yaml), "inline", &err);
    assert_non_null(doc);
    bool ok = valid(schema, schema, doc);
    nf_ynode_free(doc);
    return ok;
}

/* Pipelines nlflow accepts (checked here too) that the schema must accept. */
static const char *const accepted[] = {
    "nlflow: 1\n"
    "settings: {seed: \"${seed}\", threads: \"${threads}\", device: \"${device}\", cache: false}\n"
    "params: {seed: 3, threads: 1, device: cpu, n: 20, k: 2, std: true, test: one_sample, lo: -2}\n"
    "nodes:\n"
    "  sim: {type: simulate, subjects: \"${n}\", images: \"${n}\", mask: synthetic, voxel_size: 10}\n"
    "  vox: {type: mask, in: {data: sim.data, mask: sim.mask}, standardize: zscore}\n"
    "  fit: {type: ridge, in: {X: sim.X, Y: vox}, alphas: {logspace: [\"${lo}\", 2, \"${k}\"]}, cv: \"${k}\"}\n"
    "  dec: {type: predict, in: {X: vox, y: sim.y}, standardize: \"${std}\", reduce: {pca: \"${k}\"}, cv: \"${k}\"}\n"
    "  group: {type: permute, in: {data: fit.score}, test: \"${test}\", n_permutations: \"${n}\", device: \"${device}\"}\n",
    "nlflow: 1\nsettings: {cache: off}\nnodes:\n  sim: {type: simulate, mask: synthetic}\n",
    "nlflow: 1\nsettings: {cache: \"off\"}\nnodes:\n  sim: {type: simulate, mask: synthetic}\n",
    "nlflow: 1\nparams: {a: 1}\nnodes:\n  fit: {type: ridge, in: {X: x, Y: y}, alphas: [\"${a}\", 10]}\n"
    "  x: {type: load, path: x.tsv, lazy: false}\n  y: {type: load, path: y.tsv}\n",
};

/* ... and what it must still reject, so that the check above means something. */
static const char *const rejected[] = {
    "nlflow: 1\nnodes:\n  sim: {type: simulate, subjcts: 3}\n",                 /* unknown parameter */
    "nlflow: 1\nnodes:\n  sim: {type: simulate, subjects: three}\n",              /* not a number */
    "nlflow: 1\nparams: {n: 3}\nnodes:\n  sim: {type: simulate, subjects: \"${n}x\"}\n",
    "nlflow: 1\nnodes:\n  sim: {type: simulate, subjects: 0}\n",                  /* out of range */
    "nlflow: 1\nnodes:\n  p: {type: permute, in: {data: x}, tail: both}\n",      /* not a choice */
    "nlflow: 1\nsettings: {seed: -1}\nnodes:\n  sim: {type: simulate}\n",
    "nlflow: 2\nnodes:\n  sim: {type: simulate}\n",
    "nlflow: 1\nnodes:\n  Sim: {type: simulate}\n",                               /* bad id */
    "nlflow: 1\nnodes:\n  sim: {type: simulat}\n",
};

static void test_schema_accepts_what_nlflow_accepts(void **state)
{
    (void)state;
    const char *src = getenv("srcdir");
    char *path = nf_asprintf("%s/schemas/pipeline.schema.json", src ? src : ".");
    struct nf_ynode *schema = parse_file(path);
    free(path);

    /* every example pipeline */
    char *pattern = nf_asprintf("%s/pipelines/*.yaml", src ? src : ".");
    glob_t g;
    assert_int_equal(glob(pattern, 0, NULL, &g), 0);
    assert_true(g.gl_pathc >= 5);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct nf_ynode *doc = parse_file(g.gl_pathv[i]);
        if (!valid(schema, schema, doc))
            fail_msg("the schema rejects %s", g.gl_pathv[i]);
        nf_ynode_free(doc);
    }
    globfree(&g);
    free(pattern);

    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        struct nf_diags d;
        struct nf_pipeline *p = load_text(accepted[i], &d);
        if (!p)
            fail_msg("nlflow rejects accepted[%zu]: %s", i, d.n ? d.v[0].msg : "?");
        nf_pipeline_free(p);
        nf_diags_release(&d);
        if (!schema_accepts(schema, accepted[i]))
            fail_msg("the schema rejects accepted[%zu]", i);
    }
    for (size_t i = 0; i < sizeof rejected / sizeof rejected[0]; i++) {
        struct nf_diags d;
        struct nf_pipeline *p = load_text(rejected[i], &d);
        if (p)
            fail_msg("nlflow accepts rejected[%zu]", i);
        nf_diags_release(&d);
        if (schema_accepts(schema, rejected[i]))
            fail_msg("the schema accepts rejected[%zu]", i);
    }
    nf_ynode_free(schema);
}

/* ---- large pipelines ---- */

/* A 20,000-node chain validates (it took ~23 s when edges were resolved and
 * sorted by scanning every node per edge). Written last node first, so that
 * the sorted order (n0, n1, ...) is the reverse of file order: the sort must
 * follow `after:`, not the file. */
static void test_long_chain(void **state)
{
    (void)state;
    enum { N = 20000 };
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "nlflow: 1\nnodes:\n");
    for (int i = N - 1; i >= 0; i--) {
        nf_strbuf_addf(&sb, "  n%d:\n    type: load\n    path: x.tsv\n", i);
        if (i > 0)
            nf_strbuf_addf(&sb, "    after: n%d\n", i - 1);
    }
    assert_false(sb.oom);
    struct nf_diags d;
    struct nf_pipeline *p = load_text(sb.buf, &d);
    if (!p)
        fail_msg("the chain is refused: %s", d.n ? d.v[0].msg : "?");
    assert_int_equal(p->n_nodes, N);
    for (int k = 0; k < N; k++) {
        char want[16];
        snprintf(want, sizeof want, "n%d", k);
        assert_string_equal(p->nodes[p->order[k]].id, want);
    }
    nf_pipeline_free(p);
    nf_diags_release(&d);
    nf_strbuf_release(&sb);

    /* the same length with data edges, through shape resolution too (it
     * asked every node's wanted outputs by a scan of all edges) */
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "nlflow: 1\nnodes:\n");
    for (int i = 0; i < N; i++) {
        nf_strbuf_addf(&sb, "  n%d:\n    type: debug_fault\n    chunks: 1\n", i);
        if (i > 0)
            nf_strbuf_addf(&sb, "    in: {in: n%d}\n", i - 1);
    }
    assert_false(sb.oom);
    p = load_text(sb.buf, &d);
    if (!p)
        fail_msg("the data chain is refused: %s", d.n ? d.v[0].msg : "?");
    assert_int_equal(nf_resolve_shapes(p, &d), 0);
    for (int k = 0; k < N; k++)
        assert_int_equal(p->order[k], k);
    assert_int_equal(p->nodes[N - 1].out_shape[0].kind, NF_KIND_MATRIX);
    nf_pipeline_free(p);
    nf_diags_release(&d);
    nf_strbuf_release(&sb);
}

/* Independent nodes keep file order; a node waits for its last producer. */
static void test_sort_keeps_file_order(void **state)
{
    (void)state;
    static const char text[] =
        "nlflow: 1\nnodes:\n"
        "  c:\n    type: load\n    path: x.tsv\n    after: [b, e]\n"
        "  b:\n    type: load\n    path: x.tsv\n"
        "  e:\n    type: load\n    path: x.tsv\n    after: d\n"
        "  a:\n    type: load\n    path: x.tsv\n"
        "  d:\n    type: load\n    path: x.tsv\n";
    static const char *const want[] = { "b", "a", "d", "e", "c" };
    struct nf_diags d;
    struct nf_pipeline *p = load_text(text, &d);
    if (!p)
        fail_msg("refused: %s", d.n ? d.v[0].msg : "?");
    for (size_t k = 0; k < 5; k++)
        assert_string_equal(p->nodes[p->order[k]].id, want[k]);
    nf_pipeline_free(p);
    nf_diags_release(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edit_distance),
        cmocka_unit_test(test_suggest),
        cmocka_unit_test(test_quoted_variable_typed),
        cmocka_unit_test(test_cache_boolean),
        cmocka_unit_test(test_schema_accepts_what_nlflow_accepts),
        cmocka_unit_test(test_long_chain),
        cmocka_unit_test(test_sort_keeps_file_order),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
