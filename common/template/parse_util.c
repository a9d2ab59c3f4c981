/* SPDX-License-Identifier: Apache-2.0 */
/* parse_util.c - the parser's helpers (parse_internal.h): failures that name the line,
 * token expectations, node and kid-list allocation in the arena, immortal string
 * constants, name interning, the nesting bound, and Jinja2's constant folding test.
 */
#include "parse_internal.h"

#include "builtins.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int parse_fail(const struct ps *p, int code, int line, const char *fmt, ...)
{
    (void)p;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return deras_fail(code, "template line %d: %s", line, msg);
}

static const char *parse_describe(const token *t, char *buf, size_t cap)
{
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_NAME: snprintf(buf, cap, "'%s'", t->s); return buf;
    case T_STRING: return "a string";
    case T_INT:
    case T_FLOAT: return "a number";
    default: snprintf(buf, cap, "'%s'", lex_op_text(t->op)); return buf;
    }
}

int parse_unexpected(const struct ps *p, const char *expected)
{
    char buf[300];
    return parse_fail(p, DERAS_EFORMAT, cur(p)->line, "unexpected %s, expected %s",
                 parse_describe(cur(p), buf, sizeof buf), expected);
}


int parse_expect_op(struct ps *p, int op)
{
    if (!is_op(p, op)) {
        char want[16];
        snprintf(want, sizeof want, "'%s'", lex_op_text(op));
        return parse_unexpected(p, want);
    }
    next(p);
    return 0;
}

int parse_expect_type(struct ps *p, int type, const char *what)
{
    if (cur(p)->type != type)
        return parse_unexpected(p, what);
    next(p);
    return 0;
}

struct node *parse_mk(struct ps *p, int kind, int line)
{
    struct node *n = arena_alloc(p->arena, sizeof *n);
    if (n) {
        n->kind = (uint8_t)kind;
        n->line = line;
        n->sym = -1;
    }
    return n;
}


int parse_vec_push(vec *v, struct node *n)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        struct node **a = realloc(v->v, (size_t)cap * sizeof *a);
        if (!a)
            return deras_fail(DERAS_ENOMEM, "template: out of memory");
        v->v = a;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return 0;
}

/* Move the vector's nodes into the arena as n's kids. */
int parse_vec_finish(struct ps *p, vec *v, struct node *n)
{
    if (v->n) {
        n->kids = arena_alloc(p->arena, (size_t)v->n * sizeof *n->kids);
        if (!n->kids) {
            free(v->v);
            return deras_fail(DERAS_ENOMEM, "template: out of memory");
        }
        memcpy(n->kids, v->v, (size_t)v->n * sizeof *n->kids);
    }
    n->n_kids = v->n;
    free(v->v);
    *v = (vec){0};
    return 0;
}

int parse_enter(struct ps *p)
{
    if (++p->depth > p->max_depth)
        return parse_fail(p, DERAS_EUNSUPPORTED, cur(p)->line,
                     "nesting deeper than max_depth (%d) is not supported", p->max_depth);
    return 0;
}

int parse_const_str(struct ps *p, const char *s, size_t n, tv *out)
{
    struct tstr *t = arena_alloc(p->arena, sizeof *t + n + 1);
    if (!t)
        return deras_fail(DERAS_ENOMEM, "template: out of memory");
    t->refs = TV_IMMORTAL;
    t->len = n;
    t->ascii = true;
    for (size_t i = 0; i < n; i++)
        t->ascii &= (unsigned char)s[i] < 0x80;
    memcpy(t->p, s, n);
    t->p[n] = 0;
    *out = (tv){.type = TV_STR, .u.s = t};
    return 0;
}

int parse_intern(struct ps *p, struct node *n, const char *name)
{
    n->name = name;
    n->sym = sym_intern(p->arena, p->syms, name, strlen(name));
    return n->sym < 0 ? deras_fail(DERAS_ENOMEM, "template: out of memory") : 0;
}

/* Whether Jinja2's optimizer can fold n into a constant when compiling: literals, the
 * operators over them, and filters and tests of constants (except the filters that take
 * the context). Folding changes two results, which the parser reproduces: a negative
 * constant raised to a variable power is written into Python as "-1 ** x", which is
 * -(1 ** x); and a {{ }} whose whole expression folds evaluates its slices through the
 * sandbox's getitem (Undefined where Python's slicing raises). */
bool is_const_expr(const struct node *n)
{
    if (!n)
        return true;
    switch (n->kind) {
    case N_CONST: return true;
    case N_NEG:
    case N_POS:
    case N_NOT:
    case N_GETATTR: return is_const_expr(n->a);
    case N_BINOP:
    case N_AND:
    case N_OR:
    case N_GETITEM:
    case N_PAIR: return is_const_expr(n->a) && is_const_expr(n->b);
    case N_SLICE:
    case N_CONDEXPR: return is_const_expr(n->a) && is_const_expr(n->b) && is_const_expr(n->c);
    case N_FILTER:
        if (n->op == F_MAP || n->op == F_SELECT || n->op == F_REJECT || n->op == F_SELECTATTR ||
            n->op == F_REJECTATTR || n->op < 0)
            return false;
        /* fall through */
    case N_TEST:
    case N_COMPARE:
    case N_CONCAT:
    case N_LIST:
    case N_TUPLE:
    case N_DICT:
        if ((n->kind == N_COMPARE || n->kind == N_FILTER || n->kind == N_TEST) &&
            (!n->a || !is_const_expr(n->a)))
            return false;
        for (int i = 0; i < n->n_kids; i++)
            if (!is_const_expr(n->kids[i]->kind == N_OPERAND || n->kids[i]->kind == N_KEYWORD
                                   ? n->kids[i]->a : n->kids[i]))
                return false;
        return true;
    default: return false;
    }
}
