/* distributions.h — Student's t upper tail, normal upper quantile (distributions.c). */
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
/* The standard normal upper quantile isf(p), 0 < p <= 0.5. */
double nf_normal_isf(double p);

#endif
