/* SPDX-License-Identifier: Apache-2.0 */
/* ops.c - Python's operators on template values: + - * / // % ** (ints are 64-bit; what
 * would need a big integer fails as unsupported rather than wrap), `in`, iteration, len.
 *
 * Markup (a string marked |safe) keeps markupsafe's rule for +: the plain string on the
 * other side is HTML-escaped, so "'|safe + name" renders as Jinja2 renders it. String
 * and list results are charged one step per element or per STEP_COPY bytes. Also len(). Errors Python raises
 * (TypeError, ZeroDivisionError, Undefined used in arithmetic) are DERAS_EFORMAT.
 */
#include "render.h"

#include "common/base/status.h"
#include "unicode.h"

#include <math.h>
#include <string.h>

static const char *const op_names[] = {"+", "-", "*", "/", "//", "%", "**"};

static int overflow(void)
{
    return deras_fail(DERAS_EUNSUPPORTED, "integer overflow (no big integers)");
}

static int int_pow(int64_t a, int64_t b, tv *out)
{
    int64_t r = 1;
    while (b > 0) {
        if ((b & 1) && __builtin_mul_overflow(r, a, &r))
            return overflow();
        b >>= 1;
        if (b && __builtin_mul_overflow(a, a, &a))
            return overflow();
    }
    *out = tv_int(r);
    return 0;
}

/* CPython's float_divmod: floor division and modulo with Python's signs. */
static void float_divmod(double vx, double wx, double *floordiv, double *mod)
{
    double m = fmod(vx, wx), div = (vx - m) / wx;
    if (m) {
        if ((wx < 0) != (m < 0)) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = copysign(0.0, wx);
    }
    double fd;
    if (div) {
        fd = floor(div);
        if (div - fd > 0.5)
            fd += 1.0;
    } else {
        fd = copysign(0.0, vx / wx);
    }
    *floordiv = fd;
    *mod = m;
}

static int num_op(int op, const tv *a, const tv *b, tv *out)
{
    bool ints = a->type != TV_FLOAT && b->type != TV_FLOAT;
    int64_t x = a->type == TV_BOOL ? a->u.b : a->u.i, y = b->type == TV_BOOL ? b->u.b : b->u.i;
    double fx = a->type == TV_FLOAT ? a->u.f : (double)x, fy = b->type == TV_FLOAT ? b->u.f : (double)y;
    int64_t r;
    double fd, fm;
    switch (op) {
    case BIN_ADD:
        if (ints && __builtin_add_overflow(x, y, &r))
            return overflow();
        *out = ints ? tv_int(r) : tv_float(fx + fy);
        return 0;
    case BIN_SUB:
        if (ints && __builtin_sub_overflow(x, y, &r))
            return overflow();
        *out = ints ? tv_int(r) : tv_float(fx - fy);
        return 0;
    case BIN_MUL:
        if (ints && __builtin_mul_overflow(x, y, &r))
            return overflow();
        *out = ints ? tv_int(r) : tv_float(fx * fy);
        return 0;
    case BIN_DIV:
        if (fy == 0)
            return deras_fail(DERAS_EFORMAT, "division by zero");
        *out = tv_float(fx / fy);
        return 0;
    case BIN_FLOORDIV:
    case BIN_MOD:
        if (ints) {
            if (y == 0)
                return deras_fail(DERAS_EFORMAT, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1)
                return overflow();
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            *out = tv_int(op == BIN_MOD ? m : q);
            return 0;
        }
        if (fy == 0)
            return deras_fail(DERAS_EFORMAT, "float modulo or floor division by zero");
        float_divmod(fx, fy, &fd, &fm);
        *out = tv_float(op == BIN_MOD ? fm : fd);
        return 0;
    case BIN_POW:
        if (ints && y >= 0)
            return int_pow(x, y, out);
        if (fx == 0 && fy < 0)
            return deras_fail(DERAS_EFORMAT, "0.0 cannot be raised to a negative power");
        if (fx < 0 && fy != floor(fy))
            return deras_fail(DERAS_EUNSUPPORTED, "complex numbers are not supported");
        *out = tv_float(pow(fx, fy));
        if (isinf(out->u.f) && !isinf(fx))
            return deras_fail(DERAS_EFORMAT, "numerical result out of range");
        return 0;
    }
    return deras_fail(DERAS_EINTERNAL, "bad operator %d", op);
}

static int str_add(struct rx *rx, const tv *a, const tv *b, tv *out)
{
    sbuf s;
    tsb_init(&s, rx);
    bool markup = a->markup || b->markup;
    int st = rx_step(rx, (tv_sn(a) + tv_sn(b)) / STEP_COPY);
    if (!st && !markup)
        st = tsb_reserve(&s, tv_sn(a) + tv_sn(b));
    for (int i = 0; i < 2 && !st; i++) {
        const tv *v = i ? b : a;
        st = markup && !v->markup ? html_escape(&s, tv_sp(v), tv_sn(v))
                                  : tsb_put(&s, tv_sp(v), tv_sn(v));
    }
    if (!st)
        st = tsb_take(&s, out);
    else
        tsb_free(&s);
    if (!st)
        out->markup = markup;
    return st;
}

static bool int_like(const tv *v, int64_t *n)
{
    if (v->type == TV_INT || v->type == TV_BOOL) {
        *n = v->type == TV_INT ? v->u.i : v->u.b;
        return true;
    }
    return false;
}

static int repeat(struct rx *rx, const tv *v, int64_t n, tv *out)
{
    if (n < 0)
        n = 0;
    int st;
    if (v->type == TV_STR) {
        size_t len = tv_sn(v);
        if (len && (uint64_t)n > rx->lim.max_output / len)
            return deras_fail(DERAS_ERANGE, "a repeated string passes max_output (%zu bytes)",
                              rx->lim.max_output);
        if ((st = rx_step(rx, (uint64_t)n * len / STEP_COPY)))
            return st;
        sbuf s;
        tsb_init(&s, rx);
        for (int64_t i = 0; i < n && !st; i++)
            st = tsb_put(&s, tv_sp(v), len);
        if (!st)
            st = tsb_take(&s, out);
        else
            tsb_free(&s);
        if (!st)
            out->markup = v->markup;
        return st;
    }
    size_t len = v->u.l->n;
    if (len && (uint64_t)n > rx->lim.max_steps / len)
        return deras_fail(DERAS_ETIMEOUT, "a repeated list passes the step budget");
    if ((st = rx_step(rx, (uint64_t)n * len)) || (st = tv_list_new(rx, v->type, 0, out)))
        return st;
    for (int64_t i = 0; i < n && !st; i++)
        for (size_t j = 0; j < len && !st; j++)
            st = tv_list_push(rx, out, tv_ref(v->u.l->v[j]));
    if (st)
        tv_release(rx, out);
    return st;
}

int binop(struct rx *rx, int op, const tv *a, const tv *b, tv *out)
{
    if (op == BIN_MOD && a->type == TV_STR)
        return deras_fail(DERAS_EUNSUPPORTED, "printf-style string formatting ('%%') is not "
                          "supported");
    if (a->type == TV_UNDEF)
        return undef_error(a);
    if (b->type == TV_UNDEF)
        return undef_error(b);
    if (tv_is_num(a) && tv_is_num(b))
        return num_op(op, a, b, out);
    int64_t n;
    int st;
    switch (op) {
    case BIN_ADD:
        if (a->type == TV_STR && b->type == TV_STR)
            return str_add(rx, a, b, out);
        if (a->type == b->type && tv_is_seq(a) && !a->u.l->view && !b->u.l->view) {
            const struct tlist *x = a->u.l, *y = b->u.l;
            if ((st = rx_step(rx, x->n + y->n)) || (st = tv_list_new(rx, a->type, x->n + y->n, out)))
                return st;
            for (size_t i = 0; i < x->n + y->n && !st; i++)
                st = tv_list_push(rx, out, tv_ref(i < x->n ? x->v[i] : y->v[i - x->n]));
            if (st)
                tv_release(rx, out);
            return st;
        }
        break;
    case BIN_MUL:
        if ((a->type == TV_STR || (tv_is_seq(a) && !a->u.l->view)) && int_like(b, &n))
            return repeat(rx, a, n, out);
        if ((b->type == TV_STR || (tv_is_seq(b) && !b->u.l->view)) && int_like(a, &n))
            return repeat(rx, b, n, out);
        break;
    }
    return deras_fail(DERAS_EFORMAT, "unsupported operand type(s) for %s: '%s' and '%s'",
                      op_names[op], tv_typename(a), tv_typename(b));
}

int contains(struct rx *rx, const tv *seq, const tv *x, bool *in)
{
    *in = false;
    switch (seq->type) {
    case TV_STR:
        if (x->type != TV_STR)
            return deras_fail(DERAS_EFORMAT, "'in <string>' requires string as left operand, "
                              "not %s", tv_typename(x));
        *in = tv_sn(x) == 0 || memmem(tv_sp(seq), tv_sn(seq), tv_sp(x), tv_sn(x)) != NULL;
        return rx_step(rx, tv_sn(seq) / STEP_COPY);
    case TV_LIST:
    case TV_TUPLE:
        for (size_t i = 0; i < seq->u.l->n && !*in; i++)
            *in = tv_eq(&seq->u.l->v[i], x);
        return rx_step(rx, seq->u.l->n);
    case TV_DICT:
        if (x->type == TV_LIST || x->type == TV_DICT)
            return deras_fail(DERAS_EFORMAT, "unhashable type: '%s'", tv_typename(x));
        *in = tv_dict_get(seq, x) != NULL;
        return 0;
    case TV_UNDEF: return 0;
    default:
        return deras_fail(DERAS_EFORMAT, "argument of type '%s' is not iterable",
                          tv_typename(seq));
    }
}

int tv_iterate(struct rx *rx, const tv *v, tv *list)
{
    int st;
    switch (v->type) {
    case TV_LIST:
    case TV_TUPLE: *list = tv_ref(*v); return 0;
    case TV_UNDEF: return tv_list_new(rx, TV_LIST, 0, list);
    case TV_DICT:
        if ((st = rx_step(rx, v->u.d->n)) || (st = tv_list_new(rx, TV_LIST, v->u.d->n, list)))
            return st;
        for (size_t i = 0; i < v->u.d->n && !st; i++)
            st = tv_list_push(rx, list, tv_ref(v->u.d->k[i]));
        break;
    case TV_STR: {
        const char *s = tv_sp(v);
        size_t n = tv_sn(v);
        if ((st = rx_step(rx, n)) || (st = tv_list_new(rx, TV_LIST, n, list)))
            return st;
        for (size_t i = 0; i < n && !st;) {
            uint32_t cp;
            size_t len = uni_decode(s, n, i, &cp);
            tv c;
            if (!(st = tv_str(rx, s + i, len, &c)))
                st = tv_list_push(rx, list, c);
            i += len;
        }
        break;
    }
    default:
        return deras_fail(DERAS_EFORMAT, "'%s' object is not iterable", tv_typename(v));
    }
    if (st)
        tv_release(rx, list);
    return st;
}

int tv_length(const tv *v, size_t *n)
{
    switch (v->type) {
    case TV_STR: *n = v->u.s->ascii ? tv_sn(v) : uni_count(tv_sp(v), tv_sn(v)); return 0;
    case TV_LIST:
    case TV_TUPLE:
        if (v->u.l->view != VIEW_GEN) {
            *n = v->u.l->n;
            return 0;
        }
        break;
    case TV_DICT: *n = v->u.d->n; return 0;
    case TV_UNDEF: *n = 0; return 0;
    default: break;
    }
    return deras_fail(DERAS_EFORMAT, "object of type '%s' has no len()", tv_typename(v));
}
