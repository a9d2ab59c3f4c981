/* SPDX-License-Identifier: Apache-2.0 */
/* gbnf.c - the GBNF parser (llama.cpp's grammar notation, grammar.h has the syntax) into
 * the code-point grammar of gbuild.h.
 *
 * Recursive descent as in llama.cpp's grammar-parser: a rule's body ends at a newline
 * unless inside parentheses or right after `|` / `::=`; `#` comments run to the end of
 * the line. Groups become helper rules; a repetition operator applies to the last atom
 * (a literal, a class, a name or a group) and rewrites it in place: x{m,n} is m copies of
 * x and a chain of n - m nested optional helpers, x* (and the unbounded tail of x{m,})
 * a right-recursive helper R ::= x R | empty. Recursion depth is bounded by max_nesting,
 * every item by max_elements, so hostile text costs O(its length) until a limit.
 * Costs: O(text + items produced).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"
#include "common/grammar/gbuild.h"

typedef struct gp {
    const char *s;
    size_t n, i;
    int depth;
    gbuild *b;
} gp;

static void where(const gp *p, size_t at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int fail_at(const gp *p, size_t at, const char *what)
{
    int line, col;
    where(p, at, &line, &col);
    return deras_fail(DERAS_EFORMAT, "grammar: line %d, column %d: %s", line, col, what);
}

static int peek(const gp *p)
{
    return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

static void skip_space(gp *p, bool newline_ok)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r')
                p->i++;
        } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            p->i++;
        } else {
            break;
        }
    }
}

static bool is_word(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static int parse_char(gp *p, uint32_t *cp)
{
    size_t at = p->i;
    if (p->i >= p->n)
        return fail_at(p, at, "unexpected end of the grammar");
    if (p->s[p->i] == '\\') {
        p->i++;
        int c = peek(p);
        p->i++;
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int h = hex_value(peek(p));
                if (h < 0)
                    return fail_at(p, p->i, "expecting a hex digit in an escape");
                v = v * 16 + (uint32_t)h;
                p->i++;
            }
            if (v > GB_MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
                return fail_at(p, at, "escape is not a Unicode scalar value");
            *cp = v;
            return DERAS_OK;
        }
        switch (c) {
        case 'n': *cp = '\n'; return DERAS_OK;
        case 'r': *cp = '\r'; return DERAS_OK;
        case 't': *cp = '\t'; return DERAS_OK;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/':
            *cp = (uint32_t)c;
            return DERAS_OK;
        default:
            return fail_at(p, at, "unknown escape");
        }
    }
    size_t k = utf8_decode(p->s + p->i, p->n - p->i, cp);
    if (k == 0)
        return fail_at(p, at, "invalid UTF-8");
    p->i += k;
    return DERAS_OK;
}

static int add_char(gp *p, int r, uint32_t cp)
{
    uint32_t range[2] = {cp, cp};
    int id, rc = gb_class(p->b, range, 1, false, &id);
    return rc ? rc : gb_item(p->b, r, GB_CLASS, id);
}

static int parse_literal(gp *p, int r)
{
    size_t at = p->i++;
    while (peek(p) != '"') {
        if (p->i >= p->n)
            return fail_at(p, at, "unterminated literal");
        uint32_t cp;
        int rc = parse_char(p, &cp);
        if (rc || (rc = add_char(p, r, cp)))
            return rc;
    }
    p->i++;
    return DERAS_OK;
}

static int parse_class(gp *p, int r)
{
    size_t at = p->i++;
    bool negate = peek(p) == '^';
    if (negate)
        p->i++;
    gb_vec ranges = {0};
    int rc = DERAS_OK;
    while (peek(p) != ']') {
        if (p->i >= p->n) {
            rc = fail_at(p, at, "unterminated character class");
            goto done;
        }
        uint32_t lo, hi;
        if ((rc = parse_char(p, &lo)))
            goto done;
        hi = lo;
        if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            if ((rc = parse_char(p, &hi)))
                goto done;
            if (hi < lo) {
                rc = fail_at(p, at, "character range out of order");
                goto done;
            }
        }
        if ((rc = gb_push(&ranges, (int32_t)lo)) || (rc = gb_push(&ranges, (int32_t)hi)))
            goto done;
        if (ranges.n > 2 * p->b->lim.max_elements) {
            rc = deras_fail(DERAS_ERANGE, "grammar: a character class over max_elements %d",
                            p->b->lim.max_elements);
            goto done;
        }
    }
    p->i++;
    int id;
    if (!(rc = gb_class(p->b, (const uint32_t *)ranges.v, ranges.n / 2, negate, &id)))
        rc = gb_item(p->b, r, GB_CLASS, id);
done:
    gb_vec_free(&ranges);
    return rc;
}

static int parse_int(gp *p, int *out)
{
    size_t at = p->i;
    long v = 0;
    if (peek(p) < '0' || peek(p) > '9')
        return fail_at(p, at, "expecting a number");
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (peek(p) - '0');
        if (v > p->b->lim.max_repeat)
            return deras_fail(DERAS_ERANGE, "grammar: repetition count over max_repeat %d",
                              p->b->lim.max_repeat);
        p->i++;
    }
    *out = (int)v;
    return DERAS_OK;
}

/* Append items[0..n) of `subject` to rule r. */
static int append_seq(gp *p, int r, const int32_t *subject, int n)
{
    for (int k = 0; k + 1 < n; k += 2) {
        int rc = gb_item(p->b, r, subject[k], subject[k + 1]);
        if (rc)
            return rc;
    }
    return DERAS_OK;
}

/* Rewrite the items from `start` on in rule r as x{m,n} (n < 0: unbounded). */
static int repeat(gp *p, int r, int start, int m, int n)
{
    gb_vec *it = &p->b->rules[r].items;
    int len = it->n - start;
    int32_t *subject = malloc((size_t)(len > 0 ? len : 1) * sizeof(int32_t));
    if (!subject)
        return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
    memcpy(subject, it->v + start, (size_t)len * sizeof(int32_t));
    it->n = start;
    p->b->n_items -= len / 2;
    int rc = DERAS_OK;
    for (int k = 0; k < m && !rc; k++)
        rc = append_seq(p, r, subject, len);
    if (rc)
        goto done;
    if (n < 0) { /* R ::= x R | empty */
        int h;
        if ((rc = gb_helper(p->b, &h)) || (rc = append_seq(p, h, subject, len)) ||
            (rc = gb_item(p->b, h, GB_REF, h)) || (rc = gb_item(p->b, h, GB_ALT, 0)) ||
            (rc = gb_item(p->b, r, GB_REF, h)))
            goto done;
    } else if (n > m) { /* O1 ::= x | empty; Ok ::= x O(k-1) | empty */
        int prev = -1;
        for (int k = 0; k < n - m && !rc; k++) {
            int h;
            if ((rc = gb_helper(p->b, &h)) || (rc = append_seq(p, h, subject, len)))
                break;
            if (prev >= 0 && (rc = gb_item(p->b, h, GB_REF, prev)))
                break;
            rc = gb_item(p->b, h, GB_ALT, 0);
            prev = h;
        }
        if (!rc)
            rc = gb_item(p->b, r, GB_REF, prev);
    }
done:
    free(subject);
    return rc;
}

static int parse_alternates(gp *p, int r, bool nested);

/* Items up to the end of a sequence (`|`, `)`, a newline outside parentheses, the end). */
static int parse_sequence(gp *p, int r, bool nested)
{
    int last = -1; /* items index where the last atom starts */
    for (;;) {
        int c = peek(p);
        size_t at = p->i;
        int rc = DERAS_OK;
        int start = p->b->rules[r].items.n;
        if (c == '"') {
            rc = parse_literal(p, r);
            last = start;
        } else if (c == '[') {
            rc = parse_class(p, r);
            last = start;
        } else if (c == '.') {
            p->i++;
            uint32_t none[2] = {0, 0};
            int id;
            if (!(rc = gb_class(p->b, none, 0, true, &id)))
                rc = gb_item(p->b, r, GB_CLASS, id);
            last = start;
        } else if (c == '<' || c == '!') {
            int line, col;
            where(p, at, &line, &col);
            return deras_fail(DERAS_EUNSUPPORTED, "grammar: line %d, column %d: token references "
                              "(<[id]>, <|name|>, !<...>) are not supported", line, col);
        } else if (is_word(c)) {
            size_t b0 = p->i;
            while (is_word(peek(p)))
                p->i++;
            int id, line, col;
            where(p, b0, &line, &col);
            if (!(rc = gb_named(p->b, p->s + b0, p->i - b0, line, &id)))
                rc = gb_item(p->b, r, GB_REF, id);
            last = start;
        } else if (c == '(') {
            if (++p->depth > p->b->lim.max_nesting)
                return deras_fail(DERAS_ERANGE, "grammar: groups nested deeper than max_nesting %d",
                                  p->b->lim.max_nesting);
            p->i++;
            skip_space(p, true);
            int h;
            if ((rc = gb_helper(p->b, &h)) || (rc = parse_alternates(p, h, true)))
                return rc;
            if (peek(p) != ')')
                return fail_at(p, at, "expecting ')' to close this group");
            p->i++;
            p->depth--;
            rc = gb_item(p->b, r, GB_REF, h);
            last = start;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0)
                return fail_at(p, at, "a repetition operator needs an item before it");
            int m = 0, n = -1;
            p->i++;
            if (c == '+')
                m = 1;
            else if (c == '?')
                n = 1;
            else if (c == '{') {
                skip_space(p, false);
                if ((rc = parse_int(p, &m)))
                    return rc;
                skip_space(p, false);
                n = m;
                if (peek(p) == ',') {
                    p->i++;
                    skip_space(p, false);
                    n = -1;
                    if (peek(p) != '}' && (rc = parse_int(p, &n)))
                        return rc;
                    skip_space(p, false);
                }
                if (peek(p) != '}')
                    return fail_at(p, at, "expecting '}' to close a repetition");
                p->i++;
                if (n >= 0 && n < m)
                    return fail_at(p, at, "repetition {m,n} with n < m");
            }
            rc = repeat(p, r, last, m, n);
        } else {
            return DERAS_OK;
        }
        if (rc)
            return rc;
        skip_space(p, nested);
    }
}

static int parse_alternates(gp *p, int r, bool nested)
{
    int rc = parse_sequence(p, r, nested);
    while (!rc && peek(p) == '|') {
        p->i++;
        skip_space(p, true);
        if (!(rc = gb_item(p->b, r, GB_ALT, 0)))
            rc = parse_sequence(p, r, nested);
    }
    return rc;
}

static int parse_rule(gp *p)
{
    size_t at = p->i;
    while (is_word(peek(p)))
        p->i++;
    if (p->i == at)
        return fail_at(p, at, "expecting a rule name");
    int id, line, col, rc;
    where(p, at, &line, &col);
    if ((rc = gb_named(p->b, p->s + at, p->i - at, line, &id)))
        return rc;
    if (p->b->rules[id].defined)
        return deras_fail(DERAS_EFORMAT, "grammar: line %d: rule '%s' is defined twice", line,
                          p->b->rules[id].name);
    p->b->rules[id].defined = true;
    skip_space(p, false);
    if (p->n - p->i < 3 || memcmp(p->s + p->i, "::=", 3) != 0)
        return fail_at(p, p->i, "expecting '::='");
    p->i += 3;
    skip_space(p, true);
    if ((rc = parse_alternates(p, id, false)))
        return rc;
    if (peek(p) == '\r')
        p->i++;
    if (peek(p) == '\n')
        p->i++;
    else if (p->i < p->n)
        return fail_at(p, p->i, "expecting a newline or the end after a rule");
    skip_space(p, true);
    return DERAS_OK;
}

int grammar_from_gbnf(const char *text, size_t len, const grammar_limits *lim, grammar_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "grammar_from_gbnf: NULL out");
    *out = NULL;
    if (!text && len)
        return deras_fail(DERAS_EINVAL, "grammar_from_gbnf: NULL text");
    grammar_limits dl;
    if (!lim) {
        grammar_limits_default(&dl);
        lim = &dl;
    }
    if (len > lim->max_source)
        return deras_fail(DERAS_ERANGE, "grammar: %zu bytes over max_source %zu", len,
                          lim->max_source);
    gbuild b;
    gb_init(&b, lim);
    gp p = {.s = text, .n = len, .b = &b};
    int rc = DERAS_OK;
    skip_space(&p, true);
    while (!rc && p.i < p.n)
        rc = parse_rule(&p);
    int root = -1;
    for (int r = 0; !rc && r < b.n_rules; r++) {
        if (b.rules[r].name && !b.rules[r].defined)
            rc = deras_fail(DERAS_ENOTFOUND, "grammar: line %d: rule '%s' is used but not "
                            "defined", b.rules[r].line, b.rules[r].name);
        if (b.rules[r].name && strcmp(b.rules[r].name, "root") == 0)
            root = r;
    }
    if (!rc && root < 0)
        rc = deras_fail(DERAS_ENOTFOUND, "grammar: no 'root' rule");
    if (rc) {
        gb_free(&b);
        return rc;
    }
    return gb_compile(&b, root, out);
}
