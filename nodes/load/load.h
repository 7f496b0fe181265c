/* load.h — the parameters of the `load` node (nodes/load/load.c), shared with the
 * unit tests, which fill them by hand instead of through YAML. */
#ifndef NF_NODE_LOAD_H
#define NF_NODE_LOAD_H

#include "node.h"

struct load_params {
    char *path;                  /* NF_P_PATH, already resolved; may hold a glob */
    struct nf_str_list columns;  /* NF_P_STR_LIST: table columns to keep (n = 0: all) */
    int lazy;                    /* NF_P_ENUM: enum load_lazy */
};

enum load_lazy { LOAD_LAZY_AUTO, LOAD_LAZY_TRUE, LOAD_LAZY_FALSE };

enum { LOAD_N_IN = 0 };
enum { LOAD_OUT_DATA, LOAD_N_OUT };

extern const struct nf_node_type nf_node_load;

#endif
