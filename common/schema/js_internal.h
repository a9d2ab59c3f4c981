/* SPDX-License-Identifier: Apache-2.0 */
/* js_internal.h - the JSON Schema compiler's shared state (internal to common/schema):
 * json_schema.c walks schemas (objects, arrays, combinators, $ref), js_prims.c writes the
 * leaves (strings, formats, numbers, integer ranges, literals, enums as tries).
 *
 * Output is GBNF text built rule by rule: each schema node gets a rule "rN" whose body is
 * assembled in a local buffer and appended whole, so rules nest without interleaving. The
 * shared primitives (ws, jchar, jstring, jnumber, ...) are written once, when first used.
 */
#ifndef DERAS_JS_INTERNAL_H
#define DERAS_JS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/schema/json_schema.h"

/* Repetition counts (minLength, maxItems, ...) up to this are written as {m,n}: the GBNF
 * default limit. Past it an upper bound is not enforced, a lower bound refused. */
#define JS_MAX_REPEAT 4096

typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf;

int sb_put(sbuf *b, const char *s, size_t n);
int sb_puts(sbuf *b, const char *s);
int sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_free(sbuf *b);

enum js_prim {
    JP_WS = 1 << 0, JP_CHAR = 1 << 1, JP_STRING = 1 << 2, JP_INT = 1 << 3,
    JP_NUMBER = 1 << 4, JP_VALUE = 1 << 5, JP_DATE = 1 << 6, JP_TIME = 1 << 7,
};

typedef struct js {
    jschema_opts o;
    sbuf out;                 /* the rules written so far */
    const json_t *root;
    int n_rules;
    int depth;
    const json_t **ref_t;     /* $ref targets already given a rule */
    int *ref_r;
    int n_refs, cap_refs;
    unsigned have;            /* js_prim rules written */
    char ptr[256];            /* the JSON pointer being compiled, for messages */
    size_t ptr_len;
} js;

/* Messages name the JSON pointer. */
int js_fail(js *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A fresh rule number (its name is "r<N>"). DERAS_ERANGE past the output budget. */
int js_rule(js *c, int *id);
/* Append "r<id> ::= body\n". */
int js_emit(js *c, int id, const sbuf *body);
/* The whitespace between tokens: " ws " or " " when compact. */
const char *js_ws(const js *c);
/* Write a primitive rule once (its name is what the caller references). */
int js_need(js *c, unsigned prim);

/* A GBNF literal of s[0..n) (UTF-8) into b: "..." with the needed escapes. */
int js_literal(sbuf *b, const char *s, size_t n);

/* Leaves, each a GBNF expression appended to body (js_prims.c). */
int js_string(js *c, const json_t *schema, sbuf *body);
int js_integer(js *c, const json_t *schema, sbuf *body);
int js_number(js *c, const json_t *schema, sbuf *body);
/* enum (a JSON array of values) or const (one value): literals, shared prefixes merged. */
int js_enum(js *c, const json_t *values, bool is_const, sbuf *body);

#endif
