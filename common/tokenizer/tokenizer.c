/* SPDX-License-Identifier: Apache-2.0 */
/* tokenizer.c - the tokenizer object: construction helpers shared by the two loaders,
 * added-token matching, encode, decode and the accessors.
 *
 * Encoding follows Hugging Face's order of work (tokenizer.rs, added_vocabulary.rs):
 *  1. added tokens that match the raw text (non-normalized ones) cut the text into
 *     segments, leftmost-longest through a byte trie; special ones only when
 *     parse_special, the others (GGUF user-defined tokens, HF non-special added tokens)
 *     always, which is also what llama.cpp does;
 *  2. each remaining segment is normalized, then cut again by the normalized added tokens;
 *  3. each segment is pre-tokenized into pieces and each piece is run through BPE;
 *  4. add_special wraps the ids in the model's prefix/suffix ids (BOS, EOS).
 * SentencePiece GGUF vocabularies use the same path: their whitespace handling (a prefix
 * "▁" per segment, spaces -> "▁") is the normalizer Llama 2's tokenizer.json declares, and
 * llama.cpp's "prefix a space after every special token" is the same rule.
 *
 * Each token keeps two strings in one arena: its vocabulary text and the bytes it decodes
 * to, computed once at construction (byte-level unmapping; "▁" -> " " and <0xXX> -> byte
 * for SentencePiece), so decode and the streaming detokenizer only copy bytes.
 */
#include "tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"

char *tok_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

struct tokenizer *tok_alloc(enum tok_algo algo, int32_t n_vocab)
{
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->algo = algo;
    t->n_vocab = n_vocab;
    t->tokens = calloc((size_t)(n_vocab > 0 ? n_vocab : 1), sizeof *t->tokens);
    if (!t->tokens) {
        free(t);
        return NULL;
    }
    t->unk_id = t->bos = t->eos = t->eot = t->eom = -1;
    for (int i = 0; i < 256; i++)
        t->byte_ids[i] = -1;
    return t;
}

static int arena_put(struct tokenizer *t, const char *s, size_t n, size_t *off)
{
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap < t->arena_len + n + 1)
            cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a)
            return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for the vocabulary (%zu bytes)", cap);
        t->arena = a;
        t->arena_cap = cap;
    }
    *off = t->arena_len;
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = '\0';
    t->arena_len += n + 1;
    return 0;
}

int tok_set_text(struct tokenizer *t, int32_t id, const char *s, size_t n)
{
    if (id < 0 || id >= t->n_vocab)
        return deras_fail(DERAS_ERANGE, "tokenizer: token id %d outside the vocabulary of %d", id, t->n_vocab);
    if (n > UINT32_MAX / 2)
        return deras_fail(DERAS_EFORMAT, "tokenizer: token %d is %zu bytes long", id, n);
    struct tok_token *tk = &t->tokens[id];
    int rc = arena_put(t, s, n, &tk->text_off);
    if (rc < 0)
        return rc;
    tk->text_len = (uint32_t)n;
    tk->flags |= TOKF_PRESENT;
    if (tk->type == 0)
        tk->type = TOK_NORMAL;
    return 0;
}

int tok_add_eog(struct tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return 0;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 0;
    int32_t *v = realloc(t->eog, (size_t)(t->n_eog + 1) * sizeof *v);
    if (!v)
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
    t->eog = v;
    t->eog[t->n_eog++] = id;
    t->tokens[id].flags |= TOKF_EOG;
    return 0;
}

/* "<0xXX>" -> XX, or -1. */
static int byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static bool is_raw_token(const struct tok_token *tk)
{
    return (tk->flags & TOKF_ADDED) || tk->type == TOK_CONTROL || tk->type == TOK_USER_DEFINED ||
           tk->type == TOK_UNKNOWN;
}

/* The bytes token `id` decodes to, into buf (cap >= 4 * text length). */
static size_t token_decoded(const struct tokenizer *t, const struct tok_token *tk, enum tok_decoder dec,
                            char *buf)
{
    const char *s = t->arena + tk->text_off;
    size_t n = tk->text_len, k = 0;
    if (is_raw_token(tk)) {
        memcpy(buf, s, n);
        return n;
    }
    if (dec == DEC_BYTELEVEL) {
        /* All or nothing per token, as Hugging Face's ByteLevel decoder does. */
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t cl = utf8_decode(s + i, n - i, &cp);
            int b = cl ? utf8_cp_to_byte(cp) : -1;
            if (b < 0) {
                memcpy(buf, s, n);
                return n;
            }
            buf[k++] = (char)b;
            i += cl;
        }
        return k;
    }
    int bv = byte_token_value(s, n);
    if (bv >= 0 && (tk->type == TOK_BYTE || t->byte_fallback)) {
        buf[0] = (char)bv;
        return 1;
    }
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            buf[k++] = ' ';
            i += 3;
        } else {
            buf[k++] = s[i++];
        }
    }
    return k;
}

static int trie_init(struct trie *tr)
{
    tr->cap = 64;
    tr->nodes = malloc((size_t)tr->cap * sizeof *tr->nodes);
    if (!tr->nodes)
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
    tr->nodes[0] = (struct trie_node){.child = -1, .sibling = -1, .id = -1};
    tr->n = 1;
    return 0;
}

static int trie_insert(struct trie *tr, const char *s, size_t n, int32_t id)
{
    int32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = tr->nodes[cur].child;
        while (c >= 0 && tr->nodes[c].byte != b)
            c = tr->nodes[c].sibling;
        if (c < 0) {
            if (tr->n == tr->cap) {
                struct trie_node *v = realloc(tr->nodes, (size_t)tr->cap * 2 * sizeof *v);
                if (!v)
                    return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
                tr->nodes = v;
                tr->cap *= 2;
            }
            c = tr->n++;
            tr->nodes[c] = (struct trie_node){.child = -1, .sibling = tr->nodes[cur].child, .id = -1, .byte = b};
            tr->nodes[cur].child = c;
        }
        cur = c;
    }
    /* Two added tokens with the same text: the first keeps it. */
    if (tr->nodes[cur].id < 0)
        tr->nodes[cur].id = id;
    return 0;
}

int tok_finish(struct tokenizer *t, enum tok_decoder dec, const char *name)
{
    int rc;
    char *buf = NULL;
    if ((rc = strmap_build(&t->vocab, t)) < 0)
        return rc;
    size_t maxlen = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tokens[id].text_len > maxlen)
            maxlen = t->tokens[id].text_len;
    buf = malloc(maxlen * 4 + 4);
    if (!buf)
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
    for (int32_t id = 0; id < t->n_vocab; id++) {
        struct tok_token *tk = &t->tokens[id];
        if (!(tk->flags & TOKF_PRESENT)) {
            tk->bytes_off = 0;
            tk->bytes_len = 0;
            continue;
        }
        const char *s = t->arena + tk->text_off;
        int bv = byte_token_value(s, tk->text_len);
        if (bv >= 0 && !(tk->flags & TOKF_ADDED) && t->byte_ids[bv] < 0)
            t->byte_ids[bv] = id;
        size_t n = token_decoded(t, tk, dec, buf);
        if ((rc = arena_put(t, buf, n, &tk->bytes_off)) < 0)
            goto fail;
        tk->bytes_len = (uint32_t)n;
        if (n > t->max_token_bytes)
            t->max_token_bytes = n;
    }
    if ((rc = trie_init(&t->raw_trie)) < 0 || (rc = trie_init(&t->norm_trie)) < 0)
        goto fail;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        struct tok_token *tk = &t->tokens[id];
        if (!(tk->flags & TOKF_ADDED) || tk->text_len == 0)
            continue;
        const char *s = t->arena + tk->text_off;
        if ((tk->flags & TOKF_NORMALIZED) && t->n_norm > 0) {
            char *ns;
            size_t nn;
            if ((rc = norm_apply(t, s, tk->text_len, &ns, &nn)) < 0)
                goto fail;
            rc = nn ? trie_insert(&t->norm_trie, ns, nn, id) : 0;
            free(ns);
        } else {
            rc = trie_insert(&t->raw_trie, s, tk->text_len, id);
        }
        if (rc < 0)
            goto fail;
    }
    free(buf);
    return 0;
fail:
    free(buf);
    return deras_fail_ctx(rc, "%s: ", name);
}

void tokenizer_destroy(tokenizer_t **tp)
{
    if (!tp || !*tp)
        return;
    struct tokenizer *t = *tp;
    strmap_free(&t->vocab);
    pairmap_free(&t->merges);
    norm_free_steps(t->norm, t->n_norm);
    pretok_free_steps(t->pre, t->n_pre);
    free(t->raw_trie.nodes);
    free(t->norm_trie.nodes);
    free(t->prefix_ids);
    free(t->suffix_ids);
    free(t->eog);
    free(t->chat_template);
    free(t->tokens);
    free(t->arena);
    free(t);
    *tp = NULL;
}

/* --- encode --- */

struct enc {
    const struct tokenizer *t;
    bool parse_special;
    struct idvec ids;
    struct pieces p, tmp;
    struct bpe_work *w;
};

/* Longest allowed added token starting at s[0..n); its id and length, or -1. */
static int32_t trie_match(const struct trie *tr, const struct tokenizer *t, const char *s, size_t n,
                          bool parse_special, size_t *len)
{
    int32_t cur = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t c = tr->nodes[cur].child;
        while (c >= 0 && tr->nodes[c].byte != (uint8_t)s[i])
            c = tr->nodes[c].sibling;
        if (c < 0)
            break;
        cur = c;
        int32_t id = tr->nodes[cur].id;
        if (id >= 0 && (parse_special || !(t->tokens[id].flags & TOKF_SPECIAL))) {
            best = id;
            *len = i + 1;
        }
    }
    return best;
}

/* Whitespace run ending at s[end) going left (returns its start), or starting at s[start). */
static size_t ws_left(const char *s, size_t lo, size_t end)
{
    while (end > lo) {
        size_t k = end - 1;
        while (k > lo && ((uint8_t)s[k] & 0xC0) == 0x80)
            k--;
        uint32_t cp;
        if (!utf8_decode(s + k, end - k, &cp) || !tok_is_whitespace(cp))
            break;
        end = k;
    }
    return end;
}

static size_t ws_right(const char *s, size_t start, size_t n)
{
    while (start < n) {
        uint32_t cp;
        size_t cl = utf8_decode(s + start, n - start, &cp);
        if (!cl || !tok_is_whitespace(cp))
            break;
        start += cl;
    }
    return start;
}

/* Pre-tokenize and BPE one normalized segment. */
static int encode_plain(struct enc *e, const char *s, size_t n, bool origin)
{
    int rc;
    if (n == 0)
        return 0;
    pieces_clear(&e->p);
    if ((rc = pieces_add(&e->p, s, n, origin)) < 0)
        return rc;
    if (e->t->n_pre > 0 && (rc = pretok_apply(e->t, &e->p, &e->tmp)) < 0)
        return rc;
    for (size_t i = 0; i < e->p.n; i++)
        if ((rc = bpe_encode_piece(e->t, e->p.buf + e->p.v[i].off, e->p.v[i].len, e->w, &e->ids)) < 0)
            return rc;
    return 0;
}

typedef int (*segment_fn)(struct enc *e, const char *s, size_t n, bool origin);

/* Cut s by the added tokens of trie tr; text between them goes to fn. */
static int split_added(struct enc *e, const struct trie *tr, const char *s, size_t n, bool origin,
                       segment_fn fn)
{
    int rc;
    size_t seg = 0, i = 0;
    const struct tokenizer *t = e->t;
    if (tr->nodes[0].child < 0)
        return fn(e, s, n, origin);
    while (i < n) {
        size_t mlen = 0;
        int32_t id = trie_match(tr, t, s + i, n - i, e->parse_special, &mlen);
        if (id < 0) {
            i++;
            continue;
        }
        size_t start = i, stop = i + mlen;
        if (t->tokens[id].flags & TOKF_LSTRIP)
            start = ws_left(s, seg, start);
        if (t->tokens[id].flags & TOKF_RSTRIP)
            stop = ws_right(s, stop, n);
        if (start > seg && (rc = fn(e, s + seg, start - seg, origin && seg == 0)) < 0)
            return rc;
        if ((rc = idvec_push(&e->ids, id)) < 0)
            return rc;
        seg = i = stop;
    }
    if (seg < n)
        return fn(e, s + seg, n - seg, origin && seg == 0);
    return 0;
}

static int encode_normalized(struct enc *e, const char *s, size_t n, bool origin)
{
    const struct tokenizer *t = e->t;
    if (t->n_norm == 0)
        return split_added(e, &t->norm_trie, s, n, origin, encode_plain);
    char *ns;
    size_t nn;
    int rc = norm_apply(t, s, n, &ns, &nn);
    if (rc < 0)
        return rc;
    rc = split_added(e, &t->norm_trie, ns, nn, origin, encode_plain);
    free(ns);
    return rc;
}

int tokenizer_encode(const tokenizer_t *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *ids, size_t cap, size_t *n_out)
{
    if (!t || (!text && len > 0) || (!ids && cap > 0) || !n_out)
        return deras_fail(DERAS_EINVAL, "tokenizer_encode: NULL argument");
    size_t bad = utf8_valid_prefix(text, len);
    if (bad < len)
        return deras_fail(DERAS_EFORMAT, "tokenizer_encode: invalid UTF-8 at byte %zu of %zu", bad, len);
    struct enc e = {.t = t, .parse_special = parse_special};
    int rc = 0;
    if ((rc = bpe_work_new(&e.w))) {
        rc = deras_fail_ctx(rc, "tokenizer_encode: ");
        goto done;
    }
    if (add_special)
        for (int i = 0; i < t->n_prefix && rc == 0; i++)
            rc = idvec_push(&e.ids, t->prefix_ids[i]);
    if (rc == 0)
        rc = split_added(&e, &t->raw_trie, text ? text : "", len, true, encode_normalized);
    if (add_special)
        for (int i = 0; i < t->n_suffix && rc == 0; i++)
            rc = idvec_push(&e.ids, t->suffix_ids[i]);
    if (rc < 0)
        goto done;
    *n_out = e.ids.n;
    if (e.ids.n)
        memcpy(ids, e.ids.v, (e.ids.n < cap ? e.ids.n : cap) * sizeof *ids);
    if (e.ids.n > cap)
        rc = deras_fail(DERAS_ERANGE, "tokenizer_encode: %zu ids do not fit in %zu", e.ids.n, cap);
done:
    free(e.ids.v);
    pieces_free(&e.p);
    pieces_free(&e.tmp);
    bpe_work_destroy(&e.w);
    return rc;
}

/* --- decode --- */

int tokenizer_decode(const tokenizer_t *t, const int32_t *ids, size_t n, bool skip_special, char *out,
                     size_t cap, size_t *n_out)
{
    if (!t || (!ids && n > 0) || (!out && cap > 0) || !n_out)
        return deras_fail(DERAS_EINVAL, "tokenizer_decode: NULL argument");
    size_t raw_len = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return deras_fail(DERAS_ERANGE, "tokenizer_decode: id %d (position %zu) outside the "
                              "vocabulary of %d", ids[i], i, t->n_vocab);
        raw_len += t->tokens[ids[i]].bytes_len;
    }
    char *raw = malloc(raw_len + 1);
    if (!raw)
        return deras_fail(DERAS_ENOMEM, "tokenizer_decode: out of memory for %zu bytes", raw_len);
    size_t k = 0;
    bool at_start = true;
    for (size_t i = 0; i < n; i++) {
        const struct tok_token *tk = &t->tokens[ids[i]];
        if (skip_special && (tk->flags & TOKF_SPECIAL))
            continue;
        const char *b = t->arena + tk->bytes_off;
        size_t bl = tk->bytes_len;
        if (at_start && bl > 0) {
            if (t->strip_leading_space && b[0] == ' ') {
                b++;
                bl--;
            }
            at_start = false;
        }
        memcpy(raw + k, b, bl);
        k += bl;
    }
    size_t need = utf8_lossy_copy(raw, k, out, cap, 0);
    free(raw);
    *n_out = need;
    if (cap > 0)
        out[need < cap ? need : cap - 1] = '\0';
    if (need >= cap)
        return deras_fail(DERAS_ERANGE, "tokenizer_decode: %zu bytes (and a NUL) do not fit in %zu", need, cap);
    return 0;
}

/* --- accessors --- */

int tokenizer_vocab_size(const tokenizer_t *t)
{
    return t ? t->n_vocab : 0;
}

const char *tokenizer_token_bytes(const tokenizer_t *t, int32_t id, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab || !(t->tokens[id].flags & TOKF_PRESENT)) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = t->tokens[id].bytes_len;
    return t->arena + t->tokens[id].bytes_off;
}

const char *tokenizer_token_text(const tokenizer_t *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab || !(t->tokens[id].flags & TOKF_PRESENT))
        return NULL;
    return t->arena + t->tokens[id].text_off;
}

int32_t tokenizer_find(const tokenizer_t *t, const char *text)
{
    if (!t || !text)
        return -1;
    return strmap_find(&t->vocab, t, text, strlen(text));
}

int32_t tokenizer_bos(const tokenizer_t *t)
{
    return t ? t->bos : -1;
}

int32_t tokenizer_eos(const tokenizer_t *t)
{
    return t ? t->eos : -1;
}

bool tokenizer_is_special(const tokenizer_t *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab && (t->tokens[id].flags & TOKF_SPECIAL);
}

bool tokenizer_is_eog(const tokenizer_t *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab && (t->tokens[id].flags & TOKF_EOG);
}

int tokenizer_n_eog(const tokenizer_t *t)
{
    return t ? t->n_eog : 0;
}

int32_t tokenizer_eog_at(const tokenizer_t *t, int i)
{
    return t && i >= 0 && i < t->n_eog ? t->eog[i] : -1;
}

const char *tokenizer_chat_template(const tokenizer_t *t)
{
    return t ? t->chat_template : NULL;
}
