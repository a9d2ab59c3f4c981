/* methods.c - the Python methods templates call on strings (strip, split, startswith,
 * replace, format, ...), dicts (get, items, keys, values) and lists (count, index), and
 * the globals of transformers' environment: range (capped at 100000 items like the
 * sandbox), namespace, dict, raise_exception, strftime_now.
 *
 * Strings are UTF-8 and indexed by code point as Python does; whitespace is Python's
 * str.isspace set. Methods that would change a list or dict never get here: the sandbox
 * refuses them at the lookup (eval.c). Cost: O(length) per call, charged in steps.
 */
#include "builtins.h"
#include "render.h"
#include "unicode.h"

#include "common/base/status.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The bound argument i, or NULL when not given or None. */
static inline const tv_t *given(const tv_t *slot, int i)
{
    return slot[i].type != TV_EMPTY && slot[i].type != TV_NONE ? &slot[i] : NULL;
}
#define ARG(i) given(slot, i)

static int need_str(const tv_t *v, const char *what)
{
    if (v->type == TV_STR)
        return 0;
    return deras_fail(DERAS_EFORMAT, "%s requires a str argument, not %s", what, tv_typename(v));
}

static int finish(sbuf_t *b, const tv_t *like, tv_t *out)
{
    int st = sb_take(b, out);
    if (!st)
        out->markup = like->markup;
    return st;
}

/* Python's one-to-many upper cases (SpecialCasing.txt) for the characters that have them
 * in everyday text; true when cp was written. */
static bool special_upper(sbuf_t *b, uint32_t cp, int *st)
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
            *st = sb_puts(b, tab[i].up);
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

int str_case(rx_t *rx, const tv_t *s, int mode, tv_t *out)
{
    sbuf_t b;
    sb_init(&b, rx);
    const char *p = tv_sp(s);
    size_t n = tv_sn(s);
    int st = rx_step(rx, n / 64);
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
            st = sb_put(&b, "i\xcc\x87", 3); /* U+0130 lowers to i + combining dot */
            i += len;
            continue;
        }
        if (cp == 0x3A3 && o == 0x3C3 && final_sigma(p, n, i, len))
            o = 0x3C2;
        st = sb_putcp(&b, o);
        i += len;
    }
    if (st) {
        sb_free(&b);
        return st;
    }
    return finish(&b, s, out);
}

/* Whether cp is in `chars` (a str), or whitespace when chars is NULL. */
static bool in_set(uint32_t cp, const tv_t *chars)
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

int str_strip(rx_t *rx, const tv_t *s, const tv_t *chars, int which, tv_t *out)
{
    if (chars && chars->type == TV_NONE)
        chars = NULL;
    int st;
    if (chars && (st = need_str(chars, "strip")))
        return st;
    const char *p = tv_sp(s);
    size_t n = tv_sn(s), a = 0, b = n;
    if ((st = rx_step(rx, n / 64)))
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

int str_replace(rx_t *rx, const tv_t *s, const tv_t *old, const tv_t *new_, int64_t count,
                tv_t *out)
{
    const char *p = tv_sp(s), *o = tv_sp(old);
    size_t n = tv_sn(s), on = tv_sn(old);
    sbuf_t b;
    sb_init(&b, rx);
    int st = rx_step(rx, n / 64);
    size_t i = 0;
    int64_t done = 0;
    if (on == 0) { /* Python inserts `new` before every character and at the end */
        while (!st && i <= n) {
            if (count < 0 || done < count) {
                st = sb_put(&b, tv_sp(new_), tv_sn(new_));
                done++;
            }
            if (st || i == n)
                break;
            uint32_t cp;
            size_t len = uni_decode(p, n, i, &cp);
            st = sb_put(&b, p + i, len);
            i += len;
        }
    } else {
        while (!st && i < n) {
            const char *hit = count >= 0 && done >= count ? NULL : memmem(p + i, n - i, o, on);
            if (!hit) {
                st = sb_put(&b, p + i, n - i);
                break;
            }
            size_t at = (size_t)(hit - p);
            if (!(st = sb_put(&b, p + i, at - i)))
                st = sb_put(&b, tv_sp(new_), tv_sn(new_));
            i = at + on;
            done++;
        }
    }
    if (st) {
        sb_free(&b);
        return st;
    }
    return finish(&b, s, out);
}

/* str.split / str.rsplit. */
static int str_split(rx_t *rx, const tv_t *s, const tv_t *sep, int64_t maxsplit, bool right,
                     tv_t *out)
{
    const char *p = tv_sp(s);
    size_t n = tv_sn(s);
    int st;
    if (sep && (st = need_str(sep, "split")))
        return st;
    if (sep && tv_sn(sep) == 0)
        return deras_fail(DERAS_EFORMAT, "empty separator");
    if ((st = rx_step(rx, n / 16)) || (st = tv_list_new(rx, TV_LIST, 0, out)))
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
        tv_t piece;
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
static int str_format(rx_t *rx, const tv_t *s, const args_t *a, tv_t *out)
{
    if (s->markup)
        return deras_fail(DERAS_EUNSUPPORTED, "format() on a Markup string is not supported");
    const char *p = tv_sp(s);
    size_t n = tv_sn(s);
    sbuf_t b;
    sb_init(&b, rx);
    int st = 0, autonum = 0;
    for (size_t i = 0; i < n && !st;) {
        char c = p[i];
        if ((c == '{' || c == '}') && i + 1 < n && p[i + 1] == c) {
            st = sb_putc(&b, c);
            i += 2;
            continue;
        }
        if (c == '}') {
            st = deras_fail(DERAS_EFORMAT, "Single '}' encountered in format string");
            break;
        }
        if (c != '{') {
            st = sb_putc(&b, c);
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
        const tv_t *v = NULL;
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
        st = rx_step(rx, b.len / 64);
    if (st) {
        sb_free(&b);
        return st;
    }
    return sb_take(&b, out);
}

/* Index of the first (last) occurrence in code points, or -1. */
static int str_find(rx_t *rx, const tv_t *s, const tv_t *sub, bool last, int64_t *at)
{
    int st = need_str(sub, "find");
    if (st || (st = rx_step(rx, tv_sn(s) / 64)))
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

static int affix(const tv_t *s, const tv_t *x, bool end, bool *res)
{
    const tv_t *opts = x;
    size_t n_opts = 1;
    if (x->type == TV_TUPLE) {
        opts = x->u.l->v;
        n_opts = x->u.l->n;
    }
    *res = false;
    for (size_t i = 0; i < n_opts; i++) {
        const tv_t *o = &opts[i];
        if (o->type != TV_STR)
            return deras_fail(DERAS_EFORMAT, "%s first arg must be str or a tuple of str",
                              end ? "endswith" : "startswith");
        size_t n = tv_sn(s), m = tv_sn(o);
        if (m <= n && !memcmp(tv_sp(s) + (end ? n - m : 0), tv_sp(o), m))
            *res = true;
    }
    return 0;
}

static int str_method(rx_t *rx, int id, const tv_t *s, const args_t *a, tv_t *slot, tv_t *out)
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
        if ((st = args_bind(a, ps, 3, slot, name)))
            return st;
        if (slot[0].type == TV_EMPTY)
            return deras_fail(DERAS_EFORMAT, "%s() takes at least 1 argument", name);
        if (ARG(1) || ARG(2))
            return deras_fail(DERAS_EUNSUPPORTED, "%s() with start or end is not supported", name);
        if ((st = affix(s, &slot[0], id == M_ENDSWITH, &r)))
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
        if ((st = need_str(&slot[0], name)) || (st = need_str(&slot[1], name)))
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
        if ((st = args_bind(a, ps, 3, slot, name)))
            return st;
        if (slot[0].type == TV_EMPTY)
            return deras_fail(DERAS_EFORMAT, "%s() takes at least 1 argument", name);
        if (ARG(1) || ARG(2))
            return deras_fail(DERAS_EUNSUPPORTED, "%s() with start or end is not supported", name);
        if ((st = str_find(rx, s, &slot[0], id == M_RFIND, &at)))
            return st;
        if (id == M_INDEX && at < 0)
            return deras_fail(DERAS_EFORMAT, "substring not found");
        *out = tv_int(at);
        return 0;
    }
    case M_COUNT: {
        static const char *const ps[] = {"sub"};
        if ((st = args_bind(a, ps, 1, slot, name)) || (st = need_str(&slot[0], name)))
            return st;
        size_t m = tv_sn(&slot[0]), n = tv_sn(s), c = 0;
        if (m == 0) {
            c = uni_count(tv_sp(s), n) + 1;
        } else {
            for (const char *q = tv_sp(s), *e = q + n; (q = memmem(q, (size_t)(e - q), tv_sp(&slot[0]), m)); q += m)
                c++;
        }
        *out = tv_int((int64_t)c);
        return rx_step(rx, n / 64);
    }
    case M_FORMAT: return str_format(rx, s, a, out);
    case M_JOIN: {
        static const char *const ps[] = {"iterable"};
        tv_t it;
        if ((st = args_bind(a, ps, 1, slot, name)) || (st = tv_iterate(rx, &slot[0], &it)))
            return st;
        if (s->markup) {
            tv_release(rx, &it);
            return deras_fail(DERAS_EUNSUPPORTED, "join() on a Markup string is not supported");
        }
        sbuf_t b;
        sb_init(&b, rx);
        for (size_t i = 0; i < it.u.l->n && !st; i++) {
            const tv_t *x = &it.u.l->v[i];
            if (x->type != TV_STR)
                st = deras_fail(DERAS_EFORMAT, "sequence item %zu: expected str instance, %s found",
                                i, tv_typename(x));
            else if (!(st = i ? sb_put(&b, tv_sp(s), tv_sn(s)) : 0))
                st = sb_put(&b, tv_sp(x), tv_sn(x));
        }
        tv_release(rx, &it);
        if (!st)
            st = rx_step(rx, b.len / 64);
        if (st) {
            sb_free(&b);
            return st;
        }
        return sb_take(&b, out);
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
            tv_t line;
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
        if ((st = args_bind(a, ps, 1, slot, name)) || (st = need_str(&slot[0], name)))
            return st;
        bool end = id == M_REMOVESUFFIX;
        if ((st = affix(s, &slot[0], end, &r)))
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
static int dict_view(rx_t *rx, const tv_t *d, int kind, tv_t *out)
{
    size_t n = d->u.d->n;
    int st = rx_step(rx, n);
    if (st || (st = tv_list_new(rx, TV_LIST, n, out)))
        return st;
    out->u.l->view = (uint8_t)kind;
    for (size_t i = 0; i < n && !st; i++) {
        if (kind == VIEW_ITEMS) {
            tv_t t;
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

int method_call(rx_t *rx, int id, const tv_t *self, const args_t *a, tv_t *out)
{
    tv_t slot[4];
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
            const tv_t *v = tv_dict_get(self, &slot[0]);
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

/* --- globals --- */

/* dict(*args, **kwargs) and namespace(...): a mapping or pairs, then keywords. */
static int build_dict(rx_t *rx, const args_t *a, int type, tv_t *out)
{
    if (a->n_pos > 1)
        return deras_fail(DERAS_EFORMAT, "dict expected at most 1 argument, got %d", a->n_pos);
    int st = tv_dict_new(rx, type, 0, out);
    if (!st && a->n_pos == 1) {
        const tv_t *src = &a->pos[0];
        if (src->type == TV_DICT || src->type == TV_NS) {
            for (size_t i = 0; i < src->u.d->n && !st; i++)
                st = tv_dict_set(rx, out, tv_ref(src->u.d->k[i]), tv_ref(src->u.d->v[i]));
        } else {
            tv_t it;
            if (!(st = tv_iterate(rx, src, &it))) {
                for (size_t i = 0; i < it.u.l->n && !st; i++) {
                    const tv_t *pair = &it.u.l->v[i];
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
        tv_t key;
        if (!(st = tv_str(rx, a->kw_names[k], strlen(a->kw_names[k]), &key)))
            st = tv_dict_set(rx, out, key, tv_ref(a->kw[k]));
    }
    if (!st && type == TV_NS)
        st = rx_track_ns(rx, out);
    if (st)
        tv_release(rx, out);
    return st;
}

static int range(rx_t *rx, const args_t *a, tv_t *out)
{
    int64_t v[3] = {0, 0, 1};
    if (a->n_kw || a->n_pos < 1 || a->n_pos > 3)
        return deras_fail(DERAS_EFORMAT, "range expected 1 to 3 integer arguments");
    for (int i = 0; i < a->n_pos; i++) {
        const tv_t *x = &a->pos[i];
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

int global_call(rx_t *rx, int id, const args_t *a, tv_t *out)
{
    tv_t slot[1], msg;
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
        size_t n = tv_sn(&slot[0]) ? strftime(buf, cap, tv_sp(&slot[0]), &tm) : 0;
        st = tv_str(rx, buf, n, out);
        tv_free(rx, buf, cap);
        return st;
    }
    }
    return deras_fail(DERAS_EUNSUPPORTED, "global '%s' is not supported", global_name(id));
}
