/* SPDX-License-Identifier: Apache-2.0 */
/* globals.c - the global functions of transformers' environment: Jinja2's range (capped
 * at 100000 items, as the sandbox caps it), namespace and dict, and transformers'
 * raise_exception (the template's own error, DERAS_EINVAL) and strftime_now (local time,
 * C strftime in the C locale, as Python's). Cost: O(result).
 */
#include "builtins.h"
#include "render.h"

#include "common/base/status.h"

#include <locale.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

/* Python formats dates in the C locale (it never sets LC_TIME): so does strftime_now,
 * whatever locale the process runs in. */
static pthread_once_t c_once = PTHREAD_ONCE_INIT;
static locale_t c_loc;
static void c_init(void) { c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/* dict(*args, **kwargs) and namespace(...): a mapping or pairs, then keywords. */
static int build_dict(struct rx *rx, const struct args *a, int type, tv *out)
{
    if (a->n_pos > 1)
        return deras_fail(DERAS_EFORMAT, "dict expected at most 1 argument, got %d", a->n_pos);
    int st = tv_dict_new(rx, type, 0, out);
    if (!st && a->n_pos == 1) {
        const tv *src = &a->pos[0];
        if (src->type == TV_DICT || src->type == TV_NS) {
            for (size_t i = 0; i < src->u.d->n && !st; i++)
                st = tv_dict_set(rx, out, tv_ref(src->u.d->k[i]), tv_ref(src->u.d->v[i]));
        } else {
            tv it;
            if (!(st = tv_iterate(rx, src, &it))) {
                for (size_t i = 0; i < it.u.l->n && !st; i++) {
                    const tv *pair = &it.u.l->v[i];
                    if (!tv_is_seq(pair) || pair->u.l->n != 2)
                        st = deras_fail(DERAS_EFORMAT, "dictionary update sequence element #%zu "
                                        "has the wrong length", i);
                    else
                        st = tv_dict_set(rx, out, tv_ref(pair->u.l->v[0]), tv_ref(pair->u.l->v[1]));
                }
                tv_release(rx, &it);
            }
        }
    }
    for (int k = 0; k < a->n_kw && !st; k++) {
        tv key;
        if (!(st = tv_str(rx, a->kw_names[k], strlen(a->kw_names[k]), &key)))
            st = tv_dict_set(rx, out, key, tv_ref(a->kw[k]));
    }
    if (!st && type == TV_NS)
        st = rx_track_ns(rx, out);
    if (st)
        tv_release(rx, out);
    return st;
}

static int range(struct rx *rx, const struct args *a, tv *out)
{
    int64_t v[3] = {0, 0, 1};
    if (a->n_kw || a->n_pos < 1 || a->n_pos > 3)
        return deras_fail(DERAS_EFORMAT, "range expected 1 to 3 integer arguments");
    for (int i = 0; i < a->n_pos; i++) {
        const tv *x = &a->pos[i];
        if (x->type != TV_INT && x->type != TV_BOOL)
            return x->type == TV_UNDEF ? undef_error(x)
                   : deras_fail(DERAS_EFORMAT, "'%s' object cannot be interpreted as an integer",
                                tv_typename(x));
        v[a->n_pos == 1 ? 1 : i] = x->type == TV_INT ? x->u.i : x->u.b;
    }
    int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0)
        return deras_fail(DERAS_EFORMAT, "range() arg 3 must not be zero");
    __int128 span = step > 0 ? (__int128)stop - start : (__int128)start - stop;
    __int128 n = span <= 0 ? 0 : (span + (step > 0 ? step : -(__int128)step) - 1) /
                                     (step > 0 ? step : -(__int128)step);
    if (n > 100000)
        return deras_fail(DERAS_EFORMAT, "Range too big. The sandbox blocks ranges larger than "
                          "MAX_RANGE (100000).");
    int st = rx_step(rx, (uint64_t)n);
    if (st || (st = tv_list_new(rx, TV_LIST, (size_t)n, out)))
        return st;
    for (int64_t i = 0; i < (int64_t)n && !st; i++)
        st = tv_list_push(rx, out, tv_int(start + i * step));
    if (st) {
        tv_release(rx, out);
        return st;
    }
    out->u.l->view = VIEW_RANGE;
    out->u.l->r_start = start;
    out->u.l->r_stop = stop;
    out->u.l->r_step = step;
    return 0;
}

int global_call(struct rx *rx, int id, const struct args *a, tv *out)
{
    tv slot[1], msg;
    int st;
    switch (id) {
    case G_RANGE: return range(rx, a, out);
    case G_NAMESPACE: return build_dict(rx, a, TV_NS, out);
    case G_DICT: return build_dict(rx, a, TV_DICT, out);
    case G_RAISE_EXCEPTION: {
        static const char *const ps[] = {"message"};
        if ((st = args_bind(a, ps, 1, slot, "raise_exception")))
            return st;
        if (slot[0].type == TV_EMPTY)
            return deras_fail(DERAS_EFORMAT, "raise_exception() missing 1 required argument");
        if ((st = tv_to_str(rx, &slot[0], &msg)))
            return st;
        st = deras_fail(DERAS_EINVAL, "%s", tv_sp(&msg));
        tv_release(rx, &msg);
        return st;
    }
    case G_STRFTIME_NOW: {
        static const char *const ps[] = {"format"};
        if ((st = args_bind(a, ps, 1, slot, "strftime_now")))
            return st;
        if (slot[0].type != TV_STR)
            return deras_fail(DERAS_EFORMAT, "strftime() argument 1 must be str");
        struct tm tm;
        time_t now = rx->now ? rx->now : time(NULL);
        localtime_r(&now, &tm);
        size_t cap = 64 + tv_sn(&slot[0]) * 8;
        char *buf = tv_alloc(rx, cap);
        if (!buf)
            return DERAS_ENOMEM;
        pthread_once(&c_once, c_init);
        size_t n = !tv_sn(&slot[0]) ? 0
                   : c_loc ? strftime_l(buf, cap, tv_sp(&slot[0]), &tm, c_loc)
                           : strftime(buf, cap, tv_sp(&slot[0]), &tm);
        st = tv_str(rx, buf, n, out);
        tv_free(rx, buf, cap);
        return st;
    }
    }
    return deras_fail(DERAS_EUNSUPPORTED, "global '%s' is not supported", global_name(id));
}
