/* glm_stats.c — the numbers of the `glm` node that are not GEMMs: Student's
 * t tail, the normal quantile that turns it into nilearn's z, and a Jacobi
 * eigendecomposition of the small k x k normal matrices (one per AR(1) bin).
 *
 * The t tail is the regularised incomplete beta function I_x(dof/2, 1/2),
 * x = dof / (dof + t²), by its continued fraction (modified Lentz), which
 * keeps full relative precision far into the tail (p down to 1e-300), where
 * nilearn's clipping takes over. The normal quantile is Acklam's rational
 * approximation polished by two Halley steps on erfc, good to about 1e-15
 * relative. Jacobi rotations are used for the eigendecomposition because
 * they find small eigenvalues to high relative accuracy, which decides
 * whether a design is rank-deficient.
 */
#include <math.h>
#include <stdbool.h>

#include "node.h"

#include "glm.h"

/* I_x(a, b) by its continued fraction, for x < (a + 1) / (a + b + 2). */
static double beta_fraction(double a, double b, double x)
{
    const double tiny = 1e-300;
    double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x)) / a;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    d = 1 / (fabs(d) < tiny ? tiny : d);
    double f = d;
    for (int m = 1; m < 1000; m++) {
        double num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)), delta = 1;
        for (int half = 0; half < 2; half++) {
            d = 1 + num * d;
            d = 1 / (fabs(d) < tiny ? tiny : d);
            c = 1 + num / c;
            c = fabs(c) < tiny ? tiny : c;
            delta = d * c;
            f *= delta;
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
        }
        if (fabs(delta - 1) < 1e-16)
            break;
    }
    return front * f;
}

double glm_t_sf(double t, double dof)
{
    if (isnan(t) || !(dof > 0))
        return NAN;
    if (t < 0)
        return 1 - glm_t_sf(-t, dof);
    if (isinf(t))
        return 0;
    double a = dof / 2, b = 0.5, x = dof / (dof + t * t);
    /* P(T > t) = I_x(a, b) / 2; the fraction converges fast on one side of
     * (a + 1) / (a + b + 2), the other side by I_x(a, b) = 1 - I_{1-x}(b, a) */
    if (x < (a + 1) / (a + b + 2))
        return 0.5 * beta_fraction(a, b, x);
    double one_minus_x = t * t / (dof + t * t);
    if (one_minus_x <= 0)
        return 0.5;
    return 0.5 * (1 - beta_fraction(b, a, one_minus_x));
}

/* Standard normal quantile Φ⁻¹(p), 0 < p < 1. */
static double norm_ppf(double p)
{
    static const double a[] = { -3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00 };
    static const double b[] = { -5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                6.680131188771972e+01, -1.328068155288572e+01 };
    static const double c[] = { -7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00 };
    static const double d[] = { 7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                3.754408661907416e+00 };
    double x;
    if (p < 0.02425) {
        double q = sqrt(-2 * log(p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else if (p > 1 - 0.02425) {
        double q = sqrt(-2 * log1p(-p));
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else {
        double q = p - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    }
    /* Halley steps on Φ(x) - p, Φ from erfc (accurate in both tails) */
    for (int i = 0; i < 2; i++) {
        double e = (x < 0 ? 0.5 * erfc(-x / M_SQRT2) : 1 - 0.5 * erfc(x / M_SQRT2)) - p;
        double u = e * sqrt(2 * M_PI) * exp(x * x / 2);
        x = x - u / (1 + x * u / 2);
    }
    return x;
}

double glm_norm_isf(double p)
{
    return -norm_ppf(p);
}

void glm_t_p_z(double t, double dof, double *p, double *z)
{
    if (isnan(t)) {
        *p = *z = NAN;
        return;
    }
    /* nilearn: z = isf(sf(t)) where that is >= 0, else ppf(cdf(t)); both
     * probabilities clipped to [1e-300, 1 - 1e-16]. cdf(t) = sf(-t) and
     * sf(|t|) <= 0.5, so only the lower clip can bite:
     * z = sign(t) isf(max(sf(|t|), 1e-300)). */
    double tail = glm_t_sf(fabs(t), dof);
    *p = t < 0 ? 1 - tail : tail;
    double zz = glm_norm_isf(tail < 1e-300 ? 1e-300 : tail);
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
