/* SPDX-License-Identifier: Apache-2.0 */
/* filters.h - what filters.c and filters_seq.c share: the filters over sequences, called
 * from the dispatch (filter_call, render.h), and the argument helpers. */
#ifndef DERAS_TEMPLATE_FILTERS_H
#define DERAS_TEMPLATE_FILTERS_H

#include "render.h"

/* The bound argument i, or NULL when not given. */
static inline const tv *filter_arg(const tv *slot, int i)
{
    return slot[i].type != TV_EMPTY ? &slot[i] : NULL;
}
static inline bool is_true(const tv *v) { return v && tv_truthy(v); }

/* An empty list, marked as a generator when gen. */
int filter_new_list(struct rx *rx, bool gen, tv *out);
/* sort(reverse, case_sensitive, attribute); pairs: sort (key, value) tuples by item pos. */
int filter_sort(struct rx *rx, const tv *v, const tv *reverse, const tv *cs, const tv *attr,
                bool pairs, int pos, tv *out);
int filter_dictsort(struct rx *rx, const tv *v, tv *slot, tv *out); /* slot: cs, by, reverse */
int filter_minmax(struct rx *rx, const tv *v, const tv *cs, const tv *attr, bool max, tv *out);
int filter_unique(struct rx *rx, const tv *v, const tv *cs, const tv *attr, tv *out);
/* select / reject (attr false) and selectattr / rejectattr (attr true); keep: select. */
int filter_select(struct rx *rx, const tv *v, const struct args *a, bool attr, bool keep, tv *out);
int filter_map(struct rx *rx, struct frame *f, const tv *v, const struct args *a, tv *out);
int filter_join(struct rx *rx, const tv *v, const tv *d, const tv *attr, tv *out);
int filter_end(struct rx *rx, const tv *v, bool last, tv *out); /* first / last */
int filter_sum(struct rx *rx, const tv *v, const tv *attr, const tv *start, tv *out);

#endif
