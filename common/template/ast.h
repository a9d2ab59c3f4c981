/* SPDX-License-Identifier: Apache-2.0 */
/* ast.h - a compiled template: its syntax tree, the arena that holds it, and the table of
 * the names it uses.
 *
 * Nodes, their strings and their constants live in one arena freed with the template, so
 * the tree has no individual frees and no reference counts: a render only reads it. Every
 * identifier is interned to a small integer (its symbol) at compile time; a render binds
 * variables by symbol, and reads from the context only the keys that are symbols.
 *
 * One node struct serves every kind; the comment on each kind says which fields it uses
 * (a, b, c, d: children; kids: a list; name/sym: an identifier; val: a constant; op).
 * Cost: the arena grows in 64 KiB chunks; a template takes a few times its source size.
 */
#ifndef DERAS_TEMPLATE_AST_H
#define DERAS_TEMPLATE_AST_H

#include <stddef.h>
#include <stdint.h>

#include "value.h"

enum node_kind {
    /* statements */
    N_BODY,     /* kids: statements */
    N_DATA,     /* val: the text */
    N_OUTPUT,   /* a: expression to print */
    N_IF,       /* a: test, b: body, c: else (N_BODY, or N_IF for elif) or NULL */
    N_FOR,      /* a: target (N_NAME or N_TUPLE of names), b: iterable, c: filter or NULL,
                   d: body; kids[0]: else body (n_kids 0 or 1) */
    N_SET,      /* a: target (N_NAME, N_TUPLE of names, N_NSREF), b: value */
    N_SETBLOCK, /* a: target, b: body, c: filter chain (innermost a NULL) or NULL */
    N_MACRO,    /* name/sym, kids: params (N_NAME, a: default or NULL), b: body,
                   op: MACRO_* flags */
    N_FILTERBLK, /* a: filter chain (innermost a NULL), b: body */
    N_SCOPE,    /* b: body rendered in its own scope ({% generation %}) */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    N_CONST,   /* val */
    N_NAME,    /* name, sym */
    N_NSREF,   /* a: N_NAME of the namespace, name: attribute (assignment target) */
    N_GETATTR, /* a: object, name: attribute */
    N_GETITEM, /* a: object, b: index or N_SLICE */
    N_SLICE,   /* a, b, c: start, stop, step (each may be NULL) */
    N_CALL,    /* a: callee, kids: positional args, then N_KEYWORD */
    N_KEYWORD, /* name, a: value */
    N_FILTER,  /* a: operand (NULL in a filter block), name, op: filter id or -1 (unknown
                  to Jinja2, deferred to render), kids: args */
    N_TEST,    /* a: operand, name, op: test id or -1, kids: args */
    N_NOT,     /* a */
    N_NEG,     /* a */
    N_POS,     /* a */
    N_BINOP,   /* op: BIN_*, a, b */
    N_AND,     /* a, b */
    N_OR,      /* a, b */
    N_CONCAT,  /* kids: operands of ~ */
    N_COMPARE, /* a: first operand, kids: N_OPERAND (op: CMP_*, a: operand) */
    N_OPERAND,
    N_CONDEXPR, /* a: test, b: value if true, c: value if false or NULL */
    N_LIST,     /* kids */
    N_TUPLE,    /* kids */
    N_DICT,     /* kids: N_PAIR (a: key, b: value) */
    N_PAIR,
};

enum { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_FLOORDIV, BIN_MOD, BIN_POW };
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };
enum { MACRO_VARARGS = 1, MACRO_KWARGS = 2 };

/* Arguments of one call, filter or test: more are refused at compile time, so a render
 * evaluates them into fixed arrays on the stack. */
#define TMPL_MAX_ARGS 16

struct node {
    uint8_t kind;
    int16_t op;
    int line;
    int sym;
    struct node *a, *b, *c, *d;
    struct node **kids;
    int n_kids;
    const char *name;
    tv val;
};

/* A chunked bump allocator; everything in it is freed at once. */
struct arena_chunk;
struct arena {
    struct arena_chunk *head;
    size_t used_total;
};

void *arena_alloc(struct arena *a, size_t n); /* zeroed, 16-aligned; NULL when out of memory */
char *arena_strdup(struct arena *a, const char *s, size_t n);
void arena_free(struct arena *a);

/* The compiled template. */
typedef struct symtab {
    const char **names; /* arena strings */
    int n, cap;
} symtab;

int sym_intern(struct arena *a, symtab *st, const char *name, size_t n); /* -1: no memory */
int sym_find(const symtab *st, const char *name);                        /* -1: absent */
void sym_free(symtab *st);

#endif
