/* test_engine.c — unit tests of the engine phases: the node registry and its
 * parameter tables, YAML parsing with marks, validation messages, topological
 * order and cycle detection, ${var} substitution, placement, memory planning,
 * collection stacking, and an end-to-end round trip of a volume through
 * load -> mask -> summarize executed in process.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io.h"
#include "lang/params.h"
#include "pipeline.h"
#include "core/switches.h"
#include "core/util.h"
#include "lang/ytree.h"
#include "core/rng.h"

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-engine-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *write_yaml(const char *name, const char *text)
{
    char *path = nf_asprintf("%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Load a pipeline and return it (or NULL) with diagnostics in d. */
static struct nf_pipeline *load(const char *name, const char *text, struct nf_diags *d)
{
    char *path = write_yaml(name, text);
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

/* ---- registry ---- */
static void test_registry_tables(void **state)
{
    (void)state;
    int problems = 0;
    for (size_t i = 0; nf_node_types[i]; i++) {
        const struct nf_node_type *t = nf_node_types[i];
        for (size_t j = 0; j < i; j++)
            if (strcmp(nf_node_types[j]->name, t->name) == 0) {
                fprintf(stderr, "duplicate node type '%s'\n", t->name);
                problems++;
            }
        if (!t->summary || !t->summary[0] || !t->run_cpu || t->version < 1) {
            fprintf(stderr, "node '%s': missing summary, run_cpu or version\n", t->name);
            problems++;
        }
        if (t->run_gpu && !t->run_cpu) {
            fprintf(stderr, "node '%s': GPU without CPU implementation\n", t->name);
            problems++;
        }
        for (const struct nf_param *p = t->params; p && p->name; p++) {
            for (const struct nf_param *q = t->params; q != p; q++)
                if (strcmp(p->name, q->name) == 0) {
                    fprintf(stderr, "node '%s': duplicate parameter '%s'\n", t->name, p->name);
                    problems++;
                }
            if (!p->help || !p->help[0]) {
                fprintf(stderr, "node '%s': parameter '%s' has no help\n", t->name, p->name);
                problems++;
            }
            if (p->offset + 1 > t->params_size) {
                fprintf(stderr, "node '%s': parameter '%s' offset outside params\n", t->name, p->name);
                problems++;
            }
            if (strcmp(p->name, "type") == 0 || strcmp(p->name, "in") == 0 ||
                strcmp(p->name, "device") == 0 || strcmp(p->name, "after") == 0) {
                fprintf(stderr, "node '%s': parameter '%s' shadows a reserved key\n", t->name, p->name);
                problems++;
            }
            const struct nf_ptype_ops *ops = nf_ptype_ops(p->type);
            if (!ops) {
                fprintf(stderr, "node '%s': parameter '%s' has an unknown type\n", t->name, p->name);
                problems++;
                continue;
            }
            bool ranged = !(p->min == 0 && p->max == 0);
            if (p->flags & NF_PF_REQUIRED)
                continue;
            if ((p->type == NF_P_INT && ranged && (p->def.i < p->min || p->def.i > p->max)) ||
                (p->type == NF_P_NUM && ranged && !isnan(p->def.d) && (p->def.d < p->min || p->def.d > p->max))) {
                fprintf(stderr, "node '%s': default of '%s' outside its range\n", t->name, p->name);
                problems++;
            }
            if (p->type == NF_P_ENUM) {
                int n = 0;
                while (p->choices && p->choices[n])
                    n++;
                if (n == 0 || p->def.i < 0 || p->def.i >= n) {
                    fprintf(stderr, "node '%s': enum '%s' default out of choices\n", t->name, p->name);
                    problems++;
                }
            }
        }
        const struct nf_port *lists[2] = { t->inputs, t->outputs };
        for (int l = 0; l < 2; l++)
            for (const struct nf_port *pt = lists[l]; pt && pt->name; pt++) {
                if ((pt->types & ~(unsigned)NF_PT_ANY) || pt->types == 0) {
                    fprintf(stderr, "node '%s': port '%s' has unknown types\n", t->name, pt->name);
                    problems++;
                }
                if (nf_param_find(t->params, pt->name) && l == 0) {
                    fprintf(stderr, "node '%s': port '%s' is also a parameter\n", t->name, pt->name);
                    problems++;
                }
            }
    }
    assert_int_equal(problems, 0);
}

/* Every parameter type has a complete row of operations (params.c), and a
 * value outside the enum has none. */
static void test_ptype_ops_table(void **state)
{
    (void)state;
    static const enum nf_ptype all[] = { NF_P_INT, NF_P_NUM, NF_P_BOOL, NF_P_STR, NF_P_PATH,
                                         NF_P_ENUM, NF_P_NUM_LIST, NF_P_STR_LIST };
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        const struct nf_ptype_ops *ops = nf_ptype_ops(all[k]);
        assert_non_null(ops);
        assert_non_null(ops->name);
        assert_string_equal(nf_ptype_name(all[k]), ops->name);
        assert_non_null(ops->set_default);
        assert_non_null(ops->parse);
        assert_non_null(ops->default_text);
        assert_non_null(ops->allowed_text);
        assert_non_null(ops->key);
        assert_non_null(ops->json);
        assert_non_null(ops->schema);
        /* types that own memory free it */
        bool owns = all[k] == NF_P_STR || all[k] == NF_P_PATH || all[k] == NF_P_NUM_LIST ||
                    all[k] == NF_P_STR_LIST;
        assert_true(owns == (ops->release != NULL));
    }
    assert_null(nf_ptype_ops((enum nf_ptype)(NF_P_STR_LIST + 1)));
    assert_string_equal(nf_ptype_name((enum nf_ptype)(NF_P_STR_LIST + 1)), "?");
}

/* The NLFLOW_* switches are read once; nf_switches_reload reads them again. */
static void test_switches(void **state)
{
    (void)state;
    setenv("NLFLOW_KILL_AT", "-3", 1);
    setenv("NLFLOW_GPU_RESIDENT", "0", 1);
    setenv("NLFLOW_CACHE_FS_MAGIC", "0x10", 1);
    setenv("NLFLOW_DEVICES_FILE", "", 1);
    nf_switches_reload();
    const struct nf_switches *sw = nf_switches();
    assert_int_equal(sw->kill_at, 0);   /* negative: off */
    assert_false(sw->gpu_resident);
    assert_true(sw->cache_fs_magic_set);
    assert_int_equal(sw->cache_fs_magic, 16);
    assert_null(sw->devices_file);      /* empty: unset */
    assert_false(sw->cache_readonly);
    unsetenv("NLFLOW_KILL_AT");
    unsetenv("NLFLOW_GPU_RESIDENT");
    unsetenv("NLFLOW_CACHE_FS_MAGIC");
    unsetenv("NLFLOW_DEVICES_FILE");
    assert_false(nf_switches()->gpu_resident);   /* not read again by itself */
    nf_switches_reload();
    assert_true(nf_switches()->gpu_resident);
    assert_false(nf_switches()->cache_fs_magic_set);
}

static void test_param_parsing(void **state)
{
    (void)state;
    static const char *const choices[] = { "a", "b", NULL };
    struct P { int64_t i; double d; bool b; int e; struct nf_num_list l; char *s; } params;
    const struct nf_param table[] = {
        NF_PARAM_INT("i", offsetof(struct P, i), 3, 1, 10, "int"),
        NF_PARAM_NUM("d", offsetof(struct P, d), 0.5, 0, 1, "num"),
        NF_PARAM_BOOL("b", offsetof(struct P, b), 0, "bool"),
        NF_PARAM_ENUM("e", offsetof(struct P, e), choices, 1, "enum"),
        NF_PARAM_NUM_LIST("l", offsetof(struct P, l), "1,2,3", -5, 5, 3, 3, "list"),
        NF_PARAM_STR("s", offsetof(struct P, s), "x", "str"),
        NF_PARAM_END,
    };
    struct nf_node_type t = { .name = "t", .params = table, .params_size = sizeof params };
    nf_params_defaults(&t, &params);
    assert_int_equal(params.i, 3);
    assert_true(params.d == 0.5);
    assert_int_equal(params.e, 1);
    assert_int_equal(params.l.n, 3);
    assert_true(params.l.v[2] == 3.0);
    assert_string_equal(params.s, "x");

    struct nf_error err = { 0 };
    const char *text = "i: 11\nd: '0.3'\nb: maybe\ne: c\nl: [1, 2]\nok: 7\n";
    struct nf_ynode *doc = nf_yaml_parse(text, strlen(text), "f.yaml", &err);
    assert_non_null(doc);
    struct nf_diags d;
    nf_diags_init(&d);
    for (size_t k = 0; k < 5; k++)
        assert_true(nf_param_set(&table[k], &params, doc->items[k], "n", ".", &d) < 0);
    assert_int_equal(d.n, 5);
    assert_string_equal(d.v[0].msg, "parameter 'i' must be an integer between 1 and 10 (got '11')");
    assert_int_equal(d.v[0].loc.line, 1);
    assert_int_equal(d.v[0].loc.col, 4);
    /* a quoted number is a string; the message says what to change */
    assert_string_equal(d.v[1].msg, "parameter 'd' must be a number between 0 and 1 "
                                    "(got the quoted string '0.3': write it without quotes)");
    assert_string_equal(d.v[2].msg, "parameter 'b' must be true or false (got 'maybe')");
    assert_string_equal(d.v[3].msg, "parameter 'e' must be one of a, b (got 'c')");
    assert_string_equal(d.v[4].msg, "parameter 'l' must have 3 values (got 2)");
    /* values untouched by failed sets */
    assert_int_equal(params.i, 3);
    assert_int_equal(params.e, 1);
    nf_diags_release(&d);
    nf_ynode_free(doc);
    nf_params_release(&t, &params);
}

static void test_yaml_marks_and_errors(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    const char *text = "a:\n  b: [1, 2\n";
    assert_null(nf_yaml_parse(text, strlen(text), "x.yaml", &err));
    assert_int_equal(err.code, NF_ESYNTAX);
    assert_int_equal(err.loc.line, 3);
    assert_non_null(strstr(err.msg, "invalid YAML"));
    memset(&err, 0, sizeof err);
    assert_null(nf_yaml_parse("", 0, "x.yaml", &err));
    assert_string_equal(err.msg, "the file is empty");
    memset(&err, 0, sizeof err);
    text = "a: &x 1\nb: *x\n";
    assert_null(nf_yaml_parse(text, strlen(text), "x.yaml", &err));
    assert_non_null(strstr(err.msg, "not supported"));
}

/* ---- validation, order, cycles ---- */
static const char good_pipeline[] =
    "nlflow: 1\n"
    "params: {n: '3'}\n"
    "nodes:\n"
    "  maps:\n"
    "    type: summarize\n"
    "    in: {m: masked}\n"
    "  masked:\n"
    "    type: mask\n"
    "    in: {data: sim.data, mask: sim.mask}\n"
    "  sim:\n"
    "    type: simulate\n"
    "    subjects: ${n}\n"
    "    mask: synthetic\n";

static void test_topological_order(void **state)
{
    (void)state;
    struct nf_diags d;
    struct nf_pipeline *p = load("order.yaml", good_pipeline, &d);
    assert_int_equal(d.n, 0);
    assert_non_null(p);
    assert_int_equal(p->n_nodes, 3);
    /* every edge goes from an earlier to a later position */
    int pos[3];
    for (int i = 0; i < 3; i++)
        pos[p->order[i]] = i;
    for (size_t i = 0; i < p->n_nodes; i++)
        for (size_t e = 0; e < p->nodes[i].n_edges; e++)
            assert_true(pos[p->nodes[i].edges[e].src] < pos[i]);
    int sim = nf_node_index(p, "sim");
    assert_int_equal(p->order[0], sim);
    /* ${n} substituted and typed by the table */
    assert_int_equal(*(int64_t *)p->nodes[sim].params, 3);
    nf_pipeline_free(p);
    nf_diags_release(&d);
}

static void test_cycle_detected(void **state)
{
    (void)state;
    struct nf_diags d;
    struct nf_pipeline *p = load("cycle.yaml",
        "nlflow: 1\nnodes:\n"
        "  a: {type: summarize, in: {x: c.table}}\n"
        "  b: {type: summarize, in: {x: a.table}}\n"
        "  c: {type: summarize, in: {x: b.table}}\n"
        "  d: {type: summarize, in: {x: c.table}}\n", &d);
    assert_null(p);
    assert_int_equal(d.n, 1);
    assert_non_null(strstr(d.v[0].msg, "the pipeline has a cycle: "));
    /* the cycle names all three nodes */
    /* exactly the three nodes of the loop, each edge in its direction */
    const char *msg = strstr(d.v[0].msg, ": ") + 2;
    assert_true(strcmp(msg, "a -> b -> c -> a") == 0 || strcmp(msg, "b -> c -> a -> b") == 0 ||
                strcmp(msg, "c -> a -> b -> c") == 0);
    nf_diags_release(&d);
}

static void test_all_errors_reported(void **state)
{
    (void)state;
    struct nf_diags d;
    struct nf_pipeline *p = load("many.yaml",
        "nlflow: 1\n"
        "nodes:\n"
        "  a: {type: simulate, subjects: -1, colour: red}\n"
        "  b: {type: mask, in: {data: a.data, mask: nowhere, extra: a}}\n"
        "  c: {type: nosuch}\n"
        "  d: {type: load, path: '${undefined}'}\n", &d);
    assert_null(p);
    assert_true(diags_contain(&d, "parameter 'subjects' must be an integer"));
    assert_true(diags_contain(&d, "unknown parameter 'colour'"));
    assert_true(diags_contain(&d, "refers to unknown node 'nowhere'"));
    assert_true(diags_contain(&d, "unknown input port 'extra'"));
    assert_true(diags_contain(&d, "unknown node type 'nosuch'"));
    assert_true(diags_contain(&d, "undefined variable '${undefined}'"));
    assert_true(d.n >= 6);
    nf_diags_release(&d);
}

static void test_set_override(void **state)
{
    (void)state;
    char *path = write_yaml("set.yaml", good_pipeline);
    struct nf_diags d;
    nf_diags_init(&d);
    char *sets[] = { "n=5" };
    struct nf_overrides ov = { .set = sets, .n_set = 1, .device = -1, .memory = -1, .threads = -1 };
    struct nf_pipeline *p = nf_pipeline_load(path, &ov, &d);
    assert_non_null(p);
    assert_int_equal(*(int64_t *)p->nodes[nf_node_index(p, "sim")].params, 5);
    nf_pipeline_free(p);
    char *bad[] = { "m=5" };
    ov.set = bad;
    assert_null(nf_pipeline_load(path, &ov, &d));
    assert_true(diags_contain(&d, "--set m: the pipeline has no such variable"));
    nf_diags_release(&d);
    free(path);
}

static void test_placement(void **state)
{
    (void)state;
    /* requested, pipeline default, node has gpu, gpu available */
    assert_int_equal(nf_place_node(NF_DEV_AUTO, NF_DEV_AUTO, true, true), NF_DEV_CPU);
    assert_int_equal(nf_place_node(NF_DEV_GPU, NF_DEV_CPU, true, true), NF_DEV_GPU);
    assert_int_equal(nf_place_node(NF_DEV_AUTO, NF_DEV_GPU, true, true), NF_DEV_GPU);
    assert_int_equal(nf_place_node(NF_DEV_GPU, NF_DEV_AUTO, true, false), NF_DEV_CPU);
    assert_int_equal(nf_place_node(NF_DEV_GPU, NF_DEV_AUTO, false, true), NF_DEV_CPU);
    assert_int_equal(nf_place_node(NF_DEV_CPU, NF_DEV_GPU, true, true), NF_DEV_CPU);
}

/* nf_argsort_f32 against a comparison sort (ties by index): negatives, both
 * zeros, infinities, duplicates, keys that share their high bytes (skipped
 * radix passes), sizes 0 and 1. */
static int cmp_key_index(const void *a, const void *b)
{
    const double *x = a, *y = b;   /* (key, index) pairs */
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    if (x[0] == 0 && signbit(x[0]) != signbit(y[0]))
        return signbit(x[0]) ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static void test_argsort(void **state)
{
    (void)state;
    enum { N = 3000 };
    static float key[N];
    static double pair[N][2];
    static int64_t order[N];
    uint64_t st = 5;
    for (int round = 0; round < 4; round++) {
        int n = round == 0 ? 0 : round == 1 ? 1 : N;
        for (int i = 0; i < n; i++) {
            double u = nf_rand_uniform(&st);
            key[i] = round == 3 ? (float)(0.5 + u * 1e-3)                  /* high bytes shared */
                   : i % 7 == 0 ? (float)(int)(u * 5) - 2.0f              /* duplicates */
                   : (float)nf_rand_normal(&st) * 100.0f;
            if (round == 2 && i < 6) {
                const float special[] = { -0.0f, 0.0f, INFINITY, -INFINITY, -0.0f, 1e-40f };
                key[i] = special[i];
            }
            pair[i][0] = key[i];
            pair[i][1] = i;
        }
        assert_int_equal(nf_argsort_f32(key, n, order), 0);
        qsort(pair, (size_t)n, sizeof pair[0], cmp_key_index);
        for (int i = 0; i < n; i++)
            assert_int_equal(order[i], (int64_t)pair[i][1]);
    }
}

/* nf_first_nonfinite: the first NaN or infinity, in any block and lane. */
static void test_first_nonfinite(void **state)
{
    (void)state;
    enum { N = 10000 };
    static float a[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i - 5000.0f;
    a[17] = FLT_MAX;
    assert_int_equal(nf_first_nonfinite(a, N), -1);
    assert_int_equal(nf_first_nonfinite(a, 0), -1);
    const int at[] = { 0, 1, 4095, 4096, 9999 };
    const float bad[] = { NAN, INFINITY, -INFINITY };
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
        for (size_t b = 0; b < 3; b++) {
            float keep = a[at[k]];
            a[at[k]] = bad[b];
            assert_int_equal(nf_first_nonfinite(a, N), at[k]);
            if (at[k] + 1 < N) {
                a[N - 1] = NAN;   /* a later one does not matter */
                assert_int_equal(nf_first_nonfinite(a, N), at[k]);
                a[N - 1] = 4999.0f;
            }
            a[at[k]] = keep;
        }
    /* on several threads: the first over the parts, whichever part finishes first */
    const int64_t M = 3 * NF_SCAN_THREADS_MIN + 5;
    float *big = malloc((size_t)M * sizeof *big);
    assert_non_null(big);
    for (int64_t i = 0; i < M; i++)
        big[i] = (float)(i % 1000) * 0.5f;
    for (int t = 1; t <= 5; t++)
        assert_int_equal(nf_first_nonfinite_threads(big, M, t), -1);
    const int64_t pos[] = { 0, NF_SCAN_THREADS_MIN - 1, M / 2, M / 2 + 1, M - 1 };
    for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) {
        big[pos[k]] = k % 2 ? INFINITY : NAN;
        if (pos[k] + 1 < M)
            big[M - 1] = -INFINITY;   /* a later one, in the last part */
        for (int t = 1; t <= 5; t++)
            assert_int_equal(nf_first_nonfinite_threads(big, M, t), pos[k]);
        big[M - 1] = 1.0f;
        big[pos[k]] = 2.0f;
    }
    assert_int_equal(nf_first_nonfinite_threads(big, NF_SCAN_THREADS_MIN - 1, 4), -1);
    free(big);
}

/* nf_format_float_g9 gives printf("%.9g")'s text: random bit patterns over
 * every exponent, powers of ten and their neighbours (the exponent estimate's
 * edge), values that round up to a power of ten, halfway cases, denormals,
 * zeros, infinities. */
static void check_g9(float f)
{
    char want[64], got[64];
    snprintf(want, sizeof want, "%.9g", (double)f);
    int n = nf_format_float_g9(f, got);
    if (strcmp(want, got) != 0 || n != (int)strlen(want))
        fprintf(stderr, "nf_format_float_g9(%a): '%s', printf: '%s'\n", (double)f, got, want);
    assert_string_equal(got, want);
    assert_int_equal(n, (int)strlen(want));
}

static void test_format_float(void **state)
{
    (void)state;
    uint64_t st = 77;
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)nf_splitmix64(&st);
        float f;
        memcpy(&f, &u, sizeof f);
        if (!isnan(f))
            check_g9(f);
    }
    for (int x = -45; x <= 38; x++) {
        float p = (float)pow(10.0, x);
        check_g9(p);
        check_g9(-p);
        check_g9(nextafterf(p, 0));
        check_g9(nextafterf(p, INFINITY));
        check_g9((float)(9.9999999995 * pow(10.0, x)));
    }
    const float special[] = { 0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f,
                              0.5f, 1.0f / 3.0f, 123456789.0f, 1234567890.0f, 0.00012345678f, 0.0001f, 1e-5f,
                              16777216.0f, 0.000999999999f, 1.0f / 10001.0f, 5000.0f / 10001.0f };
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++)
        check_g9(special[k]);
    /* p-values (count + 1) / (N + 1) of every count */
    for (int c = 0; c <= 10000; c++)
        check_g9((float)((c + 1.0) / 10001.0));
    char buf[32];
    assert_int_equal(nf_format_uint(0, buf), 1);
    assert_string_equal(buf, "0");
    assert_int_equal(nf_format_uint(18446744073709551615ull, buf), 20);
    assert_string_equal(buf, "18446744073709551615");
}

static void test_sizes(void **state)
{
    (void)state;
    assert_int_equal(nf_parse_size("8GiB"), 8LL << 30);
    assert_int_equal(nf_parse_size("512 MiB"), 512LL << 20);
    assert_int_equal(nf_parse_size("2G"), 2000000000LL);
    assert_int_equal(nf_parse_size("100"), 100);
    assert_int_equal(nf_parse_size("lots"), -1);
    assert_int_equal(nf_parse_size("-1G"), -1);
    assert_int_equal(nf_parse_size("8 parsecs"), -1);
}

/* ---- collections ---- */
static void test_collection_stacking(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    struct nf_value *coll = nf_value_new_collection(3, &err);
    assert_non_null(coll);
    for (int i = 0; i < 3; i++) {
        struct nf_value *m = nf_value_new_matrix(1, 4, NULL, &err);
        for (int c = 0; c < 4; c++)
            m->u.mat.data[c] = (float)(10 * i + c);
        coll->u.coll.items[i] = m;
    }
    struct nf_value *s = nf_collection_stack(coll, &err);
    assert_non_null(s);
    assert_int_equal(s->u.mat.rows, 3);
    assert_int_equal(s->u.mat.cols, 4);
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 4; c++)
            assert_true(s->u.mat.data[i * 4 + c] == (float)(10 * i + c));
    nf_value_unref(s);
    /* a mismatched item is an error naming it */
    nf_value_unref(coll->u.coll.items[1]);
    coll->u.coll.items[1] = nf_value_new_matrix(1, 5, NULL, &err);
    nf_value_set_label(coll->u.coll.items[1], "sub-02");
    assert_null(nf_collection_stack(coll, &err));
    assert_int_equal(err.code, NF_ESHAPE);
    assert_non_null(strstr(err.msg, "sub-02"));
    nf_value_unref(coll);
}

/* ---- planning ---- */
static void test_memory_budget(void **state)
{
    (void)state;
    struct nf_diags d;
    char *sets[] = { 0 };
    (void)sets;
    struct nf_pipeline *p = load("budget.yaml",
        "nlflow: 1\nsettings: {memory: 1MiB}\nnodes:\n"
        "  sim: {type: simulate, mask: synthetic, subjects: 2, images: 50}\n", &d);
    assert_non_null(p);
    assert_int_equal(nf_resolve_shapes(p, &d), 0);
    assert_int_equal(nf_place(p, false, &d), 0);
    assert_true(nf_plan_memory(p, &d) < 0);
    assert_true(diags_contain(&d, "more than the memory budget of 1.0 MiB"));
    assert_string_equal(d.v[0].node, "sim");
    nf_pipeline_free(p);
    nf_diags_release(&d);
}

static const struct nf_shape *node_output(const struct nf_pipeline *p, const char *id)
{
    for (size_t i = 0; i < p->n_nodes; i++)
        if (strcmp(p->nodes[i].id, id) == 0)
            return &p->nodes[i].out_shape[0];
    fail_msg("no node '%s'", id);
    return NULL;
}

/* on_outputs: a copy of the matrix node `want_node` gave. */
struct captured {
    size_t want_node;
    struct nf_value *m;
};

static void capture_output(void *arg, size_t node, struct nf_value *const *out, size_t n_out)
{
    struct captured *c = arg;
    if (node == c->want_node && n_out > 0 && out[0] && !c->m)
        c->m = nf_value_ref(out[0]);
}

static size_t node_index(const struct nf_pipeline *p, const char *id)
{
    for (size_t i = 0; i < p->n_nodes; i++)
        if (strcmp(p->nodes[i].id, id) == 0)
            return i;
    fail_msg("no node '%s'", id);
    return 0;
}

/* Plan and run text; *lazy: whether vol stayed on disk; returns m's matrix. */
static struct nf_value *run_masking(const char *name, const char *text, bool *lazy)
{
    struct nf_diags d;
    struct nf_error err = { 0 };
    struct nf_pipeline *p = load(name, text, &d);
    assert_non_null(p);
    assert_int_equal(nf_resolve_shapes(p, &d), 0);
    assert_int_equal(nf_place(p, false, &d), 0);
    assert_int_equal(nf_plan_memory(p, &d), 0);
    *lazy = node_output(p, "vol")->lazy;
    assert_false(node_output(p, "brain")->lazy);
    /* the plan counts none of a volume left on disk: not where it is
     * loaded, not in a node that reads only its header */
    if (*lazy) {
        assert_int_equal(p->nodes[node_index(p, "vol")].est_peak, 0);
        for (size_t i = 0; i < p->n_nodes; i++) {
            const struct nf_node_inst *n = &p->nodes[i];
            if (strcmp(n->id, "d") == 0)   /* events in, X out, work: no frames */
                assert_int_equal(n->est_peak, nf_shape_item_bytes(&n->in_shape[0]) +
                                              nf_shape_item_bytes(&n->out_shape[0]) + n->est_work);
        }
    }
    struct captured c = { .want_node = node_index(p, "m") };
    struct nf_exec_opts o = { .threads = 2, .on_outputs = capture_output, .on_outputs_arg = &c };
    nf_log_quiet = true;
    int rc = nf_execute(p, &o, &err);
    if (rc < 0)
        fail_msg("%s: %s", name, err.msg);
    assert_non_null(c.m);
    nf_pipeline_free(p);
    nf_diags_release(&d);
    return c.m;
}

/* An image stays on disk only when every consumer reads it itself (mask its
 * voxels, design its header), and mask reading it there gives the bits of
 * mask reading it from memory (a second consumer that needs it in memory,
 * smooth, makes load read it whole), for a .nii and a .nii.gz 4D series with
 * NaNs. */
static void test_image_left_on_disk_only_for_mask(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    struct nf_grid g = { .dim = { 7, 5, 3 }, .pixdim = { 2, 2, 2 }, .sform_code = 4 };
    for (int a = 0; a < 3; a++)
        g.affine[a][a] = 2;
    g.affine[3][3] = 1;
    enum { NVOX = 7 * 5 * 3, NT = 4 };
    float vol[NVOX * NT], inside[NVOX];
    uint64_t seed = 5;
    for (int i = 0; i < NVOX * NT; i++)
        vol[i] = i % 17 == 3 ? NAN : (float)nf_rand_normal(&seed);
    for (int i = 0; i < NVOX; i++)
        inside[i] = i % 4 != 1;
    const char *suffixes[] = { ".nii", ".nii.gz" };
    for (int k = 0; k < 2; k++) {
        char *vpath = nf_asprintf("%s/disk4d%s", tmpdir, suffixes[k]);
        char *mpath = nf_asprintf("%s/diskmask.nii", tmpdir);
        assert_int_equal(nf_nifti_write(vpath, &g, NT, vol, 0, "test", &err), 0);
        assert_int_equal(nf_nifti_write(mpath, &g, 1, inside, 0, "test", &err), 0);
        char *only_mask = nf_asprintf(
            "nlflow: 1\nsettings: {outputs: out}\nnodes:\n"
            "  vol: {type: load, path: disk4d%s}\n"
            "  brain: {type: load, path: diskmask.nii}\n"
            "  m: {type: mask, in: {data: vol, mask: brain}}\n"
            "  m2: {type: mask, in: {data: vol, mask: brain}}\n", suffixes[k]);
        char *with_smooth = nf_asprintf(
            "nlflow: 1\nsettings: {outputs: out}\nnodes:\n"
            "  vol: {type: load, path: disk4d%s}\n"
            "  brain: {type: load, path: diskmask.nii}\n"
            "  m: {type: mask, in: {data: vol, mask: brain}}\n"
            "  sm: {type: smooth, fwhm: 4, in: {data: vol}}\n", suffixes[k]);
        /* design reads only the header (length, TR) of its frames */
        char *with_design = nf_asprintf(
            "nlflow: 1\nsettings: {outputs: out}\nnodes:\n"
            "  vol: {type: load, path: disk4d%s}\n"
            "  brain: {type: load, path: diskmask.nii}\n"
            "  ev: {type: load, path: diskevents.tsv}\n"
            "  m: {type: mask, in: {data: vol, mask: brain}}\n"
            "  d: {type: design, in: {events: ev, frames: vol}}\n", suffixes[k]);
        char *events = nf_asprintf("%s/diskevents.tsv", tmpdir);
        FILE *f = fopen(events, "w");
        assert_non_null(f);
        fputs("onset\tduration\ttrial_type\n0\t2\ta\n4\t2\tb\n", f);
        fclose(f);
        bool lazy_a, lazy_b, lazy_c;
        struct nf_value *a = run_masking("disk.yaml", only_mask, &lazy_a);
        struct nf_value *b = run_masking("disk2.yaml", with_smooth, &lazy_b);
        struct nf_value *c = run_masking("disk3.yaml", with_design, &lazy_c);
        assert_true(lazy_a);
        assert_false(lazy_b);
        assert_true(lazy_c);
        assert_memory_equal(a->u.mat.data, c->u.mat.data,
                            (size_t)(NT * a->u.mat.cols) * sizeof(float));
        nf_value_unref(c);
        free(with_design);
        free(events);
        assert_int_equal(a->u.mat.rows, NT);
        assert_int_equal(a->u.mat.cols, b->u.mat.cols);
        assert_int_equal(b->u.mat.rows, NT);
        assert_memory_equal(a->u.mat.data, b->u.mat.data,
                            (size_t)(NT * a->u.mat.cols) * sizeof(float));
        /* and both are the data at the mask's voxels (NaN -> 0), by hand */
        for (int t = 0; t < NT; t++)
            for (int64_t c = 0; c < a->u.mat.cols; c++) {
                float want = vol[t * NVOX + a->u.mat.geom->index[c]];
                assert_true(a->u.mat.data[t * a->u.mat.cols + c] == (isnan(want) ? 0.0f : want));
            }
        nf_value_unref(a);
        nf_value_unref(b);
        free(only_mask);
        free(with_smooth);
        free(vpath);
        free(mpath);
    }
}

/* ---- end to end: load -> mask -> summarize reproduces the input ---- */
static void test_roundtrip(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    struct nf_grid g = { .dim = { 5, 4, 3 }, .pixdim = { 2, 2, 2 }, .sform_code = 4, .qform_code = 4 };
    double A[4][4] = { { -2, 0, 0, 40 }, { 0, 2, 0, -30 }, { 0, 0, 2, -10 }, { 0, 0, 0, 1 } };
    memcpy(g.affine, A, sizeof A);
    int64_t nvox = 5 * 4 * 3;
    float *vol = calloc((size_t)nvox, sizeof *vol), *mask = calloc((size_t)nvox, sizeof *mask);
    for (int64_t v = 0; v < nvox; v++) {
        vol[v] = (float)(v * 1.25 - 7);
        mask[v] = (v % 3 != 0) ? 1.0f : 0.0f;
    }
    char *vpath = nf_asprintf("%s/vol.nii.gz", tmpdir), *mpath = nf_asprintf("%s/mask.nii.gz", tmpdir);
    assert_int_equal(nf_nifti_write(vpath, &g, 1, vol, 0, "test", &err), 0);
    assert_int_equal(nf_nifti_write(mpath, &g, 1, mask, 0, "test", &err), 0);
    char *yaml = write_yaml("rt.yaml",
        "nlflow: 1\nname: rt\nsettings: {outputs: out}\nnodes:\n"
        "  vol: {type: load, path: vol.nii.gz}\n"
        "  brain: {type: load, path: mask.nii.gz}\n"
        "  m: {type: mask, in: {data: vol, mask: brain}}\n"
        "  s: {type: summarize, in: {roundtrip: m}}\n");
    struct nf_diags d;
    nf_diags_init(&d);
    struct nf_pipeline *p = nf_pipeline_load(yaml, NULL, &d);
    assert_non_null(p);
    assert_int_equal(nf_resolve_shapes(p, &d), 0);
    assert_int_equal(nf_place(p, false, &d), 0);
    assert_int_equal(nf_plan_memory(p, &d), 0);
    /* only mask reads vol: it stays on disk and mask reads its voxels (the
     * values checked below went that way); the mask image is read whole */
    assert_true(node_output(p, "vol")->lazy);
    assert_false(node_output(p, "brain")->lazy);
    struct nf_exec_opts o = { .threads = 2 };
    nf_log_quiet = true;
    int rc = nf_execute(p, &o, &err);
    if (rc < 0)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    char *out = nf_asprintf("%s/out/rt_stat-roundtrip_statmap.nii.gz", tmpdir);
    struct nf_value *back = nf_nifti_read(out, &err);
    assert_non_null(back);
    assert_int_equal(back->u.vol.grid.dim[0], 5);
    assert_true(nf_grid_same(&back->u.vol.grid, &g));
    for (int64_t v = 0; v < nvox; v++)
        assert_true(back->u.vol.data[v] == (mask[v] != 0 ? vol[v] : 0.0f));
    nf_value_unref(back);
    nf_pipeline_free(p);
    nf_diags_release(&d);
    free(out);
    free(yaml);
    free(vpath);
    free(mpath);
    free(vol);
    free(mask);
}

/* A collection that does not fit the budget as a whole is streamed: the plan
 * accepts it with one item in flight, and the run succeeds. */
static void test_streaming_collection(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    struct nf_grid g = { .dim = { 20, 20, 20 }, .pixdim = { 2, 2, 2 }, .sform_code = 1 };
    for (int i = 0; i < 3; i++)
        g.affine[i][i] = 2;
    g.affine[3][3] = 1;
    int64_t nvox = 8000, nt = 30;
    float *data = calloc((size_t)(nvox * nt), sizeof *data), *mask = calloc((size_t)nvox, sizeof *mask);
    for (int64_t v = 0; v < nvox * nt; v++)
        data[v] = (float)(v % 97);
    for (int64_t v = 0; v < nvox; v++)
        mask[v] = 1;
    char *dir = nf_asprintf("%s/stream", tmpdir);
    assert_int_equal(nf_mkdirs(dir, &err), 0);
    for (int s = 1; s <= 4; s++) {
        char *path = nf_asprintf("%s/sub-%02d_bold.nii.gz", dir, s);
        assert_int_equal(nf_nifti_write(path, &g, nt, data, 0, "t", &err), 0);
        free(path);
    }
    char *mpath = nf_asprintf("%s/mask.nii.gz", dir);
    assert_int_equal(nf_nifti_write(mpath, &g, 1, mask, 0, "t", &err), 0);
    /* one subject: 960 KB read + 960 KB out; all four outputs: 3.84 MB, so
     * only one subject fits in flight next to them */
    char *yaml = write_yaml("stream/stream.yaml",
        "nlflow: 1\nsettings: {memory: 5MB, outputs: out}\nnodes:\n"
        "  bold: {type: load, path: 'sub-*_bold.nii.gz'}\n"
        "  brain: {type: load, path: mask.nii.gz}\n"
        "  m: {type: mask, in: {data: bold, mask: brain}}\n"
        "  s: {type: summarize, in: {m: m}}\n");
    struct nf_diags d;
    nf_diags_init(&d);
    struct nf_pipeline *p = nf_pipeline_load(yaml, NULL, &d);
    assert_non_null(p);
    assert_int_equal(nf_resolve_shapes(p, &d), 0);
    assert_int_equal(nf_place(p, false, &d), 0);
    int rc = nf_plan_memory(p, &d);
    if (rc < 0)
        nf_diags_print(&d);
    assert_int_equal(rc, 0);
    const struct nf_node_inst *m = &p->nodes[nf_node_index(p, "m")];
    assert_true(m->mapped);
    assert_int_equal(m->n_items, 4);
    assert_int_equal(m->concurrency, 1);
    assert_true(p->est_total_peak <= 5000000);
    struct nf_exec_opts o = { .threads = 2 };
    nf_log_quiet = true;
    assert_int_equal(nf_execute(p, &o, &err), 0);
    char *out = nf_asprintf("%s/out/sub-04_stream_stat-m_statmap.nii.gz", dir);
    struct nf_value *back = nf_nifti_read(out, &err);
    assert_non_null(back);
    assert_int_equal(back->u.vol.nt, nt);
    for (int64_t v = 0; v < nvox * nt; v += 101)
        assert_true(back->u.vol.data[v] == data[v]);
    nf_value_unref(back);
    free(out);
    nf_pipeline_free(p);
    nf_diags_release(&d);
    free(yaml);
    free(mpath);
    free(dir);
    free(data);
    free(mask);
}

/* The bytes in mmapped blocks (every large image: the threshold is fixed
 * below), sampled whenever a value is freed; the largest sample. */
static pthread_mutex_t mapped_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t mapped_peak;

static void sample_mapped(uint64_t serial)
{
    (void)serial;
    struct mallinfo2 mi = mallinfo2();
    pthread_mutex_lock(&mapped_lock);
    if (mi.hblkhd > mapped_peak)
        mapped_peak = mi.hblkhd;
    pthread_mutex_unlock(&mapped_lock);
}

/* A chain of mapped nodes (smooth -> mask over 16 subjects) streams: mask's
 * item i runs once smooth's item i is made, and each smoothed image is
 * dropped once mask is done with it, so that the 16 smoothed images (960 KB
 * each) are never all held at once, as they were when mask waited for the
 * whole collection (with the images of the tasks in flight, 18 then, 5
 * now); the subjects are read when a task needs them (lazy), and the
 * masked maps (small) are kept for summarize. */
static void test_streaming_chain(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    struct nf_grid g = { .dim = { 20, 20, 20 }, .pixdim = { 2, 2, 2 }, .sform_code = 1 };
    for (int i = 0; i < 3; i++)
        g.affine[i][i] = 2;
    g.affine[3][3] = 1;
    enum { SUBJECTS = 16 };
    int64_t nvox = 8000, nt = 30;
    const size_t image = (size_t)(nvox * nt) * sizeof(float);
    float *data = calloc((size_t)(nvox * nt), sizeof *data), *mask = calloc((size_t)nvox, sizeof *mask);
    for (int64_t v = 0; v < nvox * nt; v++)
        data[v] = (float)(v % 89);
    for (int64_t v = 0; v < nvox; v += 16)
        mask[v] = 1;
    char *dir = nf_asprintf("%s/chain", tmpdir);
    assert_int_equal(nf_mkdirs(dir, &err), 0);
    for (int s = 1; s <= SUBJECTS; s++) {
        char *path = nf_asprintf("%s/sub-%02d_bold.nii.gz", dir, s);
        assert_int_equal(nf_nifti_write(path, &g, nt, data, 0, "t", &err), 0);
        free(path);
    }
    char *mpath = nf_asprintf("%s/mask.nii.gz", dir);
    assert_int_equal(nf_nifti_write(mpath, &g, 1, mask, 0, "t", &err), 0);
    char *yaml = write_yaml("chain/chain.yaml",
        "nlflow: 1\nsettings: {outputs: out}\nnodes:\n"
        "  bold: {type: load, path: 'sub-*_bold.nii.gz', lazy: true}\n"
        "  brain: {type: load, path: mask.nii.gz}\n"
        "  sm: {type: smooth, in: {data: bold}, fwhm: 4}\n"
        "  m: {type: mask, in: {data: sm, mask: brain}}\n"
        "  s: {type: summarize, in: {m: m}}\n");
    struct nf_diags d;
    nf_diags_init(&d);
    struct nf_pipeline *p = nf_pipeline_load(yaml, NULL, &d);
    assert_non_null(p);
    assert_int_equal(nf_resolve_shapes(p, &d), 0);
    assert_int_equal(nf_place(p, false, &d), 0);
    assert_int_equal(nf_plan_memory(p, &d), 0);
    struct nf_exec_opts o = { .threads = 2 };
    nf_log_quiet = true;
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);   /* every image mmapped, counted in hblkhd */
    mapped_peak = 0;
    nf_value_set_free_hook(sample_mapped);
    assert_int_equal(nf_execute(p, &o, &err), 0);
    nf_value_set_free_hook(NULL);
    /* per task in flight (2 threads) the image read, its smoothed copy and
     * smooth's working memory; a few smoothed images waiting for mask */
#ifdef __SANITIZE_ADDRESS__
    /* AddressSanitizer's allocator does not report to mallinfo2: the
     * results below are still checked, the bytes held are not */
    print_message("skipped: bytes held (mallinfo2 sees nothing under AddressSanitizer; images of %zu bytes)\n", image);
#else
    assert_true(mapped_peak > image);
    if (mapped_peak >= 10 * image)
        fail_msg("%zu bytes of images held at once (%zu images of %zu)", mapped_peak, mapped_peak / image,
                 (size_t)SUBJECTS);
#endif
    /* the results are those of the chain: subject 5's masked series */
    char *out = nf_asprintf("%s/out/sub-05_chain_stat-m_statmap.nii.gz", dir);
    struct nf_value *back = nf_nifti_read(out, &err);
    assert_non_null(back);
    assert_int_equal(back->u.vol.nt, nt);
    nf_value_unref(back);
    free(out);
    nf_pipeline_free(p);
    nf_diags_release(&d);
    free(yaml);
    free(mpath);
    free(dir);
    free(data);
    free(mask);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_tables),
        cmocka_unit_test(test_ptype_ops_table),
        cmocka_unit_test(test_switches),
        cmocka_unit_test(test_param_parsing),
        cmocka_unit_test(test_yaml_marks_and_errors),
        cmocka_unit_test(test_topological_order),
        cmocka_unit_test(test_cycle_detected),
        cmocka_unit_test(test_all_errors_reported),
        cmocka_unit_test(test_set_override),
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_argsort),
        cmocka_unit_test(test_first_nonfinite),
        cmocka_unit_test(test_format_float),
        cmocka_unit_test(test_collection_stacking),
        cmocka_unit_test(test_memory_budget),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_image_left_on_disk_only_for_mask),
        cmocka_unit_test(test_streaming_collection),
        cmocka_unit_test(test_streaming_chain),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
