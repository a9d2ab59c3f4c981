/* SPDX-License-Identifier: Apache-2.0 */
/* tokenizer_json.c - building a tokenizer from a Hugging Face directory.
 *
 * tokenizer.json describes the pipeline; this file maps each component onto the internal
 * description (tokenizer_internal.h) and rejects, with DERAS_EUNSUPPORTED naming the
 * component and its path in the file, anything it does not implement exactly:
 *  - normalizer: null, NFC/NFD/NFKC/NFKD, Prepend, Replace (String or Regex), Sequence;
 *  - pre_tokenizer: null, ByteLevel (add_prefix_space, use_regex), Split (Regex or String,
 *    every behaviour, invert), Digits, Metaspace, Sequence;
 *  - model: BPE (vocab, merges as "a b" strings or [a, b] pairs, byte_fallback, fuse_unk,
 *    ignore_merges, unk_token; no dropout, no subword prefix/suffix);
 *  - added_tokens: special, lstrip, rstrip, normalized (single_word is rejected);
 *  - post_processor: TemplateProcessing (its "single" template gives the ids add_special
 *    puts before and after the text), ByteLevel (nothing to do for ids), Sequence;
 *  - decoder: ByteLevel, Metaspace, or a Sequence of Replace("▁" -> " "), ByteFallback,
 *    Fuse, Strip(" ", 1, 0) (Llama 2), ByteLevel, Metaspace.
 * tokenizer_config.json adds bos_token / eos_token, add_bos_token / add_eos_token (used
 * only where tokenizer.json has no post_processor, which otherwise decides, as in the
 * tokenizers library) and chat_template (a string, or a list of named templates of which
 * "default" is taken); a chat_template.jinja file wins over both. generation_config.json's
 * eos_token_id (an int or a list) joins the end-of-generation set.
 *
 * Loading costs O(vocabulary + merges) and reads each file once.
 */
#include "tokenizer_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/base/status.h"

struct jload {
    const char *path; /* for messages */
    struct tokenizer *t;
    bool has_post;
    bool dec_byte_fallback;
};

static const char *jtype(json_t *o)
{
    json_t *ty = json_object_get(o, "type");
    return json_is_string(ty) ? json_string_value(ty) : NULL;
}

static bool jbool(json_t *o, const char *key, bool dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* The String or Regex of a {"String": ...} / {"Regex": ...} pattern object. */
static int jpattern(struct jload *L, json_t *pat, const char *where, const char **s, size_t *len,
                    bool *is_regex)
{
    json_t *v;
    if ((v = json_object_get(pat, "String")) && json_is_string(v)) {
        *is_regex = false;
    } else if ((v = json_object_get(pat, "Regex")) && json_is_string(v)) {
        *is_regex = true;
    } else {
        return deras_fail(DERAS_EFORMAT, "%s: %s: pattern is neither {\"String\"} nor {\"Regex\"}", L->path, where);
    }
    *s = json_string_value(v);
    *len = json_string_length(v);
    return 0;
}

/* A "Sequence" step: each element of n[key] loaded by `load` in order, named
 * where.key[i] in errors. */
static int load_sequence(struct jload *L, json_t *n, const char *key, const char *where,
                         int (*load)(struct jload *, json_t *, const char *))
{
    json_t *arr = json_object_get(n, key);
    size_t i;
    json_t *e;
    if (!json_is_array(arr))
        return deras_fail(DERAS_EFORMAT, "%s: %s: Sequence without %s", L->path, where, key);
    json_array_foreach(arr, i, e) {
        char sub[128];
        snprintf(sub, sizeof sub, "%s.%s[%zu]", where, key, i);
        int rc = load(L, e, sub);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int load_normalizer(struct jload *L, json_t *n, const char *where)
{
    struct tokenizer *t = L->t;
    const char *ty = jtype(n);
    if (!ty)
        return deras_fail(DERAS_EFORMAT, "%s: %s has no type", L->path, where);
    if (!strcmp(ty, "Sequence"))
        return load_sequence(L, n, "normalizers", where, load_normalizer);
    struct norm_step st = {0};
    if (!strcmp(ty, "NFC"))
        st.kind = NORM_NFC;
    else if (!strcmp(ty, "NFD"))
        st.kind = NORM_NFD;
    else if (!strcmp(ty, "NFKC"))
        st.kind = NORM_NFKC;
    else if (!strcmp(ty, "NFKD"))
        st.kind = NORM_NFKD;
    else if (!strcmp(ty, "Prepend")) {
        json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p))
            return deras_fail(DERAS_EFORMAT, "%s: %s: Prepend without a prepend string", L->path, where);
        st.kind = NORM_PREPEND;
        st.alen = json_string_length(p);
        st.a = tok_strndup(json_string_value(p), st.alen);
        if (!st.a)
            return deras_fail(DERAS_ENOMEM, "%s: out of memory", L->path);
    } else if (!strcmp(ty, "Replace")) {
        const char *pat;
        size_t plen;
        bool is_re;
        json_t *c = json_object_get(n, "content");
        int rc = jpattern(L, json_object_get(n, "pattern"), where, &pat, &plen, &is_re);
        if (rc < 0)
            return rc;
        if (!json_is_string(c))
            return deras_fail(DERAS_EFORMAT, "%s: %s: Replace without content", L->path, where);
        st.kind = is_re ? NORM_REPLACE_RE : NORM_REPLACE;
        st.alen = plen;
        st.a = tok_strndup(pat, plen);
        st.blen = json_string_length(c);
        st.b = tok_strndup(json_string_value(c), st.blen);
        if (!st.a || !st.b) {
            free(st.a);
            free(st.b);
            return deras_fail(DERAS_ENOMEM, "%s: out of memory", L->path);
        }
        if (is_re && (rc = regex_compile(pat, plen, where, &st.re)) < 0) {
            free(st.a);
            free(st.b);
            return rc;
        }
    } else {
        return deras_fail(DERAS_EUNSUPPORTED, "%s: %s: normalizer '%s' is not supported "
                          "(supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence)", L->path, where, ty);
    }
    struct norm_step *v = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *v);
    if (!v) {
        free(st.a);
        free(st.b);
        pcre2_code_free(st.re);
        return deras_fail(DERAS_ENOMEM, "%s: out of memory", L->path);
    }
    t->norm = v;
    t->norm[t->n_norm++] = st;
    return 0;
}

static int push_pre(struct jload *L, struct pretok_step *st)
{
    struct tokenizer *t = L->t;
    struct pretok_step *v = realloc(t->pre, (size_t)(t->n_pre + 1) * sizeof *v);
    if (!v) {
        pcre2_code_free(st->re);
        free(st->str);
        return deras_fail(DERAS_ENOMEM, "%s: out of memory", L->path);
    }
    t->pre = v;
    t->pre[t->n_pre++] = *st;
    return 0;
}

static int load_pretokenizer(struct jload *L, json_t *p, const char *where)
{
    const char *ty = jtype(p);
    int rc;
    struct pretok_step st = {0};
    if (!ty)
        return deras_fail(DERAS_EFORMAT, "%s: %s has no type", L->path, where);
    if (!strcmp(ty, "Sequence"))
        return load_sequence(L, p, "pretokenizers", where, load_pretokenizer);
    if (!strcmp(ty, "ByteLevel")) {
        if ((rc = pretok_bytelevel_step(jbool(p, "add_prefix_space", true), jbool(p, "use_regex", true), &st)) < 0)
            return rc;
        return push_pre(L, &st);
    }
    if (!strcmp(ty, "Digits")) {
        const char *re = jbool(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+";
        st.kind = PRE_SPLIT_RE;
        st.behavior = SPLIT_ISOLATED;
        if ((rc = regex_compile(re, strlen(re), where, &st.re)) < 0)
            return rc;
        return push_pre(L, &st);
    }
    if (!strcmp(ty, "Split")) {
        const char *pat;
        size_t plen;
        bool is_re;
        if ((rc = jpattern(L, json_object_get(p, "pattern"), where, &pat, &plen, &is_re)) < 0)
            return rc;
        json_t *b = json_object_get(p, "behavior");
        const char *bs = json_is_string(b) ? json_string_value(b) : "";
        static const struct {
            const char *name;
            enum split_behavior b;
        } behs[] = {{"Removed", SPLIT_REMOVED}, {"Isolated", SPLIT_ISOLATED},
                    {"MergedWithPrevious", SPLIT_MERGED_PREV}, {"MergedWithNext", SPLIT_MERGED_NEXT},
                    {"Contiguous", SPLIT_CONTIGUOUS}};
        for (size_t i = 0; i < sizeof behs / sizeof behs[0]; i++)
            if (!strcmp(bs, behs[i].name))
                st.behavior = behs[i].b;
        if (!st.behavior)
            return deras_fail(DERAS_EUNSUPPORTED, "%s: %s: Split behavior '%s' is not supported", L->path, where, bs);
        st.invert = jbool(p, "invert", false);
        if (is_re) {
            st.kind = PRE_SPLIT_RE;
            if ((rc = regex_compile(pat, plen, where, &st.re)) < 0)
                return rc;
        } else {
            st.kind = PRE_SPLIT_STR;
            st.slen = plen;
            if (!(st.str = tok_strndup(pat, plen)))
                return deras_fail(DERAS_ENOMEM, "%s: out of memory", L->path);
        }
        return push_pre(L, &st);
    }
    if (!strcmp(ty, "Metaspace")) {
        json_t *r = json_object_get(p, "replacement");
        json_t *ps = json_object_get(p, "prepend_scheme");
        st.kind = PRE_METASPACE;
        st.split = jbool(p, "split", true);
        if (json_is_string(ps)) {
            const char *s = json_string_value(ps);
            st.prepend = !strcmp(s, "always") ? PREPEND_ALWAYS : !strcmp(s, "first") ? PREPEND_FIRST
                         : !strcmp(s, "never") ? PREPEND_NEVER : 0;
            if (!st.prepend)
                return deras_fail(DERAS_EUNSUPPORTED, "%s: %s: Metaspace prepend_scheme '%s' is not supported",
                                  L->path, where, s);
        } else {
            st.prepend = jbool(p, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
        }
        const char *rs = json_is_string(r) ? json_string_value(r) : "\xE2\x96\x81";
        st.slen = strlen(rs);
        if (!(st.str = tok_strndup(rs, st.slen)))
            return deras_fail(DERAS_ENOMEM, "%s: out of memory", L->path);
        return push_pre(L, &st);
    }
    return deras_fail(DERAS_EUNSUPPORTED, "%s: %s: pre-tokenizer '%s' is not supported (supported: "
                      "ByteLevel, Split, Digits, Metaspace, Sequence)", L->path, where, ty);
}

static int load_model(struct jload *L, json_t *m, json_t *added)
{
    const char *ty = jtype(m);
    if (!ty)
        ty = "BPE"; /* old files omit the type of a BPE model */
    if (strcmp(ty, "BPE") != 0)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: model '%s' is not supported (only BPE)", L->path, ty);
    json_t *v;
    if ((v = json_object_get(m, "dropout")) && !json_is_null(v))
        return deras_fail(DERAS_EUNSUPPORTED, "%s: model.dropout is not supported", L->path);
    const char *opt[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(m, opt[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return deras_fail(DERAS_EUNSUPPORTED, "%s: model.%s is not supported", L->path, opt[i]);
    }
    json_t *vocab = json_object_get(m, "vocab");
    if (!json_is_object(vocab))
        return deras_fail(DERAS_EFORMAT, "%s: model.vocab is not an object", L->path);
    /* The id space: model vocabulary plus added tokens. */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= INT32_MAX)
            return deras_fail(DERAS_EFORMAT, "%s: model.vocab['%s'] is not a valid id", L->path, key);
        if (json_integer_value(val) > max_id)
            max_id = json_integer_value(val);
    }
    size_t i;
    json_t *e;
    json_array_foreach(added, i, e) {
        json_t *id = json_object_get(e, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= INT32_MAX ||
            !json_is_string(json_object_get(e, "content")))
            return deras_fail(DERAS_EFORMAT, "%s: added_tokens[%zu] needs an id and a content", L->path, i);
        if (json_integer_value(id) > max_id)
            max_id = json_integer_value(id);
    }
    if (max_id < 0)
        return deras_fail(DERAS_EFORMAT, "%s: empty vocabulary", L->path);
    struct tokenizer *t = tok_alloc(TOK_ALGO_BPE, (int32_t)(max_id + 1));
    if (!t)
        return deras_fail(DERAS_ENOMEM, "%s: out of memory for %lld tokens", L->path, (long long)max_id + 1);
    L->t = t;
    int rc;
    const char *vk;
    json_object_foreach(vocab, vk, val) {
        int32_t id = (int32_t)json_integer_value(val);
        if ((rc = tok_set_text(t, id, vk, strlen(vk))) < 0)
            return rc;
    }
    json_array_foreach(added, i, e) {
        int32_t id = (int32_t)json_integer_value(json_object_get(e, "id"));
        json_t *c = json_object_get(e, "content");
        if (jbool(e, "single_word", false))
            return deras_fail(DERAS_EUNSUPPORTED, "%s: added_tokens[%zu] ('%s'): single_word is not supported",
                              L->path, i, json_string_value(c));
        if ((rc = tok_set_text(t, id, json_string_value(c), json_string_length(c))) < 0)
            return rc;
        struct tok_token *tk = &t->tokens[id];
        bool special = jbool(e, "special", false);
        tk->type = special ? TOK_CONTROL : TOK_USER_DEFINED;
        tk->flags |= TOKF_ADDED | (special ? TOKF_SPECIAL : 0);
        if (jbool(e, "lstrip", false))
            tk->flags |= TOKF_LSTRIP;
        if (jbool(e, "rstrip", false))
            tk->flags |= TOKF_RSTRIP;
        if (jbool(e, "normalized", !special))
            tk->flags |= TOKF_NORMALIZED;
    }
    t->byte_fallback = jbool(m, "byte_fallback", false);
    t->fuse_unk = jbool(m, "fuse_unk", false);
    t->ignore_merges = jbool(m, "ignore_merges", false);
    return 0;
}

/* Merges are stored by token id, so they load after tok_finish has hashed the vocabulary.
 * A merge whose parts or result are not tokens is DERAS_EFORMAT. O(merges). */
static int load_merges(struct jload *L, json_t *m)
{
    struct tokenizer *t = L->t;
    json_t *merges = json_object_get(m, "merges");
    if (!merges || json_is_null(merges))
        return 0;
    if (!json_is_array(merges))
        return deras_fail(DERAS_EFORMAT, "%s: model.merges is not an array", L->path);
    int rc = pairmap_init(&t->merges, json_array_size(merges));
    if (rc < 0)
        return rc;
    size_t i;
    json_t *e;
    char *buf = NULL;
    size_t bufcap = 0;
    json_array_foreach(merges, i, e) {
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(e)) {
            const char *s = json_string_value(e);
            const char *sp = strchr(s, ' ');
            if (!sp) {
                free(buf);
                return deras_fail(DERAS_EFORMAT, "%s: model.merges[%zu] '%s' has no space", L->path, i, s);
            }
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = strlen(b);
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            al = json_string_length(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            bl = json_string_length(json_array_get(e, 1));
        } else {
            free(buf);
            return deras_fail(DERAS_EFORMAT, "%s: model.merges[%zu] is neither \"a b\" nor [a, b]", L->path, i);
        }
        if (al + bl > bufcap) {
            bufcap = (al + bl) * 2;
            char *nb = realloc(buf, bufcap);
            if (!nb) {
                free(buf);
                return deras_fail(DERAS_ENOMEM, "%s: out of memory", L->path);
            }
            buf = nb;
        }
        memcpy(buf, a, al);
        memcpy(buf + al, b, bl);
        int32_t ia = strmap_find(&t->vocab, t, a, al), ib = strmap_find(&t->vocab, t, b, bl);
        int32_t ir = strmap_find(&t->vocab, t, buf, al + bl);
        if (ia < 0 || ib < 0 || ir < 0) {
            free(buf);
            return deras_fail(DERAS_EFORMAT, "%s: model.merges[%zu] ('%.*s' + '%.*s') uses or makes a token "
                              "missing from the vocabulary", L->path, i, (int)al, a, (int)bl, b);
        }
        pairmap_put(&t->merges, ia, ib, (int32_t)i, ir);
    }
    free(buf);
    return 0;
}

/* Ids of the {"SpecialToken": {"id": name}} items before and after {"Sequence": A}. */
static int load_template(struct jload *L, json_t *pp)
{
    struct tokenizer *t = L->t;
    json_t *single = json_object_get(pp, "single");
    json_t *specials = json_object_get(pp, "special_tokens");
    size_t i;
    json_t *e;
    bool after = false;
    if (!json_is_array(single))
        return deras_fail(DERAS_EFORMAT, "%s: post_processor TemplateProcessing without a 'single' list", L->path);
    json_array_foreach(single, i, e) {
        json_t *st = json_object_get(e, "SpecialToken");
        if (json_object_get(e, "Sequence")) {
            json_t *sid = json_object_get(json_object_get(e, "Sequence"), "id");
            if (!json_is_string(sid) || strcmp(json_string_value(sid), "A") != 0)
                return deras_fail(DERAS_EUNSUPPORTED, "%s: post_processor: single template uses sequence other than A",
                                  L->path);
            after = true;
            continue;
        }
        json_t *name = json_object_get(st, "id");
        if (!json_is_string(name))
            return deras_fail(DERAS_EFORMAT, "%s: post_processor.single[%zu] is not a SpecialToken", L->path, i);
        json_t *ids = json_object_get(json_object_get(specials, json_string_value(name)), "ids");
        if (!json_is_array(ids))
            return deras_fail(DERAS_EFORMAT, "%s: post_processor: special token '%s' has no ids", L->path,
                              json_string_value(name));
        size_t k;
        json_t *idv;
        json_array_foreach(ids, k, idv) {
            json_int_t id = json_integer_value(idv);
            if (!json_is_integer(idv) || id < 0 || id >= t->n_vocab)
                return deras_fail(DERAS_EFORMAT, "%s: post_processor: special token '%s' has an invalid id",
                                  L->path, json_string_value(name));
            int32_t **arr = after ? &t->suffix_ids : &t->prefix_ids;
            int *n = after ? &t->n_suffix : &t->n_prefix;
            int32_t *v = realloc(*arr, (size_t)(*n + 1) * sizeof *v);
            if (!v)
                return deras_fail(DERAS_ENOMEM, "%s: out of memory", L->path);
            v[(*n)++] = (int32_t)id;
            *arr = v;
        }
    }
    return 0;
}

static int load_post(struct jload *L, json_t *pp, const char *where)
{
    const char *ty = jtype(pp);
    if (!ty)
        return deras_fail(DERAS_EFORMAT, "%s: %s has no type", L->path, where);
    if (!strcmp(ty, "ByteLevel"))
        return 0;
    if (!strcmp(ty, "TemplateProcessing")) {
        L->has_post = true;
        return load_template(L, pp);
    }
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(pp, "processors");
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", where, i);
            int rc = load_post(L, e, sub);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    return deras_fail(DERAS_EUNSUPPORTED, "%s: %s: post-processor '%s' is not supported "
                      "(supported: TemplateProcessing, ByteLevel, Sequence)", L->path, where, ty);
}

/* Decide the decoding rules from the decoder. */
static int load_decoder(struct jload *L, json_t *d, enum tok_decoder *dec)
{
    const char *ty = jtype(d);
    if (!ty)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: decoder: null (tokens would be joined by spaces) is not supported",
                          L->path);
    json_t *list = NULL;
    if (!strcmp(ty, "Sequence")) {
        list = json_object_get(d, "decoders");
        if (!json_is_array(list))
            return deras_fail(DERAS_EFORMAT, "%s: decoder: Sequence without decoders", L->path);
    }
    size_t n = list ? json_array_size(list) : 1;
    bool bytelevel = false, spm = false, fused = !list;
    for (size_t i = 0; i < n; i++) {
        json_t *e = list ? json_array_get(list, i) : d;
        const char *et = jtype(e);
        if (!et)
            return deras_fail(DERAS_EFORMAT, "%s: decoder.decoders[%zu] has no type", L->path, i);
        if (!strcmp(et, "ByteLevel")) {
            bytelevel = true;
        } else if (!strcmp(et, "Metaspace")) {
            json_t *r = json_object_get(e, "replacement");
            json_t *ps = json_object_get(e, "prepend_scheme");
            if (json_is_string(r) && strcmp(json_string_value(r), "\xE2\x96\x81") != 0)
                return deras_fail(DERAS_EUNSUPPORTED, "%s: decoder Metaspace with replacement '%s' is not supported",
                                  L->path, json_string_value(r));
            spm = true;
            bool prepend = json_is_string(ps) ? strcmp(json_string_value(ps), "never") != 0
                                              : jbool(e, "add_prefix_space", true);
            L->t->strip_leading_space = prepend;
        } else if (!strcmp(et, "Replace")) {
            const char *pat;
            size_t plen;
            bool is_re;
            json_t *c = json_object_get(e, "content");
            int rc = jpattern(L, json_object_get(e, "pattern"), "decoder Replace", &pat, &plen, &is_re);
            if (rc < 0)
                return rc;
            if (is_re || strcmp(pat, "\xE2\x96\x81") != 0 || !json_is_string(c) || strcmp(json_string_value(c), " "))
                return deras_fail(DERAS_EUNSUPPORTED, "%s: decoder Replace other than \"\xE2\x96\x81\" -> \" \" is "
                                  "not supported", L->path);
            spm = true;
        } else if (!strcmp(et, "ByteFallback")) {
            L->dec_byte_fallback = true;
        } else if (!strcmp(et, "Fuse")) {
            fused = true;
        } else if (!strcmp(et, "Strip")) {
            json_t *c = json_object_get(e, "content");
            json_int_t start = json_integer_value(json_object_get(e, "start"));
            json_int_t stop = json_integer_value(json_object_get(e, "stop"));
            if (!fused || !json_is_string(c) || strcmp(json_string_value(c), " ") != 0 || start > 1 || stop != 0)
                return deras_fail(DERAS_EUNSUPPORTED, "%s: decoder Strip other than one leading space of the fused "
                                  "text is not supported", L->path);
            L->t->strip_leading_space = start == 1;
        } else {
            return deras_fail(DERAS_EUNSUPPORTED, "%s: decoder '%s' is not supported (supported: ByteLevel, "
                              "Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)", L->path, et);
        }
    }
    if (bytelevel == spm)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: decoder must be byte-level or SentencePiece-style "
                          "(\"\xE2\x96\x81\" -> \" \"), not %s", L->path, bytelevel ? "both" : "neither");
    *dec = bytelevel ? DEC_BYTELEVEL : DEC_SPM;
    return 0;
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int read_text(const char *path, char **out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return deras_fail(DERAS_EIO, "%s: cannot open", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return deras_fail(DERAS_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, 4096, f);
        len += r;
        if (r < 4096)
            break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return deras_fail(DERAS_EIO, "%s: read error", path);
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

static int32_t special_id(struct tokenizer *t, json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!json_is_string(v))
        return -1;
    return strmap_find(&t->vocab, t, json_string_value(v), json_string_length(v));
}

static int load_config(struct jload *L, const char *dir)
{
    struct tokenizer *t = L->t;
    int rc = 0;
    char *p = path_join(dir, "tokenizer_config.json");
    char *pj = path_join(dir, "chat_template.jinja");
    char *pg = path_join(dir, "generation_config.json");
    json_t *cfg = NULL, *gen = NULL;
    json_error_t jerr;
    if (!p || !pj || !pg) {
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
        goto done;
    }
    if (file_exists(p)) {
        if (!(cfg = json_load_file(p, 0, &jerr))) {
            rc = deras_fail(DERAS_EFORMAT, "%s: line %d: %s", p, jerr.line, jerr.text);
            goto done;
        }
        int32_t id;
        if ((id = special_id(t, json_object_get(cfg, "bos_token"))) >= 0)
            t->bos = id;
        if ((id = special_id(t, json_object_get(cfg, "eos_token"))) >= 0)
            t->eos = id;
        if ((id = special_id(t, json_object_get(cfg, "unk_token"))) >= 0 && t->unk_id < 0)
            t->unk_id = id;
        if (!L->has_post) {
            if (jbool(cfg, "add_bos_token", false) && t->bos >= 0) {
                if (!(t->prefix_ids = malloc(sizeof(int32_t)))) {
                    rc = deras_fail(DERAS_ENOMEM, "out of memory");
                    goto done;
                }
                t->prefix_ids[0] = t->bos;
                t->n_prefix = 1;
            }
            if (jbool(cfg, "add_eos_token", false) && t->eos >= 0) {
                if (!(t->suffix_ids = malloc(sizeof(int32_t)))) {
                    rc = deras_fail(DERAS_ENOMEM, "out of memory");
                    goto done;
                }
                t->suffix_ids[0] = t->eos;
                t->n_suffix = 1;
            }
        }
        json_t *ct = json_object_get(cfg, "chat_template");
        const char *tmpl = NULL;
        if (json_is_string(ct)) {
            tmpl = json_string_value(ct);
        } else if (json_is_array(ct)) {
            size_t i;
            json_t *e;
            json_array_foreach(ct, i, e) {
                json_t *name = json_object_get(e, "name");
                json_t *tx = json_object_get(e, "template");
                if (json_is_string(tx) && (!tmpl || (json_is_string(name) && !strcmp(json_string_value(name), "default"))))
                    tmpl = json_string_value(tx);
            }
        }
        if (tmpl && !(t->chat_template = tok_strndup(tmpl, strlen(tmpl)))) {
            rc = deras_fail(DERAS_ENOMEM, "out of memory");
            goto done;
        }
    }
    if (file_exists(pj)) {
        char *s = NULL;
        if ((rc = read_text(pj, &s)) < 0)
            goto done;
        free(t->chat_template);
        t->chat_template = s;
    }
    if ((rc = tok_add_eog(t, t->eos)) < 0)
        goto done;
    if (file_exists(pg)) {
        if (!(gen = json_load_file(pg, 0, &jerr))) {
            rc = deras_fail(DERAS_EFORMAT, "%s: line %d: %s", pg, jerr.line, jerr.text);
            goto done;
        }
        json_t *e = json_object_get(gen, "eos_token_id");
        if (json_is_integer(e)) {
            rc = tok_add_eog(t, (int32_t)json_integer_value(e));
        } else if (json_is_array(e)) {
            size_t i;
            json_t *x;
            json_array_foreach(e, i, x) {
                if (json_is_integer(x) && (rc = tok_add_eog(t, (int32_t)json_integer_value(x))) < 0)
                    goto done;
            }
        }
    }
done:
    json_decref(cfg);
    json_decref(gen);
    free(p);
    free(pj);
    free(pg);
    return rc;
}

int tokenizer_from_hf_dir(const char *dir, tokenizer_t **out)
{
    if (!dir || !out)
        return deras_fail(DERAS_EINVAL, "tokenizer_from_hf_dir: NULL argument");
    *out = NULL;
    struct jload L = {0};
    json_error_t jerr;
    json_t *root = NULL;
    int rc;
    char *path = path_join(dir, "tokenizer.json");
    if (!path)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    L.path = path;
    if (!file_exists(path)) {
        rc = deras_fail(DERAS_ENOTFOUND, "%s: no such file", path);
        goto fail;
    }
    if (!(root = json_load_file(path, JSON_ALLOW_NUL, &jerr))) {
        rc = deras_fail(DERAS_EFORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
        goto fail;
    }
    json_t *model = json_object_get(root, "model");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(model)) {
        rc = deras_fail(DERAS_EFORMAT, "%s: no model object", path);
        goto fail;
    }
    if (added && !json_is_null(added) && !json_is_array(added)) {
        rc = deras_fail(DERAS_EFORMAT, "%s: added_tokens is not a list", path);
        goto fail;
    }
    if (!json_is_array(added))
        added = NULL;
    json_t *empty = json_array();
    rc = load_model(&L, model, added ? added : empty);
    json_decref(empty);
    if (rc < 0)
        goto fail;
    struct tokenizer *t = L.t;
    json_t *n = json_object_get(root, "normalizer");
    if (n && !json_is_null(n) && (rc = load_normalizer(&L, n, "normalizer")) < 0)
        goto fail;
    json_t *p = json_object_get(root, "pre_tokenizer");
    if (p && !json_is_null(p) && (rc = load_pretokenizer(&L, p, "pre_tokenizer")) < 0)
        goto fail;
    json_t *pp = json_object_get(root, "post_processor");
    if (pp && !json_is_null(pp) && (rc = load_post(&L, pp, "post_processor")) < 0)
        goto fail;
    enum tok_decoder dec = DEC_BYTELEVEL;
    if ((rc = load_decoder(&L, json_object_get(root, "decoder"), &dec)) < 0)
        goto fail;
    if (L.dec_byte_fallback) {
        for (int32_t id = 0; id < t->n_vocab; id++) {
            struct tok_token *tk = &t->tokens[id];
            const char *s = t->arena + tk->text_off;
            if ((tk->flags & TOKF_PRESENT) && !(tk->flags & TOKF_ADDED) && tk->text_len == 6 && !memcmp(s, "<0x", 3))
                tk->type = TOK_BYTE;
        }
    }
    json_t *unk = json_object_get(model, "unk_token");
    if ((rc = tok_finish(t, dec, path)) < 0)
        goto fail;
    if (json_is_string(unk))
        t->unk_id = strmap_find(&t->vocab, t, json_string_value(unk), json_string_length(unk));
    if ((rc = load_merges(&L, model)) < 0)
        goto fail;
    if (t->n_prefix == 1 && t->bos < 0)
        t->bos = t->prefix_ids[0];
    if ((rc = load_config(&L, dir)) < 0)
        goto fail;
    json_decref(root);
    free(path);
    *out = t;
    return 0;
fail:
    json_decref(root);
    tokenizer_destroy(&L.t);
    free(path);
    return rc;
}
