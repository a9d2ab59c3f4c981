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

struct ps {
    struct arena *arena;
    symtab *syms;
    const token *tk;
    size_t i;
    int depth, max_depth;
    int loop_depth;
    bool soft;
    int n_macros;
    struct node *macros[64]; /* enclosing macros, for their varargs / kwargs flags */
};

typedef struct vec {
    struct node **v;
    int n, cap;
} vec;

static inline const token *cur(const struct ps *p) { return &p->tk[p->i]; }
static inline const token *peek(const struct ps *p, int k)
{
    size_t j = p->i;
    while (k-- > 0 && p->tk[j].type != T_EOF)
        j++;
    return &p->tk[j];
}
static inline void next(struct ps *p)
{
    if (p->tk[p->i].type != T_EOF)
        p->i++;
}
static inline bool is_op(const struct ps *p, int op)
{
    return cur(p)->type == T_OP && cur(p)->op == op;
}
static inline bool is_name(const token *t, const char *s)
{
    return t->type == T_NAME && !strcmp(t->s, s);
}

#define NEW(var, kind, line)                                                                 \
    do {                                                                                     \
        if (!((var) = parse_mk(p, (kind), (line))))                                             \
            return deras_fail(DERAS_ENOMEM, "template: out of memory");                      \
    } while (0)
#define TRY(x)                                                                               \
    do {                                                                                     \
        int st_ = (x);                                                                       \
        if (st_)                                                                             \
            return st_;                                                                      \
    } while (0)

/* Failures name the line: "template line N: ...". */
int parse_fail(const struct ps *p, int code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int parse_unexpected(const struct ps *p, const char *expected);
int parse_expect_op(struct ps *p, int op);
int parse_expect_type(struct ps *p, int type, const char *what);
struct node *parse_mk(struct ps *p, int kind, int line); /* NULL when out of memory */
int parse_vec_push(vec *v, struct node *n);
int parse_vec_finish(struct ps *p, vec *v, struct node *n); /* the vector's nodes become n's kids */
int parse_enter(struct ps *p);                       /* one nesting level; leave with depth-- */
int parse_const_str(struct ps *p, const char *s, size_t n, tv *out); /* an immortal string */
int parse_intern(struct ps *p, struct node *n, const char *name);

/* Expressions (parse_expr.c). */
int parse_expression(struct ps *p, bool with_condexpr, struct node **out);
int parse_tuple(struct ps *p, bool simplified, bool with_condexpr, const char *extra,
                bool explicit_parens, struct node **out);
int parse_primary(struct ps *p, struct node **out);
/* Whether Jinja2 folds the expression into a constant at compile time. */
bool is_const_expr(const struct node *n);
/* A filter chain applied to *node; start_inline: the first name is current (no '|'). */
int parse_filter(struct ps *p, struct node **node, bool start_inline);

#endif
