/* SPDX-License-Identifier: Apache-2.0 */
/* tokenizer_gguf.c - building a tokenizer from GGUF metadata (tokenizer.ggml.*).
 *
 * tokenizer.ggml.model says which algorithm: "gpt2" is byte-level BPE, whose merges are
 * listed and whose pre-tokenizer is only named (tokenizer.ggml.pre; the names map to
 * regex lists in pretokenizer.c, an unknown one is refused); "llama" is SentencePiece
 * BPE by token scores, with spaces written as U+2581, a prefix space per text segment when
 * add_space_prefix (default on, as in llama.cpp) and <0xXX> byte fallback. Token types
 * decide what is matched in the text as a whole token: control (3) and unknown (2) tokens
 * under parse_special only, user-defined (4) always, as llama.cpp does. BOS/EOS come from
 * the ids and the add_bos_token / add_eos_token flags (defaults: BOS for "llama", nothing
 * for "gpt2"); EOS, EOT and EOM form the end-of-generation set.
 *
 * Cost: O(vocabulary + merges); strings are copied out of the GGUF, which may be closed
 * afterwards.
 */
#include "tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

static int32_t opt_id(const gguf_t *g, const char *key, int32_t n_vocab)
{
    int64_t v;
    if (gguf_get_int(g, key, &v) < 0 || v < 0 || v >= n_vocab)
        return -1;
    return (int32_t)v;
}

static bool opt_bool(const gguf_t *g, const char *key, bool dflt)
{
    bool b;
    return gguf_get_bool(g, key, &b) == 0 ? b : dflt;
}

static int load_merges(const gguf_t *g, struct tokenizer *t)
{
    int elem;
    uint64_t n;
    int rc = gguf_get_arr_info(g, "tokenizer.ggml.merges", &elem, &n);
    if (rc < 0)
        return deras_fail_ctx(rc, "byte-level BPE needs tokenizer.ggml.merges: ");
    if (elem != GGUF_TYPE_STRING)
        return deras_fail(DERAS_EFORMAT, "%s: tokenizer.ggml.merges is not a string array", gguf_name(g));
    if ((rc = pairmap_init(&t->merges, (size_t)n)) < 0)
        return rc;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if ((rc = gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &s, &len)) < 0)
            return rc;
        /* "a b": split at the first space after the first character (a token never starts
         * with a plain space in a byte-level vocabulary, but may be one). */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            return deras_fail(DERAS_EFORMAT, "%s: tokenizer.ggml.merges[%llu] '%.*s' has no space",
                              gguf_name(g), (unsigned long long)i, (int)len, s);
        size_t al = (size_t)(sp - s), bl = len - al - 1;
        char stackbuf[512];
        char *buf = al + bl <= sizeof stackbuf ? stackbuf : malloc(al + bl);
        if (!buf)
            return deras_fail(DERAS_ENOMEM, "out of memory");
        memcpy(buf, s, al);
        memcpy(buf + al, sp + 1, bl);
        int32_t ia = strmap_find(&t->vocab, t, s, al), ib = strmap_find(&t->vocab, t, sp + 1, bl);
        int32_t ir = strmap_find(&t->vocab, t, buf, al + bl);
        if (buf != stackbuf)
            free(buf);
        /* llama.cpp skips nothing either: a merge whose parts are unknown cannot apply. */
        if (ia < 0 || ib < 0 || ir < 0)
            return deras_fail(DERAS_EFORMAT, "%s: tokenizer.ggml.merges[%llu] '%.*s' uses or makes a token "
                              "missing from the vocabulary", gguf_name(g), (unsigned long long)i, (int)len, s);
        pairmap_put(&t->merges, ia, ib, (int32_t)i, ir);
    }
    return 0;
}

static int add_norm(struct tokenizer *t, enum norm_kind kind, const char *a, const char *b)
{
    struct norm_step *v = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *v);
    if (!v)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    t->norm = v;
    struct norm_step *st = &t->norm[t->n_norm];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->alen = strlen(a);
    st->a = tok_strndup(a, st->alen);
    if (b) {
        st->blen = strlen(b);
        st->b = tok_strndup(b, st->blen);
    }
    if (!st->a || (b && !st->b)) {
        free(st->a);
        free(st->b);
        return deras_fail(DERAS_ENOMEM, "out of memory");
    }
    t->n_norm++;
    return 0;
}

int tokenizer_from_gguf(const gguf_t *g, tokenizer_t **out)
{
    if (!g || !out)
        return deras_fail(DERAS_EINVAL, "tokenizer_from_gguf: NULL argument");
    *out = NULL;
    struct tokenizer *t = NULL;
    const char *name = gguf_name(g);
    const char *model, *s;
    size_t len;
    int elem, rc;
    uint64_t n;
    float *scores = NULL;
    int32_t *types = NULL;

    if ((rc = gguf_get_str(g, "tokenizer.ggml.model", &model, &len)) < 0)
        return deras_fail_ctx(rc, "%s: no tokenizer: ", name);
    enum tok_algo algo;
    if (!strcmp(model, "gpt2"))
        algo = TOK_ALGO_BPE;
    else if (!strcmp(model, "llama"))
        algo = TOK_ALGO_SPM;
    else
        return deras_fail(DERAS_EUNSUPPORTED, "%s: tokenizer.ggml.model '%s' is not supported (gpt2, llama)", name,
                          model);
    if ((rc = gguf_get_arr_info(g, "tokenizer.ggml.tokens", &elem, &n)) < 0)
        return deras_fail_ctx(rc, "%s: ", name);
    if (elem != GGUF_TYPE_STRING || n == 0 || n > INT32_MAX)
        return deras_fail(DERAS_EFORMAT, "%s: tokenizer.ggml.tokens must be a non-empty string array", name);
    if (!(t = tok_alloc(algo, (int32_t)n))) {
        rc = deras_fail(DERAS_ENOMEM, "%s: out of memory for %llu tokens", name, (unsigned long long)n);
        goto fail;
    }
    uint64_t nt;
    if (gguf_get_arr_info(g, "tokenizer.ggml.token_type", &elem, &nt) == 0) {
        if (nt != n) {
            rc = deras_fail(DERAS_EFORMAT, "%s: %llu token types for %llu tokens", name, (unsigned long long)nt,
                            (unsigned long long)n);
            goto fail;
        }
        if (!(types = malloc(n * sizeof *types))) {
            rc = deras_fail(DERAS_ENOMEM, "out of memory");
            goto fail;
        }
        if ((rc = gguf_get_arr_i32(g, "tokenizer.ggml.token_type", types, n)) < 0)
            goto fail;
    }
    if (gguf_get_arr_info(g, "tokenizer.ggml.scores", &elem, &nt) == 0) {
        if (nt != n) {
            rc = deras_fail(DERAS_EFORMAT, "%s: %llu token scores for %llu tokens", name, (unsigned long long)nt,
                            (unsigned long long)n);
            goto fail;
        }
        if (!(scores = malloc(n * sizeof *scores))) {
            rc = deras_fail(DERAS_ENOMEM, "out of memory");
            goto fail;
        }
        if ((rc = gguf_get_arr_f32(g, "tokenizer.ggml.scores", scores, n)) < 0)
            goto fail;
    } else if (algo == TOK_ALGO_SPM) {
        rc = deras_fail(DERAS_EFORMAT, "%s: a SentencePiece vocabulary needs tokenizer.ggml.scores", name);
        goto fail;
    }
    for (uint64_t i = 0; i < n; i++) {
        if ((rc = gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len)) < 0)
            goto fail;
        if ((rc = tok_set_text(t, (int32_t)i, s, len)) < 0)
            goto fail;
        struct tok_token *tk = &t->tokens[i];
        int ty = types ? types[i] : TOK_NORMAL;
        if (ty < TOK_NORMAL || ty > TOK_BYTE)
            ty = TOK_NORMAL; /* llama.cpp reads undefined types as normal too */
        tk->type = (uint8_t)ty;
        tk->score = scores ? scores[i] : 0.0f;
        if (ty == TOK_CONTROL || ty == TOK_UNKNOWN)
            tk->flags |= TOKF_ADDED | TOKF_SPECIAL;
        else if (ty == TOK_USER_DEFINED)
            tk->flags |= TOKF_ADDED;
    }

    bool space_prefix = false;
    if (algo == TOK_ALGO_SPM) {
        space_prefix = opt_bool(g, "tokenizer.ggml.add_space_prefix", true);
        if (space_prefix && (rc = add_norm(t, NORM_PREPEND, "\xE2\x96\x81", NULL)) < 0)
            goto fail;
        if ((rc = add_norm(t, NORM_REPLACE, " ", "\xE2\x96\x81")) < 0)
            goto fail;
        t->byte_fallback = true;
        t->strip_leading_space = space_prefix;
    } else {
        const char *pre = "default";
        if (gguf_has_key(g, "tokenizer.ggml.pre") && (rc = gguf_get_str(g, "tokenizer.ggml.pre", &pre, &len)) < 0)
            goto fail;
        if ((rc = pretok_from_gguf_name(pre, &t->pre, &t->n_pre, &t->ignore_merges)) < 0) {
            deras_fail_ctx(rc, "%s: ", name);
            goto fail;
        }
    }
    if ((rc = tok_finish(t, algo == TOK_ALGO_SPM ? DEC_SPM : DEC_BYTELEVEL, name)) < 0)
        goto fail;
    if (algo == TOK_ALGO_BPE && (rc = load_merges(g, t)) < 0)
        goto fail;

    t->unk_id = opt_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab);
    t->bos = opt_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab);
    t->eos = opt_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab);
    t->eot = opt_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab);
    t->eom = opt_id(g, "tokenizer.ggml.eom_token_id", t->n_vocab);
    if (opt_bool(g, "tokenizer.ggml.add_bos_token", algo == TOK_ALGO_SPM) && t->bos >= 0) {
        if (!(t->prefix_ids = malloc(sizeof(int32_t)))) {
            rc = deras_fail(DERAS_ENOMEM, "out of memory");
            goto fail;
        }
        t->prefix_ids[t->n_prefix++] = t->bos;
    }
    if (opt_bool(g, "tokenizer.ggml.add_eos_token", false) && t->eos >= 0) {
        if (!(t->suffix_ids = malloc(sizeof(int32_t)))) {
            rc = deras_fail(DERAS_ENOMEM, "out of memory");
            goto fail;
        }
        t->suffix_ids[t->n_suffix++] = t->eos;
    }
    if ((rc = tok_add_eog(t, t->eos)) < 0 || (rc = tok_add_eog(t, t->eot)) < 0 || (rc = tok_add_eog(t, t->eom)) < 0)
        goto fail;
    if (gguf_has_key(g, "tokenizer.chat_template")) {
        if ((rc = gguf_get_str(g, "tokenizer.chat_template", &s, &len)) < 0)
            goto fail;
        if (!(t->chat_template = tok_strndup(s, len))) {
            rc = deras_fail(DERAS_ENOMEM, "out of memory");
            goto fail;
        }
    }
    free(types);
    free(scores);
    *out = t;
    return 0;
fail:
    free(types);
    free(scores);
    tokenizer_destroy(&t);
    return rc;
}
