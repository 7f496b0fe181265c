/* simulate.h — parameters of the `simulate` node (nodes/simulate/simulate.c), exposed so
 * that unit tests can fill them without a pipeline file. */
#ifndef NF_NODE_SIMULATE_H
#define NF_NODE_SIMULATE_H

#include <stdint.h>

#include "node.h"

/* The brain template used by `mask: auto` when mricron-data is installed. */
#define NF_SIMULATE_TEMPLATE "/usr/share/mricron/templates/ch2bet.nii.gz"

struct simulate_params {
    int64_t subjects;              /* number of simulated subjects */
    int64_t images;                /* images (time points) per subject */
    int64_t features;              /* design columns */
    char *mask;                    /* "auto", "synthetic" or a NIfTI path */
    double voxel_size;             /* mm of the simulated grid */
    double effect_size;            /* planted weight scale */
    double noise;                  /* standard deviation of the Gaussian noise */
    struct nf_num_list roi_center; /* world mm, 3 values */
    double roi_radius;             /* mm */
    int64_t seed;                  /* -1: the pipeline's settings.seed */
    char *write;                   /* folder for a BIDS-like copy, or NULL */
    char *bids;                    /* folder for a BIDS + fMRIPrep-like task data set, or NULL */
    int64_t runs;                  /* runs per subject of the task data set */
    bool overwrite;                /* write into a non-empty folder simulate did not make */
};

/* Output ports, in table order. */
enum { SIMULATE_N_IN = 0 };
enum { SIMULATE_OUT_DATA, SIMULATE_OUT_MASK, SIMULATE_OUT_X, SIMULATE_OUT_Y, SIMULATE_OUT_TRUTH, SIMULATE_N_OUT };

extern const struct nf_node_type nf_node_simulate;

#endif
