/* SPDX-License-Identifier: Apache-2.0 */
/* ref_attention.c - the dense attention reference of ref_attention.h. */
#include "ref_attention.h"

#include <math.h>
#include <stdlib.h>

void ref_attention(const ref_attn_shape *s, const float *q, size_t q_stride, const float *k,
                   const float *v, int ctx, int n_q, double *out)
{
    const int hd = s->head_dim;
    const int rep = s->q_per_kv ? s->q_per_kv : s->n_heads / s->n_kv_heads;
    double *p = malloc((size_t)ctx * sizeof(double));
    if (!p)
        abort(); /* a test's reference: nothing to recover */
    for (int i = 0; i < n_q; i++) {
        const int pos = ctx - n_q + i;
        const int lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
        for (int h = 0; h < s->n_heads; h++) {
            const int g = (s->q_head0 + h) / rep - s->q_head0 / rep;
            const float *qi = q + (size_t)i * q_stride + (size_t)h * hd;
            double mx = -INFINITY, z = 0;
            for (int t = lo; t <= pos; t++) {
                const float *kt = k + ((size_t)t * s->n_kv_heads + g) * hd;
                double sc = 0;
                for (int d = 0; d < hd; d++)
                    sc += (double)qi[d] * kt[d];
                p[t] = sc / sqrt((double)hd);
                mx = p[t] > mx ? p[t] : mx;
            }
            for (int t = lo; t <= pos; t++)
                z += (p[t] = exp(p[t] - mx));
            double *o = out + ((size_t)i * s->n_heads + h) * hd;
            for (int d = 0; d < hd; d++) {
                double acc = 0;
                for (int t = lo; t <= pos; t++)
                    acc += p[t] * v[((size_t)t * s->n_kv_heads + g) * hd + d];
                o[d] = acc / z;
            }
        }
    }
    free(p);
}
