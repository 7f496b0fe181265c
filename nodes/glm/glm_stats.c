/* glm_stats.c — the numbers of the `glm` node that are not GEMMs: a t
 * statistic's p and nilearn's z, and a Jacobi eigendecomposition of the
 * small k x k normal matrices (one per AR(1) bin).
 *
 * The t tail and the normal quantile are the engine's (core/distributions.c:
 * the incomplete beta's continued fraction, full relative precision down to
 * p = 1e-300 where nilearn's clipping takes over; Acklam's approximation
 * polished by Halley steps), so glm, fixed_effects and permute agree to the
 * last bit. Jacobi rotations are used for the eigendecomposition because
 * they find small eigenvalues to high relative accuracy, which decides
 * whether a design is rank-deficient.
 */
#include <math.h>
#include <stdbool.h>

#include "node.h"
#include "core/distributions.h"

#include "glm.h"

void glm_t_p_z(double t, double dof, double *p, double *z)
{
    struct nf_t_tail tt;
    nf_t_tail_init(&tt, dof);
    glm_t_p_z_tail(&tt, t, p, z);
}

void glm_t_p_z_tail(const struct nf_t_tail *tt, double t, double *p, double *z)
{
    if (isnan(t)) {
        *p = *z = NAN;
        return;
    }
    /* nilearn: z = isf(sf(t)) where that is >= 0, else ppf(cdf(t)); both
     * probabilities clipped to [1e-300, 1 - 1e-16]. cdf(t) = sf(-t) and
     * sf(|t|) <= 0.5, so only the lower clip can bite:
     * z = sign(t) isf(max(sf(|t|), 1e-300)). */
    double tail = nf_t_tail_sf(tt, fabs(t));
    *p = t < 0 ? 1 - tail : tail;
    double zz = nf_normal_isf(tail < 1e-300 ? 1e-300 : tail);
    *z = t < 0 ? -zz : zz;
}

void glm_sym_eigen(double *A, int64_t k, double *lambda, double *Q)
{
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
            Q[i * k + j] = i == j;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, diag = 0;
        for (int64_t i = 0; i < k; i++) {
            diag += A[i * k + i] * A[i * k + i];
            for (int64_t j = i + 1; j < k; j++)
                off += A[i * k + j] * A[i * k + j];
        }
        if (off <= 1e-32 * diag || off == 0)
            break;
        for (int64_t p = 0; p < k; p++)
            for (int64_t q = p + 1; q < k; q++) {
                double apq = A[p * k + q];
                if (apq == 0)
                    continue;
                double theta = (A[q * k + q] - A[p * k + p]) / (2 * apq);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t i = 0; i < k; i++) {   /* A P */
                    double aip = A[i * k + p], aiq = A[i * k + q];
                    A[i * k + p] = c * aip - s * aiq;
                    A[i * k + q] = s * aip + c * aiq;
                }
                for (int64_t j = 0; j < k; j++) {   /* Pᵀ (A P) */
                    double apj = A[p * k + j], aqj = A[q * k + j];
                    A[p * k + j] = c * apj - s * aqj;
                    A[q * k + j] = s * apj + c * aqj;
                }
                for (int64_t i = 0; i < k; i++) {   /* Q P */
                    double qip = Q[i * k + p], qiq = Q[i * k + q];
                    Q[i * k + p] = c * qip - s * qiq;
                    Q[i * k + q] = s * qip + c * qiq;
                }
            }
    }
    for (int64_t i = 0; i < k; i++)
        lambda[i] = A[i * k + i];
}
