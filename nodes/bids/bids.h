/* bids.h — parameters and ports of the `bids` node (nodes/bids/bids.c),
 * exposed so that unit tests can fill them without a pipeline file. */
#ifndef NF_NODE_BIDS_H
#define NF_NODE_BIDS_H

#include "node.h"

struct bids_params {
    char *root;                     /* the BIDS dataset */
    char *derivatives;              /* fMRIPrep folder, or NULL */
    struct nf_str_list subjects;    /* labels or globs; empty: all */
    struct nf_str_list sessions;
    char *task;                     /* NULL: every task */
    struct nf_str_list runs;
    char *space;                    /* NULL: the one space there is */
    char *desc;                     /* derivatives' desc of the bold ("preproc") */
    struct nf_str_list require;     /* of events, confounds, mask */
};

enum { BIDS_N_IN = 0 };
/* The per-run collections come first (BIDS_N_RUN_OUT of them), then the
 * dataset's participants table. */
enum { BIDS_OUT_BOLD, BIDS_OUT_MASK, BIDS_OUT_EVENTS, BIDS_OUT_CONFOUNDS, BIDS_OUT_PARTICIPANTS, BIDS_N_OUT };
enum { BIDS_N_RUN_OUT = BIDS_OUT_PARTICIPANTS };

extern const struct nf_node_type nf_node_bids;

#endif
