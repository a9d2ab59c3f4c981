/* SPDX-License-Identifier: Apache-2.0 */
/* oai_chunk.c - a one-pass scanner of an OpenAI streaming chunk (see oai_chunk.h): a JSON
 * reader that checks the grammar (RFC 8259: strings and their escapes, numbers, literals,
 * objects, arrays) and hands the members it is asked about to small handlers; everything
 * else is skipped as it is checked. */
#include "tools/oai_chunk.h"

#include <string.h>

#include "common/base/status.h"

typedef struct scan {
    const char *p, *end;
    int depth;
} scan;

typedef int (*member_fn)(scan *s, const char *key, size_t key_len, void *ctx);

static int value(scan *s);

static void ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int fail(void)
{
    return DERAS_EFORMAT;
}

static bool hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string: its escaped text between the quotes. */
static int string(scan *s, const char **out, size_t *len)
{
    if (s->p >= s->end || *s->p != '"')
        return fail();
    const char *start = ++s->p;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            *out = start;
            *len = (size_t)(s->p - start);
            s->p++;
            return DERAS_OK;
        }
        if (c < 0x20)
            return fail();
        if (c != '\\') {
            s->p++;
            continue;
        }
        if (s->end - s->p < 2)
            return fail();
        char e = s->p[1];
        if (e == 'u') {
            if (s->end - s->p < 6 || !hex(s->p[2]) || !hex(s->p[3]) || !hex(s->p[4]) ||
                !hex(s->p[5]))
                return fail();
            s->p += 6;
        } else if (strchr("\"\\/bfnrt", e) && e) {
            s->p += 2;
        } else {
            return fail();
        }
    }
    return fail();
}

static bool digit(const scan *s)
{
    return s->p < s->end && *s->p >= '0' && *s->p <= '9';
}

/* A number; *is_int when it has no fraction or exponent and fits in 18 digits. */
static int number(scan *s, long long *v, bool *is_int)
{
    bool neg = s->p < s->end && *s->p == '-';
    if (neg)
        s->p++;
    if (!digit(s))
        return fail();
    long long x = 0;
    int nd = 0;
    if (*s->p == '0') {
        s->p++;
        nd = 1;
    } else {
        for (; digit(s); s->p++, nd++)
            if (nd < 18)
                x = x * 10 + (*s->p - '0');
    }
    *is_int = nd <= 18;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!digit(s))
            return fail();
        while (digit(s))
            s->p++;
        *is_int = false;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (!digit(s))
            return fail();
        while (digit(s))
            s->p++;
        *is_int = false;
    }
    *v = neg ? -x : x;
    return DERAS_OK;
}

static int literal(scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n))
        return fail();
    s->p += n;
    return DERAS_OK;
}

/* An object whose members go to fn (which reads the value), or are skipped (fn NULL or
 * returning 1). */
static int object(scan *s, member_fn fn, void *ctx)
{
    if (s->p >= s->end || *s->p != '{' || ++s->depth > OAI_CHUNK_MAX_DEPTH)
        return fail();
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        s->depth--;
        return DERAS_OK;
    }
    for (;;) {
        const char *k;
        size_t kl;
        ws(s);
        if (string(s, &k, &kl))
            return fail();
        ws(s);
        if (s->p >= s->end || *s->p++ != ':')
            return fail();
        ws(s);
        int rc = fn ? fn(s, k, kl, ctx) : 1;
        if (rc < 0 || (rc > 0 && value(s)))
            return fail();
        ws(s);
        if (s->p >= s->end)
            return fail();
        if (*s->p == '}') {
            s->p++;
            s->depth--;
            return DERAS_OK;
        }
        if (*s->p++ != ',')
            return fail();
    }
}

static int array(scan *s, int (*first)(scan *s, void *ctx), void *ctx)
{
    if (s->p >= s->end || *s->p != '[' || ++s->depth > OAI_CHUNK_MAX_DEPTH)
        return fail();
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        s->depth--;
        return DERAS_OK;
    }
    for (int i = 0;; i++) {
        ws(s);
        if (i == 0 && first ? first(s, ctx) : value(s))
            return fail();
        ws(s);
        if (s->p >= s->end)
            return fail();
        if (*s->p == ']') {
            s->p++;
            s->depth--;
            return DERAS_OK;
        }
        if (*s->p++ != ',')
            return fail();
    }
}

static int value(scan *s)
{
    if (s->p >= s->end)
        return fail();
    const char *str;
    size_t len;
    long long x;
    bool is_int;
    switch (*s->p) {
    case '{': return object(s, NULL, NULL);
    case '[': return array(s, NULL, NULL);
    case '"': return string(s, &str, &len);
    case 't': return literal(s, "true");
    case 'f': return literal(s, "false");
    case 'n': return literal(s, "null");
    default: return number(s, &x, &is_int);
    }
}

static bool is(const char *k, size_t kl, const char *name)
{
    return kl == strlen(name) && !memcmp(k, name, kl);
}

/* A string member into (*s_out, *n_out), or NULL when it is not a string. */
static int opt_string(scan *s, const char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (s->p < s->end && *s->p == '"')
        return string(s, out, len);
    return value(s);
}

static int opt_int(scan *s, long long *out)
{
    bool is_int;
    long long x;
    *out = -1;
    if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        if (number(s, &x, &is_int))
            return fail();
        if (is_int)
            *out = x;
        return DERAS_OK;
    }
    return value(s);
}

static int usage_member(scan *s, const char *k, size_t kl, void *ctx)
{
    oai_chunk *c = ctx;
    if (is(k, kl, "prompt_tokens"))
        return opt_int(s, &c->prompt_tokens);
    if (is(k, kl, "completion_tokens"))
        return opt_int(s, &c->completion_tokens);
    return 1;
}

static int text_member(scan *s, oai_chunk *c)
{
    const char *t;
    size_t n;
    if (opt_string(s, &t, &n))
        return fail();
    c->text = t && n > 0;
    return DERAS_OK;
}

static int delta_member(scan *s, const char *k, size_t kl, void *ctx)
{
    return is(k, kl, "content") ? text_member(s, ctx) : 1;
}

static int choice_member(scan *s, const char *k, size_t kl, void *ctx)
{
    oai_chunk *c = ctx;
    if (is(k, kl, "finish_reason"))
        return opt_string(s, &c->finish, &c->finish_len);
    if (is(k, kl, "text"))
        return text_member(s, c);
    if (is(k, kl, "delta") && s->p < s->end && *s->p == '{')
        return object(s, delta_member, c);
    return 1;
}

static int first_choice(scan *s, void *ctx)
{
    oai_chunk *c = ctx;
    if (s->p >= s->end || *s->p != '{')
        return value(s);
    c->choice = true;
    return object(s, choice_member, c);
}

static int top_member(scan *s, const char *k, size_t kl, void *ctx)
{
    oai_chunk *c = ctx;
    if (is(k, kl, "error")) {
        c->error = true;
        return 1;
    }
    if (is(k, kl, "id"))
        return opt_string(s, &c->id, &c->id_len);
    if (is(k, kl, "usage") && s->p < s->end && *s->p == '{') {
        c->usage = true;
        c->prompt_tokens = c->completion_tokens = -1;
        return object(s, usage_member, c);
    }
    if (is(k, kl, "choices") && s->p < s->end && *s->p == '[') {
        c->choice = false;
        c->finish = NULL;
        c->text = false;
        return array(s, first_choice, c);
    }
    return 1;
}

int oai_chunk_scan(const char *p, size_t n, oai_chunk *out)
{
    memset(out, 0, sizeof *out);
    out->prompt_tokens = out->completion_tokens = -1;
    scan s = {.p = p, .end = p + n};
    ws(&s);
    if (object(&s, top_member, out))
        return deras_fail(DERAS_EFORMAT, "a chunk that is not one JSON object");
    ws(&s);
    if (s.p != s.end)
        return deras_fail(DERAS_EFORMAT, "bytes after the chunk's JSON object");
    return DERAS_OK;
}
