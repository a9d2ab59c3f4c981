/* SPDX-License-Identifier: Apache-2.0 */
/* lexer.c - see lexer.h. This follows jinja2/lexer.py (3.1) rule by rule: the root rule
 * (text, then the earliest {{ {% {# or {% raw %}), the lstrip_blocks condition (only
 * whitespace between the previous newline, or a line start, and a block or comment tag),
 * the end rules of each tag state (tried before the expression rules, and only while
 * brackets are balanced), and Python's unicode-escape decoding of string literals.
 */
#include "lexer.h"

#include "common/base/status.h"
#include "common/base/utf8.h"
#include "unicode.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct lx {
    struct arena *arena;
    const char *s; /* normalised source */
    size_t n, pos;
    int line;
    bool line_starting;
    tokens *out;
    char brackets[256];
    int depth;
} lx_t;

static const char *const op_text[] = {
    [OP_ADD] = "+",      [OP_SUB] = "-",      [OP_DIV] = "/",      [OP_FLOORDIV] = "//",
    [OP_MUL] = "*",      [OP_MOD] = "%",      [OP_POW] = "**",     [OP_TILDE] = "~",
    [OP_LBRACKET] = "[", [OP_RBRACKET] = "]", [OP_LPAREN] = "(",   [OP_RPAREN] = ")",
    [OP_LBRACE] = "{",   [OP_RBRACE] = "}",   [OP_EQ] = "==",      [OP_NE] = "!=",
    [OP_GT] = ">",       [OP_GTEQ] = ">=",    [OP_LT] = "<",       [OP_LTEQ] = "<=",
    [OP_ASSIGN] = "=",   [OP_DOT] = ".",      [OP_COLON] = ":",    [OP_PIPE] = "|",
    [OP_COMMA] = ",",    [OP_SEMICOLON] = ";",
};

const char *lex_op_text(int op)
{
    return op >= 0 && op <= OP_SEMICOLON ? op_text[op] : "?";
}

static int push(lx_t *x, token t)
{
    tokens *o = x->out;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        token *v = realloc(o->v, cap * sizeof *v);
        if (!v)
            return deras_fail(DERAS_ENOMEM, "template: out of memory lexing");
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = t;
    return 0;
}

static int count_nl(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

static bool at(const lx_t *x, size_t p, const char *lit)
{
    size_t k = strlen(lit);
    return p + k <= x->n && memcmp(x->s + p, lit, k) == 0;
}

/* Length of the Python-\s run at p. */
static size_t space_run(const lx_t *x, size_t p)
{
    return uni_lspace(x->s + p, x->n - p);
}

/* {% raw %} at p ({%(-|+|)\s*raw\s*(-%}\s*|%})): its length, its sign in *sign. */
static size_t raw_begin(const lx_t *x, size_t p, char *sign)
{
    size_t q = p + 2;
    *sign = 0;
    if (q < x->n && (x->s[q] == '-' || x->s[q] == '+'))
        *sign = x->s[q++];
    q += space_run(x, q);
    if (!at(x, q, "raw"))
        return 0;
    q += 3;
    q += space_run(x, q);
    if (at(x, q, "-%}"))
        return q + 3 + space_run(x, q + 3) - p;
    if (at(x, q, "%}"))
        return q + 2 - p;
    return 0;
}

/* Data text before a tag, with whitespace control; emits it when not empty. `full` is
 * the text's length in the source (for line counting). */
static int emit_text(lx_t *x, size_t start, size_t len, char sign, bool lstrip_ok)
{
    const char *t = x->s + start;
    size_t keep = len;
    if (sign == '-') {
        keep = len - uni_rspace(t, len);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = len;
        while (l_pos > 0 && t[l_pos - 1] != '\n')
            l_pos--;
        if ((l_pos > 0 || x->line_starting) && l_pos < len &&
            uni_lspace(t + l_pos, len - l_pos) == len - l_pos)
            keep = l_pos;
    }
    int st = 0;
    if (keep > 0)
        st = push(x, (token){.type = T_DATA, .line = x->line, .s = t, .len = keep});
    x->line += count_nl(t, len);
    return st;
}

static int fail_at(lx_t *x, int code, const char *what)
{
    return deras_fail(code, "template line %d: %s", x->line, what);
}

/* Python unicode-escape decoding of a string literal's body (after Jinja2 normalised its
 * newlines and backslash-replaced non-ASCII characters). */
static int decode_string(lx_t *x, const char *s, size_t n, token *tok)
{
    char *o = arena_alloc(x->arena, n * 3 + 1); /* \é -> "\xe9": at most 10 bytes per 4 */
    if (!o)
        return deras_fail(DERAS_ENOMEM, "template: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c != '\\') {
            o[k++] = (char)c;
            i++;
            continue;
        }
        if (i + 1 >= n)
            return fail_at(x, DERAS_EFORMAT, "\\ at end of string");
        unsigned char e = (unsigned char)s[i + 1];
        i += 2;
        uint32_t cp;
        int digits = 0;
        switch (e) {
        case '\n': continue;
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return fail_at(x, DERAS_EUNSUPPORTED, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = e - '0';
                for (int j = 0; j < 2 && i < n && s[i] >= '0' && s[i] <= '7'; j++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                k += utf8_encode(cp, o + k);
                continue;
            }
            if (e >= 0x80) { /* backslashreplace made it \xNN / \uNNNN: "\" + that */
                size_t len = uni_decode(s, n, i - 1, &cp);
                i = i - 1 + len;
                static const char hex[] = "0123456789abcdef";
                int w = cp < 0x100 ? 2 : cp < 0x10000 ? 4 : 8;
                o[k++] = '\\';
                o[k++] = w == 2 ? 'x' : w == 4 ? 'u' : 'U';
                for (int j = w - 1; j >= 0; j--)
                    o[k++] = hex[(cp >> (4 * j)) & 15];
                continue;
            }
            o[k++] = '\\'; /* unknown escapes stay as they are */
            o[k++] = (char)e;
            continue;
        }
        cp = 0;
        for (int j = 0; j < digits; j++, i++) {
            if (i >= n || !isxdigit((unsigned char)s[i]))
                return fail_at(x, DERAS_EFORMAT, "truncated \\x, \\u or \\U escape in a string");
            int h = s[i];
            cp = cp * 16 + (uint32_t)(h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
        }
        if (cp > 0x10FFFF)
            return fail_at(x, DERAS_EFORMAT, "\\U escape out of range");
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return fail_at(x, DERAS_EUNSUPPORTED, "surrogate escapes in strings are not supported");
        k += utf8_encode(cp, o + k);
    }
    o[k] = 0;
    tok->s = o;
    tok->len = k;
    return 0;
}

static bool digit_run(const char *s, size_t n, size_t *p, int (*ok)(int))
{ /* (\d+_)*\d+ style: digits with single underscores between them */
    size_t q = *p;
    if (q >= n || !ok((unsigned char)s[q]))
        return false;
    while (q < n && ok((unsigned char)s[q])) {
        q++;
        if (q + 1 < n && s[q] == '_' && ok((unsigned char)s[q + 1]))
            q++;
    }
    *p = q;
    return true;
}

static int isdig(int c) { return c >= '0' && c <= '9'; }

/* Float at p (float_re), or 0. */
static size_t match_float(const lx_t *x, size_t p)
{
    if (p > 0 && x->s[p - 1] == '.')
        return 0;
    size_t q = p;
    if (!digit_run(x->s, x->n, &q, isdig))
        return 0;
    size_t r = q;
    bool frac = false;
    if (r < x->n && x->s[r] == '.') {
        size_t t = r + 1;
        if (digit_run(x->s, x->n, &t, isdig)) {
            r = t;
            frac = true;
        }
    }
    if (r < x->n && (x->s[r] | 32) == 'e') {
        size_t t = r + 1;
        if (t < x->n && (x->s[t] == '+' || x->s[t] == '-'))
            t++;
        if (digit_run(x->s, x->n, &t, isdig))
            return t - p;
    }
    return frac ? r - p : 0;
}

static int scan_number(lx_t *x, size_t p, token *tok, size_t *len)
{
    char buf[128];
    size_t fl = match_float(x, p);
    if (fl) {
        size_t k = 0;
        for (size_t i = 0; i < fl && k < sizeof buf - 1; i++)
            if (x->s[p + i] != '_')
                buf[k++] = x->s[p + i];
        buf[k] = 0;
        tok->type = T_FLOAT;
        tok->f = strtod(buf, NULL);
        *len = fl;
        return 0;
    }
    int base = 10;
    size_t q = p;
    if (x->s[q] == '0' && q + 1 < x->n && strchr("bBoOxX", x->s[q + 1]) && x->s[q + 1]) {
        char b = (char)(x->s[q + 1] | 32);
        base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        q += 2;
    }
    uint64_t v = 0;
    bool any = false;
    while (q < x->n) {
        int c = (unsigned char)x->s[q];
        int d;
        if (c == '_' && any && q + 1 < x->n && isxdigit((unsigned char)x->s[q + 1])) {
            q++;
            continue;
        }
        if (isdig(c))
            d = c - '0';
        else if (base == 16 && isxdigit(c))
            d = (c | 32) - 'a' + 10;
        else
            break;
        if (d >= base)
            break;
        if (base == 10 && !any && c == '0') { /* 0(_?0)* */
            q++;
            any = true;
            while (q < x->n && (x->s[q] == '0' || (x->s[q] == '_' && q + 1 < x->n && x->s[q + 1] == '0')))
                q++;
            break;
        }
        if (v > (uint64_t)INT64_MAX / (uint64_t)base ||
            v * (uint64_t)base + (uint64_t)d > (uint64_t)INT64_MAX)
            return fail_at(x, DERAS_EUNSUPPORTED, "integer literal too large (no big integers)");
        v = v * (uint64_t)base + (uint64_t)d;
        any = true;
        q++;
    }
    if (!any)
        return fail_at(x, DERAS_EFORMAT, "malformed number");
    tok->type = T_INT;
    tok->i = (int64_t)v;
    *len = q - p;
    return 0;
}

/* One operator at p: its OP_* or -1. */
static int match_op(const lx_t *x, size_t p, size_t *len)
{
    static const struct { const char *t; int op; } two[] = {
        {"**", OP_POW}, {"//", OP_FLOORDIV}, {"==", OP_EQ}, {"!=", OP_NE},
        {">=", OP_GTEQ}, {"<=", OP_LTEQ},
    };
    for (size_t i = 0; i < sizeof two / sizeof two[0]; i++)
        if (at(x, p, two[i].t)) {
            *len = 2;
            return two[i].op;
        }
    static const char one[] = "+-/*%~[](){}><=.:|,;";
    static const int ops[] = {OP_ADD, OP_SUB, OP_DIV, OP_MUL, OP_MOD, OP_TILDE, OP_LBRACKET,
                              OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
                              OP_GT, OP_LT, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA,
                              OP_SEMICOLON};
    const char *c = x->s[p] ? strchr(one, x->s[p]) : NULL;
    if (!c)
        return -1;
    *len = 1;
    return ops[c - one];
}

/* The inside of {{ ... }} or {% ... %}, up to and including its end tag. */
static int lex_tag(lx_t *x, bool block)
{
    x->depth = 0;
    for (;;) {
        size_t p = x->pos;
        if (p >= x->n)
            return fail_at(x, DERAS_EFORMAT, block ? "unexpected end of template, expected '%}'"
                                                  : "unexpected end of template, expected '}}'");
        if (x->depth == 0) {
            size_t end = 0;
            if (block) {
                if (at(x, p, "+%}"))
                    end = 3;
                else if (at(x, p, "-%}"))
                    end = 3 + space_run(x, p + 3);
                else if (at(x, p, "%}"))
                    end = 2 + (p + 2 < x->n && x->s[p + 2] == '\n');
            } else {
                if (at(x, p, "-}}"))
                    end = 3 + space_run(x, p + 3);
                else if (at(x, p, "}}"))
                    end = 2;
            }
            if (end) {
                int st = push(x, (token){.type = block ? T_BLOCK_END : T_VAR_END, .line = x->line});
                x->line += count_nl(x->s + p, end);
                x->pos = p + end;
                x->line_starting = x->s[x->pos - 1] == '\n';
                return st;
            }
        }
        size_t ws = space_run(x, p);
        if (ws) {
            x->line += count_nl(x->s + p, ws);
            x->pos += ws;
            continue;
        }
        token tok = {.line = x->line};
        size_t len = 0;
        unsigned char c = (unsigned char)x->s[p];
        if (isdig(c)) {
            int st = scan_number(x, p, &tok, &len);
            if (st)
                return st;
        } else if (isalpha(c) || c == '_') {
            len = 1;
            while (p + len < x->n && (isalnum((unsigned char)x->s[p + len]) || x->s[p + len] == '_'))
                len++;
            tok.type = T_NAME;
            tok.s = arena_strdup(x->arena, x->s + p, len);
            tok.len = len;
            if (!tok.s)
                return deras_fail(DERAS_ENOMEM, "template: out of memory");
        } else if (c == '\'' || c == '"') {
            size_t q = p + 1;
            while (q < x->n && x->s[q] != (char)c)
                q += x->s[q] == '\\' ? 2 : 1;
            if (q >= x->n)
                return fail_at(x, DERAS_EFORMAT, "unterminated string");
            tok.type = T_STRING;
            int st = decode_string(x, x->s + p + 1, q - p - 1, &tok);
            if (st)
                return st;
            len = q + 1 - p;
        } else {
            int op = match_op(x, p, &len);
            if (op < 0) {
                uint32_t cp;
                uni_decode(x->s, x->n, p, &cp);
                return deras_fail(DERAS_EFORMAT, "template line %d: unexpected char U+%04X",
                                  x->line, cp);
            }
            tok.type = T_OP;
            tok.op = (uint8_t)op;
            if (op == OP_LBRACE || op == OP_LPAREN || op == OP_LBRACKET) {
                if (x->depth >= (int)sizeof x->brackets)
                    return fail_at(x, DERAS_EUNSUPPORTED, "brackets nested too deeply");
                x->brackets[x->depth++] = op == OP_LBRACE ? '}' : op == OP_LPAREN ? ')' : ']';
            } else if (op == OP_RBRACE || op == OP_RPAREN || op == OP_RBRACKET) {
                char want = op == OP_RBRACE ? '}' : op == OP_RPAREN ? ')' : ']';
                if (x->depth == 0 || x->brackets[x->depth - 1] != want)
                    return deras_fail(DERAS_EFORMAT, "template line %d: unexpected '%c'",
                                      x->line, want);
                x->depth--;
            }
        }
        int st = push(x, tok);
        if (st)
            return st;
        x->line += count_nl(x->s + p, len);
        x->pos = p + len;
    }
}

/* Normalise newlines and drop one trailing newline, into the arena. */
static int normalise(lx_t *x, const char *src, size_t n)
{
    char *o = arena_alloc(x->arena, n + 1);
    if (!o)
        return deras_fail(DERAS_ENOMEM, "template: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            o[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n')
                i++;
        } else {
            o[k++] = src[i];
        }
    }
    if (k > 0 && o[k - 1] == '\n')
        k--;
    o[k] = 0;
    x->s = o;
    x->n = k;
    return 0;
}

int lex(struct arena *arena, const char *src, size_t n, tokens *out)
{
    *out = (tokens){0};
    size_t bad = utf8_valid_prefix(src, n);
    if (bad < n) {
        int line = 1 + count_nl(src, bad);
        return deras_fail(DERAS_EFORMAT, "template line %d: invalid UTF-8", line);
    }
    lx_t x = {.arena = arena, .line = 1, .line_starting = true, .out = out};
    int st = normalise(&x, src, n); /* every failure below breaks to the one cleanup */
    while (!st && x.pos < x.n) {
        size_t tp = x.pos;
        bool found = false;
        while (tp + 1 < x.n) {
            const char *h = memchr(x.s + tp, '{', x.n - tp - 1);
            if (!h)
                break;
            tp = (size_t)(h - x.s);
            if (x.s[tp + 1] == '{' || x.s[tp + 1] == '%' || x.s[tp + 1] == '#') {
                found = true;
                break;
            }
            tp++;
        }
        if (!found) {
            st = push(&x, (token){.type = T_DATA, .line = x.line, .s = x.s + x.pos,
                                  .len = x.n - x.pos});
            x.pos = x.n;
            break;
        }
        char kind = x.s[tp + 1];
        char sign = 0, rsign = 0;
        size_t rawlen = kind == '%' ? raw_begin(&x, tp, &rsign) : 0;
        if (rawlen)
            sign = rsign;
        else if (tp + 2 < x.n && (x.s[tp + 2] == '-' || x.s[tp + 2] == '+'))
            sign = x.s[tp + 2];
        st = emit_text(&x, x.pos, tp - x.pos, sign, kind != '{');
        if (st)
            break;
        if (rawlen) {
            int open_line = x.line;
            x.line += count_nl(x.s + tp, rawlen);
            x.pos = tp + rawlen;
            x.line_starting = x.s[x.pos - 1] == '\n';
            /* (.*?)({%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)) */
            size_t q = x.pos, endlen = 0;
            char esign = 0;
            for (; q + 1 < x.n; q++) {
                if (x.s[q] != '{' || x.s[q + 1] != '%')
                    continue;
                size_t r = q + 2;
                char sg = 0;
                if (r < x.n && (x.s[r] == '-' || x.s[r] == '+'))
                    sg = x.s[r++];
                r += space_run(&x, r);
                if (!at(&x, r, "endraw"))
                    continue;
                r += 6;
                r += space_run(&x, r);
                if (at(&x, r, "+%}"))
                    r += 3;
                else if (at(&x, r, "-%}"))
                    r += 3 + space_run(&x, r + 3);
                else if (at(&x, r, "%}"))
                    r += 2 + (r + 2 < x.n && x.s[r + 2] == '\n');
                else
                    continue;
                esign = sg;
                endlen = r - q;
                break;
            }
            if (!endlen) {
                st = deras_fail(DERAS_EFORMAT, "template line %d: missing end of raw directive",
                                open_line);
                break;
            }
            st = emit_text(&x, x.pos, q - x.pos, esign, true);
            x.line += count_nl(x.s + q, endlen);
            x.pos = q + endlen;
            x.line_starting = x.s[x.pos - 1] == '\n';
            continue;
        }
        x.pos = tp + 2 + (sign != 0);
        x.line_starting = false;
        if (kind == '#') {
            /* (.*?)((?:\+#}|\-#}\s*|#}\n?)) */
            size_t q = x.pos, end = 0;
            for (; q + 1 < x.n; q++) {
                if (at(&x, q, "+#}")) {
                    end = 3;
                    break;
                }
                if (at(&x, q, "-#}")) {
                    end = 3 + space_run(&x, q + 3);
                    break;
                }
                if (at(&x, q, "#}")) {
                    end = 2 + (q + 2 < x.n && x.s[q + 2] == '\n');
                    break;
                }
            }
            if (!end) {
                st = fail_at(&x, DERAS_EFORMAT, "missing end of comment tag");
                break;
            }
            x.line += count_nl(x.s + x.pos, q + end - x.pos);
            x.pos = q + end;
            x.line_starting = x.s[x.pos - 1] == '\n';
            continue;
        }
        st = push(&x, (token){.type = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, .line = x.line});
        if (!st)
            st = lex_tag(&x, kind == '%');
    }
    if (!st)
        st = push(&x, (token){.type = T_EOF, .line = x.line});
    if (st) {
        tokens_free(out);
        return st;
    }
    return 0;
}

void tokens_free(tokens *t)
{
    free(t->v);
    *t = (tokens){0};
}
