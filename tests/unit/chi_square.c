/* SPDX-License-Identifier: Apache-2.0 */
/* chi_square.c - Pearson's chi-square test for the sampling tests (see chi_square.h). */
#include "chi_square.h"

#include <math.h>

/* Regularized upper incomplete gamma Q(a, x): series below a + 1, continued fraction
 * (modified Lentz) above, as in Numerical Recipes. */
double gamma_q(double a, double x)
{
    if (x <= 0)
        return 1.0;
    double lg = lgamma(a);
    if (x < a + 1) {
        double sum = 1.0 / a, term = sum;
        for (int n = 1; n < 10000; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-15)
                break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - lg);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < 1e-300 ? 1e-300 : d;
        c = b + an / c;
        c = fabs(c) < 1e-300 ? 1e-300 : c;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15)
            break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

/* Pearson's statistic of counts against probabilities p (n draws); bins expecting fewer
 * than 5 are pooled. A count in a bin of probability 0 makes the statistic infinite. */
double chi_square(const uint64_t *counts, const double *p, int V, uint64_t n, int *df)
{
    double stat = 0, pool_e = 0, pool_o = 0;
    int bins = 0;
    for (int i = 0; i < V; i++) {
        double e = p[i] * (double)n;
        if (e <= 0 && counts[i] > 0)
            return INFINITY;
        if (e < 5) {
            pool_e += e;
            pool_o += (double)counts[i];
            continue;
        }
        stat += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
        bins++;
    }
    if (pool_e > 0) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    *df = bins - 1;
    return stat;
}
