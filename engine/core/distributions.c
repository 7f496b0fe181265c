/* distributions.c — Student's t and F upper tails, the F and normal upper
 * quantiles, in double precision without a statistics library.
 *
 * Nodes turn statistics into p-values and z scores the way scipy does
 * (fixed_effects' z, permute's cluster_p thresholds on t and F): one implementation of
 * each, so that the nodes agree with one another to the last bit.
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>

#include "distributions.h"

/* The log-beta term of the fraction's front for (a, b) and for the swapped
 * pair, added in the order nf_t_sf always added them. */
void nf_t_tail_init(struct nf_t_tail *tt, double dof)
{
    const double a = dof / 2, b = 0.5;
    tt->dof = dof;
    tt->log_beta[0] = lgamma(a + b) - lgamma(a) - lgamma(b);
    tt->log_beta[1] = lgamma(b + a) - lgamma(b) - lgamma(a);
}

double nf_t_sf(double t, double dof)
{
    struct nf_t_tail tt;
    nf_t_tail_init(&tt, dof);
    return nf_t_tail_sf(&tt, t);
}

/* I_x(a, b), the regularised incomplete beta function, by its continued
 * fraction (modified Lentz), for x below (a + 1) / (a + b + 2) where the
 * fraction converges fast; log_beta = lgamma(a + b) - lgamma(a) - lgamma(b).
 * The callers swap a and b (and use 1 - x) above that point. */
static double beta_fraction(double a, double b, double x, double log_beta)
{
    double front = exp(log_beta + a * log(x) + b * log1p(-x)) / a;
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    d = 1 / (fabs(d) < tiny ? tiny : d);
    double f = d;
    for (int m = 1; m < 1000; m++) {
        double num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
        for (int half = 0; half < 2; half++) {
            d = 1 + num * d;
            d = 1 / (fabs(d) < tiny ? tiny : d);
            c = 1 + num / c;
            c = fabs(c) < tiny ? tiny : c;
            f *= d * c;
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
        }
        if (fabs(d * c - 1) < 1e-16)
            break;
    }
    return front * f;
}

/* P(T > t) for t >= 0 through the regularised incomplete beta function
 * I_x(dof/2, 1/2), x = dof / (dof + t^2). */
double nf_t_tail_sf(const struct nf_t_tail *tt, double t)
{
    const double dof = tt->dof;
    double a = dof / 2, b = 0.5, x = dof / (dof + t * t);
    bool swap = x > (a + 1) / (a + b + 2);   /* the fraction converges fast below */
    if (swap) {
        double s = a;
        a = b;
        b = s;
        x = 1 - x;
    }
    if (x <= 0)
        return swap ? 0.5 : 0.0;
    double I = beta_fraction(a, b, x, tt->log_beta[swap]);
    return 0.5 * (swap ? 1 - I : I);
}

/* P(F > f) = I_x(d2/2, d1/2), x = d2 / (d2 + d1 f); above the fraction's
 * point 1 - I_{1-x}(d1/2, d2/2), 1 - x = d1 f / (d2 + d1 f) computed as
 * such (no cancellation for small f). */
double nf_f_sf(double f, double d1, double d2)
{
    if (!(f > 0))
        return 1.0;
    if (isinf(f))
        return 0.0;
    double a = d2 / 2, b = d1 / 2, den = d2 + d1 * f;
    double x = d2 / den, x1 = d1 * f / den;
    double log_beta = lgamma(a + b) - lgamma(a) - lgamma(b);
    if (x > (a + 1) / (a + b + 2))
        return 1 - beta_fraction(b, a, x1, log_beta);
    if (x <= 0)
        return 0.0;
    return beta_fraction(a, b, x, log_beta);
}

/* Bisection on f: P(F > f) falls monotonically from 1 at f = 0, so the root
 * is bracketed once the upper end has been doubled past it; halved until the
 * bracket is a few ulps wide or its midpoint is one of its ends (a quantile
 * near 0, where a relative width is never reached). */
double nf_f_isf(double p, double d1, double d2)
{
    double lo = 0, hi = 1;
    while (nf_f_sf(hi, d1, d2) > p && hi < 1e300)
        hi *= 2;
    while (hi - lo > 4 * DBL_EPSILON * hi) {
        double mid = lo + (hi - lo) / 2;
        if (mid <= lo || mid >= hi)
            break;
        if (nf_f_sf(mid, d1, d2) > p)
            lo = mid;
        else
            hi = mid;
    }
    return lo + (hi - lo) / 2;
}

/* The standard normal upper quantile isf(p), 0 < p <= 0.5: Acklam's rational
 * approximation refined by two Halley steps on erfc (relative error near
 * double precision). */
double nf_normal_isf(double p)
{
    static const double a[] = { -3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00 };
    static const double b[] = { -5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                6.680131188771972e+01, -1.328068155288572e+01 };
    static const double c[] = { -7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00 };
    static const double d[] = { 7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                3.754408661907416e+00 };
    double x;   /* the lower quantile of p: negative */
    if (p < 0.02425) {
        double q = sqrt(-2 * log(p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else {
        double q = p - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    }
    for (int step = 0; step < 2; step++) {
        double e = 0.5 * erfc(-x / sqrt(2)) - p;
        double u = e * sqrt(2 * M_PI) * exp(x * x / 2);
        x = x - u / (1 + x * u / 2);
    }
    return -x;
}
