/* SPDX-License-Identifier: Apache-2.0 */
/* parse_stmt.c - statements: template data, {{ output }}, and the {% tags %} of
 * transformers' environment (for, if, set, macro, filter, print, break, continue,
 * generation), as jinja2/parser.py parses them. Loader statements (include, import,
 * extends, block), {% call %}, {% with %}, {% autoescape %} and recursive loops are refused
 * as unsupported; tags Jinja2 does not know are syntax errors, as there.
 *
 * The parser tracks what Jinja2's code generator tracks at compile time: whether a
 * statement sits inside a loop (break / continue), inside an `if` (a "soft frame", where
 * unknown filters are deferred to the render) and inside which macros (whether they read
 * varargs / kwargs). Cost: O(tokens).
 */
#include "parse_internal.h"
#include "parser.h"

#include <stdlib.h>

static int parse_body(struct ps *p, const char *const *ends, int *which, struct node **out);

static int expect_end(struct ps *p) { return parse_expect_type(p, T_BLOCK_END, "'%}'"); }

/* A {{ }} that Jinja2 folds: its slices go through the sandbox's getitem (see
 * is_const_expr); N_SLICE's op 1 says so. */
static void mark_folded_slices(struct node *n)
{
    if (!n)
        return;
    if (n->kind == N_SLICE)
        n->op = 1;
    mark_folded_slices(n->a);
    mark_folded_slices(n->b);
    mark_folded_slices(n->c);
    for (int i = 0; i < n->n_kids; i++)
        mark_folded_slices(n->kids[i]);
}

/* Consume the end tag's name (the cursor is on it) and its '%}'. */
static int close_tag(struct ps *p)
{
    next(p);
    return expect_end(p);
}

static bool assignable(const struct node *t)
{
    if (t->kind == N_NAME)
        return true;
    if (t->kind != N_TUPLE)
        return false;
    for (int i = 0; i < t->n_kids; i++)
        if (t->kids[i]->kind != N_NAME)
            return false;
    return true;
}

static int parse_target(struct ps *p, const char *extra, bool with_ns, struct node **out)
{
    int line = cur(p)->line;
    if (with_ns && cur(p)->type == T_NAME && peek(p, 1)->type == T_OP && peek(p, 1)->op == OP_DOT) {
        struct node *n, *ns;
        NEW(n, N_NSREF, line);
        NEW(ns, N_NAME, line);
        TRY(parse_intern(p, ns, cur(p)->s));
        next(p);
        next(p);
        if (cur(p)->type != T_NAME)
            return parse_unexpected(p, "an attribute name");
        n->a = ns;
        n->name = cur(p)->s;
        TRY(parse_const_str(p, n->name, strlen(n->name), &n->val)); /* the attribute as a key */
        next(p);
        *out = n;
        return 0;
    }
    TRY(parse_tuple(p, true, true, extra, false, out));
    if (!assignable(*out))
        return parse_fail(p, DERAS_EFORMAT, line, "can't assign to this expression");
    return 0;
}

static int parse_for(struct ps *p, struct node **out)
{
    struct node *n;
    NEW(n, N_FOR, cur(p)->line);
    next(p);
    TRY(parse_target(p, "in", false, &n->a));
    if (!is_name(cur(p), "in"))
        return parse_unexpected(p, "'in'");
    next(p);
    TRY(parse_tuple(p, false, false, "recursive", false, &n->b));
    bool soft = p->soft;
    p->soft = false;
    if (is_name(cur(p), "if")) {
        next(p);
        TRY(parse_expression(p, true, &n->c));
    }
    if (is_name(cur(p), "recursive"))
        return parse_fail(p, DERAS_EUNSUPPORTED, cur(p)->line, "recursive loops are not supported");
    TRY(expect_end(p));
    static const char *const ends[] = {"endfor", "else", NULL};
    int which;
    p->loop_depth++;
    TRY(parse_body(p, ends, &which, &n->d));
    p->loop_depth--;
    if (which == 1) {
        TRY(close_tag(p));
        static const char *const ends2[] = {"endfor", NULL};
        n->kids = arena_alloc(p->arena, sizeof *n->kids);
        if (!n->kids)
            return deras_fail(DERAS_ENOMEM, "template: out of memory");
        n->n_kids = 1;
        TRY(parse_body(p, ends2, &which, &n->kids[0]));
    }
    p->soft = soft;
    *out = n;
    return close_tag(p);
}

static int parse_if(struct ps *p, struct node **out)
{
    struct node *n;
    NEW(n, N_IF, cur(p)->line);
    *out = n;
    next(p);
    bool soft = p->soft;
    p->soft = true;
    for (;;) {
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        int which;
        TRY(parse_tuple(p, false, false, NULL, false, &n->a));
        TRY(expect_end(p));
        TRY(parse_body(p, ends, &which, &n->b));
        if (which == 0) {
            NEW(n->c, N_IF, cur(p)->line);
            n = n->c;
            next(p);
            continue;
        }
        if (which == 1) {
            static const char *const ends2[] = {"endif", NULL};
            TRY(close_tag(p));
            TRY(parse_body(p, ends2, &which, &n->c));
        }
        break;
    }
    p->soft = soft;
    return close_tag(p);
}

static int parse_set(struct ps *p, struct node **out)
{
    int line = cur(p)->line;
    next(p);
    struct node *target;
    TRY(parse_target(p, NULL, true, &target));
    struct node *n;
    if (is_op(p, OP_ASSIGN)) {
        NEW(n, N_SET, line);
        n->a = target;
        next(p);
        TRY(parse_tuple(p, false, true, NULL, false, &n->b));
        *out = n;
        return expect_end(p);
    }
    NEW(n, N_SETBLOCK, line);
    n->a = target;
    if (is_op(p, OP_PIPE))
        TRY(parse_filter(p, &n->c, false));
    TRY(expect_end(p));
    static const char *const ends[] = {"endset", NULL};
    int which;
    bool soft = p->soft;
    p->soft = false;
    TRY(parse_body(p, ends, &which, &n->b));
    p->soft = soft;
    *out = n;
    return close_tag(p);
}

static int parse_macro(struct ps *p, struct node **out)
{
    struct node *n;
    NEW(n, N_MACRO, cur(p)->line);
    next(p);
    if (cur(p)->type != T_NAME)
        return parse_unexpected(p, "a macro name");
    TRY(parse_intern(p, n, cur(p)->s));
    next(p);
    TRY(parse_expect_op(p, OP_LPAREN));
    vec params = {0};
    bool defaults = false;
    int st = 0;
    while (!st && !is_op(p, OP_RPAREN)) {
        if (params.n && (st = parse_expect_op(p, OP_COMMA)))
            break;
        if (cur(p)->type != T_NAME) {
            st = parse_unexpected(p, "a parameter name");
            break;
        }
        struct node *a = parse_mk(p, N_NAME, cur(p)->line);
        if (!a || (st = parse_intern(p, a, cur(p)->s))) {
            st = st ? st : deras_fail(DERAS_ENOMEM, "template: out of memory");
            break;
        }
        next(p);
        if (is_op(p, OP_ASSIGN)) {
            next(p);
            if ((st = parse_expression(p, true, &a->a)))
                break;
            defaults = true;
        } else if (defaults) {
            st = parse_fail(p, DERAS_EFORMAT, a->line,
                            "non-default argument follows default argument");
            break;
        }
        st = parse_vec_push(&params, a);
    }
    if (!st && !(st = parse_expect_op(p, OP_RPAREN)) && !(st = expect_end(p)))
        st = parse_vec_finish(p, &params, n);
    if (st) {
        free(params.v);
        return st;
    }
    if (p->n_macros == (int)(sizeof p->macros / sizeof p->macros[0]))
        return parse_fail(p, DERAS_EUNSUPPORTED, n->line, "macros nested too deeply");
    p->macros[p->n_macros++] = n;
    int loops = p->loop_depth;
    bool soft = p->soft;
    p->loop_depth = 0;
    p->soft = false;
    static const char *const ends[] = {"endmacro", NULL};
    int which;
    TRY(parse_body(p, ends, &which, &n->b));
    p->loop_depth = loops;
    p->soft = soft;
    p->n_macros--;
    *out = n;
    return close_tag(p);
}

/* {% filter f %} and {% generation %}: a body in a scope of its own. */
static int parse_scoped(struct ps *p, bool filter, struct node **out)
{
    struct node *n;
    NEW(n, filter ? N_FILTERBLK : N_SCOPE, cur(p)->line);
    next(p);
    if (filter)
        TRY(parse_filter(p, &n->a, true));
    TRY(expect_end(p));
    static const char *const fends[] = {"endfilter", NULL};
    static const char *const gends[] = {"endgeneration", NULL};
    int which, loops = p->loop_depth;
    bool soft = p->soft;
    p->soft = false;
    if (!filter) /* transformers runs the body as a {% call %} caller: a function */
        p->loop_depth = 0;
    TRY(parse_body(p, filter ? fends : gends, &which, &n->b));
    p->loop_depth = loops;
    p->soft = soft;
    *out = n;
    return close_tag(p);
}

static int parse_statement(struct ps *p, struct node **out)
{
    const token *kw = cur(p);
    int line = kw->line;
    if (kw->type != T_NAME)
        return parse_unexpected(p, "a statement name");
    const char *k = kw->s;
    if (!strcmp(k, "for"))
        return parse_for(p, out);
    if (!strcmp(k, "if"))
        return parse_if(p, out);
    if (!strcmp(k, "set"))
        return parse_set(p, out);
    if (!strcmp(k, "macro"))
        return parse_macro(p, out);
    if (!strcmp(k, "filter") || !strcmp(k, "generation"))
        return parse_scoped(p, k[0] == 'f', out);
    if (!strcmp(k, "break") || !strcmp(k, "continue")) {
        if (p->loop_depth == 0)
            return parse_fail(p, DERAS_EFORMAT, line, "'%s' outside of a loop", k);
        NEW(*out, k[0] == 'b' ? N_BREAK : N_CONTINUE, line);
        next(p);
        return expect_end(p);
    }
    if (!strcmp(k, "print")) {
        NEW(*out, N_OUTPUT, line);
        next(p);
        TRY(parse_tuple(p, false, true, NULL, false, &(*out)->a));
        return expect_end(p);
    }
    static const char *const refused[] = {"call", "block", "extends", "include", "import",
                                          "from", "with", "autoescape"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (!strcmp(k, refused[i]))
            return parse_fail(p, DERAS_EUNSUPPORTED, line, "{%% %s %%} is not supported", k);
    if (!strncmp(k, "end", 3) || !strcmp(k, "else") || !strcmp(k, "elif"))
        return parse_fail(p, DERAS_EFORMAT, line, "unexpected '%s' (no block to close)", k);
    return parse_fail(p, DERAS_EFORMAT, line, "encountered unknown tag '%s'", k);
}

static int parse_body(struct ps *p, const char *const *ends, int *which, struct node **out)
{
    struct node *body;
    TRY(parse_enter(p));
    NEW(body, N_BODY, cur(p)->line);
    vec stmts = {0};
    int st = 0;
    for (;;) {
        const token *t = cur(p);
        struct node *s = NULL;
        if (t->type == T_EOF) {
            if (ends)
                st = parse_fail(p, DERAS_EFORMAT, t->line,
                             "unexpected end of template, expected '{%% %s %%}'", ends[0]);
            break;
        }
        if (t->type == T_DATA) {
            if (!(s = parse_mk(p, N_DATA, t->line)))
                st = deras_fail(DERAS_ENOMEM, "template: out of memory");
            else
                st = parse_const_str(p, t->s, t->len, &s->val);
            next(p);
        } else if (t->type == T_VAR_BEGIN) {
            next(p);
            if (!(s = parse_mk(p, N_OUTPUT, t->line)))
                st = deras_fail(DERAS_ENOMEM, "template: out of memory");
            else if (!(st = parse_tuple(p, false, true, NULL, false, &s->a)) &&
                     !(st = parse_expect_type(p, T_VAR_END, "'}}'")) && is_const_expr(s->a))
                mark_folded_slices(s->a);
        } else if (t->type == T_BLOCK_BEGIN) {
            const token *kw = peek(p, 1);
            int hit = -1;
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(kw, ends[i]))
                    hit = i;
            next(p);
            if (hit >= 0) {
                *which = hit;
                break;
            }
            st = parse_statement(p, &s);
        } else {
            st = parse_unexpected(p, "template data or a tag");
        }
        if (!st && s)
            st = parse_vec_push(&stmts, s);
        if (st)
            break;
    }
    if (st) {
        free(stmts.v);
        return st;
    }
    p->depth--;
    *out = body;
    return parse_vec_finish(p, &stmts, body);
}

int parse_template(struct arena *arena, symtab *syms, const tokens *tk, int max_depth,
                   struct node **root)
{
    struct ps p = {.arena = arena, .syms = syms, .tk = tk->v, .max_depth = max_depth};
    int which;
    return parse_body(&p, NULL, &which, root);
}
