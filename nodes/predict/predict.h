/* predict.h — parameters and ports of the `predict` node (nodes/predict/predict.c),
 * shared with the unit tests, which run the node without a pipeline file. */
#ifndef NF_NODE_PREDICT_H
#define NF_NODE_PREDICT_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"

enum predict_mode { PREDICT_WHOLE_BRAIN, PREDICT_ROI, PREDICT_SEARCHLIGHT };

struct predict_params {
    int mode;            /* enum predict_mode */
    int model;           /* enum nf_model_kind (predict_models.h), same order */
    int64_t cv;          /* folds (groups: leave-one-group-out when cv >= groups) */
    int64_t seed;        /* RandomState seed of the folds; -1: settings.seed */
    int scoring;         /* enum nf_scoring (predict_models.h), same order */
    bool standardize;    /* StandardScaler fitted on each training fold */
    int64_t pca;         /* components of a PCA after the scaler; 0: none */
    double radius;       /* searchlight sphere radius, mm */
    double C;            /* svm, logistic */
    double alpha;        /* ridge, ridge_classifier */
    char *target;        /* column of y; NULL: the first */
};

enum { PREDICT_IN_X, PREDICT_IN_Y, PREDICT_IN_GROUPS, PREDICT_IN_LABELS, PREDICT_N_IN };
enum {
    PREDICT_OUT_PREDICTIONS,
    PREDICT_OUT_SCORES,
    PREDICT_OUT_WEIGHTS,
    PREDICT_OUT_FOLD_WEIGHTS,
    PREDICT_OUT_MAP,
    PREDICT_OUT_TABLE,
    PREDICT_N_OUT
};

/* node_type.cost (predict_cost.c, every build): the searchlight's closed forms
 * only; 0 for every other mode and learner (they have no GPU path, so
 * `device: auto` keeps them on the CPU). */
int nf_predict_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                    struct nf_cost *c);
#ifdef HAVE_CUDA
/* The GPU implementation (predict.c, CUDA builds): mode searchlight with ridge
 * or ridge_classifier on the GPU (nodes/searchlight/searchlight_gpu.c), maps
 * equal to the CPU's except at centres whose decision values are within
 * round-off of a class boundary; every other mode and learner warns that it
 * has no GPU path and runs the CPU node. */
int nf_predict_run_gpu(struct nf_run *run);
#endif

extern const struct nf_node_type nf_node_predict;

#endif
