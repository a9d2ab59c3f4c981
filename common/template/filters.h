/* SPDX-License-Identifier: Apache-2.0 */
/* filters.h - what filters.c and filters_seq.c share: the filters over sequences, called
 * from the dispatch (filter_call, render.h), and the argument helpers. */
#ifndef DERAS_TEMPLATE_FILTERS_H
#define DERAS_TEMPLATE_FILTERS_H

#include "render.h"

/* The bound argument i, or NULL when not given. */
static inline const tv_t *filter_arg(const tv_t *slot, int i)
{
    return slot[i].type != TV_EMPTY ? &slot[i] : NULL;
}
static inline bool is_true(const tv_t *v) { return v && tv_truthy(v); }

/* An empty list, marked as a generator when gen. */
int filter_new_list(rx_t *rx, bool gen, tv_t *out);
/* sort(reverse, case_sensitive, attribute); pairs: sort (key, value) tuples by item pos. */
int filter_sort(rx_t *rx, const tv_t *v, const tv_t *reverse, const tv_t *cs, const tv_t *attr,
                bool pairs, int pos, tv_t *out);
int filter_dictsort(rx_t *rx, const tv_t *v, tv_t *slot, tv_t *out); /* slot: cs, by, reverse */
int filter_minmax(rx_t *rx, const tv_t *v, const tv_t *cs, const tv_t *attr, bool max, tv_t *out);
int filter_unique(rx_t *rx, const tv_t *v, const tv_t *cs, const tv_t *attr, tv_t *out);
/* select / reject (attr false) and selectattr / rejectattr (attr true); keep: select. */
int filter_select(rx_t *rx, const tv_t *v, const args_t *a, bool attr, bool keep, tv_t *out);
int filter_map(rx_t *rx, frame_t *f, const tv_t *v, const args_t *a, tv_t *out);
int filter_join(rx_t *rx, const tv_t *v, const tv_t *d, const tv_t *attr, tv_t *out);
int filter_end(rx_t *rx, const tv_t *v, bool last, tv_t *out); /* first / last */
int filter_sum(rx_t *rx, const tv_t *v, const tv_t *attr, const tv_t *start, tv_t *out);

#endif
