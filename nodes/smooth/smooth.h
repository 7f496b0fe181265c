/* smooth.h — parameters and ports of the `smooth` node (nodes/smooth/smooth.c),
 * and its Gaussian kernel, exposed so that unit tests can fill them without a
 * pipeline file and check the kernel's width against their own formula. */
#ifndef NF_NODE_SMOOTH_H
#define NF_NODE_SMOOTH_H

#include <stdint.h>

#include "node.h"

struct smooth_params {
    struct nf_num_list fwhm;     /* mm: one value (isotropic) or one per axis i, j, k */
};

enum { SMOOTH_IN_DATA, SMOOTH_N_IN };
enum { SMOOTH_OUT_DATA, SMOOTH_N_OUT };

/* The standard deviation in voxels along each axis for `fwhm` (mm, one per
 * axis): fwhm / (sqrt(8 ln 2) * voxel size), the voxel size being the norm of
 * the affine's column (nilearn's smooth_array). 0 means "not smoothed". */
void nf_smooth_sigmas(const struct nf_grid *grid, const double fwhm[3], double sigma[3]);

extern const struct nf_node_type nf_node_smooth;

#endif
