/* SPDX-License-Identifier: Apache-2.0 */
/* test_kv_manager_property.c - part of test_kv_manager: random operation sequences
 * (admit, grow, forward, commit, fork, truncate, free, take copies) against a model of
 * the cache: expected block tables and reference counts, the expected copy queue, and
 * simulated KV memory in which every position holds a fingerprint of the whole token
 * prefix that produced it. Any wrong cache hit, any block handed out while referenced, any missed or
 * misdirected copy shows up as a fingerprint that does not match the sequence reading it.
 * 8 seeds x 2000 sequences x 150 operations: the bulk of the test's seconds.
 */
#include "test_kv_manager.h"

#define MAX_SEQS 6
#define MAX_BPS 12
#define MAX_BS 4
#define CAP (MAX_BPS * MAX_BS)
#define N_TEMPLATES 3

typedef struct model_slot {
    int n_tokens, n_computed;
    int32_t tok[CAP];
    uint64_t fp[CAP];       /* fingerprint of tok[0..i] */
    int32_t table[MAX_BPS]; /* expected block table */
} model_slot;

typedef struct model_copy {
    int32_t src, dst;
    bool live;
} model_copy;

typedef struct stress {
    uint64_t seed, rng;
    int seq, op;
    const char *what;
    bool trace; /* KV_TEST_TRACE=seed:sequence prints every operation of that sequence */
    kv_manager_opts o;
    int hash_bits;
    kv_manager_t *kv;
    model_slot slots[MAX_SEQS];
    int *tref;     /* (n_blocks) expected block-table references */
    int *pin;      /* (n_blocks) expected queued copies reading the block */
    uint64_t *mem; /* (n_blocks, block_size) simulated KV: fingerprints */
    model_copy *pend;
    int n_pend, pend_cap;
    int32_t templates[N_TEMPLATES][CAP];
    /* totals */
    long n_ops, n_claims, n_hit_claims, n_verified;
    uint64_t hits, evictions, cows;
} stress;

#define SFAIL(st, ...)                                                                     \
    do {                                                                                   \
        char m_[512];                                                                      \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                              \
        fail_msg("seed %llu sequence %d op %d (%s; n_blocks %d bs %d seqs %d width %d "   \
                 "caching %d hash bits %d): %s [replay: KV_TEST_TRACE=%llu:%d]",           \
                 (unsigned long long)(st)->seed, (st)->seq, (st)->op, (st)->what,          \
                 (st)->o.n_blocks, (st)->o.block_size, (st)->o.max_seqs,                   \
                 (st)->o.max_blocks_per_seq, (st)->o.prefix_caching, (st)->hash_bits, m_,  \
                 (unsigned long long)(st)->seed, (st)->seq);                               \
    } while (0)

static int rnd(stress *st, int n)
{
    return n > 0 ? (int)(test_rng_next(&st->rng) % (uint64_t)n) : 0;
}

static uint64_t fingerprint(uint64_t prev, int32_t tok)
{
    uint64_t z = prev ^ ((uint64_t)(uint32_t)tok * 0x9E3779B97F4A7C15ull);
    return test_rng_next(&z) | 1; /* 0 means "never written" */
}

/* Fingerprints of positions [from, to) from the tokens already in m->tok. */
static void set_fingerprints(model_slot *m, int from, int to)
{
    for (int i = from; i < to; i++)
        m->fp[i] = fingerprint(i ? m->fp[i - 1] : 0, m->tok[i]);
}

static int cap_tokens(const stress *st)
{
    return st->o.max_blocks_per_seq * st->o.block_size;
}

static int nblk(const stress *st, int n)
{
    return (n + st->o.block_size - 1) / st->o.block_size;
}

static bool model_free(const stress *st, int32_t b)
{
    return st->tref[b] == 0 && st->pin[b] == 0;
}

/* Block b lost a reference: once it has none, a queued copy into it is dropped, and with
 * it the copy's hold on its source. */
static void model_drop(stress *st, int32_t b)
{
    while (model_free(st, b)) {
        int i = 0;
        while (i < st->n_pend && !(st->pend[i].live && st->pend[i].dst == b))
            i++;
        if (i == st->n_pend)
            return;
        st->pend[i].live = false;
        b = st->pend[i].src;
        st->pin[b]--;
    }
}

static void model_release(stress *st, int32_t b)
{
    st->tref[b]--;
    model_drop(st, b);
}

static void model_push_copy(stress *st, int32_t src, int32_t dst)
{
    if (st->n_pend == st->pend_cap) {
        int j = 0;
        for (int i = 0; i < st->n_pend; i++)
            if (st->pend[i].live)
                st->pend[j++] = st->pend[i];
        st->n_pend = j;
        if (j == st->pend_cap)
            SFAIL(st, "model copy queue overflow: %d live copies", j);
    }
    st->pend[st->n_pend++] = (model_copy){src, dst, true};
    st->pin[src]++;
}

static void apply_copy(stress *st, kv_copy c)
{
    size_t bs = (size_t)st->o.block_size;
    memcpy(st->mem + (size_t)c.dst * bs, st->mem + (size_t)c.src * bs, bs * sizeof *st->mem);
}

/* Take up to cap copies, compare them with the model's queue and run them on the
 * simulated memory. Returns how many came. */
static int take_copies(stress *st, int cap)
{
    kv_copy got[8];
    if (cap > 8)
        cap = 8;
    int n = kv_take_copies(st->kv, got, cap);
    if (n < 0 || n > cap)
        SFAIL(st, "take_copies(cap %d): expected 0..%d, got %d", cap, cap, n);
    int k = 0, i = 0;
    for (; i < st->n_pend && k < cap; i++) {
        if (!st->pend[i].live)
            continue;
        if (k >= n)
            SFAIL(st, "take_copies: expected copy {%d -> %d} at %d, got only %d copies",
                  st->pend[i].src, st->pend[i].dst, k, n);
        if (got[k].src != st->pend[i].src || got[k].dst != st->pend[i].dst)
            SFAIL(st, "take_copies: copy %d expected {%d -> %d}, got {%d -> %d}", k,
                  st->pend[i].src, st->pend[i].dst, got[k].src, got[k].dst);
        st->pend[i].live = false;
        apply_copy(st, got[k]);
        st->pin[got[k].src]--;
        model_drop(st, got[k].src);
        k++;
    }
    if (k != n)
        SFAIL(st, "take_copies: expected %d copies, got %d", k, n);
    memmove(st->pend, st->pend + i, (size_t)(st->n_pend - i) * sizeof *st->pend);
    st->n_pend -= i;
    return n;
}

/* Every computed position of every slot reads its own fingerprint. */
static void verify_memory(stress *st)
{
    int bs = st->o.block_size;
    for (int s = 0; s < st->o.max_seqs; s++) {
        const model_slot *m = &st->slots[s];
        for (int p = 0; p < m->n_computed; p++) {
            int32_t b = m->table[p / bs];
            if (st->mem[(size_t)b * (size_t)bs + (size_t)(p % bs)] != m->fp[p])
                SFAIL(st, "slot %d position %d in block %d: expected the KV of its own prefix "
                      "(%016llx), got %016llx", s, p, b, (unsigned long long)m->fp[p],
                      (unsigned long long)st->mem[(size_t)b * (size_t)bs + (size_t)(p % bs)]);
            st->n_verified++;
        }
    }
}

/* The manager agrees with the model: invariants, tables, token counts, free blocks. */
static void compare(stress *st)
{
    int st_ = kv_manager_check(st->kv);
    if (st_)
        SFAIL(st, "kv_manager_check: %s", deras_errmsg());
    for (int s = 0; s < st->o.max_seqs; s++) {
        const model_slot *m = &st->slots[s];
        int n = kv_slot_tokens(st->kv, s);
        if (n != m->n_tokens)
            SFAIL(st, "slot %d: expected %d tokens, got %d", s, m->n_tokens, n);
        const int32_t *t = kv_block_table(st->kv, s);
        for (int i = 0; i < st->o.max_blocks_per_seq; i++)
            if (t[i] != m->table[i])
                SFAIL(st, "slot %d table entry %d: expected block %d, got %d", s, i,
                      m->table[i], t[i]);
    }
    int want_free = 0;
    for (int b = 1; b < st->o.n_blocks; b++)
        want_free += model_free(st, b);
    kv_stats ks;
    kv_get_stats(st->kv, &ks);
    if (ks.n_free != want_free || ks.n_usable != st->o.n_blocks - 1)
        SFAIL(st, "stats: expected %d free of %d, got %d of %d", want_free,
              st->o.n_blocks - 1, ks.n_free, ks.n_usable);
}

static int pick_slot(stress *st, bool empty)
{
    int start = rnd(st, st->o.max_seqs);
    for (int k = 0; k < st->o.max_seqs; k++) {
        int s = (start + k) % st->o.max_seqs;
        if ((st->slots[s].n_tokens == 0) == empty)
            return s;
    }
    return -1;
}

static int32_t random_token(stress *st)
{
    return 1 + rnd(st, 2); /* two symbols: blocks repeat often */
}

/* Grow slot s to n_total; tokens [n_tokens, n_total) must already be in the model. */
static int grow(stress *st, int s, int n_total)
{
    model_slot *m = &st->slots[s];
    const int bs = st->o.block_size, n = m->n_tokens;
    int have = nblk(st, n), want = nblk(st, n_total);
    bool cow = n_total > n && n % bs && st->tref[m->table[have - 1]] > 1;
    int need = n_total > n ? want - have + cow : 0;
    int n_free = 0;
    for (int b = 1; b < st->o.n_blocks; b++)
        n_free += model_free(st, b);
    bool range = n_total > cap_tokens(st);
    int got_need = kv_blocks_needed(st->kv, s, n_total);
    if (got_need != need)
        SFAIL(st, "blocks_needed(slot %d, %d -> %d): expected %d, got %d", s, n, n_total, need,
              got_need);
    bool can = !range && need <= n_free;
    if (kv_can_grow(st->kv, s, n_total) != can)
        SFAIL(st, "can_grow(slot %d, %d -> %d, need %d, free %d): expected %d", s, n, n_total,
              need, n_free, can);
    int rc = kv_grow(st->kv, s, n_total);
    int want_rc = range ? DERAS_ERANGE : !can ? DERAS_EBUSY : DERAS_OK;
    if (rc != want_rc)
        SFAIL(st, "grow(slot %d, %d -> %d): expected %s, got %s (%s)", s, n, n_total,
              deras_status_name(want_rc), deras_status_name(rc), deras_errmsg());
    if (rc)
        return rc;
    const int32_t *t = kv_block_table(st->kv, s);
    for (int i = 0; i < have - cow; i++)
        if (t[i] != m->table[i])
            SFAIL(st, "grow(slot %d): kept entry %d changed from %d to %d (copy expected: %d)",
                  s, i, m->table[i], t[i], cow);
    if (cow) {
        int32_t old = m->table[have - 1], dst = t[have - 1];
        if (dst <= 0 || dst >= st->o.n_blocks || !model_free(st, dst))
            SFAIL(st, "grow(slot %d): copy of shared block %d went into block %d, which is "
                  "not free", s, old, dst);
        st->tref[dst] = 1;
        model_push_copy(st, old, dst);
        model_release(st, old);
        m->table[have - 1] = dst;
        st->cows++;
    }
    for (int i = have; i < want; i++) {
        int32_t b = t[i];
        if (b <= 0 || b >= st->o.n_blocks || !model_free(st, b))
            SFAIL(st, "grow(slot %d): entry %d got block %d, expected a free block", s, i, b);
        st->tref[b] = 1;
        m->table[i] = b;
    }
    m->n_tokens = n_total;
    return rc;
}

static void op_admit(stress *st)
{
    int s = pick_slot(st, true);
    if (s < 0)
        return;
    model_slot *m = &st->slots[s];
    int cap = cap_tokens(st);
    int len = 1 + rnd(st, cap + st->o.block_size); /* sometimes too long */
    if (len > CAP)
        len = CAP;
    /* a quarter of prompts repeat a live slot's tokens: the same prefix computed twice
     * before either commits, the way identical requests arriving together are */
    int other = rnd(st, 4) ? -1 : pick_slot(st, false);
    const int32_t *tpl = other >= 0 ? st->slots[other].tok : st->templates[rnd(st, N_TEMPLATES)];
    int same = other >= 0 ? st->slots[other].n_tokens : rnd(st, len + 1);
    if (same > len)
        same = len;
    for (int i = 0; i < len; i++)
        m->tok[i] = i < same ? tpl[i] : random_token(st);
    set_fingerprints(m, 0, len);
    int cached = -1;
    int rc = kv_claim_prefix(st->kv, s, m->tok, len, &cached);
    if (rc)
        SFAIL(st, "claim(slot %d, %d tokens): expected ok, got %s (%s)", s, len,
              deras_status_name(rc), deras_errmsg());
    int max = ((len - 1) / st->o.block_size) * st->o.block_size;
    if (max > cap)
        max = cap;
    if (cached < 0 || cached % st->o.block_size || cached > max ||
        (!st->o.prefix_caching && cached))
        SFAIL(st, "claim(slot %d, %d tokens): expected whole blocks up to %d, got %d", s, len,
              st->o.prefix_caching ? max : 0, cached);
    const int32_t *t = kv_block_table(st->kv, s);
    int bs = st->o.block_size;
    for (int i = 0; i < cached / bs; i++) {
        int32_t b = t[i];
        if (b <= 0 || b >= st->o.n_blocks)
            SFAIL(st, "claim(slot %d): entry %d is block %d", s, i, b);
        for (int j = 0; j < bs; j++)
            if (st->mem[(size_t)b * (size_t)bs + (size_t)j] != m->fp[i * bs + j])
                SFAIL(st, "claim(slot %d, %d tokens): block %d (entry %d) position %d holds "
                      "KV of another prefix", s, len, b, i, j);
        st->tref[b]++;
        m->table[i] = b;
    }
    m->n_tokens = m->n_computed = cached;
    st->n_claims++;
    st->n_hit_claims += cached > 0;
    /* a second claim on the now non-empty slot is refused and changes nothing */
    if (cached && !rnd(st, 8)) {
        int again;
        if (kv_claim_prefix(st->kv, s, m->tok, len, &again) != DERAS_EINVAL)
            SFAIL(st, "claim on non-empty slot %d: expected invalid_argument", s);
    }
    if (rnd(st, 8) && grow(st, s, len) && rnd(st, 2)) {
        /* it does not fit: give the claim back, as a scheduler would */
        for (int i = nblk(st, m->n_tokens) - 1; i >= 0; i--) {
            model_release(st, m->table[i]);
            m->table[i] = 0;
        }
        m->n_tokens = m->n_computed = 0;
        kv_free(st->kv, s);
    }
}

static void op_grow(stress *st)
{
    int s = pick_slot(st, false);
    if (s < 0)
        return;
    model_slot *m = &st->slots[s];
    int n = m->n_tokens;
    int add = rnd(st, 8) ? 1 + rnd(st, 2 * st->o.block_size + 1) : 0;
    int n_total = n + add;
    if (n_total > CAP)
        n_total = CAP;
    for (int i = n; i < n_total; i++)
        m->tok[i] = random_token(st);
    set_fingerprints(m, n, n_total);
    grow(st, s, n_total);
}

/* One forward pass: run every pending copy, then compute the pending tokens of some slots
 * into their blocks, then check every slot reads its own KV. */
static void op_forward(stress *st)
{
    while (take_copies(st, 8) > 0) {
    }
    if (st->n_pend)
        SFAIL(st, "forward: %d copies expected still pending, got none", st->n_pend);
    int bs = st->o.block_size;
    for (int s = 0; s < st->o.max_seqs; s++) {
        model_slot *m = &st->slots[s];
        if (!rnd(st, 4))
            continue;
        for (int p = m->n_computed; p < m->n_tokens; p++)
            st->mem[(size_t)m->table[p / bs] * (size_t)bs + (size_t)(p % bs)] = m->fp[p];
        m->n_computed = m->n_tokens;
    }
    verify_memory(st);
}

static void op_commit(stress *st)
{
    int s = pick_slot(st, false);
    if (s < 0)
        return;
    model_slot *m = &st->slots[s];
    int n = rnd(st, 4) ? m->n_computed : rnd(st, m->n_computed + 1);
    int rc = kv_commit(st->kv, s, m->tok, n);
    if (rc)
        SFAIL(st, "commit(slot %d, %d tokens): expected ok, got %s (%s)", s, n,
              deras_status_name(rc), deras_errmsg());
}

static void op_fork(stress *st)
{
    int src = pick_slot(st, false), dst = pick_slot(st, true);
    if (src < 0 || dst < 0)
        return;
    int rc = kv_fork(st->kv, src, dst);
    if (rc)
        SFAIL(st, "fork(%d -> %d): expected ok, got %s (%s)", src, dst, deras_status_name(rc),
              deras_errmsg());
    st->slots[dst] = st->slots[src];
    for (int i = 0; i < nblk(st, st->slots[src].n_tokens); i++)
        st->tref[st->slots[src].table[i]]++;
}

static void op_truncate(stress *st, bool to_zero)
{
    int s = pick_slot(st, false);
    if (s < 0)
        return;
    model_slot *m = &st->slots[s];
    int n = to_zero ? 0 : rnd(st, m->n_tokens + 1);
    if (to_zero)
        kv_free(st->kv, s);
    else if (kv_truncate(st->kv, s, n))
        SFAIL(st, "truncate(slot %d, %d -> %d): expected ok, got %s", s, m->n_tokens, n,
              deras_errmsg());
    for (int i = nblk(st, m->n_tokens) - 1; i >= nblk(st, n); i--) {
        model_release(st, m->table[i]);
        m->table[i] = 0;
    }
    m->n_tokens = n;
    if (m->n_computed > n)
        m->n_computed = n;
}

static void trace_state(const stress *st)
{
    printf("op %d %s:", st->op, st->what);
    for (int s = 0; s < st->o.max_seqs; s++) {
        const model_slot *m = &st->slots[s];
        if (!m->n_tokens)
            continue;
        printf(" [slot %d n %d computed %d:", s, m->n_tokens, m->n_computed);
        for (int i = 0; i < nblk(st, m->n_tokens); i++)
            printf(" %d", m->table[i]);
        printf(" tok");
        for (int i = 0; i < m->n_tokens; i++)
            printf("%s%d", i % st->o.block_size ? "" : " ", m->tok[i]);
        printf("]");
    }
    printf(" pending");
    for (int i = 0; i < st->n_pend; i++)
        if (st->pend[i].live)
            printf(" {%d->%d}", st->pend[i].src, st->pend[i].dst);
    printf("\n");
}

static void run_sequence(stress *st, int n_ops)
{
    const char *tr = getenv("KV_TEST_TRACE");
    unsigned long long tr_seed;
    int tr_seq;
    st->trace = tr && sscanf(tr, "%llu:%d", &tr_seed, &tr_seq) == 2 && tr_seed == st->seed &&
                tr_seq == st->seq;
    static const int bits_choice[] = {64, 64, 0, 0, 1, 2};
    st->o = (kv_manager_opts){
        .n_blocks = 2 + rnd(st, 40),
        .block_size = 1 + rnd(st, MAX_BS),
        .max_seqs = 1 + rnd(st, MAX_SEQS),
        .max_blocks_per_seq = 1 + rnd(st, MAX_BPS),
        .prefix_caching = rnd(st, 10) != 0,
    };
    st->what = "new";
    uint64_t cows_before = st->cows;
    int rc = kv_manager_new(&st->o, &st->kv);
    if (rc)
        SFAIL(st, "kv_manager_new: %s", deras_errmsg());
    st->hash_bits = bits_choice[rnd(st, 6)];
    kv_manager_set_hash_bits(st->kv, st->hash_bits);
    size_t nb = (size_t)st->o.n_blocks;
    st->tref = calloc(nb, sizeof *st->tref);
    st->pin = calloc(nb, sizeof *st->pin);
    st->mem = calloc(nb * (size_t)st->o.block_size, sizeof *st->mem);
    st->pend_cap = 2 * st->o.n_blocks;
    st->pend = calloc((size_t)st->pend_cap, sizeof *st->pend);
    assert_non_null(st->tref);
    assert_non_null(st->pin);
    assert_non_null(st->mem);
    assert_non_null(st->pend);
    st->n_pend = 0;
    memset(st->slots, 0, sizeof st->slots);
    for (int k = 0; k < N_TEMPLATES; k++)
        for (int i = 0; i < CAP; i++)
            st->templates[k][i] = random_token(st);
    for (st->op = 0; st->op < n_ops; st->op++) {
        int r = rnd(st, 100);
        if (r < 20) {
            st->what = "admit";
            op_admit(st);
        } else if (r < 40) {
            st->what = "grow";
            op_grow(st);
        } else if (r < 58) {
            st->what = "forward";
            op_forward(st);
        } else if (r < 70) {
            st->what = "commit";
            op_commit(st);
        } else if (r < 78) {
            st->what = "fork";
            op_fork(st);
        } else if (r < 86) {
            st->what = "truncate";
            op_truncate(st, false);
        } else if (r < 94) {
            st->what = "free";
            op_truncate(st, true);
        } else {
            st->what = "take_copies";
            take_copies(st, 1 + rnd(st, 3));
        }
        if (st->trace)
            trace_state(st);
        compare(st);
        st->n_ops++;
    }
    kv_stats ks;
    kv_get_stats(st->kv, &ks);
    st->hits += ks.prefix_hit_tokens;
    st->evictions += ks.evictions;
    if (ks.cow_copies != st->cows - cows_before)
        SFAIL(st, "stats: expected %llu copy-on-writes, got %llu",
              (unsigned long long)(st->cows - cows_before), (unsigned long long)ks.cow_copies);
    kv_manager_destroy(&st->kv);
    free(st->tref);
    free(st->pin);
    free(st->mem);
    free(st->pend);
}

void random_operation_sequences_keep_every_invariant_and_read_only_their_own_kv(void **state)
{
    (void)state;
    static const uint64_t seeds[] = {1, 2, 3, 4, 0xdecafbad, 20240611, 77, 0x5eed};
    const int n_seqs = 2000, n_ops = 150;
    stress *st = calloc(1, sizeof *st);
    assert_non_null(st);
    long total_ops = 0, total_claims = 0, total_hit_claims = 0, total_verified = 0;
    uint64_t total_hits = 0, total_evict = 0, total_cows = 0;
    for (size_t k = 0; k < sizeof seeds / sizeof *seeds; k++) {
        memset(st, 0, sizeof *st);
        st->seed = seeds[k];
        st->rng = seeds[k];
        for (st->seq = 0; st->seq < n_seqs; st->seq++)
            run_sequence(st, n_ops);
        printf("  seed %-10llu: %ld ops, %ld claims (%ld hit), %llu hit tokens, %llu evictions, "
               "%llu copy-on-writes, %ld KV positions verified\n",
               (unsigned long long)st->seed, st->n_ops, st->n_claims, st->n_hit_claims,
               (unsigned long long)st->hits, (unsigned long long)st->evictions,
               (unsigned long long)st->cows, st->n_verified);
        if (!st->hits || !st->evictions || !st->cows)
            fail_msg("seed %llu: expected hits, evictions and copy-on-writes to be exercised, "
                     "got %llu, %llu, %llu", (unsigned long long)st->seed,
                     (unsigned long long)st->hits, (unsigned long long)st->evictions,
                     (unsigned long long)st->cows);
        total_ops += st->n_ops;
        total_claims += st->n_claims;
        total_hit_claims += st->n_hit_claims;
        total_verified += st->n_verified;
        total_hits += st->hits;
        total_evict += st->evictions;
        total_cows += st->cows;
    }
    printf("  total: %ld ops (%d sequences x %zu seeds), %ld claims (%ld hit), %llu hit tokens, "
           "%llu evictions, %llu copy-on-writes, %ld KV positions verified\n",
           total_ops, n_seqs, sizeof seeds / sizeof *seeds, total_claims, total_hit_claims,
           (unsigned long long)total_hits, (unsigned long long)total_evict,
           (unsigned long long)total_cows, total_verified);
    free(st);
}
