/* SPDX-License-Identifier: Apache-2.0 */
/* js_prims.c - the leaves of a JSON Schema as GBNF: strings (lengths, formats, patterns),
 * integers with exact bounds, numbers, literals and enums (js_internal.h), and the text
 * builder they and the walk write with.
 *
 * Integer ranges: [lo, hi] splits by sign, then by digit count, then each fixed-length
 * range of digit strings [a, b] becomes the classic prefix recursion (a0 then [a1.., 9..],
 * the digits strictly between a0 and b0 followed by free digits, b0 then [0.., b1..]), so
 * only numbers inside the bounds, without leading zeros, match. O(digits^2) text.
 * Enums: the compact serializations, deduplicated and sorted, merged into a trie of rules
 * split on UTF-8 character boundaries, so n values that share a prefix cost one parse
 * stack, not n. Costs: linear in the schema and the text written.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"
#include "common/grammar/regex.h"
#include "common/schema/js_internal.h"

#define MAX_ENUM_DEPTH 512
#define MAX_ENUM_VALUES 65536

/* ---- the text builder (js_internal.h) ---- */

/* Room for n more bytes and the terminating NUL. */
static int sb_room(sbuf *b, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p)
            return deras_fail(DERAS_ENOMEM, "json_schema: out of memory");
        b->s = p;
        b->cap = cap;
    }
    return DERAS_OK;
}

int sb_put(sbuf *b, const char *s, size_t n)
{
    int rc = sb_room(b, n);
    if (rc)
        return rc;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return DERAS_OK;
}

int sb_puts(sbuf *b, const char *s)
{
    return sb_put(b, s, strlen(s));
}

/* Any length: a piece may carry a whole pattern's rule (the output's own limit is
 * checked where rules are emitted). */
int sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return deras_fail(DERAS_EINTERNAL, "json_schema: a piece that cannot be formatted");
    int rc = sb_room(b, (size_t)n);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
    return DERAS_OK;
}

void sb_free(sbuf *b)
{
    free(b->s);
    *b = (sbuf){0};
}

int js_literal(sbuf *b, const char *s, size_t n)
{
    int rc = sb_puts(b, "\"");
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            rc = sb_printf(b, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F)
            rc = sb_printf(b, "\\x%02X", ch);
        else
            rc = sb_put(b, (const char *)&ch, 1);
    }
    return rc ? rc : sb_puts(b, "\"");
}

/* ---- strings ---- */

static const char *format_expr(const char *f, unsigned *prims)
{
    *prims = 0;
    if (!strcmp(f, "date")) {
        *prims = JP_DATE;
        return "jdate";
    }
    if (!strcmp(f, "time")) {
        *prims = JP_TIME;
        return "jtime";
    }
    if (!strcmp(f, "date-time")) {
        *prims = JP_DATE | JP_TIME;
        return "jdate \"T\" jtime";
    }
    if (!strcmp(f, "uuid"))
        return "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
               "[0-9a-fA-F]{12}";
    if (!strcmp(f, "email"))
        return "[a-zA-Z0-9._%+\\x2D]{1,64} \"@\" [a-zA-Z0-9] [a-zA-Z0-9\\x2D]{0,62} (\".\" "
               "[a-zA-Z0-9] [a-zA-Z0-9\\x2D]{0,62}){1,8}";
    if (!strcmp(f, "ipv4"))
        return "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]) (\".\" (\"25\" "
               "[0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9])){3}";
    if (!strcmp(f, "hostname"))
        return "[a-zA-Z0-9] [a-zA-Z0-9\\x2D]{0,62} (\".\" [a-zA-Z0-9] [a-zA-Z0-9\\x2D]{0,62}){0,8}";
    return NULL;
}

/* A non-negative integer keyword, or -1 when absent. */
static int count_kw(js *c, const json_t *s, const char *kw, long long *out)
{
    const json_t *v = json_object_get(s, kw);
    *out = -1;
    if (!v)
        return DERAS_OK;
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (!json_is_number(v) || d < 0 || d != floor(d))
        return js_fail(c, DERAS_EFORMAT, "'%s' must be a non-negative integer", kw);
    *out = d > 1e15 ? (long long)1e15 : (long long)d;
    return DERAS_OK;
}

int js_string(js *c, const json_t *s, sbuf *body)
{
    const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    long long lo, hi;
    int rc = count_kw(c, s, "minLength", &lo);
    if (rc || (rc = count_kw(c, s, "maxLength", &hi)))
        return rc;
    if ((fmt || pat) && (lo >= 0 || hi >= 0))
        return js_fail(c, DERAS_EUNSUPPORTED, "minLength/maxLength together with %s are not "
                       "supported", fmt ? "format" : "pattern");
    if (fmt && pat)
        return js_fail(c, DERAS_EUNSUPPORTED, "format together with pattern is not supported");
    if (fmt) {
        if (!json_is_string(fmt))
            return js_fail(c, DERAS_EFORMAT, "'format' must be a string");
        unsigned prims;
        const char *e = format_expr(json_string_value(fmt), &prims);
        if (!e)
            return js_fail(c, DERAS_EUNSUPPORTED, "format '%s' is not supported (date, time, "
                           "date-time, uuid, email, ipv4, hostname are)", json_string_value(fmt));
        if ((rc = js_need(c, prims)))
            return rc;
        return sb_printf(body, "\"\\\"\" %s \"\\\"\"", e);
    }
    if (pat) {
        if (!json_is_string(pat))
            return js_fail(c, DERAS_EFORMAT, "'pattern' must be a string");
        char *expr;
        size_t n;
        grammar_limits lim;
        grammar_limits_default(&lim);
        rc = regex_to_gbnf(json_string_value(pat), json_string_length(pat), &lim, true, &expr, &n);
        if (rc)
            return js_fail(c, rc, "pattern: %s", deras_errmsg());
        rc = sb_printf(body, "\"\\\"\" %s \"\\\"\"", expr);
        free(expr);
        return rc;
    }
    if ((rc = js_need(c, JP_CHAR | JP_STRING)))
        return rc;
    if (lo < 0 && hi < 0)
        return sb_puts(body, "jstring");
    if (lo < 0)
        lo = 0;
    if (hi >= 0 && hi < lo)
        return js_fail(c, DERAS_EUNSUPPORTED, "maxLength below minLength: nothing matches");
    if (lo > JS_MAX_REPEAT)
        return js_fail(c, DERAS_ERANGE, "minLength %lld over %d", lo, JS_MAX_REPEAT);
    if (hi < 0 || hi > JS_MAX_REPEAT) /* not enforced past the bound (docs) */
        return sb_printf(body, "\"\\\"\" jchar{%lld,} \"\\\"\"", lo);
    return sb_printf(body, "\"\\\"\" jchar{%lld,%lld} \"\\\"\"", lo, hi);
}

/* ---- integers ---- */

/* Digit strings of equal length n in [a, b] (a <= b), as a GBNF sequence. */
static int fixed_range(sbuf *b, const char *lo, const char *hi, int n)
{
    if (n == 0)
        return DERAS_OK;
    if (lo[0] == hi[0]) {
        int rc = sb_printf(b, " [%c]", lo[0]);
        return rc ? rc : fixed_range(b, lo + 1, hi + 1, n - 1);
    }
    bool lo_zeros = strspn(lo + 1, "0") == (size_t)(n - 1);
    bool hi_nines = strspn(hi + 1, "9") == (size_t)(n - 1);
    if (lo_zeros && hi_nines)
        return n > 1 ? sb_printf(b, " [%c-%c] [0-9]{%d}", lo[0], hi[0], n - 1)
                     : sb_printf(b, " [%c-%c]", lo[0], hi[0]);
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    int rc = sb_puts(b, " (");
    int first_mid = lo[0] + 1, last_mid = hi[0] - 1;
    if (lo_zeros)
        first_mid = lo[0];
    else if (!rc && !(rc = sb_printf(b, " [%c]", lo[0])))
        rc = fixed_range(b, lo + 1, nines, n - 1);
    if (hi_nines)
        last_mid = hi[0];
    if (!rc && first_mid <= last_mid) {
        rc = sb_printf(b, "%s [%c-%c]", lo_zeros ? "" : " |", first_mid, last_mid);
        if (!rc && n > 1)
            rc = sb_printf(b, " [0-9]{%d}", n - 1);
    }
    if (!rc && !hi_nines && !(rc = sb_printf(b, " | [%c]", hi[0])))
        rc = fixed_range(b, zeros, hi + 1, n - 1);
    return rc ? rc : sb_puts(b, " )");
}

/* Non-negative integers in [lo, hi] (hi UINT64_MAX: up to max_digits digits). */
static int uint_range(js *c, sbuf *b, uint64_t lo, uint64_t hi)
{
    char a[24], z[24];
    int da = snprintf(a, sizeof a, "%" PRIu64, lo), rc = sb_puts(b, "(");
    bool open = hi == UINT64_MAX;
    int dz = open ? c->o.max_digits : snprintf(z, sizeof z, "%" PRIu64, hi);
    bool first = true;
    for (int d = da; d <= dz && !rc; d++) {
        char from[24], to[24];
        if (d == da)
            memcpy(from, a, (size_t)d + 1);
        else {
            memset(from, '0', (size_t)d);
            from[0] = '1';
        }
        if (!open && d == dz)
            memcpy(to, z, (size_t)d + 1);
        else
            memset(to, '9', (size_t)d);
        from[d] = to[d] = 0;
        if (d > 20)
            break;
        if (!(rc = sb_puts(b, first ? "" : " |")))
            rc = fixed_range(b, from, to, d);
        first = false;
    }
    return rc ? rc : sb_puts(b, " )");
}

/* An integer bound keyword as a double; *present false when absent. */
static int bound(js *c, const json_t *s, const char *kw, double *v, bool *present)
{
    const json_t *j = json_object_get(s, kw);
    *present = j && !json_is_boolean(j);
    if (!*present)
        return DERAS_OK;
    if (!json_is_number(j))
        return js_fail(c, DERAS_EFORMAT, "'%s' must be a number", kw);
    *v = json_number_value(j);
    return DERAS_OK;
}

#define INT_LIMIT 1e18

int js_integer(js *c, const json_t *s, sbuf *body)
{
    double mn, mx, xmn, xmx;
    bool has_mn, has_mx, has_xmn, has_xmx;
    int rc = bound(c, s, "minimum", &mn, &has_mn);
    if (rc || (rc = bound(c, s, "maximum", &mx, &has_mx)) ||
        (rc = bound(c, s, "exclusiveMinimum", &xmn, &has_xmn)) ||
        (rc = bound(c, s, "exclusiveMaximum", &xmx, &has_xmx)))
        return rc;
    /* draft 4: exclusiveMinimum / exclusiveMaximum are booleans on minimum / maximum */
    if (json_is_true(json_object_get(s, "exclusiveMinimum")) && has_mn)
        xmn = mn, has_xmn = true, has_mn = false;
    if (json_is_true(json_object_get(s, "exclusiveMaximum")) && has_mx)
        xmx = mx, has_xmx = true, has_mx = false;
    double lo = -INFINITY, hi = INFINITY;
    if (has_mn)
        lo = ceil(mn);
    if (has_xmn && floor(xmn) + 1 > lo)
        lo = floor(xmn) + 1;
    if (has_mx)
        hi = floor(mx);
    if (has_xmx && ceil(xmx) - 1 < hi)
        hi = ceil(xmx) - 1;
    if (lo == -INFINITY && hi == INFINITY) {
        if ((rc = js_need(c, JP_INT)))
            return rc;
        return sb_puts(body, "jint");
    }
    if (lo > hi)
        return js_fail(c, DERAS_EUNSUPPORTED, "no integer lies within the bounds");
    if (fabs(lo) > INT_LIMIT && lo != -INFINITY)
        return js_fail(c, DERAS_EUNSUPPORTED, "integer bounds beyond 1e18 are not supported");
    if (fabs(hi) > INT_LIMIT && hi != INFINITY)
        return js_fail(c, DERAS_EUNSUPPORTED, "integer bounds beyond 1e18 are not supported");
    if (lo >= 0)
        return uint_range(c, body, (uint64_t)lo, hi == INFINITY ? UINT64_MAX : (uint64_t)hi);
    if (hi < 0) {
        if ((rc = sb_puts(body, "( \"-\" ")))
            return rc;
        rc = uint_range(c, body, (uint64_t)-hi, lo == -INFINITY ? UINT64_MAX : (uint64_t)-lo);
        return rc ? rc : sb_puts(body, " )");
    }
    if ((rc = sb_puts(body, "( \"-\" ")) ||
        (rc = uint_range(c, body, 1, lo == -INFINITY ? UINT64_MAX : (uint64_t)-lo)) ||
        (rc = sb_puts(body, " | ")) ||
        (rc = uint_range(c, body, 0, hi == INFINITY ? UINT64_MAX : (uint64_t)hi)))
        return rc;
    return sb_puts(body, " )");
}

int js_number(js *c, const json_t *s, sbuf *body)
{
    double mn = 0, xmn = 0;
    bool has_mn, has_xmn, dummy;
    double unused;
    int rc = bound(c, s, "minimum", &mn, &has_mn);
    if (rc || (rc = bound(c, s, "exclusiveMinimum", &xmn, &has_xmn)))
        return rc;
    if (json_is_boolean(json_object_get(s, "exclusiveMinimum")))
        return js_fail(c, DERAS_EUNSUPPORTED, "exclusiveMinimum on a number is not supported");
    if ((rc = bound(c, s, "maximum", &unused, &dummy)))
        return rc;
    if (dummy || json_object_get(s, "exclusiveMaximum"))
        return js_fail(c, DERAS_EUNSUPPORTED, "maximum / exclusiveMaximum on a number are not "
                       "enforced by a grammar (use \"type\": \"integer\" or drop the bound)");
    if ((has_mn && mn < 0) || (has_xmn && xmn < 0))
        return js_fail(c, DERAS_EUNSUPPORTED, "a negative minimum on a number is not enforced by "
                       "a grammar (only the sign of minimum >= 0 is)");
    if ((rc = js_need(c, JP_NUMBER)))
        return rc;
    if (!has_mn && !has_xmn)
        return sb_puts(body, "jnumber");
    /* minimum >= 0: no minus sign; "0" alone passes exclusiveMinimum 0 too (not enforced) */
    return sb_printf(body, "( \"0\" | [1-9] [0-9]{0,%d} ) ( \".\" [0-9]{1,%d} )? ( [eE] [-+]? "
                     "[0-9]{1,2} )?", c->o.max_digits - 1, c->o.max_digits);
}

/* ---- enums ---- */

typedef struct lit {
    char *s;
    size_t n;
} lit;

static int cmp_lit(const void *pa, const void *pb)
{
    const lit *a = pa, *b = pb;
    int r = memcmp(a->s, b->s, a->n < b->n ? a->n : b->n);
    return r ? r : a->n < b->n ? -1 : a->n > b->n;
}

static size_t char_len(const lit *l, size_t at)
{
    uint32_t cp;
    size_t k = utf8_decode(l->s + at, l->n - at, &cp);
    return k ? k : 1;
}

/* Rule for v[lo..hi), which share their first d bytes (a character boundary). */
static int enum_trie(js *c, const lit *v, int lo, int hi, size_t d, int depth, int *id)
{
    if (depth > MAX_ENUM_DEPTH)
        return js_fail(c, DERAS_ERANGE, "enum values branch deeper than %d", MAX_ENUM_DEPTH);
    sbuf b = {0};
    int rc = js_rule(c, id);
    bool first = true;
    for (int i = lo; i < hi && !rc;) {
        if (!(rc = sb_puts(&b, first ? "" : " | ")))
            first = false;
        if (v[i].n == d) { /* a value ends here (the shortest sorts first) */
            rc = rc ? rc : sb_puts(&b, "\"\"");
            i++;
            continue;
        }
        size_t cl = char_len(&v[i], d);
        int j = i + 1;
        while (j < hi && v[j].n >= d + cl && memcmp(v[j].s + d, v[i].s + d, cl) == 0)
            j++;
        if (j == i + 1) {
            rc = rc ? rc : js_literal(&b, v[i].s + d, v[i].n - d);
            i = j;
            continue;
        }
        size_t l = d + cl; /* extend the shared part over whole characters */
        for (;;) {
            if (l >= v[i].n)
                break;
            size_t k = char_len(&v[i], l);
            bool all = true;
            for (int m = i + 1; m < j && all; m++)
                all = v[m].n >= l + k && memcmp(v[m].s + l, v[i].s + l, k) == 0;
            if (!all)
                break;
            l += k;
        }
        int sub;
        if (!rc && !(rc = js_literal(&b, v[i].s + d, l - d)) &&
            !(rc = enum_trie(c, v, i, j, l, depth + 1, &sub)))
            rc = sb_printf(&b, " r%d", sub);
        i = j;
    }
    if (!rc)
        rc = js_emit(c, *id, &b);
    sb_free(&b);
    return rc;
}

int js_enum(js *c, const json_t *values, bool is_const, sbuf *body)
{
    if (!is_const && (!json_is_array(values) || json_array_size(values) == 0))
        return js_fail(c, DERAS_EFORMAT, "'enum' must be a non-empty array");
    size_t n = is_const ? 1 : json_array_size(values);
    if (n > MAX_ENUM_VALUES)
        return js_fail(c, DERAS_ERANGE, "enum has more than %d values", MAX_ENUM_VALUES);
    lit *v = calloc(n, sizeof *v);
    if (!v)
        return deras_fail(DERAS_ENOMEM, "json_schema: out of memory");
    int rc = DERAS_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        const json_t *x = is_const ? values : json_array_get(values, i);
        v[i].s = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
        if (!v[i].s)
            rc = deras_fail(DERAS_ENOMEM, "json_schema: out of memory");
        else
            v[i].n = strlen(v[i].s);
    }
    size_t m = 0, live = n;
    if (!rc) {
        qsort(v, n, sizeof *v, cmp_lit);
        for (size_t i = 0; i < n; i++) { /* dedup */
            if (m > 0 && cmp_lit(&v[m - 1], &v[i]) == 0) {
                free(v[i].s);
                continue;
            }
            v[m++] = v[i];
        }
        live = m;
        int id;
        if (!(rc = enum_trie(c, v, 0, (int)m, 0, 0, &id)))
            rc = sb_printf(body, "r%d", id);
    }
    for (size_t i = 0; i < live; i++)
        free(v[i].s);
    free(v);
    return rc;
}
