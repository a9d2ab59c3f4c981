/* SPDX-License-Identifier: Apache-2.0 */
/* loader.h - the one way from options to a running engine: backend, checkpoint, the
 * tokenizer's end-of-generation ids, the KV cache's size, the model (and a draft model),
 * the engine. deras-worker (leader and followers), `deras generate` and the benchmarks all
 * build theirs here.
 *
 * In stages, so that a caller with more to do fits in between:
 *
 *   loader_open          backend, checkpoint (mapped, not read), its config
 *   loader_size_budget   the KV cache from a budget ("4GiB", or a fraction of the memory
 *   loader_size_seqs     available less the weights), or room for n sequences of a given
 *                        length; then the model options that follow (loader_model_opts):
 *                        a tensor-parallel leader adds its rank and communicator there, a
 *                        follower skips sizing and takes the leader's options instead
 *   loader_build_model   weights and cache (progress through opts.progress); the loader
 *                        closes its checkpoint after, the model keeps a reference while it
 *                        computes on the file's mapping
 *   loader_build_engine  the draft model the proposer needs, then the engine
 *
 * loader_load runs every stage for the common case. The loader owns everything it built
 * and frees it in loader_destroy (the engine first, the backend last). Every stage returns
 * 0 or a DERAS_E* code with the message from the part that failed. Cost: what the parts
 * cost (reading and converting every weight once dominates); nothing per step.
 */
#ifndef DERAS_LOADER_H
#define DERAS_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/tokenizer/tokenizer.h"
#include "engine/engine.h"
#include "engine/kv_sizing.h"

typedef struct loader_opts {
    const char *model;        /* GGUF file or Hugging Face directory */
    const char *device;       /* backend_new spec ("cpu", "cuda:0", ...); NULL: "cpu" */
    int threads;              /* CPU threads; 0: every core */
    int matmul_mode;          /* enum backend_mm_mode: BACKEND_MM_EXACT (0, the default) or
                                 BACKEND_MM_Q8 (kernels/backend.h) */
    int block_size;           /* KV block size in tokens; 0: 16 */
    const char *kv_dtype;     /* KV cache element type as --kv-dtype spells it (f32, f16,
                                 bf16); NULL: the device's default (kv_sizing_dtype) */
    int max_seqs;             /* sequences per step, >= 1 */
    int max_batch_tokens;     /* tokens per step, >= max_seqs */
    int max_live_seqs;        /* queued + running; 0: 4 x max_seqs */
    int max_model_len;        /* prompt + max_tokens; 0: the context length or what one
                                 sequence may hold of the cache, whichever is less */
    bool prefix_caching;
    bool static_batching;     /* the benchmark's baseline (engine_opts) */
    spec_opts spec;           /* speculative decoding; zeroed (SPEC_NONE): off */
    bool log;                 /* log the KV cache line and the engine line (processes) */
    bool model_only;          /* the tokenizer is not loaded: a tensor-parallel follower, a
                                 model benchmark, or engines that need no end-of-generation
                                 ids (fixed-length benchmarks) */
    void (*progress)(void *ctx, int done, int total); /* weight loading, or NULL */
    void *progress_ctx;
    const char *weight_format; /* NULL or "as-stored": each weight in the format the file
                                  holds (used in place on the CPU); else every matrix
                                  converted at load (loader_weight_format) */
} loader_opts;

/* --weight-format: "as-stored" (*convert false), or f32, f16, bf16, q8_0, q4_0, q4_1,
 * q5_0, q5_1 (any case: *convert true, *dtype the enum deras_dtype). DERAS_EINVAL naming
 * the accepted values for anything else; DERAS_EUNSUPPORTED for a type deras computes on
 * but does not write (Q4_K, Q5_K, Q6_K: used as stored only). Out-pointers may be NULL.
 * Whether the device keeps the format is checked at load (model_new). O(1). */
int loader_weight_format(const char *s, bool *convert, int *dtype);

typedef struct loader loader_t;

/* The backend and the checkpoint. DERAS_EINVAL for options out of range (naming the
 * field), DERAS_EINVAL / DERAS_EUNSUPPORTED for a kv_dtype the device does not keep
 * (kv_sizing_dtype); backend and checkpoint errors carry their messages. The options are copied
 * (their strings must outlive the loader). */
int loader_open(const loader_opts *o, loader_t **out);

/* The KV cache from a budget spec (kv_sizing_from_budget_before: a fraction leaves out
 * the weights about to be loaded), and the model options that follow: one sequence may
 * hold up to min(context length, cache) tokens. */
int loader_size_budget(loader_t *l, const char *spec);

/* A cache with room for n_seqs sequences of tokens_per_seq tokens each (and the null
 * block), and the model options that follow. */
int loader_size_seqs(loader_t *l, int n_seqs, int64_t tokens_per_seq);

/* What loader_build_model will use; valid after a sizing call, or to be filled by the
 * caller (a tensor-parallel follower copies the leader's). Adjust before building. */
model_opts *loader_model_opts(loader_t *l);

/* The weights and the cache on the backend. The checkpoint is closed after. */
int loader_build_model(loader_t *l);

/* The options loader_build_engine uses (the model's step limits, the loader's live and
 * length limits, prefix caching, the end-of-generation ids), without callbacks, plan hook,
 * speculation or drafter: for a caller that runs several engines over one model (the
 * benchmarks). The eog ids stay owned by the loader; with opts.model_only there are none. */
int loader_engine_opts(loader_t *l, engine_opts *eo);

/* The draft model opts.spec asks for (self-draft or a draft checkpoint), then the engine,
 * with the caller's callbacks and, for a tensor-parallel leader, the plan hook (NULL:
 * none). Logs the engine line when opts.log. */
int loader_build_engine(loader_t *l, const engine_callbacks *cb,
                        int (*on_plan)(void *ctx, const struct step_plan *p), void *plan_ctx);

/* Every stage: open, size from kv_budget, model, engine with cb. */
int loader_load(const loader_opts *o, const char *kv_budget, const engine_callbacks *cb,
                loader_t **out);

/* The tokenizer of the checkpoint, loaded at the first call (GGUF metadata or
 * tokenizer.json); owned by the loader. Tokenizer errors carry their message. */
int loader_tokenizer(loader_t *l, const tokenizer_t **out);

/* What was built (NULL or zero before its stage). */
backend_t *loader_backend(const loader_t *l);
const model_config *loader_config(const loader_t *l); /* the checkpoint's, then the model's */
const kv_sizing *loader_kv(const loader_t *l);
int loader_kv_dtype(const loader_t *l);               /* enum deras_dtype, after loader_open */
model_t *loader_model(const loader_t *l);
engine_t *loader_engine(const loader_t *l);
int loader_max_model_len(const loader_t *l);

/* Everything, in reverse order of building; sets *l to NULL. NULL-safe. */
void loader_destroy(loader_t **l);

#endif
