/* fixed_effects.h — parameters, ports and the arithmetic of the
 * `fixed_effects` node (nodes/fixed_effects/fixed_effects.c), exposed so that
 * unit tests can check them without a pipeline. */
#ifndef NF_NODE_FIXED_EFFECTS_H
#define NF_NODE_FIXED_EFFECTS_H

#include <stdbool.h>
#include <stddef.h>

#include "node.h"

struct fixed_effects_params {
    bool precision_weighted;   /* weight runs by inverse variance (nilearn default: false) */
    double dof;                /* degrees of freedom of each run's model (nilearn: 100) */
};

enum { FIXED_EFFECTS_IN_EFFECT, FIXED_EFFECTS_IN_VARIANCE, FIXED_EFFECTS_N_IN };
enum { FIXED_EFFECTS_OUT_EFFECT, FIXED_EFFECTS_OUT_VARIANCE, FIXED_EFFECTS_OUT_T, FIXED_EFFECTS_OUT_Z,
       FIXED_EFFECTS_N_OUT };

/* One voxel of one contrast over n runs, as nilearn 0.14's
 * _compute_fixed_effects_params and Contrast.z_score: variances floored at
 * 1e-16; t = effect / sqrt(max(variance, 1e-50)); z from Student's t with
 * min(dof_total, 1e10) degrees of freedom through its p-value (clipped to
 * [1e-300, 1 - 1e-16]), the lower tail for negative t. */
void fixed_effects_combine(const double *effect, const double *variance, size_t n, bool precision_weighted,
                           double dof_total, double *out_effect, double *out_variance, double *out_t,
                           double *out_z);
/* The group of a run's label: "sub-01" of "sub-01_task-x_run-1", and
 * "sub-01_ses-2" of "sub-01_ses-2_task-x_run-1". Owned; NULL when the label
 * does not start with a subject entity (or out of memory: *oom). */
char *fixed_effects_group(const char *label, bool *oom);
/* The label of a group's combined maps: the group ("sub-01") followed by the
 * entities after it that every member's label has, the run excepted:
 * sub-01_task-x_run-1_space-MNI and sub-01_task-x_run-2_space-MNI give
 * sub-01_task-x_space-MNI. Owned; NULL when out of memory. */
char *fixed_effects_group_label(const char *group, const char *const *members, size_t n);

extern const struct nf_node_type nf_node_fixed_effects;

#endif
