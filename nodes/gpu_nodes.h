/* gpu_nodes.h — the GPU implementations of the ridge and permute nodes and of
 * predict's searchlight (nodes/ridge/ridge_gpu.c, nodes/permute/permute_gpu.c,
 * nodes/searchlight/searchlight_gpu.c, CUDA builds only) and the work
 * estimates the placement cost model uses for them (nodes/gpu_cost.c, every
 * build).
 *
 * The run functions have the contract of node_type.run_cpu (node.h) and give
 * the same outputs as the CPU nodes: same ports and shapes, the same messages
 * for bad input; numbers equal to float32 round-off, chosen alphas and
 * permutation p-values identical except at documented near ties (docs/gpu.md).
 * When no GPU can be used after all, they warn and run the CPU node instead.
 * Wiring, in the node descriptors:
 *     .cost = nf_ridge_cost,                  (every build)
 *   #ifdef HAVE_CUDA
 *     .run_gpu = nf_ridge_run_gpu,
 *   #endif
 * and the same with nf_permute_cost / nf_permute_run_gpu and nf_predict_cost /
 * nf_predict_run_gpu (predict's searchlight maps: equal to the CPU's except at
 * centres whose decision values are within round-off of a class boundary).
 */
#ifndef NF_GPU_NODES_H
#define NF_GPU_NODES_H

#include "node.h"

#ifdef HAVE_CUDA
int nf_ridge_run_gpu(struct nf_run *run);
int nf_permute_run_gpu(struct nf_run *run);
/* predict (nodes/predict/predict.c): mode searchlight with ridge or ridge_classifier
 * on the GPU (nodes/searchlight/searchlight_gpu.c); every other mode and learner warns
 * that it has no GPU path and runs the CPU node. */
int nf_predict_run_gpu(struct nf_run *run);
#endif

/* node_type.cost for ridge and permute: 1 and *c filled, or 0 while shapes are
 * unknown. */
int nf_ridge_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                  struct nf_cost *c);
int nf_permute_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                    struct nf_cost *c);
/* predict: the searchlight's closed forms only; 0 for every other mode and
 * learner (they have no GPU path, so `device: auto` keeps them on the CPU). */
int nf_predict_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                    struct nf_cost *c);

/* Voxels per ridge block and permutations per GEMM on the GPU, for the cost
 * model's launch counts and the nodes' upper bounds (blocks shrink to fit). */
enum { NF_RIDGE_GPU_BLOCK = 65536, NF_PERMUTE_GPU_ROWS = 2048 };
/* Searchlight spheres per GPU batch, at most (batches shrink to fit): the
 * solve kernel is one thread per sphere, so a batch needs tens of thousands
 * of spheres to keep the device's memory pipes busy; larger maps still get
 * several batches, whose host scoring overlaps the next batch. */
enum { NF_SEARCHLIGHT_GPU_BLOCK = 65536 };

#endif
