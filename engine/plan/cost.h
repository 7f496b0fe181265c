/* cost.h — the cost model behind `device: auto`: estimated seconds of a node on
 * the CPU and on the GPU, from its work (FLOPs and bytes, from resolved shapes)
 * and this machine's rates (measured by `nlflow devices --calibrate`).
 *
 *   cpu = max(flops / cpu_rate, cpu_bytes / cpu_bandwidth) + host
 *   gpu = setup + launches x launch + max(transfer / pcie, flops / gpu_rate,
 *         gpu_bytes / hbm) + host
 *
 * Transfers are overlapped with compute (two streams, pinned buffers), hence
 * the max; `host` is work that stays on the CPU either way (permute's MT19937
 * draws); `setup` is the GPU context (handles, streams), paid by the first GPU
 * node of a process and counted for each node to err on the CPU's side. A node
 * goes to the GPU when its estimate is lower. Rates come from a small JSON file
 * (nf_rates_path); without one, documented defaults (docs/gpu.md).
 */
#ifndef NF_COST_H
#define NF_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "node.h"

/* struct nf_cost, the work of one run, is in node.h: nodes fill it. */

/* Rates of this machine. */
struct nf_rates {
    double cpu_gflops;      /* SGEMM, all cores (the nodes use every core) */
    double cpu_gbs;         /* memory bandwidth (copy, bytes read + written) */
    double gpu_gflops;      /* SGEMM on the device */
    double gpu_gbs;         /* device memory bandwidth */
    double pcie_gbs;        /* pinned host-to-device copies */
    double gpu_setup_s;     /* creating the GPU context */
    double launch_s;        /* one kernel launch / synchronisation */
    bool cpu_measured, gpu_measured;   /* from a calibration file, else defaults */
};

/* Defaults (docs/gpu.md): CPU 25 GFLOP/s per core and 20 GB/s; GPU 15 TFLOP/s,
 * 1.5 TB/s, PCIe 12 GB/s, 0.5 s setup, 10 µs per launch — conservative for a
 * data-centre GPU, so that without calibration small problems stay on the CPU. */
void nf_rates_default(struct nf_rates *r);
/* A GPU without a calibration: the rates measured on the same model (a table
 * in cost.c, each row with the date and the command that measured it) replace
 * the GPU defaults. gpu_name is nf_cuda_describe's text; no match, or GPU
 * rates already from a calibration file: r unchanged. true when a row matched. */
bool nf_rates_known_gpu(struct nf_rates *r, const char *gpu_name);
/* nf_rates_known_gpu for this machine's GPU (nf_cuda_describe): call it only
 * once a GPU is known to be usable (describing one loads the CUDA libraries). */
bool nf_rates_this_gpu(struct nf_rates *r);
/* The calibration file: $NLFLOW_DEVICES_FILE, else $XDG_CACHE_HOME/nlflow/
 * devices.json, else $HOME/.cache/nlflow/devices.json (owned; NULL when there
 * is no home). */
char *nf_rates_path(void);
/* Defaults, then the values found in the file. 1 when the file was read, 0
 * when it does not exist (defaults only), <0 when it is unreadable or
 * malformed (err says which; r still holds the defaults). CPU rates measured
 * on another CPU model are not used. */
int nf_rates_load(const char *path, struct nf_rates *r, struct nf_error *err);
/* Write r (atomically), creating the folder. */
int nf_rates_save(const char *path, const struct nf_rates *r, struct nf_error *err);

/* Estimated seconds on each device. */
void nf_cost_times(const struct nf_cost *c, const struct nf_rates *r, double *cpu_s, double *gpu_s);
/* The cost model's choice: true for the GPU (strictly faster), given a usable
 * GPU and a node that has a GPU implementation. */
bool nf_cost_prefers_gpu(const struct nf_cost *c, const struct nf_rates *r);

/* Measure this machine's CPU rates (SGEMM 2048³ on all BLAS threads, a 256 MiB
 * copy) into r. */
void nf_calibrate_cpu(struct nf_rates *r);
/* Measure the GPU's (gpu_context.c in CUDA builds; cuda_stub.c says why not
 * otherwise): 0, or <0 with err saying why there is nothing to measure. */
int nf_cuda_calibrate(double *sgemm_gflops, double *hbm_gbs, double *pcie_gbs, double *setup_s,
                      struct nf_error *err);

#endif
