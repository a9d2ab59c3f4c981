/* SPDX-License-Identifier: Apache-2.0 */
/* tg_impl.h - token_grammar's record, shared by its files (internal to common/grammar):
 * token_grammar.c (life, the cache, the API), tg_analysis.c (static returns and FOLLOW
 * sets), tg_walk.c (the transition memo and the trie walk that computes a split).
 *
 * The memo: static parser states (sorted top lists over the memo's own node arena, plus
 * the accept / ctx flags) interned to ids, each with 256 transitions computed on demand
 * (TG_UNKNOWN until then, -1 for the dead state). It is cleared before a walk when it has
 * grown past memo_bytes; a walk that alone does not fit fails with DERAS_ERANGE.
 */
#ifndef DERAS_TG_IMPL_H
#define DERAS_TG_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/grammar/grammar_internal.h"
#include "common/grammar/gvocab_internal.h"
#include "common/grammar/pda.h"
#include "common/grammar/tg_internal.h"

#define RET_BOTTOM PDA_BOTTOM
#define RET_NONE (-3)
#define RET_MANY (-4)
#define TG_UNKNOWN (-2)
#define TG_DEAD (-1)
#define TG_MEMO_FULL 1 /* internal: the memo ran out during a walk */

typedef struct tg_memo {
    pda p;
    int32_t *tops;          /* interned states' tops, concatenated */
    int64_t n_tops, cap_tops;
    int32_t *off, *n;       /* per state: first top, count */
    uint8_t *flags;         /* per state: 1 accept, 2 ctx */
    int32_t *trans;         /* 256 per state */
    int32_t n_states, cap_states;
    int32_t *hash;          /* open addressing: state id + 1, 0 empty */
    uint32_t hmask;
    int32_t *buf;           /* (max_stacks) a step's output */
    size_t limit;           /* bytes the states may take */
} tg_memo;

struct token_grammar {
    atomic_int refs;
    grammar_t *g;
    const gvocab_t *v;
    token_grammar_opts o;
    int32_t *ret;             /* (n_rules) see tg_analysis.c */
    uint64_t *follow;         /* (4 * n_rules) */
    int32_t *term;            /* (n_el) index among GE_BYTES positions of reachable rules, -1 */
    int n_terms;
    _Atomic(tg_entry *) *entry; /* (n_terms) kept splits, published whole */
    pthread_mutex_t mu;       /* computing, the scratch split, the counters */
    tg_memo memo;
    int32_t *frames;          /* (max_depth) a static context being built */
    int32_t *st;              /* (max token length + 1) walk: state per depth */
    uint8_t *un;              /* (max token length + 1) walk: uncertain below this depth */
    int32_t *acc, *unc;       /* (vocab) walk results */
    int32_t n_acc, n_unc;
    uint32_t *mark;           /* (words) scratch bitmap */
    tg_entry scratch;         /* a split not kept */
    int32_t *scratch_list;    /* (vocab) its list */
    token_grammar_stats stats;
};

/* tg_analysis.c: ret and follow. DERAS_ENOMEM. */
int tg_analyze(token_grammar_t *tg);

/* tg_walk.c: the memo's life, and one walk from position pos into tg->acc / tg->unc. */
int tg_memo_init(token_grammar_t *tg);
void tg_memo_free(tg_memo *m);
size_t tg_memo_bytes(const tg_memo *m);
int tg_walk(token_grammar_t *tg, int32_t pos);

#endif
