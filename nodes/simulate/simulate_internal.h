/* simulate_internal.h — what simulate.c shares with simulate_bids.c (the
 * BIDS + fMRIPrep-like task data set of `bids:`). */
#ifndef NF_NODE_SIMULATE_INTERNAL_H
#define NF_NODE_SIMULATE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"
#include "simulate.h"

#define SIM_TR 2.0                   /* seconds, recorded in the volumes and sidecars */
#define SIM_BASELINE 100.0

/* Gaussian draws in pairs (Box-Muller uses both values: twice as fast as the
 * one-value nf_rand_normal, which matters for millions of voxels); one
 * stream per subject (or run) so that adding one leaves the others unchanged. */
struct sim_normal {
    uint64_t state;
    double spare;
    bool has_spare;
};
void sim_normal_init(struct sim_normal *ns, uint64_t seed, uint64_t stream);
double sim_normal_next(struct sim_normal *ns);

void sim_voxel_to_world(const struct nf_grid *g, double i, double j, double k, double xyz[3]);
/* The in-mask columns whose voxel centre lies within the sphere; returns their count. */
int64_t sim_roi_columns(const struct nf_geom *geom, const double centre[3], double radius, int64_t *roi);
/* "sub-01" (wider for 100+ subjects). */
char *sim_subject_label(int64_t s, int64_t subjects);
int sim_write_text(const char *dir, const char *name, const char *text, struct nf_error *err);

/* The folder simulate writes (write: or bids:) must be new, empty, or one it
 * made (it holds NF_SIMULATE_MARKER), unless p->overwrite: else an error at
 * the node that names the folder and the way out. Never writes. */
int sim_folder_check(const struct simulate_params *p, const char *dir, const struct nf_node_inst *node,
                     struct nf_error *err);
/* Before writing the subjects `labels` into dir: if simulate made it, the
 * subject folders its marker lists (and their fMRIPrep-like derivatives) are
 * removed, so that no subject of an earlier, larger data set is left, and the
 * marker then lists the new ones; a folder simulate made only now gets the
 * marker too; someone else's folder (overwrite: true) is written into as it
 * is, unmarked. */
int sim_folder_begin(const struct simulate_params *p, const char *dir, char *const *labels, size_t n,
                     struct nf_error *err);

/* Events of the task: how many one run of `images` volumes holds. */
int64_t sim_bids_event_count(int64_t images);
/* The task data set of `bids:`: fills out[SIMULATE_OUT_DATA] (the runs),
 * out[SIMULATE_OUT_X] (run 1's events), out[SIMULATE_OUT_Y] (run 1's
 * HRF-convolved regressors) and out[SIMULATE_OUT_TRUTH], and writes the
 * files under p->bids. */
int sim_bids_run(struct nf_run *run, const struct nf_geom *geom, const int64_t *roi, int64_t n_roi,
                 uint64_t seed, struct nf_value **out);

#endif
