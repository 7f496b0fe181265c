/* cost.c — the placement cost model's arithmetic, its rates file and the CPU
 * calibration (see cost.h for the model).
 *
 * The rates file is a flat JSON object written by `nlflow devices --calibrate`:
 *   {"nlflow_devices": 1, "cpu_model": "...", "cpu_cores": 2,
 *    "cpu_sgemm_gflops": 53.0, "cpu_copy_gbs": 9.8, "gpu_name": "...",
 *    "gpu_sgemm_gflops": 51000, "gpu_hbm_gbs": 4300, "gpu_pcie_gbs": 50,
 *    "gpu_setup_s": 0.4}
 * It is read with the YAML parser (JSON is YAML), as the benchmark's result
 * files are, and its keys with nf_ypath_num / nf_ypath_str. A missing key
 * keeps its default, so a calibration without a GPU leaves the GPU defaults in
 * place. CPU rates measured on another CPU model or core count (a home folder
 * shared between machines) are ignored.
 */
#include "cost.h"
#include "core/switches.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "core/util.h"
#include "lang/ytree.h"

void nf_rates_default(struct nf_rates *r)
{
    memset(r, 0, sizeof *r);
    r->cpu_gflops = 25.0 * nf_cpu_count();
    r->cpu_gbs = 20.0;
    r->gpu_gflops = 15000.0;
    r->gpu_gbs = 1500.0;
    r->pcie_gbs = 12.0;
    r->gpu_setup_s = 0.5;
    r->launch_s = 10e-6;
}

/* GPU rates measured on real machines, used for that model when this machine
 * has no calibration file. A row per model, matched on the start of
 * nf_cuda_describe's text. */
static const struct known_gpu {
    const char *name_prefix;
    double gflops, hbm_gbs, pcie_gbs, setup_s;
} known_gpus[] = {
    /* measured 2026-12-04 by `nlflow devices --calibrate` in bench/gpu-check.sh
     * on an H200 machine (143 GB, driver 580.159, CUDA 13.0; 16 cores); two
     * runs: 51322 / 51318 GFLOP/s, 4277 / 4276 GB/s, PCIe 55.5 / 55.4 GB/s,
     * setup 0.119 / 0.131 s (the later run's values) */
    { "NVIDIA H200", 51317.7, 4276.19, 55.3987, 0.131054 },
};

bool nf_rates_known_gpu(struct nf_rates *r, const char *gpu_name)
{
    if (r->gpu_measured || !gpu_name)
        return false;
    for (size_t i = 0; i < sizeof known_gpus / sizeof known_gpus[0]; i++) {
        const struct known_gpu *k = &known_gpus[i];
        if (strncmp(gpu_name, k->name_prefix, strlen(k->name_prefix)) != 0)
            continue;
        r->gpu_gflops = k->gflops;
        r->gpu_gbs = k->hbm_gbs;
        r->pcie_gbs = k->pcie_gbs;
        r->gpu_setup_s = k->setup_s;
        return true;
    }
    return false;
}

bool nf_rates_this_gpu(struct nf_rates *r)
{
    char gpu[512];
    if (r->gpu_measured)
        return false;
    nf_cuda_describe(gpu, sizeof gpu);
    return nf_rates_known_gpu(r, gpu);
}

char *nf_rates_path(void)
{
    const char *file = nf_switches()->devices_file, *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (file)
        return nf_strdup(file);
    if (xdg && xdg[0] == '/')
        return nf_asprintf("%s/nlflow/devices.json", xdg);
    if (home && home[0])
        return nf_asprintf("%s/.cache/nlflow/devices.json", home);
    return NULL;
}

int nf_rates_load(const char *path, struct nf_rates *r, struct nf_error *err)
{
    static const struct { const char *key; size_t offset; bool gpu; } keys[] = {
        { "cpu_sgemm_gflops", offsetof(struct nf_rates, cpu_gflops), false },
        { "cpu_copy_gbs", offsetof(struct nf_rates, cpu_gbs), false },
        { "gpu_sgemm_gflops", offsetof(struct nf_rates, gpu_gflops), true },
        { "gpu_hbm_gbs", offsetof(struct nf_rates, gpu_gbs), true },
        { "gpu_pcie_gbs", offsetof(struct nf_rates, pcie_gbs), true },
        { "gpu_setup_s", offsetof(struct nf_rates, gpu_setup_s), true },
    };
    nf_rates_default(r);
    if (!path)
        return 0;
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return errno == ENOENT ? 0 : NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
    fclose(probe);
    size_t len = 0;
    char *text = nf_read_file(path, &len, err);
    if (!text)
        return err->code;
    struct nf_error syntax = { 0 };
    struct nf_ynode *root = nf_yaml_parse(text, len, path, &syntax);
    int rc = 1;
    char here[256];
    if (!root || root->type != NF_Y_MAP || nf_ypath_num(root, "nlflow_devices") != 1) {
        rc = NF_FAIL(err, NF_EDATA, "'%s' is not an nlflow devices file (version 1); run 'nlflow devices "
                     "--calibrate' to rewrite it", path);
        goto fail;
    }
    nf_cpu_model(here, sizeof here);
    const char *model = nf_ypath_str(root, "cpu_model");
    bool same_cpu = model && strcmp(model, here) == 0 && nf_ypath_num(root, "cpu_cores") == nf_cpu_count();
    struct nf_rates got = *r;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        bool found = nf_ymap_get(root, keys[i].key) != NULL;
        double v = nf_ypath_num(root, keys[i].key);
        if (found && !(v > 0 && isfinite(v))) {
            rc = NF_FAIL(err, NF_EDATA, "'%s': \"%s\" is not a positive number", path, keys[i].key);
            goto fail;
        }
        if (found && (keys[i].gpu || same_cpu)) {
            *(double *)((char *)&got + keys[i].offset) = v;
            if (keys[i].gpu)
                got.gpu_measured = true;
            else
                got.cpu_measured = true;
        }
    }
    *r = got;
fail:
    nf_ynode_free(root);
    free(text);
    return rc;
}

int nf_rates_save(const char *path, const struct nf_rates *r, struct nf_error *err)
{
    char model[256], *dir = NULL;
    struct nf_strbuf sb;
    int rc = 0;
    if (!path)
        return NF_FAIL(err, NF_EIO, "no folder for the devices file (HOME is not set)");
    nf_cpu_model(model, sizeof model);
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "{\"nlflow_devices\": 1, \"cpu_model\": ");
    nf_strbuf_add_json_str(&sb, model);
    nf_strbuf_addf(&sb, ", \"cpu_cores\": %d,\n \"cpu_sgemm_gflops\": %.6g, \"cpu_copy_gbs\": %.6g", nf_cpu_count(),
                   r->cpu_gflops, r->cpu_gbs);
    if (r->gpu_measured) {
        char gpu[512];
        nf_cuda_describe(gpu, sizeof gpu);
        nf_strbuf_addf(&sb, ",\n \"gpu_name\": ");
        nf_strbuf_add_json_str(&sb, gpu);
        nf_strbuf_addf(&sb, ", \"gpu_sgemm_gflops\": %.6g, \"gpu_hbm_gbs\": %.6g, \"gpu_pcie_gbs\": %.6g, "
                       "\"gpu_setup_s\": %.6g", r->gpu_gflops, r->gpu_gbs, r->pcie_gbs, r->gpu_setup_s);
    }
    nf_strbuf_addf(&sb, "}\n");
    if (sb.oom || !(dir = nf_path_dirname(path))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(dir, err));
    NF_TRY(rc = nf_write_file_atomic(path, sb.buf, sb.len, err));
fail:
    free(dir);
    nf_strbuf_release(&sb);
    return rc;
}

void nf_cost_times(const struct nf_cost *c, const struct nf_rates *r, double *cpu_s, double *gpu_s)
{
    double cpu_compute = c->flops / (r->cpu_gflops * 1e9), cpu_memory = c->cpu_bytes / (r->cpu_gbs * 1e9);
    double gpu_compute = c->flops / (r->gpu_gflops * 1e9), gpu_memory = c->gpu_bytes / (r->gpu_gbs * 1e9);
    double transfer = c->transfer_bytes / (r->pcie_gbs * 1e9);
    double device = fmax(transfer, fmax(gpu_compute, gpu_memory));
    *cpu_s = fmax(cpu_compute, cpu_memory) + c->host_s;
    *gpu_s = r->gpu_setup_s + c->launches * r->launch_s + device + c->host_s;
}

bool nf_cost_prefers_gpu(const struct nf_cost *c, const struct nf_rates *r)
{
    double cpu_s, gpu_s;
    nf_cost_times(c, r, &cpu_s, &gpu_s);
    return gpu_s < cpu_s;
}

/* ---- calibration ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void nf_calibrate_cpu(struct nf_rates *r)
{
    enum { N = 2048, REPS = 3 };
    const size_t copy_bytes = (size_t)256 << 20;
    float *A = nf_alloc_floats((size_t)N * N), *B = nf_alloc_floats((size_t)N * N),
          *C = nf_alloc_floats((size_t)N * N);
    char *src = nf_malloc(copy_bytes), *dst = nf_malloc(copy_bytes);
    double t[REPS];
    if (A && B && C) {
        for (size_t i = 0; i < (size_t)N * N; i++) {
            A[i] = (float)(i % 7) * 0.25f;
            B[i] = (float)(i % 5) * 0.5f;
        }
        const struct nf_kernels *K = nf_kernels_cpu();
        int blas = nf_blas_threads();
        nf_blas_set_threads(nf_cpu_count());   /* the machine's rate: every core */
        K->sgemm(false, false, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N);   /* warm-up */
        for (int i = 0; i < REPS; i++) {
            double t0 = nf_now();
            K->sgemm(false, false, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N);
            t[i] = nf_now() - t0;
        }
        qsort(t, REPS, sizeof *t, cmp_double);
        r->cpu_gflops = 2.0 * N * (double)N * N / t[REPS / 2] * 1e-9;
        nf_blas_set_threads(blas);
        r->cpu_measured = true;
    }
    if (src && dst) {
        memset(src, 1, copy_bytes);
        memcpy(dst, src, copy_bytes);   /* fault the pages in */
        for (int i = 0; i < REPS; i++) {
            double t0 = nf_now();
            memcpy(dst, src, copy_bytes);
            t[i] = nf_now() - t0;
        }
        qsort(t, REPS, sizeof *t, cmp_double);
        r->cpu_gbs = 2.0 * (double)copy_bytes / t[REPS / 2] * 1e-9;
    }
    nf_free_aligned(A);
    nf_free_aligned(B);
    nf_free_aligned(C);
    free(src);
    free(dst);
}
