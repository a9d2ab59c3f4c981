/* SPDX-License-Identifier: Apache-2.0 */
/* tests.c - Jinja2's tests (`x is defined`, `x is string`, `x is equalto y`, ...) as
 * jinja2/tests.py defines them, on Python's notion of the types: a bool is a number,
 * Undefined is iterable and a sequence, a dict is a sequence. O(1) except `in` and the
 * comparisons of containers.
 */
#include "builtins.h"
#include "render.h"
#include "unicode.h"

#include "common/base/status.h"

#include <string.h>

static int one_arg(const struct args *a, const tv **x, const char *name)
{
    if (a->n_kw || a->n_pos != 1)
        return deras_fail(DERAS_EFORMAT, "test '%s' takes exactly one argument", name);
    *x = &a->pos[0];
    return 0;
}

/* str(v).islower() / isupper(). */
static int cased(struct rx *rx, const tv *v, bool upper, bool *res)
{
    tv s;
    int st = tv_to_str(rx, v, &s);
    if (st)
        return st;
    const char *p = tv_sp(&s);
    size_t n = tv_sn(&s);
    bool any = false, ok = true;
    for (size_t i = 0; i < n && ok;) {
        uint32_t cp;
        i += uni_decode(p, n, i, &cp);
        if (upper ? uni_islower(cp) : uni_isupper(cp))
            ok = false;
        any |= upper ? uni_isupper(cp) : uni_islower(cp);
    }
    *res = ok && any;
    tv_release(rx, &s);
    return 0;
}

/* (v % by) == want, as Python computes it (so 2.5 is neither odd nor even). */
static int modulo_is(struct rx *rx, const tv *v, const tv *by, int64_t want, bool *res)
{
    tv r, w = tv_int(want);
    int st = binop(rx, BIN_MOD, v, by, &r);
    if (st)
        return st;
    *res = tv_eq(&r, &w);
    tv_release(rx, &r);
    return 0;
}

int test_call(struct rx *rx, int id, const tv *v, const struct args *a, bool *res)
{
    const tv *x = NULL;
    int st = 0;
    bool lt;
    int t = v->type;
    if (id != IS_DIVISIBLEBY && id != IS_EQ && id != IS_NE && id != IS_LT && id != IS_LE &&
        id != IS_GT && id != IS_GE && id != IS_IN && id != IS_SAMEAS && (a->n_pos || a->n_kw))
        return deras_fail(DERAS_EFORMAT, "this test takes no arguments");
    switch (id) {
    case IS_DEFINED: *res = t != TV_UNDEF; return 0;
    case IS_UNDEFINED: *res = t == TV_UNDEF; return 0;
    case IS_NONE: *res = t == TV_NONE; return 0;
    case IS_BOOLEAN: *res = t == TV_BOOL; return 0;
    case IS_TRUE: *res = t == TV_BOOL && v->u.b; return 0;
    case IS_FALSE: *res = t == TV_BOOL && !v->u.b; return 0;
    case IS_INTEGER: *res = t == TV_INT; return 0;
    case IS_FLOAT: *res = t == TV_FLOAT; return 0;
    case IS_NUMBER: *res = tv_is_num(v); return 0;
    case IS_STRING: *res = t == TV_STR; return 0;
    case IS_MAPPING: *res = t == TV_DICT; return 0;
    case IS_ITERABLE: *res = t == TV_STR || t == TV_LIST || t == TV_TUPLE || t == TV_DICT ||
                             t == TV_UNDEF; return 0;
    case IS_SEQUENCE:
        *res = t == TV_STR || t == TV_TUPLE || t == TV_DICT || t == TV_UNDEF ||
               (t == TV_LIST && v->u.l->view <= VIEW_RANGE);
        return 0;
    case IS_CALLABLE: *res = t == TV_MACRO || t == TV_FUNC || t == TV_METHOD || t == TV_UNDEF; return 0;
    case IS_ESCAPED: *res = t == TV_STR && v->markup; return 0;
    case IS_LOWER:
    case IS_UPPER: return cased(rx, v, id == IS_UPPER, res);
    case IS_ODD:
    case IS_EVEN: {
        tv two = tv_int(2);
        return modulo_is(rx, v, &two, id == IS_ODD, res);
    }
    case IS_DIVISIBLEBY: {
        if ((st = one_arg(a, &x, "divisibleby")))
            return st;
        return modulo_is(rx, v, x, 0, res);
    }
    case IS_EQ:
    case IS_NE:
        if ((st = one_arg(a, &x, id == IS_EQ ? "eq" : "ne")))
            return st;
        *res = tv_eq(v, x) == (id == IS_EQ);
        return 0;
    case IS_LT:
    case IS_LE:
    case IS_GT:
    case IS_GE:
        if ((st = one_arg(a, &x, "comparison")))
            return st;
        if (v->type == TV_UNDEF || x->type == TV_UNDEF)
            return undef_error(v->type == TV_UNDEF ? v : x);
        if ((st = id == IS_LT || id == IS_LE ? tv_lt(v, x, &lt) : tv_lt(x, v, &lt)))
            return st;
        *res = lt || ((id == IS_LE || id == IS_GE) && tv_eq(v, x));
        return 0;
    case IS_IN:
        if ((st = one_arg(a, &x, "in")))
            return st;
        return contains(rx, x, v, res);
    case IS_SAMEAS:
        if ((st = one_arg(a, &x, "sameas")))
            return st;
        if (v->type != x->type)
            *res = false;
        else if (t == TV_NONE || t == TV_UNDEF)
            *res = t == TV_NONE;
        else if (t == TV_BOOL)
            *res = v->u.b == x->u.b;
        else if (t == TV_INT) /* CPython caches the small ints */
            *res = v->u.i == x->u.i && v->u.i >= -5 && v->u.i <= 256;
        else if (tv_is_heap(v))
            *res = v->u.obj == x->u.obj;
        else
            *res = tv_eq(v, x);
        return 0;
    case IS_FILTER:
    case IS_TEST: /* `'name' is filter`: whether the environment has it */
        *res = t == TV_STR && (id == IS_FILTER ? filter_find(tv_sp(v)) >= 0
                                               : test_find(tv_sp(v)) >= 0);
        return 0;
    }
    return deras_fail(DERAS_EUNSUPPORTED, "test %d is not supported", id);
}
