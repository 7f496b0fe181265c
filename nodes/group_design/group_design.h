/* group_design.h — parameters and ports of the `group_design` node
 * (nodes/group_design/group_design.c), and the design builder itself, which
 * unit tests call without a pipeline. */
#ifndef NF_NODE_GROUP_DESIGN_H
#define NF_NODE_GROUP_DESIGN_H

#include <stdbool.h>
#include <stddef.h>

#include "node.h"

struct group_design_params {
    struct nf_str_list columns;       /* participants' columns that become regressors, in order */
    struct nf_str_list categorical;   /* of those, the ones coded by levels even when numeric */
    bool demean;                      /* numeric columns minus their mean over the design's rows */
    bool intercept;                   /* a first column "intercept" of ones */
    char *id_column;                  /* "participant_id" */
};

enum { GROUP_DESIGN_IN_PARTICIPANTS, GROUP_DESIGN_IN_MAPS, GROUP_DESIGN_N_IN };
enum { GROUP_DESIGN_OUT, GROUP_DESIGN_N_OUT };

extern const struct nf_node_type nf_node_group_design;

/* The design of n maps labelled labels[i] (sub-XX..., matched to the
 * participants' rows by their subject entity) from the participants table:
 * a numeric table with one row per map in the maps' order. *summary (owned,
 * may be left NULL on OOM) says how each column was coded, for the log.
 * participants_name names the table in messages (its file). Errors carry no
 * location: the node adds its own. 0, NF_EDATA / NF_EUSAGE, NF_ENOMEM. */
int group_design_build(const struct group_design_params *p, const struct nf_table *participants,
                       const char *participants_name, const char *const *labels, size_t n,
                       struct nf_value **design, char **summary, struct nf_error *err);

#endif
