/* distributions.h — Student's t and F upper tails, F and normal upper quantiles (distributions.c). */
#ifndef NF_DISTRIBUTIONS_H
#define NF_DISTRIBUTIONS_H

/* P(T > t) for t >= 0, T Student's t with dof degrees of freedom (relative
 * error near double precision: continued fraction of the incomplete beta). */
double nf_t_sf(double t, double dof);
/* The same for many t of one dof: the log-beta terms (three lgamma calls)
 * computed once by nf_t_tail_init; nf_t_tail_sf(tt, t) == nf_t_sf(t, dof)
 * to the bit. */
struct nf_t_tail {
    double dof;
    double log_beta[2];   /* lgamma(a + b) - lgamma(a) - lgamma(b): (a, b) = (dof/2, 1/2), then swapped */
};
void nf_t_tail_init(struct nf_t_tail *tt, double dof);
double nf_t_tail_sf(const struct nf_t_tail *tt, double t);
/* P(F > f) for F Snedecor's F with (d1, d2) degrees of freedom (the same
 * incomplete beta fraction as nf_t_sf; 1 for f <= 0). Near double precision
 * for degrees of freedom up to thousands; the lgamma differences lose about
 * dof x 1e-16 relative beyond (1e-10 at 1e6). */
double nf_f_sf(double f, double d1, double d2);
/* The F upper quantile: f with P(F > f) = p, 0 < p < 1, to the last bits of
 * a double (bisection on nf_f_sf). */
double nf_f_isf(double p, double d1, double d2);
/* The standard normal upper quantile isf(p), 0 < p <= 0.5. */
double nf_normal_isf(double p);

#endif
