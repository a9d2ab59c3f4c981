/* SPDX-License-Identifier: Apache-2.0 */
/* parse_internal.h - the parser's shared state and helpers (parse_util.c), used by
 * parse_expr.c (expressions) and parse_stmt.c (statements); see parser.h. */
#ifndef DERAS_TEMPLATE_PARSE_INTERNAL_H
#define DERAS_TEMPLATE_PARSE_INTERNAL_H

#include <stdbool.h>
#include <string.h>

#include "ast.h"
#include "common/base/status.h"
#include "lexer.h"

typedef struct ps {
    arena_t *arena;
    symtab_t *syms;
    const token_t *tk;
    size_t i;
    int depth, max_depth;
    int loop_depth;
    bool soft;
    int n_macros;
    node_t *macros[64]; /* enclosing macros, for their varargs / kwargs flags */
} ps_t;

typedef struct vec {
    node_t **v;
    int n, cap;
} vec_t;

static inline const token_t *cur(const ps_t *p) { return &p->tk[p->i]; }
static inline const token_t *peek(const ps_t *p, int k)
{
    size_t j = p->i;
    while (k-- > 0 && p->tk[j].type != T_EOF)
        j++;
    return &p->tk[j];
}
static inline void next(ps_t *p)
{
    if (p->tk[p->i].type != T_EOF)
        p->i++;
}
static inline bool is_op(const ps_t *p, int op) { return cur(p)->type == T_OP && cur(p)->op == op; }
static inline bool is_name(const token_t *t, const char *s)
{
    return t->type == T_NAME && !strcmp(t->s, s);
}

#define NEW(var, kind, line)                                                                 \
    do {                                                                                     \
        if (!((var) = ps_mk(p, (kind), (line))))                                             \
            return deras_fail(DERAS_ENOMEM, "template: out of memory");                      \
    } while (0)
#define TRY(x)                                                                               \
    do {                                                                                     \
        int st_ = (x);                                                                       \
        if (st_)                                                                             \
            return st_;                                                                      \
    } while (0)

/* Failures name the line: "template line N: ...". */
int ps_fail(const ps_t *p, int code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int ps_unexpected(const ps_t *p, const char *expected);
int ps_expect_op(ps_t *p, int op);
int ps_expect_type(ps_t *p, int type, const char *what);
node_t *ps_mk(ps_t *p, int kind, int line); /* NULL when out of memory */
int ps_vec_push(vec_t *v, node_t *n);
int ps_vec_finish(ps_t *p, vec_t *v, node_t *n); /* the vector's nodes become n's kids */
int ps_enter(ps_t *p);                            /* one nesting level; leave with depth-- */
int ps_const_str(ps_t *p, const char *s, size_t n, tv_t *out); /* an immortal string */
int ps_intern(ps_t *p, node_t *n, const char *name);

/* Expressions (parse_expr.c). */
int parse_expression(ps_t *p, bool with_condexpr, node_t **out);
int parse_tuple(ps_t *p, bool simplified, bool with_condexpr, const char *extra,
                bool explicit_parens, node_t **out);
int parse_primary(ps_t *p, node_t **out);
/* Whether Jinja2 folds the expression into a constant at compile time. */
bool is_const_expr(const node_t *n);
/* A filter chain applied to *node; start_inline: the first name is current (no '|'). */
int parse_filter(ps_t *p, node_t **node, bool start_inline);

#endif
