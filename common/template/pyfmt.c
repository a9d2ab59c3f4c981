/* SPDX-License-Identifier: Apache-2.0 */
/* pyfmt.c - values printed as Python prints them: str() (what {{ x }} outputs), repr()
 * (what a list or dict shows of its items), repr(float) (the shortest string that reads
 * back to the same double), json.dumps (transformers' tojson: ensure_ascii, indent,
 * separators, sort_keys), and markupsafe's escape.
 *
 * Values Python would print as an object address (a function, a bound method) cannot be
 * reproduced: printing them fails with DERAS_EUNSUPPORTED. Walks into containers are
 * bounded by max_depth (a namespace can contain itself). Cost: O(output).
 */
#include "render.h"

#include "common/base/status.h"
#include "unicode.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int float_repr(char *buf, size_t cap, double f)
{
    if (isnan(f))
        return snprintf(buf, cap, "nan");
    if (isinf(f))
        return snprintf(buf, cap, f < 0 ? "-inf" : "inf");
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, neg = 0;
    const char *s = tmp;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    int exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int decpt = exp10 + 1;
    size_t k = 0;
    char out[64];
    if (neg)
        out[k++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = 0; i < -decpt; i++)
                out[k++] = '0';
            memcpy(out + k, digits, (size_t)nd);
            k += (size_t)nd;
        } else if (decpt >= nd) {
            memcpy(out + k, digits, (size_t)nd);
            k += (size_t)nd;
            for (int i = nd; i < decpt; i++)
                out[k++] = '0';
            out[k++] = '.';
            out[k++] = '0';
        } else {
            memcpy(out + k, digits, (size_t)decpt);
            k += (size_t)decpt;
            out[k++] = '.';
            memcpy(out + k, digits + decpt, (size_t)(nd - decpt));
            k += (size_t)(nd - decpt);
        }
        out[k] = 0;
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            memcpy(out + k, digits + 1, (size_t)(nd - 1));
            k += (size_t)(nd - 1);
        }
        snprintf(out + k, sizeof out - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    return snprintf(buf, cap, "%s", out);
}

static int put_num(sbuf *b, const tv *v)
{
    char tmp[64];
    if (v->type == TV_INT)
        snprintf(tmp, sizeof tmp, "%" PRId64, v->u.i);
    else
        float_repr(tmp, sizeof tmp, v->u.f);
    return tsb_puts(b, tmp);
}

static int enter_walk(sbuf *b)
{
    if (b->rx && ++b->rx->vdepth > b->rx->lim.max_depth) {
        b->rx->vdepth--;
        return deras_fail(DERAS_EUNSUPPORTED, "a value nested deeper than max_depth (%d), or "
                          "containing itself, cannot be printed", b->rx->lim.max_depth);
    }
    return 0;
}

static void leave_walk(sbuf *b)
{
    if (b->rx)
        b->rx->vdepth--;
}

static int repr_str(sbuf *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char quote = sq && !dq ? '"' : '\'';
    int st = tsb_putc(b, quote);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n && !st;) {
        uint32_t cp;
        size_t len = uni_decode(s, n, i, &cp);
        char esc[12];
        int w = 0;
        if (cp == (uint32_t)quote || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            st = tsb_put(b, esc, 2);
        } else if (cp == '\t' || cp == '\n' || cp == '\r') {
            esc[0] = '\\';
            esc[1] = cp == '\t' ? 't' : cp == '\n' ? 'n' : 'r';
            st = tsb_put(b, esc, 2);
        } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && !uni_isprintable(cp))) {
            w = cp <= 0xFF ? 2 : cp <= 0xFFFF ? 4 : 8;
            esc[0] = '\\';
            esc[1] = w == 2 ? 'x' : w == 4 ? 'u' : 'U';
            for (int j = 0; j < w; j++)
                esc[2 + j] = hex[(cp >> (4 * (w - 1 - j))) & 15];
            st = tsb_put(b, esc, (size_t)(2 + w));
        } else {
            st = tsb_put(b, s + i, len);
        }
        i += len;
    }
    return st ? st : tsb_putc(b, quote);
}

static int repr_seq(sbuf *b, const struct tlist *l, const char *open, const char *close,
                    bool one_comma)
{
    int st = tsb_puts(b, open);
    for (size_t i = 0; i < l->n && !st; i++) {
        if (i)
            st = tsb_put(b, ", ", 2);
        if (!st)
            st = tv_repr(b, &l->v[i]);
    }
    if (!st && one_comma && l->n == 1)
        st = tsb_putc(b, ',');
    return st ? st : tsb_puts(b, close);
}

static int repr_dict(sbuf *b, const struct tdict *d)
{
    int st = tsb_putc(b, '{');
    for (size_t i = 0; i < d->n && !st; i++) {
        if (i)
            st = tsb_put(b, ", ", 2);
        if (!st)
            st = tv_repr(b, &d->k[i]);
        if (!st)
            st = tsb_put(b, ": ", 2);
        if (!st)
            st = tv_repr(b, &d->v[i]);
    }
    return st ? st : tsb_putc(b, '}');
}

static int unprintable(const tv *v)
{
    return deras_fail(DERAS_EUNSUPPORTED, "printing a %s (Python shows its address) is not "
                      "supported", tv_typename(v));
}

/* str() and repr() agree on everything but strings and Undefined. */
static int print_other(sbuf *b, const tv *v)
{
    int st;
    switch (v->type) {
    case TV_NONE: return tsb_put(b, "None", 4);
    case TV_BOOL: return v->u.b ? tsb_put(b, "True", 4) : tsb_put(b, "False", 5);
    case TV_INT:
    case TV_FLOAT: return put_num(b, v);
    case TV_LIST:
    case TV_TUPLE: {
        const struct tlist *l = v->u.l;
        if (l->view == VIEW_GEN)
            return unprintable(v);
        if ((st = enter_walk(b)))
            return st;
        switch (l->view) {
        case VIEW_RANGE: {
            char tmp[96];
            if (l->r_step == 1)
                snprintf(tmp, sizeof tmp, "range(%" PRId64 ", %" PRId64 ")", l->r_start, l->r_stop);
            else
                snprintf(tmp, sizeof tmp, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ")",
                         l->r_start, l->r_stop, l->r_step);
            st = tsb_puts(b, tmp);
            break;
        }
        case VIEW_ITEMS: st = repr_seq(b, l, "dict_items([", "])", false); break;
        case VIEW_KEYS: st = repr_seq(b, l, "dict_keys([", "])", false); break;
        case VIEW_VALUES: st = repr_seq(b, l, "dict_values([", "])", false); break;
        default:
            st = v->type == TV_LIST ? repr_seq(b, l, "[", "]", false) : repr_seq(b, l, "(", ")", true);
        }
        leave_walk(b);
        return st;
    }
    case TV_DICT:
    case TV_NS:
        if ((st = enter_walk(b)))
            return st;
        if (v->type == TV_NS)
            st = tsb_puts(b, "<Namespace ");
        if (!st)
            st = repr_dict(b, v->u.d);
        if (!st && v->type == TV_NS)
            st = tsb_putc(b, '>');
        leave_walk(b);
        return st;
    case TV_MACRO:
        if ((st = tsb_puts(b, "<Macro ")) || (st = repr_str(b, v->u.macro->name, strlen(v->u.macro->name))))
            return st;
        return tsb_putc(b, '>');
    default: return unprintable(v);
    }
}

int tv_print(sbuf *b, const tv *v)
{
    if (v->type == TV_UNDEF || v->type == TV_EMPTY)
        return 0;
    if (v->type == TV_STR)
        return tsb_put(b, v->u.s->p, v->u.s->len);
    return print_other(b, v);
}

int tv_repr(sbuf *b, const tv *v)
{
    int st;
    if (v->type == TV_UNDEF || v->type == TV_EMPTY)
        return tsb_put(b, "Undefined", 9);
    if (v->type == TV_STR) {
        if (v->markup && (st = tsb_puts(b, "Markup(")))
            return st;
        if ((st = repr_str(b, v->u.s->p, v->u.s->len)))
            return st;
        return v->markup ? tsb_putc(b, ')') : 0;
    }
    return print_other(b, v);
}

int tv_to_str(struct rx *rx, const tv *v, tv *out)
{
    if (v->type == TV_STR) {
        *out = tv_ref(*v);
        out->markup = 0;
        return 0;
    }
    sbuf b;
    tsb_init(&b, rx);
    int st = tv_print(&b, v);
    return tsb_finish(&b, st, out);
}

/* --- json.dumps --- */

static int json_str(sbuf *b, const char *s, size_t n, bool ascii)
{
    static const char hex[] = "0123456789abcdef";
    int st = tsb_putc(b, '"');
    size_t run = 0; /* bytes copied as they are, flushed in one put */
    for (size_t i = 0; i < n && !st;) {
        uint32_t cp;
        size_t len = uni_decode(s, n, i, &cp);
        const char *esc = NULL;
        char u[16];
        size_t ulen = 0;
        switch (cp) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7F)) {
                uint32_t units[2] = {cp, 0};
                int nu = 1;
                if (cp > 0xFFFF) {
                    units[0] = 0xD800 + ((cp - 0x10000) >> 10);
                    units[1] = 0xDC00 + ((cp - 0x10000) & 0x3FF);
                    nu = 2;
                }
                for (int j = 0; j < nu; j++) {
                    u[ulen++] = '\\';
                    u[ulen++] = 'u';
                    for (int h = 3; h >= 0; h--)
                        u[ulen++] = hex[(units[j] >> (4 * h)) & 15];
                }
            }
        }
        if (esc || ulen) {
            if (run)
                st = tsb_put(b, s + i - run, run);
            run = 0;
            if (!st)
                st = esc ? tsb_puts(b, esc) : tsb_put(b, u, ulen);
        } else {
            run += len;
        }
        i += len;
    }
    if (!st && run)
        st = tsb_put(b, s + n - run, run);
    return st ? st : tsb_putc(b, '"');
}

static int json_newline(sbuf *b, const json_opts *o, int level)
{
    int st = tsb_putc(b, '\n');
    for (int i = 0; i < level && !st; i++)
        st = tsb_put(b, o->indent, o->indent_len);
    return st;
}

static int not_json(const tv *v)
{
    return deras_fail(DERAS_EFORMAT, "Object of type %s is not JSON serializable", tv_typename(v));
}

/* A dict key as json.dumps converts it. */
static int json_key(sbuf *b, const tv *k, const json_opts *o)
{
    char tmp[64];
    switch (k->type) {
    case TV_STR: return json_str(b, k->u.s->p, k->u.s->len, o->ensure_ascii);
    case TV_INT: snprintf(tmp, sizeof tmp, "\"%" PRId64 "\"", k->u.i); return tsb_puts(b, tmp);
    case TV_BOOL: return tsb_puts(b, k->u.b ? "\"true\"" : "\"false\"");
    case TV_NONE: return tsb_puts(b, "\"null\"");
    case TV_FLOAT:
        if (isnan(k->u.f))
            return tsb_puts(b, "\"NaN\"");
        if (isinf(k->u.f))
            return tsb_puts(b, k->u.f < 0 ? "\"-Infinity\"" : "\"Infinity\"");
        tmp[0] = '"';
        float_repr(tmp + 1, sizeof tmp - 2, k->u.f);
        strcat(tmp, "\"");
        return tsb_puts(b, tmp);
    default:
        return deras_fail(DERAS_EFORMAT, "keys must be str, int, float, bool or None, not %s",
                          tv_typename(k));
    }
}

static int key_lt(void *ctx, const void *a, const void *b, bool *lt)
{
    const tv *keys = ctx;
    return tv_lt(&keys[*(const size_t *)a], &keys[*(const size_t *)b], lt);
}

static int json_val(sbuf *b, const tv *v, const json_opts *o, int level)
{
    int st = 0;
    switch (v->type) {
    case TV_NONE: return tsb_put(b, "null", 4);
    case TV_BOOL: return v->u.b ? tsb_put(b, "true", 4) : tsb_put(b, "false", 5);
    case TV_INT: return put_num(b, v);
    case TV_FLOAT:
        if (isnan(v->u.f))
            return tsb_puts(b, "NaN");
        if (isinf(v->u.f))
            return tsb_puts(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        return put_num(b, v);
    case TV_STR: return json_str(b, v->u.s->p, v->u.s->len, o->ensure_ascii);
    case TV_LIST:
    case TV_TUPLE: {
        const struct tlist *l = v->u.l;
        if (l->view != VIEW_NONE)
            return not_json(v);
        if (l->n == 0)
            return tsb_put(b, "[]", 2);
        if ((st = enter_walk(b)) || (st = tsb_putc(b, '[')))
            return st;
        for (size_t i = 0; i < l->n && !st; i++) {
            if (i)
                st = tsb_put(b, o->item_sep, o->item_sep_len);
            if (!st && o->has_indent)
                st = json_newline(b, o, level + 1);
            if (!st)
                st = json_val(b, &l->v[i], o, level + 1);
        }
        if (!st && o->has_indent)
            st = json_newline(b, o, level);
        leave_walk(b);
        return st ? st : tsb_putc(b, ']');
    }
    case TV_DICT: {
        const struct tdict *d = v->u.d;
        if (d->n == 0)
            return tsb_put(b, "{}", 2);
        size_t *order = NULL;
        if (o->sort_keys) {
            order = malloc(d->n * sizeof *order);
            if (!order)
                return deras_fail(DERAS_ENOMEM, "out of memory");
            for (size_t i = 0; i < d->n; i++)
                order[i] = i;
            if ((st = tv_sort(order, d->n, sizeof *order, key_lt, d->k))) {
                free(order);
                return st;
            }
        }
        if ((st = enter_walk(b)) || (st = tsb_putc(b, '{'))) {
            free(order);
            return st;
        }
        for (size_t j = 0; j < d->n && !st; j++) {
            size_t i = order ? order[j] : j;
            if (j)
                st = tsb_put(b, o->item_sep, o->item_sep_len);
            if (!st && o->has_indent)
                st = json_newline(b, o, level + 1);
            if (!st)
                st = json_key(b, &d->k[i], o);
            if (!st)
                st = tsb_put(b, o->key_sep, o->key_sep_len);
            if (!st)
                st = json_val(b, &d->v[i], o, level + 1);
        }
        free(order);
        if (!st && o->has_indent)
            st = json_newline(b, o, level);
        leave_walk(b);
        return st ? st : tsb_putc(b, '}');
    }
    default: return not_json(v);
    }
}

int tv_tojson(sbuf *b, const tv *v, const json_opts *o)
{
    return json_val(b, v, o, 0);
}

int html_escape(sbuf *b, const char *p, size_t n)
{
    size_t run = 0;
    int st = 0;
    for (size_t i = 0; i < n && !st; i++) {
        const char *e = NULL;
        switch (p[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '\'': e = "&#39;"; break;
        case '"': e = "&#34;"; break;
        default: run++; continue;
        }
        if (run)
            st = tsb_put(b, p + i - run, run);
        run = 0;
        if (!st)
            st = tsb_puts(b, e);
    }
    if (!st && run)
        st = tsb_put(b, p + n - run, run);
    return st;
}
