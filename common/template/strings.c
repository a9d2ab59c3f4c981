/* SPDX-License-Identifier: Apache-2.0 */
/* strings.c - Python's str operations over UTF-8, shared by the filters and the methods:
 * case mapping (with the one-to-many upper cases of everyday text and the Greek final
 * sigma), strip, replace, split / rsplit (CPython's whitespace rules), find, startswith /
 * endswith, and str.format for the fields templates use ({}, {0}, {name}, !s, !r; a format
 * spec is refused as unsupported). Indexing is by code point and whitespace is
 * str.isspace's, as in Python. Cost: O(length), charged per STEP_SCAN bytes (render.h),
 * per STEP_COPY for the memchr / memmem based ones.
 */
#include "render.h"
#include "unicode.h"

#include "common/base/status.h"

#include <stdlib.h>
#include <string.h>

int str_require(const tv *v, const char *what)
{
    if (v->type == TV_STR)
        return 0;
    return deras_fail(DERAS_EFORMAT, "%s requires a str argument, not %s", what, tv_typename(v));
}

static int finish(sbuf *b, const tv *like, tv *out)
{
    int st = tsb_take(b, out);
    if (!st)
        out->markup = like->markup;
    return st;
}

/* Python's one-to-many upper cases (SpecialCasing.txt) for the characters that have them
 * in everyday text; true when cp was written. */
static bool special_upper(sbuf *b, uint32_t cp, int *st)
{
    static const struct {
        uint32_t cp;
        const char *up;
    } tab[] = {
        {0xDF, "SS"}, {0xFB00, "FF"}, {0xFB01, "FI"}, {0xFB02, "FL"}, {0xFB03, "FFI"},
        {0xFB04, "FFL"}, {0xFB05, "ST"}, {0xFB06, "ST"}, {0x149, "\xca\xbcN"},
        {0x1F0, "J\xcc\x8c"}, {0x587, "\xd4\xb5\xd5\x92"},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (tab[i].cp == cp) {
            *st = tsb_puts(b, tab[i].up);
            return true;
        }
    return false;
}

/* Greek capital sigma at the end of a word lowers to the final form. */
static bool final_sigma(const char *p, size_t n, size_t i, size_t len)
{
    bool before = false, after = false;
    if (i > 0) {
        size_t k = i - 1;
        while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80)
            k--;
        uint32_t c;
        uni_decode(p, n, k, &c);
        before = uni_isupper(c) || uni_islower(c);
    }
    if (i + len < n) {
        uint32_t c;
        uni_decode(p, n, i + len, &c);
        after = uni_isupper(c) || uni_islower(c);
    }
    return before && !after;
}

int str_case(struct rx *rx, const tv *s, int mode, tv *out)
{
    sbuf b;
    tsb_init(&b, rx);
    const char *p = tv_sp(s);
    size_t n = tv_sn(s);
    int st = rx_step(rx, n / STEP_SCAN);
    bool prev_cased = false, word_start = true, prev_sep = false;
    for (size_t i = 0; i < n && !st;) {
        uint32_t cp, o;
        size_t len = uni_decode(p, n, i, &cp);
        switch (mode) {
        case CASE_UPPER: o = uni_upper(cp); break;
        case CASE_LOWER: o = uni_lower(cp); break;
        case CASE_CAPITALIZE: o = i == 0 ? uni_upper(cp) : uni_lower(cp); break;
        case CASE_TITLE: { /* str.title: a cased char after an uncased one starts a word */
            bool cased = uni_isupper(cp) || uni_islower(cp);
            o = cased ? (prev_cased ? uni_lower(cp) : uni_upper(cp)) : cp;
            prev_cased = cased;
            break;
        }
        default: { /* Jinja2's |title: words split at runs of [-\s({\[<] */
            bool sep = uni_isspace(cp) || (cp < 0x80 && strchr("-({[<", (int)cp));
            word_start = i == 0 || sep != prev_sep;
            prev_sep = sep;
            o = word_start ? uni_upper(cp) : uni_lower(cp);
        }
        }
        if (mode == CASE_UPPER && cp >= 0xDF && special_upper(&b, cp, &st)) {
            i += len;
            continue;
        }
        if (cp == 0x130 && o != cp && (mode == CASE_LOWER || (mode == CASE_CAPITALIZE && i) ||
                                      mode == CASE_TITLE || mode == CASE_JINJA_TITLE)) {
            st = tsb_put(&b, "i\xcc\x87", 3); /* U+0130 lowers to i + combining dot */
            i += len;
            continue;
        }
        if (cp == 0x3A3 && o == 0x3C3 && final_sigma(p, n, i, len))
            o = 0x3C2;
        st = tsb_putcp(&b, o);
        i += len;
    }
    if (st) {
        tsb_free(&b);
        return st;
    }
    return finish(&b, s, out);
}

/* Whether cp is in `chars` (a str), or whitespace when chars is NULL. */
static bool in_set(uint32_t cp, const tv *chars)
{
    if (!chars)
        return uni_isspace(cp);
    const char *p = tv_sp(chars);
    size_t n = tv_sn(chars);
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += uni_decode(p, n, i, &c);
        if (c == cp)
            return true;
    }
    return false;
}

int str_strip(struct rx *rx, const tv *s, const tv *chars, int which, tv *out)
{
    if (chars && chars->type == TV_NONE)
        chars = NULL;
    int st;
    if (chars && (st = str_require(chars, "strip")))
        return st;
    const char *p = tv_sp(s);
    size_t n = tv_sn(s), a = 0, b = n;
    if ((st = rx_step(rx, n / STEP_SCAN)))
        return st;
    if (which & 1)
        while (a < b) {
            uint32_t cp;
            size_t len = uni_decode(p, n, a, &cp);
            if (!in_set(cp, chars))
                break;
            a += len;
        }
    if (which & 2)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)p[k] & 0xC0) == 0x80)
                k--;
            uint32_t cp;
            uni_decode(p, n, k, &cp);
            if (!in_set(cp, chars))
                break;
            b = k;
        }
    if (a == 0 && b == n) {
        *out = tv_ref(*s);
        return 0;
    }
    st = tv_str(rx, p + a, b - a, out);
    if (!st)
        out->markup = s->markup;
    return st;
}

int str_replace(struct rx *rx, const tv *s, const tv *old, const tv *new_, int64_t count,
                tv *out)
{
    const char *p = tv_sp(s), *o = tv_sp(old);
    size_t n = tv_sn(s), on = tv_sn(old);
    sbuf b;
    tsb_init(&b, rx);
    int st = rx_step(rx, n / STEP_COPY);
    size_t i = 0;
    int64_t done = 0;
    if (on == 0) { /* Python inserts `new` before every character and at the end */
        while (!st && i <= n) {
            if (count < 0 || done < count) {
                st = tsb_put(&b, tv_sp(new_), tv_sn(new_));
                done++;
            }
            if (st || i == n)
                break;
            uint32_t cp;
            size_t len = uni_decode(p, n, i, &cp);
            st = tsb_put(&b, p + i, len);
            i += len;
        }
    } else {
        while (!st && i < n) {
            const char *hit = count >= 0 && done >= count ? NULL : memmem(p + i, n - i, o, on);
            if (!hit) {
                st = tsb_put(&b, p + i, n - i);
                break;
            }
            size_t at = (size_t)(hit - p);
            if (!(st = tsb_put(&b, p + i, at - i)))
                st = tsb_put(&b, tv_sp(new_), tv_sn(new_));
            i = at + on;
            done++;
        }
    }
    if (st) {
        tsb_free(&b);
        return st;
    }
    return finish(&b, s, out);
}

/* str.split / str.rsplit. */
int str_split(struct rx *rx, const tv *s, const tv *sep, int64_t maxsplit, bool right,
                     tv *out)
{
    const char *p = tv_sp(s);
    size_t n = tv_sn(s);
    int st;
    if (sep && (st = str_require(sep, "split")))
        return st;
    if (sep && tv_sn(sep) == 0)
        return deras_fail(DERAS_EFORMAT, "empty separator");
    if ((st = rx_step(rx, n / (STEP_SCAN / 4))) || (st = tv_list_new(rx, TV_LIST, 0, out)))
        return st;
    /* Collect pieces as [start, end) byte ranges, then build the list in order. */
    size_t cap = 16, k = 0;
    size_t *r = tv_alloc(rx, cap * 2 * sizeof *r);
    if (!r) {
        tv_release(rx, out);
        return DERAS_ENOMEM;
    }
#define PIECE(a_, b_)                                                                        \
    do {                                                                                     \
        if (k == cap) {                                                                      \
            size_t *nr = tv_realloc(rx, r, cap * 2 * sizeof *r, cap * 4 * sizeof *r);        \
            if (!nr) {                                                                       \
                st = DERAS_ENOMEM;                                                           \
                goto done;                                                                   \
            }                                                                                \
            r = nr;                                                                          \
            cap *= 2;                                                                        \
        }                                                                                    \
        r[2 * k] = (a_);                                                                     \
        r[2 * k + 1] = (b_);                                                                 \
        k++;                                                                                 \
    } while (0)
    if (!sep) { /* CPython's split_whitespace / rsplit_whitespace */
        int64_t cnt = maxsplit < 0 ? INT64_MAX : maxsplit;
        if (!right) {
            size_t i = 0;
            while (cnt-- > 0) {
                i += uni_lspace(p + i, n - i);
                if (i == n)
                    break;
                size_t j = i;
                while (i < n) {
                    uint32_t cp;
                    size_t len = uni_decode(p, n, i, &cp);
                    if (uni_isspace(cp))
                        break;
                    i += len;
                }
                PIECE(j, i);
            }
            if (i < n) {
                i += uni_lspace(p + i, n - i);
                if (i != n)
                    PIECE(i, n);
            }
        } else {
            size_t e = n;
            while (cnt-- > 0) {
                e -= uni_rspace(p, e);
                if (e == 0)
                    break;
                size_t b = e;
                while (b > 0) {
                    size_t q = b - 1;
                    while (q > 0 && ((unsigned char)p[q] & 0xC0) == 0x80)
                        q--;
                    uint32_t cp;
                    uni_decode(p, n, q, &cp);
                    if (uni_isspace(cp))
                        break;
                    b = q;
                }
                PIECE(b, e);
                e = b;
            }
            if (e > 0) {
                e -= uni_rspace(p, e);
                if (e > 0)
                    PIECE(0, e);
            }
        }
    } else {
        const char *sp = tv_sp(sep);
        size_t sn = tv_sn(sep);
        if (!right) {
            size_t i = 0;
            for (;;) {
                const char *hit = maxsplit >= 0 && (int64_t)k >= maxsplit ? NULL
                                  : memmem(p + i, n - i, sp, sn);
                if (!hit) {
                    PIECE(i, n);
                    break;
                }
                PIECE(i, (size_t)(hit - p));
                i = (size_t)(hit - p) + sn;
            }
        } else {
            size_t j = n;
            for (;;) {
                size_t at = SIZE_MAX;
                if (!(maxsplit >= 0 && (int64_t)k >= maxsplit) && j >= sn)
                    for (size_t q = j - sn + 1; q-- > 0;)
                        if (!memcmp(p + q, sp, sn)) {
                            at = q;
                            break;
                        }
                if (at == SIZE_MAX) {
                    PIECE(0, j);
                    break;
                }
                PIECE(at + sn, j);
                j = at;
            }
        }
    }
    for (size_t x = 0; x < k && !st; x++) {
        size_t idx = right ? k - 1 - x : x;
        tv piece;
        if (!(st = tv_str(rx, p + r[2 * idx], r[2 * idx + 1] - r[2 * idx], &piece))) {
            piece.markup = s->markup;
            st = tv_list_push(rx, out, piece);
        }
    }
done:
#undef PIECE
    tv_free(rx, r, cap * 2 * sizeof *r);
    if (st)
        tv_release(rx, out);
    return st;
}

/* str.format with {}, {0}, {name}, {{ and }}, and !s / !r; format specs are refused. */
int str_format(struct rx *rx, const tv *s, const struct args *a, tv *out)
{
    if (s->markup)
        return deras_fail(DERAS_EUNSUPPORTED, "format() on a Markup string is not supported");
    const char *p = tv_sp(s);
    size_t n = tv_sn(s);
    sbuf b;
    tsb_init(&b, rx);
    int st = 0, autonum = 0;
    for (size_t i = 0; i < n && !st;) {
        char c = p[i];
        if ((c == '{' || c == '}') && i + 1 < n && p[i + 1] == c) {
            st = tsb_putc(&b, c);
            i += 2;
            continue;
        }
        if (c == '}') {
            st = deras_fail(DERAS_EFORMAT, "Single '}' encountered in format string");
            break;
        }
        if (c != '{') {
            st = tsb_putc(&b, c);
            i++;
            continue;
        }
        const char *close = memchr(p + i, '}', n - i);
        if (!close) {
            st = deras_fail(DERAS_EFORMAT, "Single '{' encountered in format string");
            break;
        }
        const char *f = p + i + 1;
        size_t fl = (size_t)(close - f), name_len = strcspn(f, "!:}.[");
        if (name_len > fl)
            name_len = fl;
        char conv = 0;
        if (name_len < fl) {
            if (f[name_len] == '!' && name_len + 2 == fl)
                conv = f[name_len + 1];
            else {
                st = deras_fail(DERAS_EUNSUPPORTED, "format field '{%.*s}' is not supported",
                                (int)fl, f);
                break;
            }
        }
        const tv *v = NULL;
        if (name_len == 0) {
            if (autonum < a->n_pos)
                v = &a->pos[autonum];
            autonum++;
        } else if (f[0] >= '0' && f[0] <= '9') {
            int idx = atoi(f);
            if (idx < a->n_pos)
                v = &a->pos[idx];
        } else {
            for (int k = 0; k < a->n_kw; k++)
                if (strlen(a->kw_names[k]) == name_len && !strncmp(a->kw_names[k], f, name_len))
                    v = &a->kw[k];
        }
        if (!v) {
            st = deras_fail(DERAS_EFORMAT, "format field '{%.*s}' has no argument", (int)fl, f);
            break;
        }
        if (conv == 'r')
            st = tv_repr(&b, v);
        else if (conv == 0 || conv == 's')
            st = tv_print(&b, v);
        else
            st = deras_fail(DERAS_EUNSUPPORTED, "format conversion '!%c' is not supported", conv);
        i = (size_t)(close - p) + 1;
    }
    if (!st)
        st = rx_step(rx, b.len / STEP_SCAN);
    return tsb_finish(&b, st, out);
}

/* Index of the first (last) occurrence in code points, or -1. */
int str_find(struct rx *rx, const tv *s, const tv *sub, bool last, int64_t *at)
{
    int st = str_require(sub, "find");
    if (st || (st = rx_step(rx, tv_sn(s) / STEP_COPY)))
        return st;
    const char *p = tv_sp(s), *hit = NULL;
    size_t n = tv_sn(s), m = tv_sn(sub);
    if (!last) {
        hit = memmem(p, n, tv_sp(sub), m);
    } else {
        for (size_t q = n >= m ? n - m + 1 : 0; q-- > 0;)
            if (!memcmp(p + q, tv_sp(sub), m)) {
                hit = p + q;
                break;
            }
    }
    *at = hit ? (int64_t)uni_count(p, (size_t)(hit - p)) : -1;
    return 0;
}

int str_affix(const tv *s, const tv *x, bool end, bool *res)
{
    const tv *opts = x;
    size_t n_opts = 1;
    if (x->type == TV_TUPLE) {
        opts = x->u.l->v;
        n_opts = x->u.l->n;
    }
    *res = false;
    for (size_t i = 0; i < n_opts; i++) {
        const tv *o = &opts[i];
        if (o->type != TV_STR)
            return deras_fail(DERAS_EFORMAT, "%s first arg must be str or a tuple of str",
                              end ? "endswith" : "startswith");
        size_t n = tv_sn(s), m = tv_sn(o);
        if (m <= n && !memcmp(tv_sp(s) + (end ? n - m : 0), tv_sp(o), m))
            *res = true;
    }
    return 0;
}
