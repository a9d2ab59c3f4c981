/* SPDX-License-Identifier: Apache-2.0 */
/* parse_expr.c - expressions to syntax tree nodes (ast.h), by recursive descent following
 * jinja2/parser.py: the same precedence ladder (conditional expression, or, and, not,
 * comparisons, + -, ~, * / // %, **, unary, then primary with postfix, filters and tests)
 * and the same compile-time refusals. On top of Jinja2's own checks it refuses, with the
 * line, what this interpreter does not implement: a filter, method or global it lacks,
 * *args / **kwargs in calls (statements: parse_stmt.c). A filter or test Jinja2 itself
 * does not know is an error here as there, except inside an `if` or a conditional
 * expression, where Jinja2 defers it to the render (its "soft frame"), and so does this.
 *
 * Nesting (brackets, unary and `not` chains) is bounded by max_depth, so a hostile
 * template cannot exhaust the stack. Cost: O(tokens) time and arena memory. */
#include "parse_internal.h"

#include "builtins.h"
#include "common/base/status.h"
#include "lexer.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- expressions */

static int parse_unary(struct ps *p, bool with_filter, struct node **out);
static int parse_postfix(struct ps *p, struct node **node);

/* Tuple end: '}}', '%}', ')' or one of the extra names. */
static bool tuple_end(const struct ps *p, const char *extra)
{
    const token *t = cur(p);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || (t->type == T_OP && t->op == OP_RPAREN))
        return true;
    return extra && is_name(t, extra);
}

int parse_tuple(struct ps *p, bool simplified, bool with_condexpr, const char *extra,
                bool explicit_parens, struct node **out)
{
    int line = cur(p)->line;
    vec items = {0};
    bool is_tuple = false;
    int st = 0;
    for (;;) {
        if (items.n && (st = parse_expect_op(p, OP_COMMA)))
            break;
        if (tuple_end(p, extra))
            break;
        struct node *e;
        if ((st = simplified ? parse_primary(p, &e) : parse_expression(p, with_condexpr, &e)))
            break;
        if ((st = parse_vec_push(&items, e)))
            break;
        if (is_op(p, OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (st) {
        free(items.v);
        return st;
    }
    if (!is_tuple && items.n) {
        *out = items.v[0];
        free(items.v);
        return 0;
    }
    if (!is_tuple && !explicit_parens) {
        free(items.v);
        return parse_unexpected(p, "an expression");
    }
    struct node *t;
    if (!(t = parse_mk(p, N_TUPLE, line))) {
        free(items.v);
        return deras_fail(DERAS_ENOMEM, "template: out of memory");
    }
    *out = t;
    return parse_vec_finish(p, &items, t);
}

/* (args, name=value, ...) after '(' is current. */
static int parse_call_args(struct ps *p, struct node *n)
{
    vec args = {0};
    bool kw_seen = false, comma = false;
    int n_pos = 0, n_kw = 0;
    int st = parse_expect_op(p, OP_LPAREN);
    while (!st && !is_op(p, OP_RPAREN)) {
        if (comma) {
            if ((st = parse_expect_op(p, OP_COMMA)) || is_op(p, OP_RPAREN))
                break;
        }
        if (is_op(p, OP_MUL) || is_op(p, OP_POW)) {
            st = parse_fail(p, DERAS_EUNSUPPORTED, cur(p)->line,
                       "*args and **kwargs in calls are not supported");
            break;
        }
        struct node *e;
        if (cur(p)->type == T_NAME && peek(p, 1)->type == T_OP && peek(p, 1)->op == OP_ASSIGN) {
            struct node *kw = parse_mk(p, N_KEYWORD, cur(p)->line);
            if (!kw) {
                st = deras_fail(DERAS_ENOMEM, "template: out of memory");
                break;
            }
            kw->name = cur(p)->s;
            next(p);
            next(p);
            if ((st = parse_expression(p, true, &kw->a)))
                break;
            kw_seen = true;
            e = kw;
        } else {
            if (kw_seen) {
                st = parse_fail(p, DERAS_EFORMAT, cur(p)->line,
                                "positional argument after keyword argument");
                break;
            }
            if ((st = parse_expression(p, true, &e)))
                break;
        }
        if (++*(kw_seen ? &n_kw : &n_pos) > TMPL_MAX_ARGS) {
            st = parse_fail(p, DERAS_EUNSUPPORTED, e->line, "more than %d positional or keyword "
                         "arguments in one call are not supported", TMPL_MAX_ARGS);
            break;
        }
        st = parse_vec_push(&args, e);
        comma = true;
    }
    if (!st)
        st = parse_expect_op(p, OP_RPAREN);
    if (st) {
        free(args.v);
        return st;
    }
    return parse_vec_finish(p, &args, n);
}

/* A constant string argument at `idx` of a call-like node, or NULL. */
static const char *const_arg(const struct node *n, int idx)
{
    if (idx < n->n_kids && n->kids[idx]->kind == N_CONST && n->kids[idx]->val.type == TV_STR)
        return n->kids[idx]->val.u.s->p;
    return NULL;
}

/* A filter named by a constant argument of map() must be one this interpreter has. */
static int check_named_arg(struct ps *p, const struct node *f)
{
    if (f->op != F_MAP || !f->n_kids || f->kids[0]->kind == N_KEYWORD)
        return 0;
    const char *name = const_arg(f, 0);
    int id = name ? filter_find(name) : -1;
    if (id >= 0 && !filter_supported(id))
        return parse_fail(p, DERAS_EUNSUPPORTED, f->line, "filter '%s' is not supported", name);
    return 0;
}

/* A filter's or test's name at the cursor, dots included ("tojson", "ns.attr"), into `name`
 * (cut at `cap`); `what` names the expected thing in the error. */
static int parse_dotted_name(struct ps *p, const char *what, char *name, size_t cap)
{
    if (cur(p)->type != T_NAME)
        return parse_unexpected(p, what);
    snprintf(name, cap, "%s", cur(p)->s);
    next(p);
    while (is_op(p, OP_DOT)) {
        next(p);
        if (cur(p)->type != T_NAME)
            return parse_unexpected(p, "a name");
        size_t k = strlen(name);
        snprintf(name + k, cap - k, ".%s", cur(p)->s);
        next(p);
    }
    return 0;
}

int parse_filter(struct ps *p, struct node **node, bool start_inline)
{
    while (is_op(p, OP_PIPE) || start_inline) {
        if (!start_inline)
            next(p);
        start_inline = false;
        int line = cur(p)->line;
        char name[256];
        TRY(parse_dotted_name(p, "a filter name", name, sizeof name));
        struct node *f;
        NEW(f, N_FILTER, line);
        f->a = *node;
        f->name = arena_strdup(p->arena, name, strlen(name));
        if (!f->name)
            return deras_fail(DERAS_ENOMEM, "template: out of memory");
        int id = filter_find(name);
        if (id < 0 && !p->soft)
            return parse_fail(p, DERAS_EFORMAT, line, "no filter named '%s'", name);
        if (id >= 0 && !filter_supported(id))
            return parse_fail(p, DERAS_EUNSUPPORTED, line, "filter '%s' is not supported", name);
        f->op = (int16_t)id;
        if (is_op(p, OP_LPAREN))
            TRY(parse_call_args(p, f));
        TRY(check_named_arg(p, f));
        *node = f;
    }
    return 0;
}

static int parse_test(struct ps *p, struct node **node)
{
    int line = cur(p)->line;
    next(p); /* is */
    bool negated = false;
    if (is_name(cur(p), "not")) {
        next(p);
        negated = true;
    }
    char name[256];
    TRY(parse_dotted_name(p, "a test name", name, sizeof name));
    struct node *t;
    NEW(t, N_TEST, line);
    t->a = *node;
    if (!(t->name = arena_strdup(p->arena, name, strlen(name))))
        return deras_fail(DERAS_ENOMEM, "template: out of memory");
    int id = test_find(name);
    if (id < 0 && !p->soft)
        return parse_fail(p, DERAS_EFORMAT, line, "no test named '%s'", name);
    t->op = (int16_t)id;
    const token *c = cur(p);
    if (is_op(p, OP_LPAREN)) {
        TRY(parse_call_args(p, t));
    } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT ||
                c->type == T_FLOAT || (c->type == T_OP && (c->op == OP_LPAREN ||
                c->op == OP_LBRACKET || c->op == OP_LBRACE))) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return parse_fail(p, DERAS_EFORMAT, c->line, "You cannot chain multiple tests with is");
        struct node *arg;
        TRY(parse_primary(p, &arg));
        TRY(parse_postfix(p, &arg));
        t->kids = arena_alloc(p->arena, sizeof *t->kids);
        if (!t->kids)
            return deras_fail(DERAS_ENOMEM, "template: out of memory");
        t->kids[0] = arg;
        t->n_kids = 1;
    }
    if (negated) {
        struct node *n;
        NEW(n, N_NOT, line);
        n->a = t;
        t = n;
    }
    *node = t;
    return 0;
}

static int parse_subscript_arg(struct ps *p, struct node **out)
{ /* one subscript: an expression or a slice a:b:c */
    int line = cur(p)->line;
    struct node *parts[3] = {0};
    if (!is_op(p, OP_COLON)) {
        TRY(parse_expression(p, true, &parts[0]));
        if (!is_op(p, OP_COLON)) {
            *out = parts[0];
            return 0;
        }
    }
    next(p); /* first ':' */
    if (!is_op(p, OP_COLON) && !is_op(p, OP_RBRACKET) && !is_op(p, OP_COMMA))
        TRY(parse_expression(p, true, &parts[1]));
    if (is_op(p, OP_COLON)) {
        next(p);
        if (!is_op(p, OP_RBRACKET) && !is_op(p, OP_COMMA))
            TRY(parse_expression(p, true, &parts[2]));
    }
    struct node *s;
    NEW(s, N_SLICE, line);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    *out = s;
    return 0;
}

static int parse_postfix(struct ps *p, struct node **node)
{
    for (;;) {
        int line = cur(p)->line;
        if (is_op(p, OP_DOT)) {
            next(p);
            struct node *n;
            if (cur(p)->type == T_NAME) {
                NEW(n, N_GETATTR, line);
                n->name = cur(p)->s;
            } else if (cur(p)->type == T_INT) {
                NEW(n, N_GETITEM, line);
                NEW(n->b, N_CONST, line);
                n->b->val = tv_int(cur(p)->i);
            } else {
                return parse_unexpected(p, "an attribute name");
            }
            next(p);
            n->a = *node;
            *node = n;
        } else if (is_op(p, OP_LBRACKET)) {
            next(p);
            vec args = {0};
            int st = 0;
            while (!st && !is_op(p, OP_RBRACKET)) {
                if (args.n && (st = parse_expect_op(p, OP_COMMA)))
                    break;
                struct node *a = NULL;
                if (!(st = parse_subscript_arg(p, &a)))
                    st = parse_vec_push(&args, a);
            }
            if (!st)
                st = parse_expect_op(p, OP_RBRACKET);
            struct node *n = st ? NULL : parse_mk(p, N_GETITEM, line);
            if (!st && !n)
                st = deras_fail(DERAS_ENOMEM, "template: out of memory");
            if (!st && args.n == 0)
                st = parse_fail(p, DERAS_EFORMAT, line, "expected a subscript");
            if (st) {
                free(args.v);
                return st;
            }
            n->a = *node;
            if (args.n == 1) {
                n->b = args.v[0];
                free(args.v);
            } else {
                for (int i = 0; i < args.n; i++)
                    if (args.v[i]->kind == N_SLICE) {
                        free(args.v);
                        return parse_fail(p, DERAS_EUNSUPPORTED, line,
                                       "a slice inside a tuple subscript is not supported");
                    }
                NEW(n->b, N_TUPLE, line);
                TRY(parse_vec_finish(p, &args, n->b));
            }
            *node = n;
        } else if (is_op(p, OP_LPAREN)) {
            struct node *c;
            NEW(c, N_CALL, line);
            c->a = *node;
            TRY(parse_call_args(p, c));
            if (c->a->kind == N_GETATTR && method_find(c->a->name) < 0)
                return parse_fail(p, DERAS_EUNSUPPORTED, line, "method '%s' is not supported",
                             c->a->name);
            *node = c;
        } else {
            return 0;
        }
    }
}

int parse_primary(struct ps *p, struct node **out)
{
    const token *t = cur(p);
    int line = t->line;
    struct node *n;
    TRY(parse_enter(p));
    switch (t->type) {
    case T_NAME:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") ||
            !strcmp(t->s, "False")) {
            NEW(n, N_CONST, line);
            n->val = tv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            NEW(n, N_CONST, line);
            n->val = tv_none();
        } else {
            NEW(n, N_NAME, line);
            TRY(parse_intern(p, n, t->s));
            bool ok;
            int g = global_find(t->s, &ok);
            if (g >= 0 && !ok)
                return parse_fail(p, DERAS_EUNSUPPORTED, line, "global '%s' is not supported",
                                  t->s);
            for (int i = 0; i < p->n_macros; i++)
                p->macros[i]->op |= !strcmp(t->s, "varargs") ? MACRO_VARARGS
                                    : !strcmp(t->s, "kwargs") ? MACRO_KWARGS : 0;
        }
        next(p);
        break;
    case T_STRING: {
        size_t len = 0;
        size_t j = p->i;
        while (p->tk[j].type == T_STRING)
            len += p->tk[j++].len;
        char *buf = arena_alloc(p->arena, len + 1);
        if (!buf)
            return deras_fail(DERAS_ENOMEM, "template: out of memory");
        size_t k = 0;
        for (; p->i < j; p->i++) {
            memcpy(buf + k, p->tk[p->i].s, p->tk[p->i].len);
            k += p->tk[p->i].len;
        }
        NEW(n, N_CONST, line);
        TRY(parse_const_str(p, buf, len, &n->val));
        break;
    }
    case T_INT:
    case T_FLOAT:
        NEW(n, N_CONST, line);
        n->val = t->type == T_INT ? tv_int(t->i) : tv_float(t->f);
        next(p);
        break;
    case T_OP:
        if (t->op == OP_LPAREN) {
            next(p);
            TRY(parse_tuple(p, false, true, NULL, true, &n));
            TRY(parse_expect_op(p, OP_RPAREN));
            break;
        }
        if (t->op == OP_LBRACKET || t->op == OP_LBRACE) {
            bool dict = t->op == OP_LBRACE;
            int close = dict ? OP_RBRACE : OP_RBRACKET;
            NEW(n, dict ? N_DICT : N_LIST, line);
            next(p);
            vec items = {0};
            int st = 0;
            while (!st && !is_op(p, close)) {
                if (items.n && ((st = parse_expect_op(p, OP_COMMA)) || is_op(p, close)))
                    break;
                struct node *e;
                if ((st = parse_expression(p, true, &e)))
                    break;
                if (dict) {
                    struct node *pair = parse_mk(p, N_PAIR, e->line);
                    if (!pair) {
                        st = deras_fail(DERAS_ENOMEM, "template: out of memory");
                        break;
                    }
                    pair->a = e;
                    if ((st = parse_expect_op(p, OP_COLON)) || (st = parse_expression(p, true, &pair->b)))
                        break;
                    e = pair;
                }
                st = parse_vec_push(&items, e);
            }
            if (!st)
                st = parse_expect_op(p, close);
            if (st) {
                free(items.v);
                return st;
            }
            TRY(parse_vec_finish(p, &items, n));
            break;
        }
        /* fall through */
    default:
        return parse_unexpected(p, "an expression");
    }
    p->depth--;
    *out = n;
    return 0;
}

static int parse_unary(struct ps *p, bool with_filter, struct node **out)
{
    int line = cur(p)->line;
    struct node *n;
    TRY(parse_enter(p));
    if (is_op(p, OP_SUB) || is_op(p, OP_ADD)) {
        NEW(n, is_op(p, OP_SUB) ? N_NEG : N_POS, line);
        next(p);
        TRY(parse_unary(p, false, &n->a));
    } else {
        TRY(parse_primary(p, &n));
    }
    TRY(parse_postfix(p, &n));
    while (with_filter) {
        if (is_op(p, OP_PIPE))
            TRY(parse_filter(p, &n, false));
        else if (is_name(cur(p), "is"))
            TRY(parse_test(p, &n));
        else if (is_op(p, OP_LPAREN))
            TRY(parse_postfix(p, &n));
        else
            break;
    }
    p->depth--;
    *out = n;
    return 0;
}

static int binary(struct ps *p, int kind, int op, int line, struct node *left, struct node *right,
                  struct node **out)
{
    struct node *n;
    NEW(n, kind, line);
    n->op = (int16_t)op;
    n->a = left;
    n->b = right;
    *out = n;
    return 0;
}

/* `left ** right` as Jinja2 compiles it when left is a constant (see is_const_expr). */
static int make_pow(struct ps *p, int line, struct node *left, struct node *right,
                    struct node **out)
{
    if (left->kind == N_CONST || !is_const_expr(left) || is_const_expr(right))
        return binary(p, N_BINOP, BIN_POW, line, left, right, out);
    int negs = 0;
    struct node *c = left;
    while (c->kind == N_NEG || c->kind == N_POS) {
        negs += c->kind == N_NEG;
        c = c->a;
    }
    if (c->kind != N_CONST || !tv_is_num(&c->val))
        return parse_fail(p, DERAS_EUNSUPPORTED, line, "'**' with a computed constant on its left "
                       "is not supported");
    bool neg = c->val.type == TV_FLOAT ? (c->val.u.f < 0) != (negs & 1)
             : ((c->val.type == TV_INT ? c->val.u.i : c->val.u.b) != 0) && (negs & 1);
    if (!neg)
        return binary(p, N_BINOP, BIN_POW, line, c, right, out);
    struct node *pw = NULL, *n;
    TRY(binary(p, N_BINOP, BIN_POW, line, c, right, &pw));
    NEW(n, N_NEG, line);
    n->a = pw;
    *out = n;
    return 0;
}

static int parse_pow(struct ps *p, struct node **out)
{
    TRY(parse_unary(p, true, out));
    while (is_op(p, OP_POW)) {
        int line = cur(p)->line;
        next(p);
        struct node *r;
        TRY(parse_unary(p, true, &r));
        TRY(make_pow(p, line, *out, r, out));
    }
    return 0;
}

static int parse_math2(struct ps *p, struct node **out)
{
    TRY(parse_pow(p, out));
    for (;;) {
        int op = is_op(p, OP_MUL) ? BIN_MUL : is_op(p, OP_DIV) ? BIN_DIV
               : is_op(p, OP_FLOORDIV) ? BIN_FLOORDIV : is_op(p, OP_MOD) ? BIN_MOD : -1;
        if (op < 0)
            return 0;
        int line = cur(p)->line;
        next(p);
        struct node *r;
        TRY(parse_pow(p, &r));
        TRY(binary(p, N_BINOP, op, line, *out, r, out));
    }
}

static int parse_concat(struct ps *p, struct node **out)
{
    int line = cur(p)->line;
    TRY(parse_math2(p, out));
    if (!is_op(p, OP_TILDE))
        return 0;
    vec args = {0};
    int st = parse_vec_push(&args, *out);
    while (!st && is_op(p, OP_TILDE)) {
        next(p);
        struct node *r;
        if (!(st = parse_math2(p, &r)))
            st = parse_vec_push(&args, r);
    }
    struct node *n = st ? NULL : parse_mk(p, N_CONCAT, line);
    if (!st && !n)
        st = deras_fail(DERAS_ENOMEM, "template: out of memory");
    if (st) {
        free(args.v);
        return st;
    }
    *out = n;
    return parse_vec_finish(p, &args, n);
}

static int parse_math1(struct ps *p, struct node **out)
{
    TRY(parse_concat(p, out));
    while (is_op(p, OP_ADD) || is_op(p, OP_SUB)) {
        int op = is_op(p, OP_ADD) ? BIN_ADD : BIN_SUB, line = cur(p)->line;
        next(p);
        struct node *r;
        TRY(parse_concat(p, &r));
        TRY(binary(p, N_BINOP, op, line, *out, r, out));
    }
    return 0;
}

static int parse_compare(struct ps *p, struct node **out)
{
    int line = cur(p)->line;
    struct node *first;
    TRY(parse_math1(p, &first));
    vec ops = {0};
    int st = 0;
    for (;;) {
        const token *t = cur(p);
        int op = -1;
        if (t->type == T_OP) {
            op = t->op == OP_EQ ? CMP_EQ : t->op == OP_NE ? CMP_NE : t->op == OP_LT ? CMP_LT
               : t->op == OP_LTEQ ? CMP_LE : t->op == OP_GT ? CMP_GT : t->op == OP_GTEQ ? CMP_GE : -1;
            if (op >= 0)
                next(p);
        } else if (is_name(t, "in")) {
            op = CMP_IN;
            next(p);
        } else if (is_name(t, "not") && is_name(peek(p, 1), "in")) {
            op = CMP_NOTIN;
            next(p);
            next(p);
        }
        if (op < 0)
            break;
        struct node *o = parse_mk(p, N_OPERAND, t->line);
        if (!o) {
            st = deras_fail(DERAS_ENOMEM, "template: out of memory");
            break;
        }
        o->op = (int16_t)op;
        if ((st = parse_math1(p, &o->a)) || (st = parse_vec_push(&ops, o)))
            break;
    }
    if (st) {
        free(ops.v);
        return st;
    }
    if (!ops.n) {
        *out = first;
        return 0;
    }
    struct node *n;
    NEW(n, N_COMPARE, line);
    n->a = first;
    *out = n;
    return parse_vec_finish(p, &ops, n);
}

static int parse_not(struct ps *p, struct node **out)
{
    if (is_name(cur(p), "not")) {
        struct node *n;
        NEW(n, N_NOT, cur(p)->line);
        next(p);
        TRY(parse_enter(p));
        TRY(parse_not(p, &n->a));
        p->depth--;
        *out = n;
        return 0;
    }
    return parse_compare(p, out);
}

static int parse_and(struct ps *p, struct node **out)
{
    TRY(parse_not(p, out));
    while (is_name(cur(p), "and")) {
        int line = cur(p)->line;
        next(p);
        struct node *r;
        TRY(parse_not(p, &r));
        TRY(binary(p, N_AND, 0, line, *out, r, out));
    }
    return 0;
}

static int parse_or(struct ps *p, struct node **out)
{
    TRY(parse_and(p, out));
    while (is_name(cur(p), "or")) {
        int line = cur(p)->line;
        next(p);
        struct node *r;
        TRY(parse_and(p, &r));
        TRY(binary(p, N_OR, 0, line, *out, r, out));
    }
    return 0;
}

int parse_expression(struct ps *p, bool with_condexpr, struct node **out)
{
    TRY(parse_enter(p));
    TRY(parse_or(p, out));
    while (with_condexpr && is_name(cur(p), "if")) {
        bool soft = p->soft;
        p->soft = true;
        struct node *n;
        NEW(n, N_CONDEXPR, cur(p)->line);
        next(p);
        n->b = *out;
        TRY(parse_or(p, &n->a));
        if (is_name(cur(p), "else")) {
            next(p);
            TRY(parse_expression(p, true, &n->c));
        }
        p->soft = soft;
        *out = n;
    }
    p->depth--;
    return 0;
}

