/* SPDX-License-Identifier: Apache-2.0 */
/* pda.h - parse stacks as hash-consed nodes, and the byte step (internal to common/grammar).
 *
 * A node is (pos, parent): pos a grammar position, parent the node below it or one of the
 * two bottoms: PDA_BOTTOM (below the root: popping into it completes the sentence) and
 * PDA_CTX (the end of a static context, token_grammar.c: popping into it means "what comes
 * next depends on a stack we do not know"). Nodes are unique per (pos, parent) through a
 * chained hash table, so equal stacks are one id and a state is a set of ids. A node's
 * parent always has a smaller id, so the arena is LIFO: truncating to an earlier length
 * undoes everything made since (the hash chains are unwound in the same order), and
 * compaction can slide live nodes down in order.
 *
 * The step: every top whose byte set holds the byte moves one position on, then the
 * closure runs (an explicit worklist, no recursion): GE_END pops to the parent, GE_REF
 * pushes the rule's alternatives with the return position (none in tail position),
 * GE_BYTES is a new top. A (GE_REF position, parent) pair is expanded once per step (the
 * visited set), which ends tail-call cycles and merges ambiguity. Budgets: tops per state
 * (max_stacks), stack depth (max_depth), closure pops and pushes per step (max_closure),
 * arena nodes (cap): each is DERAS_ERANGE naming it. Nothing allocates after pda_init.
 */
#ifndef DERAS_PDA_H
#define DERAS_PDA_H

#include <stdbool.h>
#include <stdint.h>

#include "common/grammar/grammar_internal.h"

#define PDA_BOTTOM (-1)
#define PDA_CTX (-2)

typedef struct pda_node {
    int32_t pos, parent, next, depth;
} pda_node;

typedef struct pda {
    const grammar_t *g;
    pda_node *node;
    int32_t cap, len;
    int32_t *head;          /* hash chains' heads, hmask + 1 of them */
    uint32_t hmask;
    uint32_t *stamp;        /* (cap) == gen: the node is in the state being built */
    uint32_t gen;
    int32_t *work;          /* (2 * max_closure) pending (pos, parent) pairs */
    uint64_t *vkey;         /* visited (GE_REF pos, parent) pairs, vmask + 1 slots */
    uint32_t *vstamp, vmask, vgen;
    int max_stacks, max_depth, max_closure;
    int steps;              /* closure steps in the state being built */
} pda;

/* A state being built: tops (capacity max_stacks, the caller's buffer), and the flags. */
typedef struct pda_out {
    int32_t *top;
    int n;
    bool accept;            /* a path popped into PDA_BOTTOM */
    bool ctx;               /* a path popped into PDA_CTX */
} pda_out;

/* Scratch for cap nodes and the budgets. DERAS_EINVAL, DERAS_ENOMEM. */
int pda_init(pda *p, const grammar_t *g, int32_t cap, int max_stacks, int max_depth,
             int max_closure);
void pda_free(pda *p);

/* The node (pos, parent), made if new. DERAS_ERANGE when the arena is full or the stack
 * would be deeper than max_depth. O(1) expected. */
int pda_cons(pda *p, int32_t pos, int32_t parent, int32_t *id);

/* Start building a state into out (its top buffer is the caller's). */
void pda_begin(pda *p, pda_out *out);

/* Add the closure of (pos, parent) to the state being built. Budget errors as above. */
int pda_expand(pda *p, int32_t pos, int32_t parent, pda_out *out);

/* out = the state after `byte` from tops[0..n) (pda_begin included). */
int pda_step(pda *p, const int32_t *tops, int n, unsigned byte, pda_out *out);

/* The start state of the grammar: root's alternatives over PDA_BOTTOM. */
int pda_start(pda *p, pda_out *out);

/* Drop every node made after the arena had `len` nodes. O(nodes dropped). */
void pda_truncate(pda *p, int32_t len);

/* Keep only the nodes reachable from lists[i][0..lens[i]) (rewritten in place to the new
 * ids), sliding them down in order. remap (cap entries, the caller's) gets, for each old
 * id, its new id, or -(the next new id) - 1 for a dropped node: pda_remap_mark turns an
 * old arena length into the new one. O(nodes). */
void pda_compact(pda *p, int32_t *const *lists, const int *lens, int n_lists, int32_t *remap);
/* dst's nodes become src's (same grammar and sizes, else DERAS_EINVAL). O(nodes + hash). */
int pda_copy(pda *dst, const pda *src);

int32_t pda_remap_mark(const pda *p, const int32_t *remap, int32_t old_len, int32_t old_mark);

#endif
