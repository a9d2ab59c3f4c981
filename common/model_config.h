/* model_config.h - the hyperparameters of a Llama-family model, whatever file they came from.
 *
 * Filled from GGUF metadata ("llama.*", "qwen2.*" keys) or from a Hugging Face config.json
 * (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM). Everything the forward pass
 * needs is here and nothing else: tokenizer facts live in the tokenizer.
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
    ROPE_SCALING_LINEAR = 1, /* positions divided by factor */
    ROPE_SCALING_LLAMA3 = 2, /* Llama 3.1: frequency-band dependent scaling */
};

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
    int sliding_window;          /* 0: full attention; else keys older than this are masked */
    bool tied_embeddings;        /* the LM head is the token embedding matrix */
    bool qkv_bias;               /* Q, K, V projections carry a bias (Qwen2) */
} model_config;

/* From GGUF metadata. Missing required keys, unknown architectures and unsupported rope
 * scaling give clear errors naming the key. Does not look at tensors, except that
 * tied_embeddings is true when the file has no "output.weight". */
int model_config_from_gguf(const gguf_t *g, model_config *out);

/* From a Hugging Face config.json at `path`. */
int model_config_from_hf_json(const char *path, model_config *out);

/* Check internal consistency (positive sizes, head divisibility, sane eps and theta);
 * DERAS_EFORMAT with the offending field otherwise. Called by both loaders. */
int model_config_validate(const model_config *c);

/* RoPE inverse frequencies for dimension pairs i = 0 .. head_dim/2 - 1, with the
 * configured scaling applied (linear scaling is folded in as 1/factor). O(head_dim). */
void model_config_rope_inv_freq(const model_config *c, float *inv_freq);

/* Short human-readable summary for logs: "llama, 30 layers, d=576, heads 9/3 x 64, ..." */
void model_config_describe(const model_config *c, char *buf, int cap);

#endif
