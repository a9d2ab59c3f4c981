/* SPDX-License-Identifier: Apache-2.0 */
/* pretokenizer.c - splitting normalized text into pieces before the BPE model.
 *
 * Steps follow Hugging Face's pre-tokenizers, applied in order to every piece:
 *  - Split by a regex or a literal with a behaviour (removed, isolated, merged with the
 *    previous or next piece, contiguous) and an invert flag (split.rs semantics). Digits
 *    is a Split by \p{N} (isolated) or \p{N}+ .
 *  - ByteLevel: optionally prefix a space, optionally split by the GPT-2 regex, then
 *    map every byte to its printable stand-in (utf8.h).
 *  - Metaspace: spaces -> the replacement (U+2581), a prefix per prepend_scheme, and
 *    optionally a split before every replacement.
 * GGUF files name their pre-tokenizer (tokenizer.ggml.pre) instead of describing it; the
 * names map to the regex lists of the Hugging Face tokenizers they came from (the table
 * in pretok_from_gguf_name), each an isolated split, followed by the byte mapping.
 *
 * Regexes run through PCRE2 with UTF and UCP (so \s, \p{L}, \p{N} are Unicode classes, as
 * in Oniguruma which Hugging Face uses), JIT-compiled where the platform allows. Compiled
 * patterns are shared read-only; match data is per call, so encoding is thread-safe.
 */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"

/* The GPT-2 pattern, as Hugging Face's ByteLevel pre-tokenizer writes it. */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Llama 3's Split pattern (tokenizer.json); Qwen2's differs only in \p{N} instead of
 * \p{N}{1,3}. */
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

bool tok_is_whitespace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

void pieces_clear(struct pieces *p)
{
    p->len = 0;
    p->n = 0;
}

void pieces_free(struct pieces *p)
{
    free(p->buf);
    free(p->v);
    memset(p, 0, sizeof *p);
}

static int pieces_reserve(struct pieces *p, size_t more)
{
    if (p->len + more > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + more)
            cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b)
            return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for %zu bytes of pieces", cap);
        p->buf = b;
        p->cap = cap;
    }
    if (p->n == p->cap_v) {
        size_t cap = p->cap_v ? p->cap_v * 2 : 64;
        struct piece *v = realloc(p->v, cap * sizeof *v);
        if (!v)
            return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for %zu pieces", cap);
        p->v = v;
        p->cap_v = cap;
    }
    return 0;
}

int pieces_add(struct pieces *p, const char *s, size_t n, bool origin)
{
    if (n == 0)
        return 0;
    int rc = pieces_reserve(p, n);
    if (rc < 0)
        return rc;
    memcpy(p->buf + p->len, s, n);
    p->v[p->n++] = (struct piece){.off = p->len, .len = n, .origin = origin};
    p->len += n;
    return 0;
}

int regex_compile(const char *pattern, size_t len, const char *what, pcre2_code **out)
{
    int err;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return deras_fail(DERAS_EUNSUPPORTED, "%s: regex '%.*s' does not compile at offset %zu: %s",
                          what, (int)(len > 200 ? 200 : len), pattern, (size_t)erroff, (char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
    *out = re;
    return 0;
}

/* One match at or after `start`; 1 found, 0 none, <0 error. A JIT stack is made on
 * demand when the default 32 KiB one runs out (long runs of one class). */
static int match_at(const pcre2_code *re, const char *s, size_t n, size_t start, pcre2_match_data *md,
                    pcre2_match_context **mctx, pcre2_jit_stack **jstack)
{
    for (;;) {
        int r = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, *mctx);
        if (r >= 0)
            return 1;
        if (r == PCRE2_ERROR_NOMATCH)
            return 0;
        if (r == PCRE2_ERROR_JIT_STACKLIMIT && !*jstack) {
            *mctx = pcre2_match_context_create(NULL);
            *jstack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
            if (!*mctx || !*jstack)
                return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for a regex stack");
            pcre2_jit_stack_assign(*mctx, NULL, *jstack);
            continue;
        }
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(r, msg, sizeof msg);
        return deras_fail(DERAS_ERANGE, "tokenizer: regex match failed: %s", (char *)msg);
    }
}

int regex_find_all(const pcre2_code *re, const char *s, size_t n, size_t **spans, size_t *n_spans)
{
    size_t cap = 16, k = 0;
    size_t *v = malloc(cap * 2 * sizeof *v);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    pcre2_match_context *mctx = NULL;
    pcre2_jit_stack *js = NULL;
    int rc = 0;
    if (!v || !md) {
        rc = deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
        goto fail;
    }
    size_t pos = 0;
    while (pos <= n) {
        int r = match_at(re, s, n, pos, md, &mctx, &js);
        if (r < 0) {
            rc = r;
            goto fail;
        }
        if (r == 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b == a) { /* empty match: no piece; step one character */
            if (a >= n)
                break;
            uint32_t cp;
            size_t cl = utf8_decode(s + a, n - a, &cp);
            pos = a + (cl ? cl : 1);
            continue;
        }
        if (k == cap) {
            size_t *nv = realloc(v, cap * 4 * sizeof *v);
            if (!nv) {
                rc = deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
                goto fail;
            }
            v = nv;
            cap *= 2;
        }
        v[2 * k] = a;
        v[2 * k + 1] = b;
        k++;
        pos = b;
    }
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(js);
    *spans = v;
    *n_spans = k;
    return 0;
fail:
    free(v);
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(js);
    return rc;
}

int literal_find_all(const char *pat, size_t plen, const char *s, size_t n, size_t **spans,
                     size_t *n_spans)
{
    size_t cap = 16, k = 0;
    size_t *v = malloc(cap * 2 * sizeof *v);
    if (!v)
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; plen > 0 && i + plen <= n;) {
        const char *p = memmem(s + i, n - i, pat, plen);
        if (!p)
            break;
        if (k == cap) {
            size_t *nv = realloc(v, cap * 4 * sizeof *v);
            if (!nv) {
                free(v);
                return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
            }
            v = nv;
            cap *= 2;
        }
        v[2 * k] = (size_t)(p - s);
        v[2 * k + 1] = (size_t)(p - s) + plen;
        k++;
        i = (size_t)(p - s) + plen;
    }
    *spans = v;
    *n_spans = k;
    return 0;
}

/* Split one piece by its matches per behaviour (split.rs / normalizer.rs split), appending
 * the resulting pieces to out. */
static int split_piece(const char *s, size_t n, bool origin, const size_t *m, size_t nm,
                       enum split_behavior beh, bool invert, struct pieces *out)
{
    /* Alternating list of (start, end, is_match) covering the piece. */
    struct seg {
        size_t a, b;
        bool match;
    };
    struct seg *segs = malloc((2 * nm + 1) * sizeof *segs);
    if (!segs)
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
    size_t ns = 0, prev = 0;
    for (size_t i = 0; i < nm; i++) {
        if (m[2 * i] != prev)
            segs[ns++] = (struct seg){prev, m[2 * i], false};
        segs[ns++] = (struct seg){m[2 * i], m[2 * i + 1], true};
        prev = m[2 * i + 1];
    }
    if (prev != n || ns == 0)
        segs[ns++] = (struct seg){prev, n, false};
    if (invert)
        for (size_t i = 0; i < ns; i++)
            segs[i].match = !segs[i].match;

    /* Fold per behaviour into (a, b, removed). */
    struct seg *res = malloc(ns * sizeof *res);
    if (!res) {
        free(segs);
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
    }
    size_t nr = 0;
    bool prev_match = false;
    switch (beh) {
    case SPLIT_REMOVED:
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < ns; i++)
            res[nr++] = (struct seg){segs[i].a, segs[i].b, beh == SPLIT_REMOVED && segs[i].match};
        break;
    case SPLIT_MERGED_PREV:
        for (size_t i = 0; i < ns; i++) {
            if (segs[i].match && !prev_match && nr > 0)
                res[nr - 1].b = segs[i].b;
            else
                res[nr++] = (struct seg){segs[i].a, segs[i].b, false};
            prev_match = segs[i].match;
        }
        break;
    case SPLIT_MERGED_NEXT:
        for (size_t k = ns; k-- > 0;) {
            if (segs[k].match && !prev_match && nr > 0)
                res[nr - 1].a = segs[k].a;
            else
                res[nr++] = (struct seg){segs[k].a, segs[k].b, false};
            prev_match = segs[k].match;
        }
        for (size_t i = 0; i < nr / 2; i++) {
            struct seg tmp = res[i];
            res[i] = res[nr - 1 - i];
            res[nr - 1 - i] = tmp;
        }
        break;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < ns; i++) {
            if (i > 0 && segs[i].match == prev_match && nr > 0)
                res[nr - 1].b = segs[i].b;
            else
                res[nr++] = (struct seg){segs[i].a, segs[i].b, false};
            prev_match = segs[i].match;
        }
        break;
    }
    int rc = 0;
    for (size_t i = 0; i < nr && rc == 0; i++)
        if (!res[i].match)
            rc = pieces_add(out, s + res[i].a, res[i].b - res[i].a, origin && res[i].a == 0);
    free(segs);
    free(res);
    return rc;
}

static int step_split(const struct pretok_step *st, const pcre2_code *re, enum split_behavior beh,
                      const struct pieces *in, struct pieces *out)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->buf + in->v[i].off;
        size_t n = in->v[i].len;
        size_t *m = NULL, nm = 0;
        int rc = re ? regex_find_all(re, s, n, &m, &nm) : literal_find_all(st->str, st->slen, s, n, &m, &nm);
        if (rc == 0)
            rc = split_piece(s, n, in->v[i].origin, m, nm, beh, st->invert, out);
        free(m);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Map every byte of every piece to its byte-level character. */
static int step_bytemap(const struct pieces *in, struct pieces *out)
{
    for (size_t i = 0; i < in->n; i++) {
        const uint8_t *s = (const uint8_t *)in->buf + in->v[i].off;
        size_t n = in->v[i].len;
        int rc = pieces_reserve(out, 2 * n);
        if (rc < 0)
            return rc;
        size_t start = out->len;
        for (size_t k = 0; k < n; k++)
            out->len += utf8_encode(utf8_byte_to_cp(s[k]), out->buf + out->len);
        out->v[out->n++] = (struct piece){.off = start, .len = out->len - start, .origin = in->v[i].origin};
    }
    return 0;
}

static int step_prefix_space(const struct pieces *in, struct pieces *out, const char *pre, size_t plen,
                             bool only_origin)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->buf + in->v[i].off;
        size_t n = in->v[i].len;
        bool add = !(n >= plen && !memcmp(s, pre, plen)) && (!only_origin || in->v[i].origin);
        int rc = pieces_reserve(out, n + plen);
        if (rc < 0)
            return rc;
        size_t start = out->len;
        if (add) {
            memcpy(out->buf + out->len, pre, plen);
            out->len += plen;
        }
        memcpy(out->buf + out->len, s, n);
        out->len += n;
        out->v[out->n++] = (struct piece){.off = start, .len = out->len - start, .origin = in->v[i].origin};
    }
    return 0;
}

static int step_replace_spaces(const struct pieces *in, struct pieces *out, const char *rep, size_t rlen)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->buf + in->v[i].off;
        size_t n = in->v[i].len;
        int rc = pieces_reserve(out, n * rlen);
        if (rc < 0)
            return rc;
        size_t start = out->len;
        for (size_t k = 0; k < n; k++) {
            if (s[k] == ' ') {
                memcpy(out->buf + out->len, rep, rlen);
                out->len += rlen;
            } else {
                out->buf[out->len++] = s[k];
            }
        }
        out->v[out->n++] = (struct piece){.off = start, .len = out->len - start, .origin = in->v[i].origin};
    }
    return 0;
}

static void swap_pieces(struct pieces *a, struct pieces *b)
{
    struct pieces t = *a;
    *a = *b;
    *b = t;
    pieces_clear(b);
}

int pretok_apply(const struct tokenizer *t, struct pieces *in, struct pieces *tmp)
{
    for (int i = 0; i < t->n_pre; i++) {
        const struct pretok_step *st = &t->pre[i];
        int rc = 0;
        pieces_clear(tmp);
        switch (st->kind) {
        case PRE_SPLIT_RE:
            rc = step_split(st, st->re, st->behavior, in, tmp);
            break;
        case PRE_SPLIT_STR:
            rc = step_split(st, NULL, st->behavior, in, tmp);
            break;
        case PRE_BYTELEVEL:
            if (st->add_prefix_space) {
                if ((rc = step_prefix_space(in, tmp, " ", 1, false)) < 0)
                    return rc;
                swap_pieces(in, tmp);
            }
            if (st->re) {
                if ((rc = step_split(st, st->re, SPLIT_ISOLATED, in, tmp)) < 0)
                    return rc;
                swap_pieces(in, tmp);
            }
            rc = step_bytemap(in, tmp);
            break;
        case PRE_METASPACE:
            if ((rc = step_replace_spaces(in, tmp, st->str, st->slen)) < 0)
                return rc;
            if (st->prepend != PREPEND_NEVER) {
                swap_pieces(in, tmp);
                if ((rc = step_prefix_space(in, tmp, st->str, st->slen, st->prepend == PREPEND_FIRST)) < 0)
                    return rc;
            }
            if (st->split) {
                swap_pieces(in, tmp);
                struct pretok_step lit = {.kind = PRE_SPLIT_STR, .str = st->str, .slen = st->slen};
                rc = step_split(&lit, NULL, SPLIT_MERGED_NEXT, in, tmp);
            }
            break;
        }
        if (rc < 0)
            return rc;
        swap_pieces(in, tmp);
    }
    return 0;
}

static int add_regex_step(struct pretok_step *steps, int *n, const char *re, const char *name)
{
    struct pretok_step *st = &steps[(*n)++];
    memset(st, 0, sizeof *st);
    st->kind = PRE_SPLIT_RE;
    st->behavior = SPLIT_ISOLATED;
    return regex_compile(re, strlen(re), name, &st->re);
}

int pretok_from_gguf_name(const char *name, struct pretok_step **out, int *n_out, bool *ignore_merges)
{
    /* Regex lists per name, as the models' Hugging Face tokenizer.json files declare them
     * (llama.cpp's llama-vocab.cpp maps the same names to the same splits). */
    static const struct {
        const char *names[6];
        const char *re[4];
        bool ignore_merges;
    } table[] = {
        {{"gpt-2", "phi-2", "jina-es", "jina-de", "olmo", "mpt"}, {RE_GPT2}, false},
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}, {RE_LLAMA3}, true},
        {{"dbrx", "smaug-bpe"}, {RE_LLAMA3}, false},
        {{"qwen2", "deepseek-r1-qwen"}, {RE_QWEN2}, false},
        {{"starcoder", "smollm", "refact", "command-r", "codeshell", "exaone"}, {"\\p{N}", RE_GPT2}, false},
        /* llama.cpp's fallback for byte-level vocabularies that name no pre-tokenizer */
        {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        for (int k = 0; k < 6 && table[i].names[k]; k++) {
            if (strcmp(name, table[i].names[k]) != 0)
                continue;
            struct pretok_step *steps = calloc(5, sizeof *steps);
            int n = 0, rc = 0;
            if (!steps)
                return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
            for (int r = 0; r < 4 && table[i].re[r] && rc == 0; r++)
                rc = add_regex_step(steps, &n, table[i].re[r], "tokenizer.ggml.pre");
            if (rc == 0)
                steps[n++] = (struct pretok_step){.kind = PRE_BYTELEVEL};
            if (rc < 0) {
                pretok_free_steps(steps, n);
                return rc;
            }
            *out = steps;
            *n_out = n;
            *ignore_merges = table[i].ignore_merges;
            return 0;
        }
    }
    return deras_fail(DERAS_EUNSUPPORTED, "tokenizer.ggml.pre '%s' is not a supported pre-tokenizer "
                      "(supported: default, gpt-2, llama3/llama-bpe, qwen2, smollm, starcoder and "
                      "their aliases)", name);
}

int pretok_bytelevel_step(bool add_prefix_space, bool use_regex, struct pretok_step *st)
{
    memset(st, 0, sizeof *st);
    st->kind = PRE_BYTELEVEL;
    st->add_prefix_space = add_prefix_space;
    if (use_regex)
        return regex_compile(RE_GPT2, strlen(RE_GPT2), "ByteLevel pre-tokenizer", &st->re);
    return 0;
}

void pretok_free_steps(struct pretok_step *steps, int n)
{
    if (!steps)
        return;
    for (int i = 0; i < n; i++) {
        pcre2_code_free(steps[i].re);
        free(steps[i].str);
    }
    free(steps);
}
