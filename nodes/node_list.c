/* node_list.c — the registry of node types. Adding a node: write nodes/X/X.c
 * (and whatever else it owns, in nodes/X/) ending with `const struct
 * nf_node_type nf_node_X`, add an extern line and an entry here, and the files
 * to Makefile.am. Everything else (validation, `nlflow nodes`, schema, docs)
 * follows from its tables. */
#include <stddef.h>

#include "node.h"

extern const struct nf_node_type nf_node_bids;
extern const struct nf_node_type nf_node_bootstrap;
extern const struct nf_node_type nf_node_debug_fault;
extern const struct nf_node_type nf_node_design;
extern const struct nf_node_type nf_node_glm;
extern const struct nf_node_type nf_node_fixed_effects;
extern const struct nf_node_type nf_node_group_design;
extern const struct nf_node_type nf_node_load;
extern const struct nf_node_type nf_node_mask;
extern const struct nf_node_type nf_node_moments;
extern const struct nf_node_type nf_node_permute;
extern const struct nf_node_type nf_node_predict;
extern const struct nf_node_type nf_node_report;
extern const struct nf_node_type nf_node_ridge;
extern const struct nf_node_type nf_node_select;
extern const struct nf_node_type nf_node_resample;
extern const struct nf_node_type nf_node_simulate;
extern const struct nf_node_type nf_node_smooth;
extern const struct nf_node_type nf_node_summarize;

const struct nf_node_type *const nf_node_types[] = {
    &nf_node_bids,
    &nf_node_bootstrap,
    &nf_node_design,
    &nf_node_glm,
    &nf_node_fixed_effects,
    &nf_node_group_design,
    &nf_node_load,
    &nf_node_mask,
    &nf_node_moments,
    &nf_node_permute,
    &nf_node_predict,
    &nf_node_report,
    &nf_node_ridge,
    &nf_node_select,
    &nf_node_resample,
    &nf_node_simulate,
    &nf_node_smooth,
    &nf_node_summarize,
    &nf_node_debug_fault,
    NULL,
};
