/* SPDX-License-Identifier: Apache-2.0 */
/* model_config.h - the hyperparameters of a Llama-family model, whatever file they came from.
 *
 * Filled from GGUF metadata ("llama.*", "qwen2.*" keys) or from a Hugging Face config.json
 * (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM). Everything the forward pass
 * needs is here and nothing else: tokenizer facts live in the tokenizer. The struct is
 * plain data (no pointers), so it can be copied between processes as bytes.
 */
#ifndef DERAS_MODEL_CONFIG_H
#define DERAS_MODEL_CONFIG_H

#include <stdbool.h>

#include "gguf.h"

enum model_arch {
    MODEL_ARCH_LLAMA = 0, /* Llama 2/3/3.1, Mistral, SmolLM2, TinyLlama */
    MODEL_ARCH_QWEN2 = 1, /* Llama with a bias on the Q, K and V projections */
};

enum rope_scaling {
    ROPE_SCALING_NONE = 0,
    ROPE_SCALING_LINEAR = 1,  /* positions divided by factor */
    ROPE_SCALING_LLAMA3 = 2,  /* Llama 3.1: frequency-band dependent scaling */
    ROPE_SCALING_FACTORS = 3, /* per-frequency divisors given by the file (GGUF rope_freqs) */
};

/* Largest head dimension a config may have; sizes the plain rope_freq_factors array. */
#define MODEL_MAX_HEAD_DIM 512

typedef struct model_config {
    enum model_arch arch;
    int n_layers;
    int d_model;      /* hidden size */
    int n_heads;      /* query heads */
    int n_kv_heads;   /* key/value heads; n_heads % n_kv_heads == 0 */
    int head_dim;     /* usually d_model / n_heads, but may differ */
    int d_ff;         /* MLP intermediate size */
    int vocab_size;
    int max_seq_len;  /* trained context length */
    float norm_eps;   /* RMSNorm epsilon */
    float rope_theta;
    enum rope_scaling rope_scaling;
    float rope_factor;           /* linear and llama3 */
    float rope_low_freq_factor;  /* llama3 */
    float rope_high_freq_factor; /* llama3 */
    int rope_orig_max_pos;       /* llama3: original_max_position_embeddings */
    /* ROPE_SCALING_FACTORS: inv_freq[i] is divided by rope_freq_factors[i], i < head_dim/2.
     * llama.cpp stores Llama 3.1's scaling this way (tensor rope_freqs.weight). A plain
     * array, so the config stays pointer-free and can be copied between processes. */
    int n_rope_freq_factors;
    float rope_freq_factors[MODEL_MAX_HEAD_DIM / 2];
    int sliding_window;          /* 0: full attention; else keys older than this are masked */
    bool tied_embeddings;        /* the LM head is the token embedding matrix */
    bool qkv_bias;               /* Q, K, V projections carry a bias (Qwen2) */
} model_config;

/* From GGUF metadata ("general.architecture" = llama or qwen2, then "{arch}.*" keys).
 * Missing required keys give DERAS_ENOTFOUND naming the key; wrong types DERAS_EFORMAT;
 * unknown architectures, partial rotary dimensions and rope scaling other than linear
 * DERAS_EUNSUPPORTED naming what was found. Looks at three tensors only: "output.weight"
 * (absent: tied_embeddings), "rope_freqs.weight" (present: ROPE_SCALING_FACTORS, its
 * head_dim/2 values copied in) and, when the metadata gives no vocabulary size,
 * "token_embd.weight" rows. The result has passed model_config_validate(). O(head_dim). */
int model_config_from_gguf(const gguf_t *g, model_config *out);

/* From a Hugging Face config.json at `path` (LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM, by architectures[0] or model_type). Understands both the classic rope
 * keys (rope_theta, rope_scaling) and transformers v5's rope_parameters; defaults are
 * transformers' own. DERAS_EIO if the file cannot be read, DERAS_EFORMAT for bad JSON or a
 * field of the wrong type (named), DERAS_EUNSUPPORTED for features deras does not implement
 * (biases on Llama, activations other than silu, per-layer sliding windows, rope types
 * other than default/linear/llama3). The result has passed model_config_validate(). */
int model_config_from_hf_json(const char *path, model_config *out);

/* Check internal consistency (positive sizes within sane caps, head divisibility, even
 * head_dim <= MODEL_MAX_HEAD_DIM, sane eps, theta and rope parameters); DERAS_EFORMAT
 * naming the offending field otherwise. Called by both loaders. O(head_dim). */
int model_config_validate(const model_config *c);

/* RoPE inverse frequencies for dimension pairs i = 0 .. head_dim/2 - 1, with the
 * configured scaling applied as transformers does it (linear: divided by factor; llama3:
 * the band-dependent rule of _compute_llama3_parameters; factors: divided by
 * rope_freq_factors[i]). Computed in double, rounded once to float. Writes head_dim/2
 * values; c must be valid. O(head_dim). */
void model_config_rope_inv_freq(const model_config *c, float *inv_freq);

/* Short human-readable summary for logs: "llama, 30 layers, d=576, heads 9/3 x 64, ...",
 * truncated to cap bytes (always NUL-terminated when cap > 0). */
void model_config_describe(const model_config *c, char *buf, int cap);

#endif
