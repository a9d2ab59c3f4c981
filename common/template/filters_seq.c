/* SPDX-License-Identifier: Apache-2.0 */
/* filters_seq.c - the filters over sequences, as jinja2/filters.py defines them: sort,
 * dictsort, unique, min, max (strings compared case-insensitively unless case_sensitive),
 * select, reject, selectattr, rejectattr, map (by attribute or by filter), join, first,
 * last, sum. Attributes are looked up as Jinja2's make_attrgetter does ("a.b.0", item by
 * item through the sandbox's getitem). Filters Jinja2 implements as generators return a
 * list marked VIEW_GEN (value.h). Sorts are stable merge sorts on keys computed once.
 * Cost: one step per element, n log n for sorts.
 */
#include "filters.h"

#include "builtins.h"
#include "common/base/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ARG(i) filter_arg(slot, i)

/* An empty list marked as a generator (or a plain list). */
int filter_new_list(struct rx *rx, bool gen, tv *out)
{
    int st = tv_list_new(rx, TV_LIST, 0, out);
    if (!st && gen)
        out->u.l->view = VIEW_GEN;
    return st;
}


/* Jinja2's ignore_case: strings lowered, anything else as it is. */
static int fold(struct rx *rx, const tv *v, bool lower, tv *out)
{
    if (lower && v->type == TV_STR)
        return str_case(rx, v, CASE_LOWER, out);
    *out = tv_ref(*v);
    return 0;
}

/* make_attrgetter: "a.b.0" looked up item by item with the environment's getitem. */
static int attr_get(struct rx *rx, const tv *item, const tv *attr, const tv *dflt, bool lower,
                    tv *out)
{
    tv cur = tv_ref(*item), next;
    int st = 0;
    if (attr->type != TV_STR) {
        st = tv_getitem(rx, &cur, attr, &next);
        tv_release(rx, &cur);
        cur = next;
    } else {
        const char *s = tv_sp(attr), *end = s + tv_sn(attr);
        while (!st && s <= end) {
            const char *dot = memchr(s, '.', (size_t)(end - s));
            size_t len = dot ? (size_t)(dot - s) : (size_t)(end - s);
            bool digits = len > 0;
            int64_t iv = 0;
            for (size_t i = 0; i < len && digits; i++) {
                digits = s[i] >= '0' && s[i] <= '9';
                iv = iv * 10 + (s[i] - '0');
            }
            tv key;
            if (digits)
                key = tv_int(iv);
            else if ((st = tv_str(rx, s, len, &key)))
                break;
            st = tv_getitem(rx, &cur, &key, &next);
            tv_release(rx, &key);
            tv_release(rx, &cur);
            if (st)
                return st;
            cur = next;
            if (dflt && cur.type == TV_UNDEF) {
                cur = tv_ref(*dflt);
            }
            if (!dot)
                break;
            s = dot + 1;
        }
    }
    if (st) {
        tv_release(rx, &cur);
        return st;
    }
    st = fold(rx, &cur, lower, out);
    tv_release(rx, &cur);
    return st;
}

/* --- sorting: keys computed once, then a stable merge sort of indices --- */

typedef struct sort_ctx {
    tv *keys;
    bool reverse;
} sort_ctx;

static int idx_lt(void *ctx, const void *a, const void *b, bool *lt)
{
    sort_ctx *c = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    return c->reverse ? tv_lt(&c->keys[j], &c->keys[i], lt) : tv_lt(&c->keys[i], &c->keys[j], lt);
}

/* Sort `items` (a list, not shared) by `keys` in place. */
static int sort_by(struct rx *rx, tv *items, tv *keys, bool reverse)
{
    size_t n = items->u.l->n;
    int st = rx_step(rx, n * (1 + (n > 1 ? (uint64_t)log2((double)n) : 0)));
    if (st || n < 2)
        return st;
    size_t *order = tv_alloc(rx, n * sizeof *order);
    tv *tmp = order ? tv_alloc(rx, n * sizeof *tmp) : NULL;
    if (!tmp) {
        tv_free(rx, order, n * sizeof *order);
        return DERAS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    sort_ctx c = {keys, reverse};
    if (!(st = tv_sort(order, n, sizeof *order, idx_lt, &c))) {
        for (size_t i = 0; i < n; i++)
            tmp[i] = items->u.l->v[order[i]];
        memcpy(items->u.l->v, tmp, n * sizeof *tmp);
    }
    tv_free(rx, tmp, n * sizeof *tmp);
    tv_free(rx, order, n * sizeof *order);
    return st;
}

static void free_keys(struct rx *rx, tv *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tv_release(rx, &keys[i]);
    tv_free(rx, keys, n * sizeof *keys);
}

/* A copy of `seq`'s items as a plain list, and each item's sort key. */
static int keyed(struct rx *rx, const tv *seq, const tv *attr, bool lower, bool pairs_by,
                 int pos, tv *list, tv **keys)
{
    tv it;
    int st = tv_iterate(rx, seq, &it);
    if (st)
        return st;
    size_t n = it.u.l->n;
    *keys = NULL;
    if ((st = tv_list_new(rx, TV_LIST, n, list))) {
        tv_release(rx, &it);
        return st;
    }
    if (n && !(*keys = tv_alloc(rx, n * sizeof **keys)))
        st = DERAS_ENOMEM;
    for (size_t i = 0; i < n && !st; i++) {
        const tv *x = &it.u.l->v[i];
        tv *k = &(*keys)[i];
        *k = (tv){0};
        if (pairs_by)
            st = fold(rx, &x->u.l->v[pos], lower, k);
        else if (attr)
            st = attr_get(rx, x, attr, NULL, lower, k);
        else
            st = fold(rx, x, lower, k);
        if (!st)
            st = tv_list_push(rx, list, tv_ref(*x));
        if (st)
            for (size_t j = i + 1; j < n; j++)
                (*keys)[j] = (tv){0};
    }
    tv_release(rx, &it);
    if (st) {
        if (*keys)
            free_keys(rx, *keys, n);
        *keys = NULL;
        tv_release(rx, list);
    }
    return st;
}

int filter_sort(struct rx *rx, const tv *v, const tv *reverse, const tv *cs, const tv *attr,
                bool dict_pairs, int pos, tv *out)
{
    tv *keys;
    int st = keyed(rx, v, attr, !is_true(cs), dict_pairs, pos, out, &keys);
    if (st)
        return st;
    size_t n = out->u.l->n;
    st = sort_by(rx, out, keys, is_true(reverse));
    if (keys)
        free_keys(rx, keys, n);
    if (st)
        tv_release(rx, out);
    return st;
}

int filter_dictsort(struct rx *rx, const tv *v, tv *slot, tv *out)
{
    if (v->type != TV_DICT)
        return deras_fail(DERAS_EFORMAT, "dictsort needs a mapping, not %s", tv_typename(v));
    int pos = 0;
    if (ARG(1)) {
        if (slot[1].type == TV_STR && !strcmp(tv_sp(&slot[1]), "value"))
            pos = 1;
        else if (!(slot[1].type == TV_STR && !strcmp(tv_sp(&slot[1]), "key")))
            return deras_fail(DERAS_EFORMAT, "You can only sort by either \"key\" or \"value\"");
    }
    tv pairs;
    int st = tv_list_new(rx, TV_LIST, v->u.d->n, &pairs);
    for (size_t i = 0; i < v->u.d->n && !st; i++) {
        tv t;
        if ((st = tv_list_new(rx, TV_TUPLE, 2, &t)))
            break;
        if (!(st = tv_list_push(rx, &t, tv_ref(v->u.d->k[i]))) &&
            !(st = tv_list_push(rx, &t, tv_ref(v->u.d->v[i]))))
            st = tv_list_push(rx, &pairs, t);
        else
            tv_release(rx, &t);
    }
    if (!st)
        st = filter_sort(rx, &pairs, ARG(2), ARG(0), NULL, true, pos, out);
    tv_release(rx, &pairs);
    return st;
}

int filter_minmax(struct rx *rx, const tv *v, const tv *cs, const tv *attr, bool max, tv *out)
{
    tv list, *keys;
    int st = keyed(rx, v, attr, !is_true(cs), false, 0, &list, &keys);
    if (st)
        return st;
    size_t n = list.u.l->n, best = 0;
    for (size_t i = 1; i < n && !st; i++) {
        bool lt = false;
        st = max ? tv_lt(&keys[best], &keys[i], &lt) : tv_lt(&keys[i], &keys[best], &lt);
        if (!st && lt)
            best = i;
    }
    if (!st)
        *out = n ? tv_ref(list.u.l->v[best]) : tv_undef(NULL, UNDEF_OTHER);
    if (keys)
        free_keys(rx, keys, n);
    tv_release(rx, &list);
    return st;
}

int filter_unique(struct rx *rx, const tv *v, const tv *cs, const tv *attr, tv *out)
{
    tv list, *keys, seen;
    int st = keyed(rx, v, attr, !is_true(cs), false, 0, &list, &keys);
    if (st)
        return st;
    size_t n = list.u.l->n;
    if (!(st = filter_new_list(rx, true, out)) && !(st = tv_dict_new(rx, TV_DICT, n, &seen))) {
        for (size_t i = 0; i < n && !st; i++) {
            if (keys[i].type == TV_LIST || keys[i].type == TV_DICT) {
                st = deras_fail(DERAS_EFORMAT, "unhashable type: '%s'", tv_typename(&keys[i]));
                break;
            }
            if (tv_dict_get(&seen, &keys[i]))
                continue;
            if (!(st = tv_dict_set(rx, &seen, tv_ref(keys[i]), tv_none())))
                st = tv_list_push(rx, out, tv_ref(list.u.l->v[i]));
        }
        tv_release(rx, &seen);
        if (st)
            tv_release(rx, out);
    }
    if (keys)
        free_keys(rx, keys, n);
    tv_release(rx, &list);
    return st;
}

/* select / reject / selectattr / rejectattr. */
int filter_select(struct rx *rx, const tv *v, const struct args *a, bool attr, bool keep, tv *out)
{
    int off = attr ? 1 : 0, test = -1;
    if (attr && a->n_pos < 1)
        return deras_fail(DERAS_EFORMAT, "Missing parameter for attribute name");
    if (a->n_pos > off) {
        if (a->pos[off].type != TV_STR)
            return deras_fail(DERAS_EFORMAT, "a test name must be a string");
        if ((test = test_find(tv_sp(&a->pos[off]))) < 0)
            return deras_fail(DERAS_EFORMAT, "no test named '%s'", tv_sp(&a->pos[off]));
    }
    struct args targs = {.pos = a->pos + off + 1, .n_pos = a->n_pos > off ? a->n_pos - off - 1 : 0,
                         .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
    tv it;
    int st = filter_new_list(rx, true, out);
    if (st || !tv_truthy(v))
        return st;
    if ((st = tv_iterate(rx, v, &it))) {
        tv_release(rx, out);
        return st;
    }
    for (size_t i = 0; i < it.u.l->n && !st; i++) {
        tv x;
        bool r;
        if (attr)
            st = attr_get(rx, &it.u.l->v[i], &a->pos[0], NULL, false, &x);
        else
            x = tv_ref(it.u.l->v[i]);
        if (st)
            break;
        if (test >= 0)
            st = test_call(rx, test, &x, &targs, &r);
        else
            r = tv_truthy(&x);
        tv_release(rx, &x);
        if (!st && r == keep)
            st = tv_list_push(rx, out, tv_ref(it.u.l->v[i]));
        if (!st)
            st = rx_step(rx, 1);
    }
    tv_release(rx, &it);
    if (st)
        tv_release(rx, out);
    return st;
}

int filter_map(struct rx *rx, struct frame *f, const tv *v, const struct args *a, tv *out)
{
    const tv *attribute = NULL, *dflt = NULL;
    int filter = -1;
    struct args fargs = *a;
    if (a->n_pos == 0) {
        for (int k = 0; k < a->n_kw; k++) {
            if (!strcmp(a->kw_names[k], "attribute"))
                attribute = &a->kw[k];
            else if (!strcmp(a->kw_names[k], "default"))
                dflt = &a->kw[k];
            else
                return deras_fail(DERAS_EFORMAT, "Unexpected keyword argument '%s'", a->kw_names[k]);
        }
        if (!attribute)
            return deras_fail(DERAS_EFORMAT, "map requires a filter argument");
    } else {
        if (a->pos[0].type != TV_STR || (filter = filter_find(tv_sp(&a->pos[0]))) < 0)
            return deras_fail(DERAS_EFORMAT, "no filter named '%s'",
                              a->pos[0].type == TV_STR ? tv_sp(&a->pos[0]) : "?");
        if (!filter_supported(filter))
            return deras_fail(DERAS_EUNSUPPORTED, "filter '%s' is not supported", tv_sp(&a->pos[0]));
        fargs.pos++;
        fargs.n_pos--;
    }
    tv it;
    int st = filter_new_list(rx, true, out);
    if (st || !tv_truthy(v))
        return st;
    if ((st = tv_iterate(rx, v, &it))) {
        tv_release(rx, out);
        return st;
    }
    for (size_t i = 0; i < it.u.l->n && !st; i++) {
        tv x;
        if (attribute)
            st = attr_get(rx, &it.u.l->v[i], attribute, dflt, false, &x);
        else
            st = filter_call(rx, f, filter, &it.u.l->v[i], &fargs, &x);
        if (!st)
            st = tv_list_push(rx, out, x);
    }
    tv_release(rx, &it);
    if (st)
        tv_release(rx, out);
    return st;
}

int filter_join(struct rx *rx, const tv *v, const tv *d, const tv *attr, tv *out)
{
    tv it;
    int st = tv_iterate(rx, v, &it);
    if (st)
        return st;
    sbuf b;
    tsb_init(&b, rx);
    for (size_t i = 0; i < it.u.l->n && !st; i++) {
        if (i && d)
            st = tv_print(&b, d);
        if (st)
            break;
        if (attr) {
            tv x;
            if (!(st = attr_get(rx, &it.u.l->v[i], attr, NULL, false, &x))) {
                st = tv_print(&b, &x);
                tv_release(rx, &x);
            }
        } else {
            st = tv_print(&b, &it.u.l->v[i]);
        }
    }
    tv_release(rx, &it);
    if (!st)
        st = rx_step(rx, b.len / STEP_COPY);
    return tsb_finish(&b, st, out);
}

/* First or last item of an iterable; Undefined when empty. */
int filter_end(struct rx *rx, const tv *v, bool last, tv *out)
{
    if (last && v->type == TV_LIST && v->u.l->view == VIEW_GEN) /* reversed(generator) */
        return deras_fail(DERAS_EFORMAT, "'generator' object is not reversible");
    tv it;
    int st = tv_iterate(rx, v, &it);
    if (st)
        return st;
    size_t n = it.u.l->n;
    *out = n ? tv_ref(it.u.l->v[last ? n - 1 : 0]) : tv_undef(NULL, UNDEF_OTHER);
    tv_release(rx, &it);
    return 0;
}

int filter_sum(struct rx *rx, const tv *v, const tv *attr, const tv *start, tv *out)
{
    tv it = {0}, acc = start ? tv_ref(*start) : tv_int(0);
    int st = tv_iterate(rx, v, &it);
    for (size_t i = 0; !st && i < it.u.l->n; i++) {
        tv x, r;
        if (attr)
            st = attr_get(rx, &it.u.l->v[i], attr, NULL, false, &x);
        else
            x = tv_ref(it.u.l->v[i]);
        if (!st && !(st = binop(rx, BIN_ADD, &acc, &x, &r))) {
            tv_release(rx, &acc);
            acc = r;
        }
        tv_release(rx, &x);
    }
    tv_release(rx, &it);
    if (st)
        tv_release(rx, &acc);
    else
        *out = acc;
    return st;
}
