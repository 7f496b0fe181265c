/* summarize.h — parameters of the `summarize` node (nodes/summarize/summarize.c), exposed
 * so that unit tests can fill them without a pipeline file. */
#ifndef NF_NODE_SUMMARIZE_H
#define NF_NODE_SUMMARIZE_H

#include <stdint.h>

#include "node.h"

enum summarize_tail { SUM_TAIL_TWO, SUM_TAIL_UPPER, SUM_TAIL_LOWER };
/* File names: BIDS-derivative only, or also FSL randomise's under fsl/. */
enum summarize_naming { SUM_NAMING_BIDS, SUM_NAMING_FSL };

struct summarize_params {
    double threshold;          /* NaN: no value threshold */
    char *threshold_key;       /* input to threshold; NULL: the first map */
    int tail;                  /* enum summarize_tail */
    double p_below;            /* NaN: no p-value threshold */
    char *p_key;               /* input holding the p-values ("p") */
    int64_t min_cluster_size;  /* smaller clusters are dropped */
    char *name;                /* file-name prefix; NULL: the pipeline name */
    char *atlas_labels;        /* label-name file of the atlas; NULL: found beside it */
    int naming;                /* enum summarize_naming */
};

/* Ports, in table order. */
/* SUMMARIZE_IN_MAPS is the variadic port: any named inputs (run->extra_in). */
enum { SUMMARIZE_IN_ATLAS, SUMMARIZE_IN_MAPS, SUMMARIZE_N_IN };
enum { SUMMARIZE_OUT_TABLE, SUMMARIZE_OUT_FILES, SUMMARIZE_N_OUT };

/* Columns of the cluster table: cluster, size, peak_value, peak_x, peak_y,
 * peak_z, label, peak_region, regions, size_mm3. */
#define SUM_CLUSTER_COLUMNS 10
/* Sub-peaks: local maxima more than this far (mm) from the cluster's stronger
 * listed peaks (nilearn's min_distance), at most SUM_MAX_SUBPEAKS per cluster
 * (nilearn's get_clusters_table reports the peak and at most three). */
#define SUM_PEAK_DISTANCE_MM 8.0
#define SUM_MAX_SUBPEAKS 3

extern const struct nf_node_type nf_node_summarize;

#endif
