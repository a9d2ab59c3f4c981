/* SPDX-License-Identifier: Apache-2.0 */
/* methods.c - the Python methods templates call on strings (strip, split, startswith,
 * replace, format, ...; the string work is in strings.c), dicts (get, items, keys, values,
 * copy) and lists and tuples (count, index, copy).
 *
 * Methods that would change a list or dict never get here: the sandbox refuses them at
 * the lookup (eval.c). dict.items() and friends return views, which print as Python
 * prints them (dict_items([...])). Cost: O(length), charged in steps.
 */
#include "builtins.h"
#include "render.h"
#include "unicode.h"

#include "common/base/status.h"

#include <stdlib.h>
#include <string.h>

/* The bound argument i, or NULL when not given or None. */
static inline const tv *given(const tv *slot, int i)
{
    return slot[i].type != TV_EMPTY && slot[i].type != TV_NONE ? &slot[i] : NULL;
}
#define ARG(i) given(slot, i)

/* Binds (x, start, end) for startswith/endswith/find/rfind/index: x is required, and the
 * start/end range is refused (no template uses it). */
static int bind_without_range(const struct args *a, const char *const ps[3], tv *slot,
                              const char *name)
{
    int st = args_bind(a, ps, 3, slot, name);
    if (st)
        return st;
    if (slot[0].type == TV_EMPTY)
        return deras_fail(DERAS_EFORMAT, "%s() takes at least 1 argument", name);
    if (ARG(1) || ARG(2))
        return deras_fail(DERAS_EUNSUPPORTED, "%s() with start or end is not supported", name);
    return 0;
}

static int str_method(struct rx *rx, int id, const tv *s, const struct args *a, tv *slot, tv *out)
{
    int st;
    bool r;
    int64_t at;
    const char *name = method_name(id);
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        static const char *const ps[] = {"chars"};
        if ((st = args_bind(a, ps, 1, slot, name)))
            return st;
        return str_strip(rx, s, ARG(0), id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2, out);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *const ps[] = {"sep", "maxsplit"};
        if ((st = args_bind(a, ps, 2, slot, name)))
            return st;
        int64_t max = ARG(1) && slot[1].type == TV_INT ? slot[1].u.i : -1;
        return str_split(rx, s, ARG(0), max, id == M_RSPLIT, out);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        static const char *const ps[] = {"prefix", "start", "end"};
        if ((st = bind_without_range(a, ps, slot, name)))
            return st;
        if ((st = str_affix(s, &slot[0], id == M_ENDSWITH, &r)))
            return st;
        *out = tv_bool(r);
        return 0;
    }
    case M_REPLACE: {
        static const char *const ps[] = {"old", "new", "count"};
        if ((st = args_bind(a, ps, 3, slot, name)))
            return st;
        if (slot[0].type == TV_EMPTY || slot[1].type == TV_EMPTY)
            return deras_fail(DERAS_EFORMAT, "replace() takes at least 2 arguments");
        if ((st = str_require(&slot[0], name)) || (st = str_require(&slot[1], name)))
            return st;
        if (s->markup && !slot[1].markup)
            return deras_fail(DERAS_EUNSUPPORTED, "replace() on a Markup string is not supported");
        return str_replace(rx, s, &slot[0], &slot[1], ARG(2) ? slot[2].u.i : -1, out);
    }
    case M_UPPER:
    case M_LOWER:
    case M_TITLE:
    case M_CAPITALIZE:
        if ((st = args_bind(a, NULL, 0, slot, name)))
            return st;
        return str_case(rx, s, id == M_UPPER ? CASE_UPPER : id == M_LOWER ? CASE_LOWER
                               : id == M_TITLE ? CASE_TITLE : CASE_CAPITALIZE, out);
    case M_FIND:
    case M_RFIND:
    case M_INDEX: {
        static const char *const ps[] = {"sub", "start", "end"};
        if ((st = bind_without_range(a, ps, slot, name)))
            return st;
        if ((st = str_find(rx, s, &slot[0], id == M_RFIND, &at)))
            return st;
        if (id == M_INDEX && at < 0)
            return deras_fail(DERAS_EFORMAT, "substring not found");
        *out = tv_int(at);
        return 0;
    }
    case M_COUNT: {
        static const char *const ps[] = {"sub"};
        if ((st = args_bind(a, ps, 1, slot, name)) || (st = str_require(&slot[0], name)))
            return st;
        size_t m = tv_sn(&slot[0]), n = tv_sn(s), c = 0;
        if (m == 0) {
            c = uni_count(tv_sp(s), n) + 1;
        } else {
            for (const char *q = tv_sp(s), *e = q + n; (q = memmem(q, (size_t)(e - q), tv_sp(&slot[0]), m)); q += m)
                c++;
        }
        *out = tv_int((int64_t)c);
        return rx_step(rx, n / STEP_COPY);
    }
    case M_FORMAT: return str_format(rx, s, a, out);
    case M_JOIN: {
        static const char *const ps[] = {"iterable"};
        tv it;
        if ((st = args_bind(a, ps, 1, slot, name)) || (st = tv_iterate(rx, &slot[0], &it)))
            return st;
        if (s->markup) {
            tv_release(rx, &it);
            return deras_fail(DERAS_EUNSUPPORTED, "join() on a Markup string is not supported");
        }
        sbuf b;
        tsb_init(&b, rx);
        for (size_t i = 0; i < it.u.l->n && !st; i++) {
            const tv *x = &it.u.l->v[i];
            if (x->type != TV_STR)
                st = deras_fail(DERAS_EFORMAT, "sequence item %zu: expected str instance, %s found",
                                i, tv_typename(x));
            else if (!(st = i ? tsb_put(&b, tv_sp(s), tv_sn(s)) : 0))
                st = tsb_put(&b, tv_sp(x), tv_sn(x));
        }
        tv_release(rx, &it);
        if (!st)
            st = rx_step(rx, b.len / STEP_COPY);
        return tsb_finish(&b, st, out);
    }
    case M_SPLITLINES: {
        if ((st = args_bind(a, NULL, 0, slot, name)) || (st = tv_list_new(rx, TV_LIST, 0, out)))
            return st;
        const char *p = tv_sp(s);
        size_t n = tv_sn(s), i = 0;
        while (i < n && !st) {
            size_t start = i, brk = 0;
            uint32_t cp = 0;
            while (i < n) {
                brk = uni_decode(p, n, i, &cp);
                if (uni_islinebreak(cp))
                    break;
                i += brk;
            }
            tv line;
            if (!(st = tv_str(rx, p + start, i - start, &line))) {
                line.markup = s->markup;
                st = tv_list_push(rx, out, line);
            }
            if (i < n)
                i += cp == '\r' && i + 1 < n && p[i + 1] == '\n' ? 2 : brk;
        }
        if (st)
            tv_release(rx, out);
        return st;
    }
    case M_ISDIGIT:
    case M_ISALPHA:
    case M_ISSPACE:
    case M_ISUPPER:
    case M_ISLOWER: {
        if ((st = args_bind(a, NULL, 0, slot, name)))
            return st;
        const char *p = tv_sp(s);
        size_t n = tv_sn(s);
        bool all = n > 0, cased = false;
        for (size_t i = 0; i < n && all;) {
            uint32_t cp;
            i += uni_decode(p, n, i, &cp);
            switch (id) {
            case M_ISDIGIT: all = uni_isdigit(cp); break;
            case M_ISALPHA: all = uni_isalpha(cp); break;
            case M_ISSPACE: all = uni_isspace(cp); break;
            case M_ISUPPER: all = !uni_islower(cp); cased |= uni_isupper(cp); break;
            default: all = !uni_isupper(cp); cased |= uni_islower(cp); break;
            }
        }
        *out = tv_bool(all && (id == M_ISUPPER || id == M_ISLOWER ? cased : true));
        return 0;
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        static const char *const ps[] = {"affix"};
        if ((st = args_bind(a, ps, 1, slot, name)) || (st = str_require(&slot[0], name)))
            return st;
        bool end = id == M_REMOVESUFFIX;
        if ((st = str_affix(s, &slot[0], end, &r)))
            return st;
        size_t m = r ? tv_sn(&slot[0]) : 0;
        if ((st = tv_str(rx, tv_sp(s) + (end ? 0 : m), tv_sn(s) - m, out)))
            return st;
        out->markup = s->markup;
        return 0;
    }
    }
    return deras_fail(DERAS_EINTERNAL, "str method %d", id);
}

/* dict.items() / keys() / values() as views; kind VIEW_*. */
static int dict_view(struct rx *rx, const tv *d, int kind, tv *out)
{
    size_t n = d->u.d->n;
    int st = rx_step(rx, n);
    if (st || (st = tv_list_new(rx, TV_LIST, n, out)))
        return st;
    out->u.l->view = (uint8_t)kind;
    for (size_t i = 0; i < n && !st; i++) {
        if (kind == VIEW_ITEMS) {
            tv t;
            if ((st = tv_list_new(rx, TV_TUPLE, 2, &t)))
                break;
            if (!(st = tv_list_push(rx, &t, tv_ref(d->u.d->k[i]))) &&
                !(st = tv_list_push(rx, &t, tv_ref(d->u.d->v[i]))))
                st = tv_list_push(rx, out, t);
            else
                tv_release(rx, &t);
        } else {
            st = tv_list_push(rx, out, tv_ref(kind == VIEW_KEYS ? d->u.d->k[i] : d->u.d->v[i]));
        }
    }
    if (st)
        tv_release(rx, out);
    return st;
}

int method_call(struct rx *rx, int id, const tv *self, const struct args *a, tv *out)
{
    tv slot[4];
    int st;
    const char *name = method_name(id);
    if (self->type == TV_STR)
        return str_method(rx, id, self, a, slot, out);
    if (self->type == TV_DICT) {
        switch (id) {
        case M_GET: {
            static const char *const ps[] = {"key", "default"};
            if ((st = args_bind(a, ps, 2, slot, name)))
                return st;
            if (slot[0].type == TV_EMPTY)
                return deras_fail(DERAS_EFORMAT, "get expected at least 1 argument, got 0");
            const tv *v = tv_dict_get(self, &slot[0]);
            *out = v ? tv_ref(*v) : slot[1].type != TV_EMPTY ? tv_ref(slot[1]) : tv_none();
            return 0;
        }
        case M_ITEMS:
        case M_KEYS:
        case M_VALUES:
            if ((st = args_bind(a, NULL, 0, slot, name)))
                return st;
            return dict_view(rx, self, id == M_ITEMS ? VIEW_ITEMS : id == M_KEYS ? VIEW_KEYS
                                                                               : VIEW_VALUES, out);
        case M_COPY:
            if ((st = args_bind(a, NULL, 0, slot, name)))
                return st;
            *out = tv_ref(*self); /* dicts never change: the same object reads the same */
            return 0;
        }
    }
    if (tv_is_seq(self)) {
        static const char *const ps[] = {"value"};
        switch (id) {
        case M_COPY:
            if ((st = args_bind(a, NULL, 0, slot, name)))
                return st;
            *out = tv_ref(*self);
            return 0;
        case M_COUNT:
        case M_INDEX: {
            if ((st = args_bind(a, ps, 1, slot, name)) || (st = rx_step(rx, self->u.l->n)))
                return st;
            int64_t c = 0, first = -1;
            for (size_t i = 0; i < self->u.l->n; i++)
                if (tv_eq(&self->u.l->v[i], &slot[0])) {
                    c++;
                    if (first < 0)
                        first = (int64_t)i;
                }
            if (id == M_INDEX && first < 0)
                return deras_fail(DERAS_EFORMAT, "value is not in list");
            *out = tv_int(id == M_COUNT ? c : first);
            return 0;
        }
        }
    }
    return deras_fail(DERAS_EFORMAT, "'%s' object has no attribute '%s'", tv_typename(self), name);
}
