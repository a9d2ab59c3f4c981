/* SPDX-License-Identifier: Apache-2.0 */
/* chi_square.h - Pearson's chi-square goodness of fit, for tests that check a sampler's
 * draws against exact probabilities: the statistic (small bins pooled) and its p-value
 * through the regularized incomplete gamma function. O(V) and O(iterations), no
 * allocation; double precision throughout.
 */
#ifndef DERAS_TEST_CHI_SQUARE_H
#define DERAS_TEST_CHI_SQUARE_H

#include <stdint.h>

/* Regularized upper incomplete gamma Q(a, x): the p-value of a chi-square statistic s with
 * df degrees of freedom is gamma_q(df / 2.0, s / 2.0). */
double gamma_q(double a, double x);

/* Pearson's statistic of counts against probabilities p (n draws over V bins); bins
 * expecting fewer than 5 are pooled, *df gets the degrees of freedom. A count in a bin of
 * probability 0 makes the statistic infinite. */
double chi_square(const uint64_t *counts, const double *p, int V, uint64_t n, int *df);

#endif
