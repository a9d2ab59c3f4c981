/* SPDX-License-Identifier: Apache-2.0 */
/* kv_math.h - memory arithmetic of a model: KV-cache bytes, parameters, weight bytes, KV budgets.
 *
 * Answers "how much memory does serving this model take" from a model_config alone, with
 * no weights, files or devices involved: what one token, one block, one sequence and one
 * batch of sequences take in the paged KV cache; how many parameters (and weight bytes at
 * a dtype) the model has, whole or per tensor-parallel rank; and how many KV blocks, tokens
 * and sequences a memory budget holds. Everything is a pure function of its arguments
 * (thread-safe, O(1), allocates nothing) with results through out-parameters; overflow of
 * 64-bit arithmetic is reported (DERAS_ERANGE), never wrapped.
 *
 * KV cache. Every layer keeps a key and a value vector of n_kv_heads x head_dim elements per
 * token, so one token takes
 *     2 x n_layers x n_kv_heads x head_dim x bytes_per_element
 * (for a model without grouped-query attention, n_kv_heads x head_dim = d_model and this
 * is 2 x n_layers x d_model x bytes). The cache is paged: a sequence holds whole blocks of
 * block_size tokens, so its length is rounded up to a multiple of block_size. A sliding
 * window (Mistral) only masks attention in deras; the cache still holds every token.
 *
 * Tensor parallelism (Megatron-style, as vLLM does it). With tp_size ranks, each rank holds
 * n_heads / tp_size query heads and n_kv_heads / tp_size KV heads, so KV bytes per token
 * per rank are divided by tp_size. When tp_size exceeds n_kv_heads, a KV head cannot be
 * split: each rank holds one KV head and each KV head is replicated on tp_size / n_kv_heads
 * ranks (memory per rank stops shrinking). n_heads must be a multiple of tp_size, and
 * n_kv_heads a multiple of tp_size or tp_size a multiple of n_kv_heads; anything else is
 * DERAS_EUNSUPPORTED. Weights: Q/K/V and gate/up are split by output rows, O and down by
 * input columns, the token embedding and the LM head by vocabulary rows (vocab-parallel;
 * a rank holds ceil(vocab / tp_size) rows, as does the largest MLP shard ceil(d_ff /
 * tp_size)), RMSNorm weights are replicated on every rank. Per-rank counts are those of
 * rank 0, the largest.
 *
 * Weight bytes count every parameter at one dtype. Real fp8 checkpoints usually keep the
 * embedding, LM head and norms in 16 bits, and quantized GGUF files are smaller still:
 * this is the size of a checkpoint stored wholly at that dtype.
 */
#ifndef DERAS_KV_MATH_H
#define DERAS_KV_MATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"

/* Element types for KV cache and weights. */
enum kvmath_dtype {
    KVMATH_FP32 = 0,
    KVMATH_FP16 = 1,
    KVMATH_BF16 = 2,
    KVMATH_FP8 = 3, /* e4m3 or e5m2: one byte either way */
    KVMATH_N_DTYPES
};

/* Parse "fp32", "fp16", "bf16" or "fp8" (also "float32", "float16", "half", "bfloat16",
 * "f32", "f16"), case-insensitively. DERAS_EINVAL naming the string otherwise. */
int kvmath_dtype_parse(const char *name, enum kvmath_dtype *out);
/* "fp32", "fp16", "bf16", "fp8"; "invalid" for anything else. Never NULL. */
const char *kvmath_dtype_name(enum kvmath_dtype dt);
/* Bytes per element: 4, 2, 2, 1; 0 for a value outside the enum. */
int kvmath_dtype_size(enum kvmath_dtype dt);

/* The same element types as enum deras_dtype (common/base/dtype.h), the ids the backends
 * and the model use: FP32 <-> DT_F32, FP16 <-> DT_F16, BF16 <-> DT_BF16. FP8 has no
 * deras_dtype (no backend computes on it): DERAS_EUNSUPPORTED; any other deras_dtype
 * (a block format) or a value outside the enum: DERAS_EINVAL. O(1). */
int kvmath_dtype_to_deras(enum kvmath_dtype dt, int *out);
int kvmath_dtype_from_deras(int dtype, enum kvmath_dtype *out);

/* How one rank's share of the attention heads looks under tensor parallelism. */
typedef struct kvmath_shard {
    int tp_size;
    int n_heads;     /* query heads per rank: n_heads / tp_size */
    int n_kv_heads;  /* KV heads per rank: n_kv_heads / tp_size, or 1 when replicated */
    int kv_replicas; /* ranks holding a copy of each KV head: 1, or tp_size / n_kv_heads */
} kvmath_shard;

/* Split c's heads over tp_size ranks (rules in the header comment). DERAS_EINVAL for a
 * NULL argument or tp_size < 1, DERAS_EUNSUPPORTED (naming the counts) for head counts
 * tp_size does not divide. */
int kvmath_shard_heads(const model_config *c, int tp_size, kvmath_shard *out);

/* KV bytes one token takes on one rank: 2 x n_layers x shard n_kv_heads x head_dim x
 * dtype size (tp_size 1: the whole model). Errors as kvmath_shard_heads, DERAS_EINVAL for
 * a bad dtype. */
int kvmath_token_bytes(const model_config *c, int tp_size, enum kvmath_dtype dt,
                       uint64_t *out);

/* token_bytes x block_size. DERAS_EINVAL for block_size < 1, DERAS_ERANGE on overflow. */
int kvmath_block_bytes(uint64_t token_bytes, int block_size, uint64_t *out);

/* One sequence in the paged cache. */
typedef struct kvmath_seq {
    int64_t n_tokens; /* as asked */
    int64_t n_blocks; /* ceil(n_tokens / block_size) */
    int64_t n_slots;  /* n_blocks x block_size token slots held; > n_tokens when rounded up */
    uint64_t bytes;   /* n_blocks x block bytes */
} kvmath_seq;

/* The blocks and bytes a sequence of n_tokens (>= 0) takes. DERAS_EINVAL for a negative
 * length or block_size < 1, DERAS_ERANGE on overflow. */
int kvmath_seq_size(uint64_t token_bytes, int block_size, int64_t n_tokens, kvmath_seq *out);

/* Bytes of n_seqs (>= 0) such sequences. DERAS_EINVAL / DERAS_ERANGE as above. */
int kvmath_batch_bytes(const kvmath_seq *s, int64_t n_seqs, uint64_t *out);

/* Parameter counts by part (one rank's share with tp_size > 1; see the header comment). */
typedef struct kvmath_params {
    int64_t embedding; /* token embedding, vocab_size x d_model */
    int64_t attn;      /* all layers: Q, K, V, O weights, and Q/K/V biases with qkv_bias */
    int64_t mlp;       /* all layers: gate, up, down */
    int64_t norms;     /* two RMSNorm weights per layer and the final one */
    int64_t lm_head;   /* vocab_size x d_model; 0 when tied to the embedding */
    int64_t total;
} kvmath_params;

/* Count c's parameters, on one rank of tp_size. Errors as kvmath_shard_heads. */
int kvmath_params_count(const model_config *c, int tp_size, kvmath_params *out);

/* p->total parameters at dtype dt. DERAS_EINVAL for NULL or a bad dtype, DERAS_ERANGE on
 * overflow. */
int kvmath_weight_bytes(const kvmath_params *p, enum kvmath_dtype dt, uint64_t *out);

/* How a KV budget (one rank's) is cut into blocks. */
typedef struct kvmath_plan {
    /* device form only (kvmath_plan_device); 0 and false for a bare budget */
    uint64_t device_bytes;   /* device memory */
    double utilization;      /* fraction of it the server may use */
    uint64_t usable_bytes;   /* device_bytes x utilization, rounded to the nearest byte */
    uint64_t weight_bytes;   /* taken by weights before the KV cache */
    bool weights_fit;        /* weight_bytes <= usable_bytes */

    uint64_t budget;         /* bytes for the KV cache: usable - weights, 0 if they don't fit */
    uint64_t block_bytes;
    int block_size;
    int64_t n_blocks;        /* whole blocks in the budget: floor(budget / block_bytes) */
    int64_t n_usable_blocks; /* n_blocks - 1: block 0 is the KV manager's null block */
    int64_t n_tokens;        /* n_usable_blocks x block_size */
    uint64_t kv_bytes;       /* n_blocks x block_bytes */
    double budget_used;      /* kv_bytes / budget (the rest is less than a block); 0 if empty */
} kvmath_plan;

/* Cut `budget` bytes into blocks of block_bytes (block_size tokens each). A budget smaller
 * than a block gives zero blocks, an ordinary result. DERAS_EINVAL for block_bytes 0 or
 * block_size < 1, or a NULL out. */
int kvmath_plan_budget(uint64_t budget, uint64_t block_bytes, int block_size,
                       kvmath_plan *out);

/* The vLLM-style budget: device_bytes x utilization (in (0, 1]) minus weight_bytes, cut
 * as kvmath_plan_budget. Weights larger than the usable memory give weights_fit false and
 * zero blocks, an ordinary result. Activations, CUDA graphs and allocator slack are not
 * counted: keep utilization below 1 for them. DERAS_EINVAL / DERAS_ERANGE for a zero
 * device, a utilization outside (0, 1], or the kvmath_plan_budget errors. */
int kvmath_plan_device(uint64_t device_bytes, double utilization, uint64_t weight_bytes,
                       uint64_t block_bytes, int block_size, kvmath_plan *out);

/* Sequences of seq_blocks blocks each that the plan's usable blocks hold at once;
 * 0 for seq_blocks < 1 or a NULL plan. */
int64_t kvmath_plan_max_seqs(const kvmath_plan *p, int64_t seq_blocks);

/* Parse a memory size: a decimal number (digits, optional fraction and exponent: "80",
 * "1.5", "141e9") and an optional unit, case-insensitive, spaces allowed between: B;
 * KB MB GB TB (powers of 1000); KiB MiB GiB TiB (powers of 1024). No unit means bytes.
 * The result is rounded to the nearest byte. DERAS_EINVAL naming the string for anything
 * else (signs, hex, inf, unknown units like "G"), DERAS_ERANGE above 2^63 bytes. */
int kvmath_parse_size(const char *s, uint64_t *out);

/* "512 B", "8.00 MiB", "2.00 GiB": the largest binary unit (up to PiB) that keeps the value
 * at least 1, two decimals. Always NUL-terminated when cap > 0. */
void kvmath_format_bytes(uint64_t n, char *buf, size_t cap);

/* A well-known public architecture with its published hyperparameters. */
typedef struct kvmath_preset {
    const char *name;   /* "llama-2-7b" */
    const char *source; /* the Hugging Face repository its config.json comes from */
    model_config config;
} kvmath_preset;

/* The built-in presets: count, i-th (NULL outside 0..count-1), and lookup by name
 * (case-insensitive; NULL if unknown). Every preset passes model_config_validate(). */
int kvmath_n_presets(void);
const kvmath_preset *kvmath_preset_at(int i);
const kvmath_preset *kvmath_preset_find(const char *name);

#endif
