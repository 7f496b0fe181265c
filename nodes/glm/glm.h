/* glm.h — parameters and ports of the `glm` node (nodes/glm/glm.c), and the
 * pieces unit tests reach directly: the contrast parser (glm_contrast.c) and
 * the statistics of a t contrast (glm_stats.c). */
#ifndef NF_NODE_GLM_H
#define NF_NODE_GLM_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"

enum glm_noise { GLM_NOISE_OLS, GLM_NOISE_AR1 };
enum glm_scaling { GLM_SCALING_NONE, GLM_SCALING_MEAN };

struct glm_params {
    int noise;                      /* enum glm_noise */
    int scaling;                    /* enum glm_scaling */
    struct nf_str_list contrasts;   /* "name = expression" or "name = [w1, w2, ...]" */
};

enum { GLM_IN_X, GLM_IN_Y, GLM_N_IN };
enum { GLM_OUT_EFFECT, GLM_OUT_VARIANCE, GLM_OUT_T, GLM_OUT_Z, GLM_OUT_P, GLM_OUT_BETAS,
       GLM_OUT_RESIDUAL_VARIANCE, GLM_N_OUT };

extern const struct nf_node_type nf_node_glm;

/* ---- contrasts (glm_contrast.c) ----
 * A contrast is written "name = expression": the expression combines the
 * design's column names with +, -, numbers times names (2*A, A*2, A/2) and
 * parentheses ("faces - houses", "2*a - (b + c)"; a name may end in a
 * bracketed level, "group[patient]", as group_design names indicator
 * columns), or lists weights in column
 * order ("[1, -1, 0]", zeros added up to the number of columns, as nilearn
 * pads a short vector). */

/* Split "name = expression": *name and *expr owned (nf_malloc), both trimmed.
 * 0, NF_EINVAL with the reason in why, or NF_ENOMEM. */
int glm_contrast_split(const char *text, char **name, char **expr, char *why, size_t why_size);
/* The weights of expression `expr` over the k columns `cols` (w: k values).
 * cols NULL (k ignored): check the syntax only, any name accepted.
 * 0, NF_EINVAL with the reason in why (an unknown name lists the
 * columns), or NF_ENOMEM. */
int glm_contrast_weights(const char *expr, const char *const *cols, size_t k, double *w, char *why,
                         size_t why_size);

/* ---- statistics (glm_stats.c) ---- */

/* nilearn's p and z of a t statistic: p = t.sf(t, dof) and z as
 * nilearn.glm._utils.z_score makes it from t.sf and t.cdf (each clipped to
 * [1e-300, 1 - 1e-16]). */
void glm_t_p_z(double t, double dof, double *p, double *z);
/* The same with the t distribution's constants computed once (core/distributions.h). */
struct nf_t_tail;
void glm_t_p_z_tail(const struct nf_t_tail *tt, double t, double *p, double *z);
/* Eigenvalues (in no particular order) and eigenvectors of the symmetric k x k matrix A
 * (row-major, destroyed) by cyclic Jacobi rotations: A = Q diag(lambda) Qᵀ
 * with Q's columns the eigenvectors (Q row-major, k x k). */
void glm_sym_eigen(double *A, int64_t k, double *lambda, double *Q);

/* ---- cost (glm_cost.c) ---- */
int nf_glm_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out, struct nf_cost *c);

#endif
