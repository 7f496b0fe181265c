/* distributions.h — Student's t upper tail, normal upper quantile (distributions.c). */
#ifndef NF_DISTRIBUTIONS_H
#define NF_DISTRIBUTIONS_H

/* P(T > t) for t >= 0, T Student's t with dof degrees of freedom (relative
 * error near double precision: continued fraction of the incomplete beta). */
double nf_t_sf(double t, double dof);
/* The standard normal upper quantile isf(p), 0 < p <= 0.5. */
double nf_normal_isf(double p);

#endif
