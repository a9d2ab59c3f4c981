/* SPDX-License-Identifier: Apache-2.0 */
/* grammar_internal.h - the byte-level grammar's layout (internal to common/grammar).
 *
 * Elements are one int32 each: kind in the low 2 bits, argument above (a byte-set index
 * for GE_BYTES, a rule id for GE_REF). An alternative is a run of elements ended by
 * GE_END; a rule is a contiguous run of alternatives (first alternative, count). A
 * position is an element index; a parse stack's top always sits on a GE_BYTES position.
 *
 * glow is the same layout while it grows (lowering, specialization); glow_finish turns
 * it into a grammar_t after the checks (gcheck.c).
 */
#ifndef DERAS_GRAMMAR_INTERNAL_H
#define DERAS_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/grammar/gbuild.h"
#include "common/grammar/grammar.h"

enum { GE_END = 0, GE_BYTES = 1, GE_REF = 2 };

#define GE_KIND(e) ((e) & 3)
#define GE_ARG(e) ((e) >> 2)
#define GE_MAKE(kind, arg) ((int32_t)(((uint32_t)(arg) << 2) | (uint32_t)(kind)))

struct grammar {
    int n_el, n_alt, n_rules, n_sets, root, n_terminals;
    int32_t *el;        /* (n_el) elements */
    int32_t *rule_of;   /* (n_el) the rule each position belongs to */
    int32_t *alt;       /* (n_alt) alternative start positions */
    int32_t *ralt;      /* (2 * n_rules) per rule: first alternative, count */
    uint64_t *set;      /* (4 * n_sets) 256-bit byte sets */
    uint8_t *nullable;  /* (n_rules) derives the empty string */
    uint8_t *reachable; /* (n_rules) from root */
    char **name;        /* (n_rules) the GBNF name, NULL for helpers */
    size_t bytes;
};

static inline bool gset_has(const uint64_t *set, unsigned byte)
{
    return (set[byte >> 6] >> (byte & 63)) & 1u;
}

typedef struct glow {
    grammar_limits lim;
    gb_vec el;          /* elements */
    gb_vec alt;         /* alternative starts */
    gb_vec ralt;        /* per rule: first alternative, count */
    gb_vec set;         /* byte sets, 8 int32 words each */
    gb_vec set_hash;    /* open-addressing table of set ids + 1 (0: empty) */
    char **name;        /* per rule, grown with ralt */
    int name_cap;
} glow;

/* Index of the byte set `words` (8 x 32 bits), added if new. DERAS_ENOMEM. */
int glow_set(glow *w, const uint32_t words[8], int *id);

/* A new rule with no alternatives yet (its (first, count) pair is (0, 0)). DERAS_ERANGE
 * past max_rules, DERAS_ENOMEM. */
int glow_new_rule(glow *w, int *id);

/* Check, specialize and freeze w into *out (gcheck.c); w is freed either way. */
int glow_finish(glow *w, int root, grammar_t **out);

void glow_free(glow *w);

#endif
