/* SPDX-License-Identifier: Apache-2.0 */
/* filters.c - Jinja2's filters as jinja2/filters.py (3.1) defines them, with
 * transformers' tojson (json.dumps, ensure_ascii=False by default, indent / separators /
 * sort_keys): the dispatch by filter id with Python's argument binding, and the filters
 * over single values (strings, numbers, JSON, Markup); the filters over sequences are in
 * filters_seq.c. Filters that return generators in Jinja2 (items, reverse of a list)
 * return a list marked as a generator, so truth, printing and length behave as there.
 * Cost: one step per element and per STEP_SCAN bytes produced (render.h).
 */
#include "filters.h"

#include "builtins.h"
#include "unicode.h"

#include "common/base/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The bound argument i, or NULL when not given. */
#define ARG(i) filter_arg(slot, i)

static int bind(const struct args *a, tv *slot, const char *fname, int n, ...)
{
    const char *params[8];
    __builtin_va_list ap;
    __builtin_va_start(ap, n);
    for (int i = 0; i < n; i++)
        params[i] = __builtin_va_arg(ap, const char *);
    __builtin_va_end(ap);
    return args_bind(a, params, n, slot, fname);
}

static int f_indent(struct rx *rx, const tv *s, const tv *width, bool first, bool blank, tv *out)
{
    if (s->type == TV_UNDEF)
        return undef_error(s);
    if (s->type != TV_STR)
        return deras_fail(DERAS_EFORMAT, "unsupported operand type(s) for +=: '%s' and 'str'",
                          tv_typename(s));
    sbuf ind, b;
    tsb_init(&ind, rx);
    tsb_init(&b, rx);
    int st = 0;
    if (!width)
        st = tsb_put(&ind, "    ", 4);
    else if (width->type == TV_STR)
        st = tsb_put(&ind, tv_sp(width), tv_sn(width));
    else if (width->type == TV_INT || width->type == TV_BOOL)
        for (int64_t i = 0; i < (width->type == TV_INT ? width->u.i : width->u.b) && !st; i++)
            st = tsb_putc(&ind, ' ');
    else
        st = deras_fail(DERAS_EFORMAT, "indent width must be an int or a string");
    /* the lines of s + "\n" as str.splitlines gives them: s split at every line break
     * (\r\n counting once), the last piece included even when empty */
    const char *p = tv_sp(s);
    size_t n = tv_sn(s), i = 0, line = 0;
    if (!st && first)
        st = tsb_put(&b, ind.p, ind.len);
    while (!st) {
        size_t start = i, brk = 0;
        uint32_t cp = 0;
        while (i < n) {
            brk = uni_decode(p, n, i, &cp);
            if (uni_islinebreak(cp))
                break;
            i += brk;
        }
        if (line++) {
            st = tsb_putc(&b, '\n');
            if (!st && (blank || i > start))
                st = tsb_put(&b, ind.p, ind.len);
        }
        if (!st)
            st = tsb_put(&b, p + start, i - start);
        if (i >= n)
            break;
        i += cp == '\r' && i + 1 < n && p[i + 1] == '\n' ? 2 : brk;
    }
    tsb_free(&ind);
    if (!st)
        st = rx_step(rx, b.len / STEP_SCAN + line);
    if (st) {
        tsb_free(&b);
        return st;
    }
    st = tsb_take(&b, out);
    if (!st)
        out->markup = s->markup;
    return st;
}

/* Python's int(str) / float(str) for |int and |float: strict, surrounding whitespace and
 * digit underscores allowed. */
static bool parse_int(const char *s, size_t n, int base, int64_t *out)
{
    size_t a = uni_lspace(s, n), b = n - uni_rspace(s, n);
    if (a >= b || base < 2 || base > 36)
        return false;
    bool neg = false;
    if (s[a] == '+' || s[a] == '-')
        neg = s[a++] == '-';
    uint64_t v = 0;
    bool any = false, under = false;
    for (size_t i = a; i < b; i++) {
        int c = (unsigned char)s[i], d;
        if (c == '_' && any && !under) {
            under = true;
            continue;
        }
        d = c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'z' ? (c | 32) - 'a' + 10 : 99;
        if (d >= base || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
        any = true;
        under = false;
    }
    if (!any || under || v > (uint64_t)INT64_MAX + neg)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool parse_float(const char *s, size_t n, double *out)
{
    size_t a = uni_lspace(s, n), b = n - uni_rspace(s, n);
    char buf[128];
    size_t k = 0;
    if (a >= b || b - a >= sizeof buf)
        return false;
    for (size_t i = a; i < b; i++) {
        char c = s[i];
        if (c == '_') {
            if (i == a || i + 1 == b || !(s[i - 1] >= '0' && s[i - 1] <= '9') ||
                !(s[i + 1] >= '0' && s[i + 1] <= '9'))
                return false;
            continue;
        }
        if (!strchr("0123456789+-.eEinfINFatyTYA", c))
            return false;
        buf[k++] = c;
    }
    buf[k] = 0;
    if (!strncmp(buf, "0x", 2) || !strncmp(buf, "0X", 2) || strpbrk(buf, "xXpP"))
        return false;
    char *end;
    *out = strtod(buf, &end);
    return end == buf + k && k > 0;
}

static int f_int(struct rx *rx, const tv *v, const tv *dflt, const tv *base, tv *out)
{
    (void)rx;
    int64_t i;
    double f;
    if (v->type == TV_UNDEF)
        return undef_error(v);
    int b = base && base->type == TV_INT ? (int)base->u.i : 10;
    if (v->type == TV_INT || v->type == TV_BOOL) {
        *out = tv_int(v->type == TV_INT ? v->u.i : v->u.b);
        return 0;
    }
    bool have = false;
    if (v->type == TV_STR && parse_int(tv_sp(v), tv_sn(v), b, &i)) {
        *out = tv_int(i);
        return 0;
    }
    if (v->type == TV_FLOAT) {
        f = v->u.f;
        have = true;
    } else if (v->type == TV_STR) {
        have = parse_float(tv_sp(v), tv_sn(v), &f);
    }
    if (have && !isnan(f)) {
        if (isinf(f))
            return deras_fail(DERAS_EFORMAT, "cannot convert float infinity to integer");
        if (f >= 9.2233720368547758e18 || f < -9.2233720368547758e18)
            return deras_fail(DERAS_EUNSUPPORTED, "integer overflow (no big integers)");
        *out = tv_int((int64_t)f);
        return 0;
    }
    *out = dflt ? tv_ref(*dflt) : tv_int(0);
    return 0;
}

static int f_tojson(struct rx *rx, const tv *v, tv *slot, tv *out)
{
    json_opts o = {.ensure_ascii = is_true(ARG(0)), .sort_keys = is_true(ARG(3)),
                   .item_sep = ", ", .item_sep_len = 2, .key_sep = ": ", .key_sep_len = 2};
    char spaces[256];
    const tv *ind = ARG(1), *sep = ARG(2);
    if (ind && ind->type != TV_NONE) {
        o.has_indent = true;
        o.item_sep = ",";
        o.item_sep_len = 1;
        if (ind->type == TV_STR) {
            o.indent = tv_sp(ind);
            o.indent_len = tv_sn(ind);
        } else if (ind->type == TV_INT) {
            int64_t w = ind->u.i < 0 ? 0 : ind->u.i;
            if (w >= (int64_t)sizeof spaces)
                return deras_fail(DERAS_EUNSUPPORTED, "tojson indent past 255 is not supported");
            memset(spaces, ' ', (size_t)w);
            o.indent = spaces;
            o.indent_len = (size_t)w;
        } else {
            return deras_fail(DERAS_EFORMAT, "tojson indent must be an int or a string");
        }
    }
    if (sep && sep->type != TV_NONE) {
        if (!tv_is_seq(sep) || sep->u.l->n != 2 || sep->u.l->v[0].type != TV_STR ||
            sep->u.l->v[1].type != TV_STR)
            return deras_fail(DERAS_EFORMAT, "tojson separators must be two strings");
        o.item_sep = tv_sp(&sep->u.l->v[0]);
        o.item_sep_len = tv_sn(&sep->u.l->v[0]);
        o.key_sep = tv_sp(&sep->u.l->v[1]);
        o.key_sep_len = tv_sn(&sep->u.l->v[1]);
    }
    sbuf b;
    tsb_init(&b, rx);
    int st = tv_tojson(&b, v, &o);
    if (!st)
        st = rx_step(rx, b.len / STEP_SCAN);
    return tsb_finish(&b, st, out);
}

int filter_call(struct rx *rx, struct frame *f, int id, const tv *v, const struct args *a, tv *out)
{
    tv slot[8];
    int st;
    const char *name = filter_name(id);
    switch (id) {
    case F_TOJSON:
        if ((st = bind(a, slot, name, 4, "ensure_ascii", "indent", "separators", "sort_keys")))
            return st;
        return f_tojson(rx, v, slot, out);
    case F_LENGTH:
    case F_COUNT: {
        size_t n;
        if ((st = bind(a, slot, name, 0)) || (st = tv_length(v, &n)))
            return st;
        *out = tv_int((int64_t)n);
        return 0;
    }
    case F_TRIM:
        if ((st = bind(a, slot, name, 1, "chars")))
            return st;
        if (v->type != TV_STR) {
            tv s;
            if ((st = tv_to_str(rx, v, &s)))
                return st;
            st = str_strip(rx, &s, ARG(0), 3, out);
            tv_release(rx, &s);
            return st;
        }
        return str_strip(rx, v, ARG(0), 3, out);
    case F_STRING:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (v->type == TV_STR) {
            *out = tv_ref(*v);
            return 0;
        }
        return tv_to_str(rx, v, out);
    case F_SAFE:
    case F_E:
    case F_ESCAPE:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (id != F_SAFE && !(v->type == TV_STR && v->markup)) {
            sbuf b;
            tv s;
            tsb_init(&b, rx);
            if ((st = tv_to_str(rx, v, &s)))
                return st;
            st = html_escape(&b, tv_sp(&s), tv_sn(&s));
            tv_release(rx, &s);
            if (st || (st = tsb_take(&b, out))) {
                tsb_free(&b);
                return st;
            }
        } else if ((st = v->type == TV_STR ? (*out = tv_ref(*v), 0) : tv_to_str(rx, v, out))) {
            return st;
        }
        out->markup = 1;
        return 0;
    case F_D:
    case F_DEFAULT:
        if ((st = bind(a, slot, name, 2, "default_value", "boolean")))
            return st;
        if (is_true(ARG(1)) ? !tv_truthy(v) : v->type == TV_UNDEF)
            return ARG(0) ? (*out = tv_ref(slot[0]), 0) : tv_str(rx, "", 0, out);
        *out = tv_ref(*v);
        return 0;
    case F_JOIN:
        if ((st = bind(a, slot, name, 2, "d", "attribute")))
            return st;
        return filter_join(rx, v, ARG(0), ARG(1), out);
    case F_ITEMS:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (v->type == TV_UNDEF)
            return filter_new_list(rx, true, out);
        if (v->type != TV_DICT)
            return deras_fail(DERAS_EFORMAT, "Can only get item pairs from a mapping.");
        if ((st = method_call(rx, M_ITEMS, v, &(struct args){0}, out)))
            return st;
        out->u.l->view = VIEW_GEN;
        return 0;
    case F_UPPER:
    case F_LOWER:
    case F_CAPITALIZE:
    case F_TITLE: {
        tv s;
        if ((st = bind(a, slot, name, 0)))
            return st;
        if ((st = v->type == TV_STR ? (s = tv_ref(*v), 0) : tv_to_str(rx, v, &s)))
            return st;
        st = str_case(rx, &s, id == F_UPPER ? CASE_UPPER : id == F_LOWER ? CASE_LOWER
                              : id == F_CAPITALIZE ? CASE_CAPITALIZE : CASE_JINJA_TITLE, out);
        tv_release(rx, &s);
        return st;
    }
    case F_REPLACE: {
        tv s, o, n;
        if ((st = bind(a, slot, name, 3, "old", "new", "count")))
            return st;
        if (!ARG(0) || !ARG(1))
            return deras_fail(DERAS_EFORMAT, "replace() missing required arguments");
        int64_t count = ARG(2) && slot[2].type == TV_INT ? slot[2].u.i : -1;
        if ((st = tv_to_str(rx, v, &s)))
            return st;
        if (!(st = tv_to_str(rx, &slot[0], &o))) {
            if (!(st = tv_to_str(rx, &slot[1], &n))) {
                st = str_replace(rx, &s, &o, &n, count, out);
                tv_release(rx, &n);
            }
            tv_release(rx, &o);
        }
        tv_release(rx, &s);
        if (!st)
            out->markup = 0;
        return st;
    }
    case F_DICTSORT:
        if ((st = bind(a, slot, name, 3, "case_sensitive", "by", "reverse")))
            return st;
        return filter_dictsort(rx, v, slot, out);
    case F_SORT:
        if ((st = bind(a, slot, name, 3, "reverse", "case_sensitive", "attribute")))
            return st;
        return filter_sort(rx, v, ARG(0), ARG(1), ARG(2), false, 0, out);
    case F_UNIQUE:
        if ((st = bind(a, slot, name, 2, "case_sensitive", "attribute")))
            return st;
        return filter_unique(rx, v, ARG(0), ARG(1), out);
    case F_MIN:
    case F_MAX:
        if ((st = bind(a, slot, name, 2, "case_sensitive", "attribute")))
            return st;
        return filter_minmax(rx, v, ARG(0), ARG(1), id == F_MAX, out);
    case F_LIST:
        if ((st = bind(a, slot, name, 0)) || (st = tv_iterate(rx, v, out)))
            return st;
        if (out->type == TV_LIST && !out->u.l->view)
            return 0;
        { /* a fresh plain list */
            tv l;
            if ((st = tv_list_new(rx, TV_LIST, out->u.l->n, &l)))
                goto list_fail;
            for (size_t i = 0; i < out->u.l->n && !st; i++)
                st = tv_list_push(rx, &l, tv_ref(out->u.l->v[i]));
            tv_release(rx, out);
            *out = l;
            if (st)
                tv_release(rx, out);
            return st;
        }
    list_fail:
        tv_release(rx, out);
        return st;
    case F_FIRST:
    case F_LAST:
        if ((st = bind(a, slot, name, 0)))
            return st;
        return filter_end(rx, v, id == F_LAST, out);
    case F_REVERSE:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (v->type == TV_STR) {
            tv it;
            sbuf b;
            if ((st = tv_iterate(rx, v, &it)))
                return st;
            tsb_init(&b, rx);
            for (size_t i = it.u.l->n; i-- > 0 && !st;)
                st = tv_print(&b, &it.u.l->v[i]);
            tv_release(rx, &it);
            if (!st && !(st = tsb_take(&b, out)))
                out->markup = v->markup;
            else
                tsb_free(&b);
            return st;
        } else {
            tv it; /* reversed(): an iterator, except for a generator (then a list) */
            bool gen = !(v->type == TV_LIST && v->u.l->view == VIEW_GEN);
            if ((st = tv_iterate(rx, v, &it)))
                return st;
            if ((st = filter_new_list(rx, gen, out))) {
                tv_release(rx, &it);
                return st;
            }
            for (size_t i = it.u.l->n; i-- > 0 && !st;)
                st = tv_list_push(rx, out, tv_ref(it.u.l->v[i]));
            tv_release(rx, &it);
            if (st)
                tv_release(rx, out);
            return st;
        }
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR:
        return filter_select(rx, v, a, id == F_SELECTATTR || id == F_REJECTATTR,
                        id == F_SELECT || id == F_SELECTATTR, out);
    case F_MAP: return filter_map(rx, f, v, a, out);
    case F_INDENT:
        if ((st = bind(a, slot, name, 3, "width", "first", "blank")))
            return st;
        return f_indent(rx, v, ARG(0), is_true(ARG(1)), is_true(ARG(2)), out);
    case F_INT:
        if ((st = bind(a, slot, name, 2, "default", "base")))
            return st;
        return f_int(rx, v, ARG(0), ARG(1), out);
    case F_FLOAT: {
        double d;
        if ((st = bind(a, slot, name, 1, "default")))
            return st;
        if (v->type == TV_UNDEF)
            return undef_error(v);
        if (tv_is_num(v))
            *out = tv_float(v->type == TV_FLOAT ? v->u.f : v->type == TV_INT ? (double)v->u.i : v->u.b);
        else if (v->type == TV_STR && parse_float(tv_sp(v), tv_sn(v), &d))
            *out = tv_float(d);
        else
            *out = ARG(0) ? tv_ref(slot[0]) : tv_float(0.0);
        return 0;
    }
    case F_ABS:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (v->type == TV_FLOAT) {
            *out = tv_float(fabs(v->u.f));
            return 0;
        }
        if (v->type == TV_INT || v->type == TV_BOOL) {
            int64_t i = v->type == TV_INT ? v->u.i : v->u.b;
            if (i == INT64_MIN)
                return deras_fail(DERAS_EUNSUPPORTED, "integer overflow (no big integers)");
            *out = tv_int(i < 0 ? -i : i);
            return 0;
        }
        return v->type == TV_UNDEF ? undef_error(v)
                                   : deras_fail(DERAS_EFORMAT, "bad operand type for abs(): '%s'",
                                                tv_typename(v));
    case F_SUM:
        if ((st = bind(a, slot, name, 2, "attribute", "start")))
            return st;
        return filter_sum(rx, v, ARG(0), ARG(1), out);
    default:
        return deras_fail(DERAS_EUNSUPPORTED, "filter '%s' is not supported", name);
    }
}
