/* SPDX-License-Identifier: Apache-2.0 */
/* loader.c - from options to a running engine (see loader.h). */
#include "loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strings.h>

#include "common/base/dtype.h"
#include "common/base/log.h"
#include "common/base/quantize.h"
#include "common/base/status.h"
#include "common/checkpoint/checkpoint.h"
#include "common/checkpoint/kv_math.h"
#include "engine/model_weights.h"
#include "engine/spec_draft.h"

#define DEFAULT_BLOCK_SIZE 16

struct loader {
    loader_opts o;
    backend_t *be;
    checkpoint_t *ck;         /* until the model is built */
    tokenizer_t *tok;         /* loaded on demand */
    int32_t *eog;             /* the tokenizer's end-of-generation ids */
    int n_eog;
    bool convert;             /* opts.weight_format converts, to weight_dtype */
    int weight_dtype;
    bool sized;
    int kv_dtype;             /* enum deras_dtype of the KV cache */
    kv_sizing kvs;
    model_opts mo;
    int max_model_len;
    model_t *m;
    model_t *drafter;         /* speculative decoding's draft model, or NULL */
    engine_t *e;
};

int loader_weight_format(const char *s, bool *convert, int *dtype)
{
    int dt = DT_F32;
    bool conv = s && strcasecmp(s, "as-stored");
    if (conv && dtype_parse(s, &dt))
        return deras_fail(DERAS_EINVAL, "--weight-format '%.32s': expected as-stored, f32, f16, "
                          "bf16, q8_0, q4_0, q4_1, q5_0 or q5_1", s);
    if (conv && !dtype_can_quantize(dt))
        return deras_fail(DERAS_EUNSUPPORTED, "--weight-format %s: deras computes on %s weights "
                          "as a file stores them but does not write them; expected as-stored, "
                          "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1", s, dtype_name(dt));
    if (convert)
        *convert = conv;
    if (dtype)
        *dtype = dt;
    return DERAS_OK;
}

int loader_open(const loader_opts *o, loader_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "loader_open: NULL out");
    *out = NULL;
    if (!o || !o->model)
        return deras_fail(DERAS_EINVAL, "loader_open: no model path");
    if (o->max_seqs < 1 || o->max_batch_tokens < o->max_seqs || o->max_live_seqs < 0 ||
        o->block_size < 0 || o->max_model_len < 0 || o->threads < 0)
        return deras_fail(DERAS_EINVAL,
                          "loader: max_seqs %d (>= 1), max_batch_tokens %d (>= max_seqs), "
                          "max_live_seqs %d, block_size %d, max_model_len %d, threads %d "
                          "(>= 0)",
                          o->max_seqs, o->max_batch_tokens, o->max_live_seqs, o->block_size,
                          o->max_model_len, o->threads);
    int kv_dtype, rc = kv_sizing_dtype(o->device ? o->device : "cpu", o->kv_dtype, &kv_dtype);
    if (rc)
        return deras_fail_ctx(rc, "KV cache dtype: ");
    loader_t *l = calloc(1, sizeof *l);
    if (!l)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    l->o = *o;
    l->kv_dtype = kv_dtype;
    if (!l->o.device)
        l->o.device = "cpu";
    if (!l->o.block_size)
        l->o.block_size = DEFAULT_BLOCK_SIZE;
    if (!l->o.max_live_seqs)
        l->o.max_live_seqs = 4 * l->o.max_seqs;
    if ((rc = loader_weight_format(l->o.weight_format, &l->convert, &l->weight_dtype)) ||
        (rc = backend_new(l->o.device, l->o.threads, &l->be)) ||
        (rc = backend_set_matmul_mode(l->be, l->o.matmul_mode)) ||
        (l->convert && (rc = ws_check_format(l->be, l->weight_dtype))) ||
        (rc = checkpoint_open(l->o.model, &l->ck))) {
        loader_destroy(&l);
        return rc;
    }
    if (l->o.log)
        log_info("loading %s on %s", l->o.model, backend_name(l->be));
    *out = l;
    return DERAS_OK;
}

int loader_tokenizer(loader_t *l, const tokenizer_t **out)
{
    if (!l || !out)
        return deras_fail(DERAS_EINVAL, "loader_tokenizer: NULL argument");
    if (!l->tok) {
        if (!l->ck)
            return deras_fail(DERAS_EINVAL, "loader_tokenizer: the checkpoint is closed");
        int rc = checkpoint_gguf(l->ck) ? tokenizer_from_gguf(checkpoint_gguf(l->ck), &l->tok)
                                        : tokenizer_from_hf_dir(checkpoint_hf_dir(l->ck), &l->tok);
        if (rc)
            return deras_fail_ctx(rc, "tokenizer: ");
        l->n_eog = tokenizer_n_eog(l->tok);
        l->eog = malloc((size_t)(l->n_eog + 1) * sizeof(int32_t));
        if (!l->eog)
            return deras_fail(DERAS_ENOMEM, "out of memory");
        for (int i = 0; i < l->n_eog; i++)
            l->eog[i] = tokenizer_eog_at(l->tok, i);
    }
    *out = l->tok;
    return DERAS_OK;
}

/* Bytes the weights will take (mapped or in backend memory): a fraction budget leaves
 * them out. */
static uint64_t weight_bytes(const loader_t *l)
{
    return ws_estimate(l->ck, l->be, l->convert, l->weight_dtype);
}

/* The model options for a cache of l->kvs where one sequence holds up to per_seq_tokens. */
static void plan_model(loader_t *l, int64_t per_seq_tokens)
{
    const model_config *c = checkpoint_config(l->ck);
    const int bs = l->o.block_size;
    int64_t seq_len = c->max_seq_len < per_seq_tokens ? c->max_seq_len : per_seq_tokens;
    const int rows = l->o.spec.kind == SPEC_NONE ? 1 : 1 + l->o.spec.k;
    l->max_model_len = l->o.max_model_len ? l->o.max_model_len : (int)seq_len;
    l->mo = (model_opts){.max_batch_tokens = l->o.max_batch_tokens, .max_seqs = l->o.max_seqs,
                         .max_logits = l->o.max_seqs * rows, .block_size = bs,
                         .n_kv_blocks = l->kvs.n_blocks, .kv_dtype = l->kv_dtype,
                         .max_blocks_per_seq = (int)((seq_len + bs - 1) / bs),
                         .max_copies = l->o.max_seqs, .progress = l->o.progress,
                         .progress_ctx = l->o.progress_ctx, .convert_weights = l->convert,
                         .weight_dtype = l->weight_dtype};
    l->sized = true;
    if (l->o.log)
        kv_sizing_log(&l->kvs);
}

int loader_size_budget(loader_t *l, const char *spec)
{
    if (!l || !l->ck)
        return deras_fail(DERAS_EINVAL, "loader_size_budget: not open, or already built");
    const model_config *c = checkpoint_config(l->ck);
    int rc = kv_sizing_from_budget_before(c, l->kv_dtype, l->o.block_size, spec, weight_bytes(l),
                                          &l->kvs);
    if (rc)
        return rc;
    plan_model(l, l->kvs.n_tokens);
    return DERAS_OK;
}

int loader_size_seqs(loader_t *l, int n_seqs, int64_t tokens_per_seq)
{
    if (!l || !l->ck)
        return deras_fail(DERAS_EINVAL, "loader_size_seqs: not open, or already built");
    if (n_seqs < 1 || tokens_per_seq < 1)
        return deras_fail(DERAS_EINVAL, "loader_size_seqs: %d sequences of %lld tokens", n_seqs,
                          (long long)tokens_per_seq);
    const int bs = l->o.block_size;
    int64_t per_seq = (tokens_per_seq + bs - 1) / bs;
    int rc = kv_sizing_for_tokens(checkpoint_config(l->ck), l->kv_dtype, bs,
                                  per_seq * bs * n_seqs, &l->kvs);
    if (rc)
        return rc;
    plan_model(l, tokens_per_seq);
    return DERAS_OK;
}

model_opts *loader_model_opts(loader_t *l)
{
    return l ? &l->mo : NULL;
}

int loader_build_model(loader_t *l)
{
    if (!l || !l->ck || l->m)
        return deras_fail(DERAS_EINVAL, "loader_build_model: not open, or already built");
    int rc = model_new(l->ck, l->be, &l->mo, &l->m);
    if (rc)
        return rc;
    if (!l->max_model_len) /* options from elsewhere (a follower): what one sequence holds */
        l->max_model_len = l->mo.max_blocks_per_seq * l->mo.block_size;
    /* The model holds its weights (a reference to the checkpoint where they are mapped) and
     * its config. The tokenizer, if nobody asked for it yet, is what the engine needs next:
     * load it before closing. */
    const tokenizer_t *tok;
    if (!l->o.model_only && !l->tok && (rc = loader_tokenizer(l, &tok)))
        return rc;
    checkpoint_destroy(&l->ck);
    return DERAS_OK;
}

int loader_engine_opts(loader_t *l, engine_opts *eo)
{
    if (!l || !eo || !l->m)
        return deras_fail(DERAS_EINVAL, "loader_engine_opts: no model yet");
    *eo = (engine_opts){.max_seqs = l->mo.max_seqs, .max_batch_tokens = l->mo.max_batch_tokens,
                        .max_live_seqs = l->o.max_live_seqs, .max_model_len = l->max_model_len,
                        .prefix_caching = l->o.prefix_caching,
                        .static_batching = l->o.static_batching, .eog_ids = l->eog,
                        .n_eog = l->n_eog};
    return DERAS_OK;
}

int loader_build_engine(loader_t *l, const engine_callbacks *cb,
                        int (*on_plan)(void *ctx, const struct step_plan *p), void *plan_ctx)
{
    if (!l || !l->m || l->e)
        return deras_fail(DERAS_EINVAL, "loader_build_engine: no model, or already built");
    engine_opts eo;
    int rc = loader_engine_opts(l, &eo);
    const spec_opts *so = &l->o.spec;
    if (!rc && (so->kind == SPEC_SELF || so->kind == SPEC_DRAFT))
        rc = spec_drafter_load(so, l->m, l->be, &l->drafter);
    if (rc)
        return rc;
    if (cb)
        eo.cb = *cb;
    eo.on_plan = on_plan;
    eo.plan_ctx = plan_ctx;
    eo.spec = *so;
    eo.drafter = l->drafter;
    if ((rc = engine_new(l->m, &eo, &l->e)))
        return rc;
    if (l->o.log) {
        if (so->kind != SPEC_NONE) {
            char prop[4200]; /* as --spec-proposer spells it */
            if (so->kind == SPEC_SELF)
                snprintf(prop, sizeof prop, "self:%d", so->self_layers);
            else if (so->kind == SPEC_DRAFT)
                snprintf(prop, sizeof prop, "draft:%s", so->draft_path);
            else
                snprintf(prop, sizeof prop, "%s", spec_kind_name(so->kind));
            log_info("speculative decoding: proposer %s, k %d, greedy cut-off at %d running "
                     "sequences%s", prop, so->k, so->max_batch,
                     l->drafter ? "; the draft model has its own KV cache of the target's size"
                                : "");
        }
        log_info("engine ready: %d sequences per step, %d tokens per step, %d live at most, "
                 "context %d tokens, prefix caching %s",
                 eo.max_seqs, eo.max_batch_tokens, eo.max_live_seqs, eo.max_model_len,
                 eo.prefix_caching ? "on" : "off");
    }
    return DERAS_OK;
}

int loader_load(const loader_opts *o, const char *kv_budget, const engine_callbacks *cb,
                loader_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "loader_load: NULL out");
    *out = NULL;
    loader_t *l = NULL;
    int rc = loader_open(o, &l);
    if (rc || (rc = loader_size_budget(l, kv_budget)) || (rc = loader_build_model(l)) ||
        (rc = loader_build_engine(l, cb, NULL, NULL))) {
        loader_destroy(&l);
        return rc;
    }
    *out = l;
    return DERAS_OK;
}

backend_t *loader_backend(const loader_t *l)
{
    return l ? l->be : NULL;
}

const model_config *loader_config(const loader_t *l)
{
    return !l ? NULL : l->m ? model_get_config(l->m) : l->ck ? checkpoint_config(l->ck) : NULL;
}

int loader_kv_dtype(const loader_t *l)
{
    return l ? l->kv_dtype : DT_F32;
}

const kv_sizing *loader_kv(const loader_t *l)
{
    return l && l->sized ? &l->kvs : NULL;
}

model_t *loader_model(const loader_t *l)
{
    return l ? l->m : NULL;
}

engine_t *loader_engine(const loader_t *l)
{
    return l ? l->e : NULL;
}

int loader_max_model_len(const loader_t *l)
{
    return l ? l->max_model_len : 0;
}

void loader_destroy(loader_t **lp)
{
    if (!lp || !*lp)
        return;
    loader_t *l = *lp;
    engine_destroy(&l->e);
    model_destroy(&l->drafter); /* a self-draft borrows the model's weights: it goes first */
    model_destroy(&l->m);
    tokenizer_destroy(&l->tok);
    free(l->eog);
    checkpoint_destroy(&l->ck);
    backend_destroy(&l->be);
    free(l);
    *lp = NULL;
}
