/* SPDX-License-Identifier: Apache-2.0 */
/* matcher.h - one sequence's place in a grammar: which tokens may come next (a mask), the
 * token that came, rollback of speculative drafts and forks for n > 1 samples.
 *
 * State. A set of parse stacks (a nondeterministic pushdown automaton over bytes, with
 * tail calls and ambiguity merged): each stack is a chain of nodes (position, parent) kept
 * in an arena and hash-consed, so equal stacks are the same node, a state is a short list
 * of node ids, and stacks share their lower parts. Accepting a token walks its bytes from
 * the current state (a byte-level BPE piece may end inside a UTF-8 character: the stack
 * then sits inside the character's byte sequence). States at token boundaries are kept
 * for the last max_rollback tokens; rolling back restores one and drops every node made
 * after it (the arena is LIFO). When the arena fills, the nodes still reachable from the
 * kept states are compacted in place (order-preserving), amortized O(1) per node made.
 *
 * Masks. gmatcher_fill_mask writes a bitset over the vocabulary: bit (t & 31) of word
 * t >> 5 is set when token t keeps the output inside the grammar. Per stack it copies the
 * cached accepted set of the stack's top position (token_grammar.h) and walks the
 * position's uncertain tokens on the real stack; end-of-generation ids are set exactly
 * when the output so far is a complete sentence. Tokens whose bytes are empty (special
 * tokens) are never set. Cost: O(stacks * vocab / 32) words plus O(uncertain tokens *
 * their length * stacks); the first use of a position also pays its trie walk (once per
 * token_grammar, shared by all its matchers).
 *
 * Budgets (gmatcher_opts): stacks alive at once (ambiguity), stack depth (nesting),
 * arena nodes (memory), closure work per byte. Exceeding one is DERAS_ERANGE and the
 * matcher is failed from then on (every later call returns DERAS_ERANGE): the engine ends
 * that request with an error, never hangs. The matcher allocates nothing after
 * gmatcher_new (the first mask at a position the token_grammar has not met yet allocates
 * that position's split there, once per grammar; token_grammar_precompute moves all of it
 * to setup): its scratch is sized from the options (about max_nodes * 28 bytes + max_stacks *
 * (max_rollback + 4) * 4 bytes + vocab / 8 bytes; the defaults at 128k: ~560 KiB).
 *
 * Threads: a matcher is used by one thread at a time; matchers of one token_grammar may
 * run on different threads (its cache is shared under a mutex).
 */
#ifndef DERAS_MATCHER_H
#define DERAS_MATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/grammar/token_grammar.h"

typedef struct gmatcher_opts {
    int max_stacks;     /* parse stacks alive at once; default 1024 */
    int max_depth;      /* frames in one stack (nesting); default 256 */
    int max_nodes;      /* arena nodes (16 bytes each, + 12 of index); default 16384 */
    int max_rollback;   /* tokens gmatcher_rollback can undo; default 16 (SPEC_MAX_K) */
    int max_closure;    /* expansion steps for one byte; default 16384 */
} gmatcher_opts;

void gmatcher_opts_default(gmatcher_opts *o);

typedef struct gmatcher gmatcher_t;

/* A matcher at the start of tg's grammar; it retains tg. o NULL: the defaults.
 * DERAS_EINVAL for options out of range (each >= 1, max_nodes >= 256), DERAS_ENOMEM,
 * DERAS_ERANGE when even the start state exceeds a budget. O(scratch). */
int gmatcher_new(token_grammar_t *tg, const gmatcher_opts *o, gmatcher_t **out);

/* Releases the matcher and its reference to the token_grammar. */
void gmatcher_destroy(gmatcher_t **m);

/* Back to the start of the grammar (a failed matcher too), keeping the scratch. O(1). */
void gmatcher_reset(gmatcher_t *m);

/* The allowed next tokens into mask (gvocab_mask_words words, all written). DERAS_ERANGE
 * on a budget (failed matcher), DERAS_ENOMEM when a position's first split cannot be
 * allocated. After an end-of-generation token was accepted, only the end-of-generation
 * ids are set. Cost in the header comment. */
int gmatcher_fill_mask(gmatcher_t *m, uint32_t *mask);

/* Advance by one token. DERAS_EINVAL (state unchanged) when the grammar does not allow it
 * here (an id out of range, an empty token, an end-of-generation id where the output is
 * not complete, anything after the end); DERAS_ERANGE on a budget (failed matcher).
 * O(token bytes * stacks) plus, rarely, a compaction. */
int gmatcher_accept(gmatcher_t *m, int32_t token);

/* Undo the last n accepted tokens (0 <= n <= gmatcher_rollback_depth). DERAS_ERANGE
 * beyond it, state unchanged. A failed matcher rolled back past its failure works again.
 * O(1) plus the arena truncation. */
int gmatcher_rollback(gmatcher_t *m, int n);

/* Tokens that can be rolled back now: min(accepted tokens, max_rollback). */
int gmatcher_rollback_depth(const gmatcher_t *m);

/* Tokens accepted since the start or the last reset (rollbacks subtract). */
int gmatcher_n_accepted(const gmatcher_t *m);

/* The output so far is a complete sentence: end of generation is allowed now. */
bool gmatcher_is_accepting(const gmatcher_t *m);

/* Complete, and nothing may follow but end of generation: the engine may finish the
 * sample (FINISH_STOP) without a forward pass, ignore_eos or not. */
bool gmatcher_is_complete(const gmatcher_t *m);

/* An end-of-generation token was accepted: the sample is over. */
bool gmatcher_is_terminated(const gmatcher_t *m);

/* dst becomes src's state (history for rollback included). Both of one token_grammar and
 * made with equal options: else DERAS_EINVAL. No allocation; O(src's arena nodes in
 * use). n > 1 samples that fork after some output use this or gmatcher_fork. */
int gmatcher_copy(gmatcher_t *dst, const gmatcher_t *src);

/* A new matcher in src's state (gmatcher_new + gmatcher_copy). */
int gmatcher_fork(const gmatcher_t *src, gmatcher_t **out);

/* ---- masks ---- */

static inline bool gmask_get(const uint32_t *mask, int32_t t)
{
    return (mask[t >> 5] >> (t & 31)) & 1u;
}

/* logits[t] = -INFINITY for every t < n the mask does not allow. O(n). */
void gmask_apply(const uint32_t *mask, float *logits, int n);

/* Allowed tokens in the first n. O(n / 32). */
int gmask_count(const uint32_t *mask, int n);

#endif
