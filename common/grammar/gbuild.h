/* SPDX-License-Identifier: Apache-2.0 */
/* gbuild.h - the code-point grammar the GBNF parser builds, before it is lowered to bytes
 * (internal to common/grammar).
 *
 * A rule is a flat list of items: CLASS (a set of code-point ranges: a literal character is
 * a class of one), REF (another rule) and ALT (the separator between alternatives). Groups
 * and repetitions are already desugared into helper rules (no name) by the parser, so this
 * is a plain context-free grammar. gb_compile lowers it to the byte-level grammar_t
 * (glower.c), then checks and specializes it (gcheck.c). Every growth is counted against
 * grammar_limits before it happens: DERAS_ERANGE naming the limit.
 */
#ifndef DERAS_GBUILD_H
#define DERAS_GBUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/grammar/grammar.h"

enum { GB_CLASS = 1, GB_REF = 2, GB_ALT = 3 };

#define GB_MAX_CP 0x10FFFFu

typedef struct gb_vec {
    int32_t *v;
    int n, cap;
} gb_vec;

/* Append x; DERAS_ENOMEM. */
int gb_push(gb_vec *a, int32_t x);
void gb_vec_free(gb_vec *a);

typedef struct gb_rule {
    char *name;        /* NULL for a helper */
    bool defined;
    int line;          /* of the first reference (undefined-rule messages) */
    gb_vec items;      /* (kind, arg) pairs */
} gb_rule;

typedef struct gbuild {
    grammar_limits lim;
    gb_rule *rules;
    int n_rules, cap_rules;
    gb_vec ranges;     /* code-point ranges, (lo, hi) pairs, sorted and merged per class */
    gb_vec cls;        /* class i: (first range, n ranges) */
    long n_items;      /* items over all rules, against lim.max_elements */
} gbuild;

void gb_init(gbuild *b, const grammar_limits *lim);
void gb_free(gbuild *b);

/* The rule named name[0..len), made (undefined) when new. DERAS_ERANGE past max_rules. */
int gb_named(gbuild *b, const char *name, size_t len, int line, int *id);
/* A new helper rule. */
int gb_helper(gbuild *b, int *id);
/* Append an item to rule r, counted against max_elements. */
int gb_item(gbuild *b, int r, int kind, int32_t arg);

/* A class from ranges[0..n) (lo, hi pairs, any order, may overlap), negated over all
 * Unicode scalar values (surrogates excluded) when negate. *id its index. */
int gb_class(gbuild *b, const uint32_t *ranges, int n, bool negate, int *id);

/* Lower, check and specialize b's grammar with start rule root into *out (glower.c). b is
 * consumed (freed) either way. */
int gb_compile(gbuild *b, int root, grammar_t **out);

#endif
