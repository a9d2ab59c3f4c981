/* SPDX-License-Identifier: Apache-2.0 */
/* mp_text.h - msgpack frames written as text, for protocol tests.
 *
 * A JSON-like notation turned into msgpack with msgpack-c's packer, so a test case reads
 * as the message it sends: {type: "request", id: "r1", prompt: "hi", temperature: 250}.
 *   maps {k: v, ...}: bare keys are strings; any value can be a key ({1: 2})
 *   arrays [a, b], strings "..." with \n \t \\ \" \0 and \xNN (raw bytes: invalid UTF-8)
 *   b"..." a bin; integers (the full int64 / uint64 range); floats (1.5, 1e3, nan, inf,
 *   -inf) pack as float64, with an f suffix (1.5f) as float32; true false nil
 *   str(N) / bin(N) / ids(N): a string of N 'a', a bin of N zero bytes, an array of N ids
 *   (0..127, so one byte per element: the densest frame msgpack allows)
 * Aborts on a syntax error: the test itself is wrong then.
 */
#ifndef DERAS_MP_TEXT_H
#define DERAS_MP_TEXT_H

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

typedef struct mpt {
    const char *s;
    msgpack_packer pk;
} mpt;

static inline void mpt_die(mpt *t, const char *what)
{
    fprintf(stderr, "mp_text: %s at '%.20s'\n", what, t->s);
    abort();
}

static inline void mpt_ws(mpt *t)
{
    while (*t->s && (isspace((unsigned char)*t->s) || *t->s == ','))
        t->s++;
}

/* A quoted string's bytes into buf (cap 64 KiB); returns the length. */
static inline size_t mpt_quoted(mpt *t, char *buf)
{
    size_t n = 0;
    if (*t->s != '"')
        mpt_die(t, "expected '\"'");
    t->s++;
    while (*t->s && *t->s != '"') {
        char c = *t->s++;
        if (c == '\\') {
            c = *t->s++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case '0': c = '\0'; break;
            case 'x': {
                char hex[3] = {t->s[0], t->s[1], 0};
                c = (char)strtol(hex, NULL, 16);
                t->s += 2;
                break;
            }
            default: break; /* \\ and \" */
            }
        }
        if (n >= 65536)
            mpt_die(t, "string too long");
        buf[n++] = c;
    }
    if (*t->s != '"')
        mpt_die(t, "unterminated string");
    t->s++;
    return n;
}

static inline void mpt_value(mpt *t);

static inline void mpt_items(mpt *t, char close, bool map)
{
    const char *start = t->s;
    size_t n = 0;
    /* Pack the elements into a scratch buffer to count them, then the header and them. */
    msgpack_sbuffer tmp;
    msgpack_sbuffer_init(&tmp);
    mpt sub = {.s = start};
    msgpack_packer_init(&sub.pk, &tmp, msgpack_sbuffer_write);
    for (;;) {
        mpt_ws(&sub);
        if (*sub.s == close)
            break;
        mpt_value(&sub);
        if (map) {
            mpt_ws(&sub);
            if (*sub.s != ':')
                mpt_die(&sub, "expected ':'");
            sub.s++;
            mpt_ws(&sub);
            mpt_value(&sub);
        }
        n++;
    }
    if (map)
        msgpack_pack_map(&t->pk, n);
    else
        msgpack_pack_array(&t->pk, n);
    msgpack_pack_str_body(&t->pk, tmp.data, tmp.size); /* raw append of the elements */
    msgpack_sbuffer_destroy(&tmp);
    t->s = sub.s + 1;
}

static inline void mpt_value(mpt *t)
{
    static char buf[65537];
    mpt_ws(t);
    const char *s = t->s;
    if (*s == '{') {
        t->s++;
        mpt_items(t, '}', true);
    } else if (*s == '[') {
        t->s++;
        mpt_items(t, ']', false);
    } else if (*s == '"') {
        size_t n = mpt_quoted(t, buf);
        msgpack_pack_str_with_body(&t->pk, buf, n);
    } else if (s[0] == 'b' && s[1] == '"') {
        t->s++;
        size_t n = mpt_quoted(t, buf);
        msgpack_pack_bin_with_body(&t->pk, buf, n);
    } else if (!strncmp(s, "str(", 4) || !strncmp(s, "bin(", 4) || !strncmp(s, "ids(", 4)) {
        char *end;
        size_t n = strtoull(s + 4, &end, 10);
        t->s = end + 1;
        if (s[0] == 's') {
            msgpack_pack_str(&t->pk, n);
            for (size_t i = 0; i < n; i++)
                msgpack_pack_str_body(&t->pk, "a", 1);
        } else if (s[0] == 'b') {
            msgpack_pack_bin(&t->pk, n);
            for (size_t i = 0; i < n; i++)
                msgpack_pack_bin_body(&t->pk, "", 1);
        } else {
            msgpack_pack_array(&t->pk, n);
            for (size_t i = 0; i < n; i++)
                msgpack_pack_int(&t->pk, (int)(i % 128)); /* fixints: 1 byte per object */
        }
    } else if (!strncmp(s, "true", 4)) {
        t->s += 4;
        msgpack_pack_true(&t->pk);
    } else if (!strncmp(s, "false", 5)) {
        t->s += 5;
        msgpack_pack_false(&t->pk);
    } else if (!strncmp(s, "nil", 3)) {
        t->s += 3;
        msgpack_pack_nil(&t->pk);
    } else if (!strncmp(s, "nan", 3)) {
        t->s += 3;
        msgpack_pack_double(&t->pk, NAN);
    } else if (!strncmp(s, "inf", 3)) {
        t->s += 3;
        msgpack_pack_double(&t->pk, INFINITY);
    } else if (!strncmp(s, "-inf", 4)) {
        t->s += 4;
        msgpack_pack_double(&t->pk, -INFINITY);
    } else if (*s == '-' || isdigit((unsigned char)*s)) {
        size_t k = strspn(s, "-+0123456789.eE");
        bool is_float = memchr(s, '.', k) || memchr(s, 'e', k) || memchr(s, 'E', k);
        char *end;
        if (is_float) {
            double d = strtod(s, &end);
            if (*end == 'f') {
                msgpack_pack_float(&t->pk, (float)d);
                end++;
            } else {
                msgpack_pack_double(&t->pk, d);
            }
        } else if (*s == '-') {
            msgpack_pack_int64(&t->pk, strtoll(s, &end, 10));
        } else {
            msgpack_pack_uint64(&t->pk, strtoull(s, &end, 10));
        }
        t->s = end;
    } else if (isalpha((unsigned char)*s) || *s == '_') {
        size_t n = 0;
        while (isalnum((unsigned char)s[n]) || s[n] == '_')
            n++;
        msgpack_pack_str_with_body(&t->pk, s, n);
        t->s += n;
    } else {
        mpt_die(t, "unexpected character");
    }
}

/* Pack `text` into sb (cleared first). */
static inline void mpt_pack(msgpack_sbuffer *sb, const char *text)
{
    mpt t = {.s = text};
    sb->size = 0;
    msgpack_packer_init(&t.pk, sb, msgpack_sbuffer_write);
    mpt_value(&t);
    mpt_ws(&t);
    if (*t.s)
        mpt_die(&t, "trailing text");
}

#endif
