/* SPDX-License-Identifier: Apache-2.0 */
/* regex.c - regular expressions to a GBNF expression (regex.h has the subset).
 *
 * Recursive descent over Python's `re` syntax, writing GBNF as it goes: an alternation is
 * a parenthesized group of sequences, a literal character a one-character GBNF literal, a
 * class a GBNF class (escapes \d \w \s expanded to their ASCII ranges), a quantifier the
 * same GBNF operator after its atom (GBNF has * + ? {m} {m,} {m,n}). `{` that does not
 * start a valid quantifier is a literal, as in Python. Special characters in the output are
 * written as \xHH / \uHHHH escapes that llama.cpp's parser reads too, so the output works
 * in both. Costs: O(len) time and output; recursion bounded by max_nesting.
 */
#include "common/grammar/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"

typedef struct rx {
    const char *s;
    size_t n, i;
    int depth;
    bool json;          /* inside a JSON string: no raw ", \ or control characters */
    grammar_limits lim;
    char *out;
    size_t len, cap;
} rx;

static int put(rx *x, const char *s, size_t n)
{
    if (x->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 256;
        while (cap < x->len + n + 1)
            cap *= 2;
        char *o = realloc(x->out, cap);
        if (!o)
            return deras_fail(DERAS_ENOMEM, "regex: out of memory");
        x->out = o;
        x->cap = cap;
    }
    memcpy(x->out + x->len, s, n);
    x->len += n;
    x->out[x->len] = 0;
    return DERAS_OK;
}

static int puts_(rx *x, const char *s)
{
    return put(x, s, strlen(s));
}

static int bad(const rx *x, int code, const char *what)
{
    return deras_fail(code, "regex: at offset %zu: %s", x->i, what);
}

static int peek(const rx *x)
{
    return x->i < x->n ? (unsigned char)x->s[x->i] : -1;
}

/* A code point as GBNF text: alphanumerics as they are, everything else escaped. */
static int put_cp(rx *x, uint32_t cp)
{
    char b[16];
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
        b[0] = (char)cp, b[1] = 0;
    else if (cp < 0x80)
        snprintf(b, sizeof b, "\\x%02X", (unsigned)cp);
    else if (cp <= 0xFFFF)
        snprintf(b, sizeof b, "\\u%04X", (unsigned)cp);
    else
        snprintf(b, sizeof b, "\\U%08X", (unsigned)cp);
    return puts_(x, b);
}

static int put_literal(rx *x, uint32_t cp)
{
    if (x->json && (cp == '"' || cp == '\\' || cp < 0x20)) { /* the JSON escape instead */
        char b[16];
        if (cp == '"' || cp == '\\')
            snprintf(b, sizeof b, "\"\\\\\\x%02X\"", (unsigned)cp);
        else
            snprintf(b, sizeof b, "\"\\\\u00%02X\"", (unsigned)cp);
        return puts_(x, b);
    }
    int rc = puts_(x, "\"");
    if (!rc)
        rc = put_cp(x, cp);
    return rc ? rc : puts_(x, "\"");
}

static int hexn(rx *x, int digits, uint32_t *v)
{
    *v = 0;
    for (int k = 0; k < digits; k++) {
        int c = peek(x), h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                             : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0)
            return bad(x, DERAS_EFORMAT, "expecting a hex digit");
        *v = *v * 16 + (uint32_t)h;
        x->i++;
    }
    if (*v > 0x10FFFF || (*v >= 0xD800 && *v <= 0xDFFF))
        return bad(x, DERAS_EFORMAT, "escape is not a Unicode scalar value");
    return DERAS_OK;
}

/* The ranges an escape letter names (d w s D W S: ASCII meanings), or 0 ranges. */
static int class_escape(int c, bool *negated, const uint32_t **r)
{
    static const uint32_t d[] = {'0', '9'};
    static const uint32_t w[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
    static const uint32_t sp[] = {0x09, 0x0D, 0x20, 0x20};
    *negated = c == 'D' || c == 'W' || c == 'S';
    switch (c) {
    case 'd': case 'D': *r = d; return 1;
    case 'w': case 'W': *r = w; return 4;
    case 's': case 'S': *r = sp; return 2;
    default: return 0;
    }
}

/* After a backslash: a single character into *cp (return 0), or a class escape (return
 * its number of ranges, *cls set), or an error. */
static int escape(rx *x, uint32_t *cp, const uint32_t **cls, bool *negated)
{
    int c = peek(x);
    if (c < 0)
        return bad(x, DERAS_EFORMAT, "a trailing backslash");
    x->i++;
    int n = class_escape(c, negated, cls);
    if (n)
        return n;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return hexn(x, 2, cp);
    case 'u': return hexn(x, 4, cp);
    case 'U': return hexn(x, 8, cp);
    case 'b': case 'B': case 'A': case 'Z': case 'z': case 'G':
        return bad(x, DERAS_EUNSUPPORTED, "anchors and word boundaries inside a pattern (\\b \\B "
                   "\\A \\Z) are not supported: the whole text always matches");
    case 'p': case 'P':
        return bad(x, DERAS_EUNSUPPORTED, "Unicode properties (\\p{..}) are not supported");
    default:
        break;
    }
    if (c >= '1' && c <= '9')
        return bad(x, DERAS_EUNSUPPORTED, "backreferences are not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80)
        return bad(x, DERAS_EFORMAT, "unknown escape");
    *cp = (uint32_t)c;
    return 0;
}

static int next_char(rx *x, uint32_t *cp)
{
    size_t k = utf8_decode(x->s + x->i, x->n - x->i, cp);
    if (!k)
        return bad(x, DERAS_EFORMAT, "invalid UTF-8");
    x->i += k;
    return DERAS_OK;
}

/* A class's ranges while it is parsed: (lo, hi) pairs. */
typedef struct ranges {
    uint32_t *v;
    int n, cap;
} ranges;

static int add(ranges *r, uint32_t lo, uint32_t hi)
{
    if (r->n + 2 > r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        uint32_t *v = realloc(r->v, (size_t)cap * sizeof(uint32_t));
        if (!v)
            return deras_fail(DERAS_ENOMEM, "regex: out of memory");
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = lo;
    r->v[r->n++] = hi;
    return DERAS_OK;
}

/* What a JSON string may not hold raw: control characters, '"', '\'. */
static const uint32_t json_forbidden[] = {0x00, 0x1F, '"', '"', '\\', '\\'};

static int put_range(rx *x, uint32_t lo, uint32_t hi)
{
    int rc = put_cp(x, lo);
    if (!rc && hi != lo && !(rc = puts_(x, "-")))
        rc = put_cp(x, hi);
    return rc;
}

/* [lo, hi] minus the JSON-forbidden characters. */
static int put_range_json(rx *x, uint32_t lo, uint32_t hi)
{
    for (int k = 0; k < 6 && lo <= hi; k += 2) {
        uint32_t a = json_forbidden[k], b = json_forbidden[k + 1];
        if (b < lo || a > hi)
            continue;
        if (a > lo) {
            int rc = put_range(x, lo, a - 1);
            if (rc)
                return rc;
        }
        if (b == 0xFFFFFFFFu || b >= hi)
            return DERAS_OK;
        lo = b + 1;
    }
    return lo <= hi ? put_range(x, lo, hi) : DERAS_OK;
}

/* A GBNF class of r's ranges (negated: their complement), JSON-safe in json mode. */
static int put_class(rx *x, const uint32_t *r, int n, bool negated)
{
    int rc = puts_(x, negated ? "[^" : "[");
    for (int k = 0; k + 1 < n && !rc; k += 2)
        rc = negated || !x->json ? put_range(x, r[k], r[k + 1]) : put_range_json(x, r[k], r[k + 1]);
    if (x->json && negated)
        for (int k = 0; k < 6 && !rc; k += 2)
            rc = put_range(x, json_forbidden[k], json_forbidden[k + 1]);
    return rc ? rc : puts_(x, "]");
}

static int parse_class(rx *x)
{
    size_t start = x->i++;
    bool negated = peek(x) == '^', first = true;
    if (negated)
        x->i++;
    ranges r = {0};
    int rc = DERAS_OK;
    while (!rc) {
        int c = peek(x);
        if (c < 0) {
            x->i = start;
            rc = bad(x, DERAS_EFORMAT, "unterminated character class");
            break;
        }
        if (c == ']' && !first)
            break;
        first = false;
        if (c == '[' && x->i + 1 < x->n && (x->s[x->i + 1] == ':' || x->s[x->i + 1] == '=' ||
                                             x->s[x->i + 1] == '.')) {
            rc = bad(x, DERAS_EUNSUPPORTED, "POSIX classes ([:alpha:]) are not supported");
            break;
        }
        uint32_t lo, hi;
        const uint32_t *cls;
        bool neg;
        if (c == '\\') {
            x->i++;
            int e = escape(x, &lo, &cls, &neg);
            if (e < 0) {
                rc = e;
                break;
            }
            if (e > 0) {
                if (neg) {
                    rc = bad(x, DERAS_EUNSUPPORTED, "\\D \\W \\S inside a class are not supported");
                    break;
                }
                for (int k = 0; k < e && !rc; k++)
                    rc = add(&r, cls[2 * k], cls[2 * k + 1]);
                continue;
            }
        } else if ((rc = next_char(x, &lo))) {
            break;
        }
        hi = lo;
        if (peek(x) == '-' && x->i + 1 < x->n && x->s[x->i + 1] != ']') {
            x->i++;
            if (peek(x) == '\\') {
                x->i++;
                int e = escape(x, &hi, &cls, &neg);
                if (e != 0) {
                    rc = e < 0 ? e : bad(x, DERAS_EFORMAT, "a class escape cannot end a range");
                    break;
                }
            } else if ((rc = next_char(x, &hi))) {
                break;
            }
            if (hi < lo) {
                rc = bad(x, DERAS_EFORMAT, "character range out of order");
                break;
            }
        }
        rc = add(&r, lo, hi);
    }
    if (!rc) {
        x->i++;
        rc = put_class(x, r.v, r.n, negated);
    }
    free(r.v);
    return rc;
}

static int parse_int(rx *x, int *v)
{
    long n = 0;
    int digits = 0;
    while (peek(x) >= '0' && peek(x) <= '9') {
        n = n * 10 + (peek(x) - '0');
        if (n > x->lim.max_repeat)
            return bad(x, DERAS_ERANGE, "repetition count over max_repeat");
        x->i++;
        digits++;
    }
    *v = digits ? (int)n : -1;
    return DERAS_OK;
}

/* A {m}, {m,}, {,n} or {m,n} quantifier at x->i; *ok false (and nothing consumed) when
 * the brace is a literal. */
static int parse_braces(rx *x, bool *ok, int *m, int *n)
{
    size_t save = x->i;
    *ok = false;
    x->i++;
    int rc = parse_int(x, m);
    bool comma = peek(x) == ',';
    *n = *m;
    if (!rc && comma) {
        x->i++;
        rc = parse_int(x, n);
    }
    if (rc)
        return rc;
    if (peek(x) != '}' || (*m < 0 && (!comma || *n < 0))) {
        x->i = save; /* a literal brace */
        return DERAS_OK;
    }
    x->i++;
    if (*m < 0)
        *m = 0;
    if (*n >= 0 && *n < *m)
        return bad(x, DERAS_EFORMAT, "repetition {m,n} with n < m");
    *ok = true;
    return DERAS_OK;
}

static int parse_alt(rx *x);

static int parse_group(rx *x)
{
    size_t start = x->i++;
    if (peek(x) == '?') {
        x->i++;
        int c = peek(x);
        if (c == ':') {
            x->i++;
        } else if (c == 'P' && x->i + 1 < x->n && x->s[x->i + 1] == '<') {
            x->i += 2;
            while (peek(x) >= 0 && peek(x) != '>')
                x->i++;
            if (peek(x) != '>')
                return bad(x, DERAS_EFORMAT, "unterminated group name");
            x->i++;
        } else if (c == '<' && x->i + 1 < x->n && x->s[x->i + 1] != '=' && x->s[x->i + 1] != '!') {
            x->i++;
            while (peek(x) >= 0 && peek(x) != '>')
                x->i++;
            if (peek(x) != '>')
                return bad(x, DERAS_EFORMAT, "unterminated group name");
            x->i++;
        } else if (c == '=' || c == '!' || c == '<') {
            return bad(x, DERAS_EUNSUPPORTED, "lookaround ((?=, (?!, (?<=, (?<!) is not supported");
        } else if (c == 'P') {
            return bad(x, DERAS_EUNSUPPORTED, "backreferences ((?P=name)) are not supported");
        } else if (c == '>') {
            return bad(x, DERAS_EUNSUPPORTED, "atomic groups are not supported");
        } else {
            return bad(x, DERAS_EUNSUPPORTED, "inline flags and other (?...) groups are not supported");
        }
    }
    if (++x->depth > x->lim.max_nesting)
        return bad(x, DERAS_ERANGE, "groups nested deeper than max_nesting");
    int rc = parse_alt(x);
    if (rc)
        return rc;
    if (peek(x) != ')') {
        x->i = start;
        return bad(x, DERAS_EFORMAT, "unclosed group");
    }
    x->i++;
    x->depth--;
    return DERAS_OK;
}

/* One atom and its quantifier. *done when the sequence ends here. */
static int parse_piece(rx *x, bool *done)
{
    int c = peek(x), rc = DERAS_OK;
    *done = false;
    if (c < 0 || c == '|' || c == ')') {
        *done = true;
        return DERAS_OK;
    }
    if (c == '^' && x->i == 0) {
        x->i++;
        return DERAS_OK;
    }
    if (c == '$' && x->i + 1 == x->n) {
        x->i++;
        return DERAS_OK;
    }
    if (c == '^' || c == '$')
        return bad(x, DERAS_EUNSUPPORTED, "^ and $ are supported only at the very start and end");
    if (c == '*' || c == '+' || c == '?')
        return bad(x, DERAS_EFORMAT, "nothing to repeat");
    if ((rc = puts_(x, " ")))
        return rc;
    if (c == '(') {
        rc = parse_group(x);
    } else if (c == '[') {
        rc = parse_class(x);
    } else if (c == '.') {
        static const uint32_t newline[] = {'\n', '\n'};
        x->i++;
        rc = put_class(x, newline, 2, true);
    } else if (c == '\\') {
        x->i++;
        uint32_t cp;
        const uint32_t *cls;
        bool neg;
        int e = escape(x, &cp, &cls, &neg);
        if (e < 0)
            return e;
        if (e > 0)
            rc = put_class(x, cls, 2 * e, neg);
        else
            rc = put_literal(x, cp);
    } else {
        if (c == '{') {
            bool ok;
            int m, n;
            if ((rc = parse_braces(x, &ok, &m, &n)))
                return rc;
            if (ok)
                return bad(x, DERAS_EFORMAT, "nothing to repeat");
        }
        uint32_t cp;
        if (!(rc = next_char(x, &cp)))
            rc = put_literal(x, cp);
    }
    if (rc)
        return rc;
    c = peek(x);
    char q[48] = "";
    if (c == '*' || c == '+' || c == '?') {
        q[0] = (char)c;
        q[1] = 0;
        x->i++;
    } else if (c == '{') {
        bool ok;
        int m, n;
        if ((rc = parse_braces(x, &ok, &m, &n)))
            return rc;
        if (ok && n < 0)
            snprintf(q, sizeof q, "{%d,}", m);
        else if (ok)
            snprintf(q, sizeof q, "{%d,%d}", m, n);
    }
    if (!q[0])
        return DERAS_OK;
    if (peek(x) == '?') /* lazy: the same language for a full match */
        x->i++;
    else if (peek(x) == '+')
        return bad(x, DERAS_EUNSUPPORTED, "possessive quantifiers are not supported");
    c = peek(x);
    if (c == '*' || c == '+' || c == '?' ||
        (c == '{' && x->i + 1 < x->n && x->s[x->i + 1] >= '0' && x->s[x->i + 1] <= '9'))
        return bad(x, DERAS_EFORMAT, "multiple repeat");
    return puts_(x, q);
}

static int parse_seq(rx *x)
{
    size_t before = x->len;
    bool done = false;
    while (!done) {
        int rc = parse_piece(x, &done);
        if (rc)
            return rc;
    }
    return x->len == before ? puts_(x, " \"\"") : DERAS_OK;
}

static int parse_alt(rx *x)
{
    int rc = puts_(x, "(");
    if (!rc)
        rc = parse_seq(x);
    while (!rc && peek(x) == '|') {
        x->i++;
        if (!(rc = puts_(x, " |")))
            rc = parse_seq(x);
    }
    return rc ? rc : puts_(x, " )");
}

int regex_to_gbnf(const char *re, size_t len, const grammar_limits *lim, bool json_string,
                  char **out, size_t *out_len)
{
    if (!out || !out_len || (!re && len))
        return deras_fail(DERAS_EINVAL, "regex_to_gbnf: NULL argument");
    *out = NULL;
    *out_len = 0;
    rx x = {.s = re, .n = len, .json = json_string};
    if (lim)
        x.lim = *lim;
    else
        grammar_limits_default(&x.lim);
    if (len > x.lim.max_source)
        return deras_fail(DERAS_ERANGE, "regex: %zu bytes over max_source %zu", len,
                          x.lim.max_source);
    int rc = parse_alt(&x);
    if (!rc && x.i < x.n)
        rc = bad(&x, DERAS_EFORMAT, "unbalanced ')'");
    if (rc) {
        free(x.out);
        return rc;
    }
    *out = x.out;
    *out_len = x.len;
    return DERAS_OK;
}
