/* test_cost.c — the placement cost model behind `device: auto`, on any machine
 * (no GPU needed: the rates are given).
 *
 * The time formulas against hand-computed values; the decisions they lead to
 * (small problems stay on the CPU, the whole-brain ridge and permutation
 * problems go to a fast GPU, not to a slow one); nf_place on a pipeline whose
 * node reports its cost (auto follows the model, explicit devices and a
 * missing GPU are obeyed, estimates are kept for `plan`, which prints them
 * for nodes that can run on either device);
 * the rates file (round trip, defaults when absent, errors when malformed,
 * CPU rates of another CPU ignored); the ridge / permute work estimates
 * (known FLOP counts on a small case, unknown shapes, growth with the size);
 * and the searchlight's (a small one stays on the CPU, the whole-brain one
 * goes to the GPU, learners and modes without a GPU path give no estimate).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/cost.h"
#include "pipeline.h"
#include "core/util.h"
#include "permute/permute.h"
#include "predict/predict.h"
#include "predict/predict_models.h"
#include "ridge/ridge.h"

/* The defaults with these CPU and GPU rates. */
static struct nf_rates rates(double cpu_gflops, double cpu_gbs, double gpu_gflops, double gpu_gbs, double pcie_gbs,
                             double gpu_setup_s)
{
    struct nf_rates r;
    nf_rates_default(&r);
    r.cpu_gflops = cpu_gflops;
    r.cpu_gbs = cpu_gbs;
    r.gpu_gflops = gpu_gflops;
    r.gpu_gbs = gpu_gbs;
    r.pcie_gbs = pcie_gbs;
    r.gpu_setup_s = gpu_setup_s;
    r.launch_s = 10e-6;
    return r;
}

/* An H200-like machine next to this project's 2-core VM. */
static struct nf_rates h200(void)
{
    return rates(53, 10, 50000, 4300, 50, 0.4);
}

static void test_times(void **state)
{
    (void)state;
    struct nf_rates r = { .cpu_gflops = 100, .cpu_gbs = 10, .gpu_gflops = 10000, .gpu_gbs = 1000, .pcie_gbs = 20,
                          .gpu_setup_s = 0.5, .launch_s = 1e-5 };
    struct nf_cost c = { .flops = 1e12, .cpu_bytes = 2e10, .gpu_bytes = 5e11, .transfer_bytes = 4e10,
                         .launches = 1000, .host_s = 0.25 };
    double cpu, gpu;
    nf_cost_times(&c, &r, &cpu, &gpu);
    /* cpu: max(1e12/1e11 = 10, 2e10/1e10 = 2) + 0.25 */
    assert_true(fabs(cpu - 10.25) < 1e-12);
    /* gpu: 0.5 + 1000 x 1e-5 + max(4e10/2e10 = 2, 1e12/1e13 = 0.1, 5e11/1e12 = 0.5) + 0.25 */
    assert_true(fabs(gpu - (0.5 + 0.01 + 2.0 + 0.25)) < 1e-12);
    assert_true(nf_cost_prefers_gpu(&c, &r));
    /* memory-bound on the CPU */
    c.cpu_bytes = 2e12;
    nf_cost_times(&c, &r, &cpu, &gpu);
    assert_true(fabs(cpu - 200.25) < 1e-9);
    /* a tiny problem: the setup decides */
    struct nf_cost tiny = { .flops = 1e6, .cpu_bytes = 1e5, .gpu_bytes = 1e5, .transfer_bytes = 1e5, .launches = 10 };
    assert_false(nf_cost_prefers_gpu(&tiny, &r));
}

static struct nf_shape matrix(int64_t rows, int64_t cols)
{
    struct nf_shape s = { .kind = NF_KIND_MATRIX };
    s.dim[0] = rows;
    s.dim[1] = cols;
    return s;
}

static void ridge_case(int64_t n, int64_t V, int64_t p, struct nf_cost *c)
{
    struct ridge_params prm;
    nf_params_defaults(&nf_node_ridge, &prm);   /* 20 alphas, 5 folds */
    struct nf_shape in[3] = { matrix(n, p), matrix(n, V), { 0 } };
    assert_int_equal(nf_ridge_cost(&prm, in, NULL, c), 1);
    nf_params_release(&nf_node_ridge, &prm);
}

static void permute_case(int64_t n, int64_t V, int64_t N, struct nf_cost *c)
{
    struct permute_params prm;
    nf_params_defaults(&nf_node_permute, &prm);
    prm.stat = PERM_STAT_T;
    prm.n_permutations = N;
    struct nf_shape in[4] = { matrix(n, V), { 0 }, { 0 }, { 0 } };
    assert_int_equal(nf_permute_cost(&prm, in, NULL, c), 1);
    nf_params_release(&nf_node_permute, &prm);
}

static void test_decisions(void **state)
{
    (void)state;
    struct nf_rates fast = h200(), slow = h200();
    struct nf_cost c;
    slow.pcie_gbs = 0.05;     /* a GPU behind a very slow link */
    slow.gpu_gflops = 200;
    /* the benchmark's whole brain: to the GPU; its tiny quick case: the CPU */
    ridge_case(1000, 230000, 100, &c);
    assert_true(nf_cost_prefers_gpu(&c, &fast));
    assert_false(nf_cost_prefers_gpu(&c, &slow));
    double cpu, gpu;
    nf_cost_times(&c, &fast, &cpu, &gpu);
    assert_true(cpu > 5 && cpu < 60);     /* the VM took 21 s */
    assert_true(gpu < cpu / 10);
    ridge_case(60, 500, 5, &c);
    assert_false(nf_cost_prefers_gpu(&c, &fast));
    permute_case(50, 230000, 10000, &c);
    assert_true(nf_cost_prefers_gpu(&c, &fast));
    permute_case(12, 200, 100, &c);
    assert_false(nf_cost_prefers_gpu(&c, &fast));
    /* without calibration (defaults) the whole brain still goes to the GPU */
    struct nf_rates def;
    nf_rates_default(&def);
    ridge_case(1000, 230000, 100, &c);
    assert_true(nf_cost_prefers_gpu(&c, &def));
}

static void test_work_estimates(void **state)
{
    (void)state;
    struct nf_cost a, b;
    /* n = 10, p = 2, V = 1, 5 folds (n_val 2, n_tr 8, r 2), 20 alphas: per fold
     * 4*8*4 + 2*2*2*2 + 2*2*4 + 2*2*8 + 2*2*2 + 2*20*4 + 6*20*2 + 2*2 = 128+16+16+32+8+160+240+4 = 604;
     * refit 4*10*4 + 2*2*10 + 2*2*2 = 160+40+8 = 208 */
    ridge_case(10, 1, 2, &a);
    assert_true(fabs(a.flops - (5 * 604 + 208)) < 1e-9);
    ridge_case(1000, 20000, 100, &a);
    ridge_case(1000, 40000, 100, &b);
    assert_true(b.flops > 1.9 * a.flops && b.flops < 2.1 * a.flops);
    assert_true(b.transfer_bytes > 1.9 * a.transfer_bytes);
    /* permute: 2 N n V + 10 N V, and an exact one-sample set when 2^n <= N */
    permute_case(20, 1000, 5000, &a);
    assert_true(fabs(a.flops - (2.0 * 5000 * 20 * 1000 + 10.0 * 5000 * 1000)) < 1);
    permute_case(8, 1000, 5000, &a);    /* 2^8 = 256 sign flips */
    assert_true(fabs(a.flops - (2.0 * 256 * 8 * 1000 + 10.0 * 256 * 1000)) < 1);
    /* unknown shapes: no estimate */
    struct ridge_params rp;
    nf_params_defaults(&nf_node_ridge, &rp);
    struct nf_shape none[3] = { { 0 }, matrix(10, 10), { 0 } };
    assert_int_equal(nf_ridge_cost(&rp, none, NULL, &a), 0);
    none[0] = matrix(10, 3);
    none[1] = matrix(10, 0);
    assert_int_equal(nf_ridge_cost(&rp, none, NULL, &a), 0);
    nf_params_release(&nf_node_ridge, &rp);
}

/* predict's cost: 1 and *c for the searchlight's closed forms, 0 otherwise. */
static int predict_case(int mode, int model, int64_t n, int64_t V, int64_t cv, double radius, struct nf_cost *c)
{
    struct predict_params prm;
    nf_params_defaults(&nf_node_predict, &prm);
    prm.mode = mode;
    prm.model = model;
    prm.cv = cv;
    prm.radius = radius;
    struct nf_shape in[4] = { matrix(n, V), matrix(n, 1), { 0 }, { 0 } };
    in[0].has_geom = true;
    int rc = nf_predict_cost(&prm, in, NULL, c);
    nf_params_release(&nf_node_predict, &prm);
    return rc;
}

/* The rates `nlflow devices --calibrate` measured on the H200 machine (16
 * cores, bench/gpu-check.sh, 2026-12-04) against the times the bench measured
 * there in the same session (bench/results/h200-gpu.json: the CPU node on all
 * cores; the GPU node cold, its input uploaded, plus the calibrated context
 * setup that the first GPU node of a process pays): `auto` must choose the
 * device that was faster, for every GPU benchmark condition. */
static void test_measured_h200(void **state)
{
    (void)state;
    struct nf_rates r = rates(227.297, 19.5866, 51317.7, 4276.19, 55.3987, 0.131054);
    const struct { const char *name; int kind; int64_t n, v, p; double cpu_s, gpu_cold_s; } cases[] = {
        { "ridge 500 x 20000 x 50", 0, 500, 20000, 50, 0.110, 0.0333 },
        { "ridge 1000 x 20000 x 100", 0, 1000, 20000, 100, 0.440, 0.0745 },
        { "ridge 1000 x 230000 x 100", 0, 1000, 230000, 100, 3.45, 0.506 },
        { "permute 50 x 230000 x 10000", 1, 50, 230000, 10000, 0.338, 0.193 },
        { "searchlight 120 x 50000, r 6, 5 folds", 2, 120, 50000, 5, 0.534, 0.102 },
    };
    /* the same GPU rates from the table of measured models, for an H200
     * without a calibration file; other models and calibrated rates keep theirs */
    struct nf_rates t;
    nf_rates_default(&t);
    assert_true(nf_rates_known_gpu(&t, "NVIDIA H200, 139.8 GiB, compute capability 9.0, 132 SMs"));
    assert_true(t.gpu_gflops == r.gpu_gflops && t.gpu_gbs == r.gpu_gbs && t.pcie_gbs == r.pcie_gbs &&
                t.gpu_setup_s == r.gpu_setup_s);
    struct nf_rates other;
    nf_rates_default(&other);
    double default_gflops = other.gpu_gflops;
    assert_false(nf_rates_known_gpu(&other, "NVIDIA A100-SXM4-80GB, 79.1 GiB"));
    assert_false(nf_rates_known_gpu(&other, "none"));
    assert_true(other.gpu_gflops == default_gflops);
    other.gpu_measured = true;
    assert_false(nf_rates_known_gpu(&other, "NVIDIA H200"));
    assert_true(other.gpu_gflops == default_gflops);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct nf_cost c;
        if (cases[i].kind == 0)
            ridge_case(cases[i].n, cases[i].v, cases[i].p, &c);
        else if (cases[i].kind == 1)
            permute_case(cases[i].n, cases[i].v, cases[i].p, &c);
        else
            assert_int_equal(predict_case(PREDICT_SEARCHLIGHT, NF_MODEL_RIDGE_CLASSIFIER, cases[i].n, cases[i].v,
                                          cases[i].p, 6, &c), 1);
        double cpu, gpu, measured_gpu = cases[i].gpu_cold_s + r.gpu_setup_s;
        nf_cost_times(&c, &r, &cpu, &gpu);
        printf("%-40s model cpu %7.3f s gpu %7.3f s | measured cpu %7.3f s gpu %7.3f s\n", cases[i].name, cpu, gpu,
               cases[i].cpu_s, measured_gpu);
        assert_int_equal(nf_cost_prefers_gpu(&c, &r), measured_gpu < cases[i].cpu_s);
    }
}

/* A small searchlight stays on the CPU, the whole-brain one (the bench's
 * 120 x 50000, r = 6 mm at 3 mm, 5 folds) goes to an H200-like GPU; learners
 * and modes without a GPU path report no cost, so `auto` keeps them on the
 * CPU. */
static void test_searchlight_cost(void **state)
{
    (void)state;
    struct nf_rates fast = h200(), def;
    struct nf_cost a, b;
    nf_rates_default(&def);
    assert_int_equal(predict_case(PREDICT_SEARCHLIGHT, NF_MODEL_RIDGE_CLASSIFIER, 24, 500, 3, 6, &a), 1);
    assert_false(nf_cost_prefers_gpu(&a, &fast));
    assert_int_equal(predict_case(PREDICT_SEARCHLIGHT, NF_MODEL_RIDGE_CLASSIFIER, 120, 50000, 5, 6, &a), 1);
    assert_true(nf_cost_prefers_gpu(&a, &fast));
    assert_true(nf_cost_prefers_gpu(&a, &def));
    double cpu, gpu;
    nf_cost_times(&a, &fast, &cpu, &gpu);
    assert_true(cpu > 0.5 && cpu < 5);   /* the VM took 1.6 s */
    assert_true(gpu < cpu / 2);
    /* 5 folds of a sphere of ~33.5 voxels (primal: 33.5 < 96 training rows) per centre */
    double m = 4.0 / 3.0 * M_PI * 8, nt = 96, nv = 24;
    double per = 2 * m * m * nt + 2 * m * nt + m * m * m / 3 + 2 * m * m + 2 * nv * m;
    assert_true(fabs(a.flops - 50000.0 * 5 * per) < 1e-6 * a.flops);
    assert_int_equal(predict_case(PREDICT_SEARCHLIGHT, NF_MODEL_RIDGE, 120, 100000, 5, 6, &b), 1);
    assert_true(b.flops > 1.99 * a.flops && b.flops < 2.01 * a.flops);
    /* no GPU path: no estimate */
    assert_int_equal(predict_case(PREDICT_SEARCHLIGHT, NF_MODEL_SVM, 120, 50000, 5, 6, &b), 0);
    assert_int_equal(predict_case(PREDICT_SEARCHLIGHT, NF_MODEL_LOGISTIC, 120, 50000, 5, 6, &b), 0);
    assert_int_equal(predict_case(PREDICT_WHOLE_BRAIN, NF_MODEL_RIDGE_CLASSIFIER, 120, 50000, 5, 6, &b), 0);
    assert_int_equal(predict_case(PREDICT_ROI, NF_MODEL_RIDGE, 120, 50000, 5, 6, &b), 0);
}

/* ---- nf_place with a node type that reports its cost ---- */

static double fake_flops;
static int fake_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out, struct nf_cost *c)
{
    (void)params;
    (void)in;
    (void)out;
    memset(c, 0, sizeof *c);
    c->flops = fake_flops;
    c->cpu_bytes = c->gpu_bytes = c->transfer_bytes = fake_flops / 1000;
    c->launches = 10;
    c->resident_port = 0;   /* its one input stays on the device, and is most of the transfer */
    c->resident_bytes = 0.9 * c->transfer_bytes;
    return 1;
}

static int fake_run(struct nf_run *run)
{
    (void)run;
    return 0;
}

static const struct nf_port fake_out[] = { { "out", "", NF_PT_MATRIX, 0 }, NF_PORT_END };
static const struct nf_port no_ports[] = { NF_PORT_END };
static const struct nf_param no_params[] = { NF_PARAM_END };
static const struct nf_node_type fake_gpu_type = {
    .name = "fake", .params = no_params, .inputs = no_ports, .outputs = fake_out,
    .run_cpu = fake_run, .run_gpu = fake_run, .cost = fake_cost,
};
static const struct nf_node_type fake_cpu_type = {
    .name = "fakecpu", .params = no_params, .inputs = no_ports, .outputs = fake_out,
    .run_cpu = fake_run, .cost = fake_cost,
};

static char rates_path[64];

static void write_rates(const struct nf_rates *r)
{
    struct nf_error err = { 0 };
    struct nf_rates copy = *r;
    copy.gpu_measured = true;
    assert_int_equal(nf_rates_save(rates_path, &copy, &err), 0);
}

/* A pipeline of two nodes (one with a GPU path, one without), placed. */
static void place_two(enum nf_device node_req, enum nf_device setting, bool gpu_available, struct nf_diags *d,
                      struct nf_node_inst nodes[2])
{
    static struct nf_shape shapes[4];
    static int order[2] = { 0, 1 };
    struct nf_pipeline p = { 0 };
    memset(nodes, 0, 2 * sizeof *nodes);
    nodes[0].id = "a";
    nodes[0].type = &fake_gpu_type;
    nodes[1].id = "b";
    nodes[1].type = &fake_cpu_type;
    for (int i = 0; i < 2; i++) {
        nodes[i].device_req = node_req;
        nodes[i].in_shape = &shapes[2 * i];
        nodes[i].out_shape = &shapes[2 * i + 1];
        shapes[2 * i + 1] = matrix(4, 4);
    }
    p.nodes = nodes;
    p.n_nodes = 2;
    p.order = order;
    p.settings.device = setting;
    nf_diags_init(d);
    assert_int_equal(nf_place(&p, gpu_available, d), 0);
}

static void test_place(void **state)
{
    (void)state;
    struct nf_node_inst nodes[2];
    struct nf_diags d;
    struct nf_rates r = h200();
    write_rates(&r);
    /* big: auto goes to the GPU when there is one */
    fake_flops = 1e13;
    place_two(NF_DEV_AUTO, NF_DEV_AUTO, true, &d, nodes);
    assert_int_equal(nodes[0].device, NF_DEV_GPU);
    assert_int_equal(nodes[1].device, NF_DEV_CPU);   /* no GPU implementation */
    assert_true(nodes[0].est_cpu_s > nodes[0].est_gpu_s && nodes[0].est_gpu_s > 0);
    assert_true(isnan(nodes[1].est_gpu_s) && nodes[1].est_cpu_s > 0);
    assert_int_equal(d.n_warnings, 0);
    nf_diags_release(&d);
    place_two(NF_DEV_AUTO, NF_DEV_AUTO, false, &d, nodes);
    assert_int_equal(nodes[0].device, NF_DEV_CPU);
    nf_diags_release(&d);
    /* explicit devices are obeyed; gpu without one warns and falls back */
    place_two(NF_DEV_CPU, NF_DEV_AUTO, true, &d, nodes);
    assert_int_equal(nodes[0].device, NF_DEV_CPU);
    nf_diags_release(&d);
    place_two(NF_DEV_GPU, NF_DEV_AUTO, false, &d, nodes);
    assert_int_equal(nodes[0].device, NF_DEV_CPU);
    assert_int_equal(d.n_warnings, 2);
    assert_non_null(strstr(d.warnings[0].msg, "no usable GPU was found"));
    assert_non_null(strstr(d.warnings[1].msg, "no GPU implementation"));
    nf_diags_release(&d);
    /* small: auto stays on the CPU; a settings default of gpu is a request */
    fake_flops = 1e7;
    place_two(NF_DEV_AUTO, NF_DEV_AUTO, true, &d, nodes);
    assert_int_equal(nodes[0].device, NF_DEV_CPU);
    nf_diags_release(&d);
    place_two(NF_DEV_AUTO, NF_DEV_GPU, true, &d, nodes);
    assert_int_equal(nodes[0].device, NF_DEV_GPU);
    nf_diags_release(&d);
    /* a slow GPU keeps even the big problem on the CPU */
    r.gpu_gflops = 10;
    r.pcie_gbs = 0.01;
    write_rates(&r);
    fake_flops = 1e13;
    place_two(NF_DEV_AUTO, NF_DEV_AUTO, true, &d, nodes);
    assert_int_equal(nodes[0].device, NF_DEV_CPU);
    nf_diags_release(&d);
    /* a broken rates file: a warning, and the defaults */
    FILE *f = fopen(rates_path, "w");
    fputs("{\"nlflow_devices\": 1, \"gpu_sgemm_gflops\": \"fast\"}", f);
    fclose(f);
    place_two(NF_DEV_AUTO, NF_DEV_AUTO, true, &d, nodes);
    assert_int_equal(d.n_warnings, 1);
    assert_non_null(strstr(d.warnings[0].msg, "default rates"));
    assert_int_equal(nodes[0].device, NF_DEV_GPU);   /* 10 TFLOP on default rates: GPU */
    nf_diags_release(&d);
}

/* Three GPU nodes in execution order: b and c read what a made, d reads
 * something else. The first GPU node to read a value pays its upload; a
 * later one reading the same value (kept on the device) does not. */
static void test_place_resident_inputs(void **state)
{
    (void)state;
    static struct nf_shape shapes[8];
    static int order[4] = { 0, 2, 1, 3 };   /* a, c, b, d */
    struct nf_node_inst nodes[4] = { { 0 } };
    struct nf_edge edges[3] = { { .port = 0, .src = 0, .src_port = 0 }, { .port = 0, .src = 0, .src_port = 0 },
                                { .port = 0, .src = 0, .src_port = 1 } };
    struct nf_pipeline p = { .nodes = nodes, .n_nodes = 4, .order = order };
    struct nf_diags d;
    struct nf_rates r = h200();
    r.pcie_gbs = 0.5;   /* transfers dominate */
    write_rates(&r);
    fake_flops = 1e12;
    const char *ids[4] = { "a", "b", "c", "d" };
    for (int i = 0; i < 4; i++) {
        nodes[i].id = (char *)ids[i];
        nodes[i].type = &fake_gpu_type;
        nodes[i].device_req = NF_DEV_AUTO;
        nodes[i].in_shape = &shapes[2 * i];
        nodes[i].out_shape = &shapes[2 * i + 1];
        shapes[2 * i + 1] = matrix(4, 4);
        if (i > 0) {
            nodes[i].edges = &edges[i - 1];
            nodes[i].n_edges = 1;
        }
    }
    p.settings.device = NF_DEV_GPU;   /* all on the GPU, whatever the estimates */
    nf_diags_init(&d);
    assert_int_equal(nf_place(&p, true, &d), 0);
    nf_diags_release(&d);
    for (int i = 0; i < 4; i++)
        assert_int_equal(nodes[i].device, NF_DEV_GPU);
    /* c runs before b: c pays for a's output, b does not; d reads another output */
    assert_true(nodes[1].est_gpu_s < nodes[2].est_gpu_s);
    assert_true(fabs(nodes[2].est_gpu_s - nodes[3].est_gpu_s) < 1e-9 * nodes[2].est_gpu_s);
    double saved = 0.9 * (fake_flops / 1000) / (r.pcie_gbs * 1e9);
    assert_true(fabs((nodes[2].est_gpu_s - nodes[1].est_gpu_s) - saved) < 1e-6 * saved);
    /* on the CPU, nothing is kept */
    p.settings.device = NF_DEV_CPU;
    nf_diags_init(&d);
    assert_int_equal(nf_place(&p, true, &d), 0);
    nf_diags_release(&d);
    assert_true(fabs(nodes[1].est_gpu_s - nodes[2].est_gpu_s) < 1e-9 * nodes[2].est_gpu_s);
}

static void test_plan_prints_estimates(void **state)
{
    (void)state;
    struct nf_node_inst nodes[2];
    struct nf_diags d;
    struct nf_rates r = h200();
    write_rates(&r);
    fake_flops = 1e13;
    place_two(NF_DEV_AUTO, NF_DEV_AUTO, true, &d, nodes);
    nf_diags_release(&d);
    static int order[2] = { 0, 1 };
    struct nf_pipeline p = { .name = "t", .file = "t.yaml", .nodes = nodes, .n_nodes = 2, .order = order };
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    nf_plan_print(&p, out);
    fclose(out);
    /* node a: both estimates; node b (no GPU path): none */
    char *a = strstr(buf, "\na "), *b = strstr(buf, "\nb ");
    assert_non_null(a);
    assert_non_null(b);
    char *est = strstr(a, "[est. per run: cpu "), *gpu = est ? strstr(est, ", gpu ") : NULL;
    assert_true(est && est < b);
    assert_true(gpu[6] >= '0' && gpu[6] <= '9');
    assert_null(strstr(b, "[est."));
    free(buf);
}

static void test_rates_file(void **state)
{
    (void)state;
    struct nf_rates r = h200(), back;
    struct nf_error err = { 0 };
    write_rates(&r);
    assert_int_equal(nf_rates_load(rates_path, &back, &err), 1);
    assert_true(back.cpu_measured && back.gpu_measured);
    assert_true(fabs(back.cpu_gflops - 53) < 1e-9 && fabs(back.gpu_gflops - 50000) < 1e-9);
    assert_true(fabs(back.pcie_gbs - 50) < 1e-9 && fabs(back.gpu_setup_s - 0.4) < 1e-9);
    /* absent: defaults, no error */
    unlink(rates_path);
    assert_int_equal(nf_rates_load(rates_path, &back, &err), 0);
    assert_false(back.cpu_measured || back.gpu_measured);
    assert_true(back.gpu_gflops == 15000 && back.cpu_gflops == 25.0 * nf_cpu_count());
    /* measured on another CPU: its CPU rates are not used, its GPU rates are */
    FILE *f = fopen(rates_path, "w");
    fprintf(f, "{\"nlflow_devices\": 1, \"cpu_model\": \"Some Other CPU\", \"cpu_cores\": %d, "
               "\"cpu_sgemm_gflops\": 999, \"gpu_sgemm_gflops\": 1234}\n", nf_cpu_count());
    fclose(f);
    assert_int_equal(nf_rates_load(rates_path, &back, &err), 1);
    assert_false(back.cpu_measured);
    assert_true(back.cpu_gflops == 25.0 * nf_cpu_count() && back.gpu_gflops == 1234);
    /* not ours, or a bad number: an error, and the defaults */
    f = fopen(rates_path, "w");
    fputs("{\"gpu_sgemm_gflops\": 1}", f);
    fclose(f);
    assert_true(nf_rates_load(rates_path, &back, &err) < 0);
    assert_non_null(strstr(err.msg, "not an nlflow devices file"));
    assert_true(back.gpu_gflops == 15000);
    f = fopen(rates_path, "w");
    fputs("{\"nlflow_devices\": 1, \"gpu_hbm_gbs\": -3}", f);
    fclose(f);
    assert_true(nf_rates_load(rates_path, &back, &err) < 0);
    assert_non_null(strstr(err.msg, "gpu_hbm_gbs"));
    unlink(rates_path);
}

int main(void)
{
    /* a private rates file, never the user's */
    snprintf(rates_path, sizeof rates_path, "/tmp/nlflow-test-cost-%d.json", (int)getpid());
    setenv("NLFLOW_DEVICES_FILE", rates_path, 1);
    char *path = nf_rates_path();
    int same = path && strcmp(path, rates_path) == 0;
    free(path);
    if (!same)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_times),
        cmocka_unit_test(test_decisions),
        cmocka_unit_test(test_work_estimates),
        cmocka_unit_test(test_searchlight_cost),
        cmocka_unit_test(test_measured_h200),
        cmocka_unit_test(test_place),
        cmocka_unit_test(test_place_resident_inputs),
        cmocka_unit_test(test_plan_prints_estimates),
        cmocka_unit_test(test_rates_file),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(rates_path);
    return rc;
}
