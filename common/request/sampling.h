/* SPDX-License-Identifier: Apache-2.0 */
/* sampling.h - the sampling parameters: one table, one struct.
 *
 * SAMPLING_PARAMS below is the one place a sampling parameter is declared. A row gives its
 * field, its kind, its wire key (client and worker protocols alike), its command-line
 * flag, its default (the protocol's: what an absent key means), its bounds with open or
 * closed ends, whether going above the upper bound is a cap (limit_exceeded) or a range
 * error (value_out_of_range), whether the worker link may omit it, and a line of doc.
 * Everything else is derived from the table:
 *   the struct sampling_params (one field per row)      here
 *   defaults, range checks, the engine's validation      sampling.c
 *   both protocols' encoders and decoders                common/wire/wire_vocab.c
 *   the flags of deras generate / complete / bench       tools/sampling_flags.c
 *   docs/protocol.md and the Python client, checked      tests/unit/test_sampling_docs.py
 * so a new parameter is a row here plus the code that applies it.
 *
 * Kinds: FLOAT (a float; the wire takes any finite number), INT (an int; the wire takes
 * integers only), BIAS (the logit-bias map: token id -> a bias added to that token's logit;
 * the row's bounds bound each bias, its cap is SAMPLING_MAX_LOGIT_BIAS entries, the OpenAI
 * API's limit). The map is a fixed array inside the struct, so sampling_params stays flat
 * and copyable, one struct from the decoder to the sampler, and applying it allocates
 * nothing. Costs: every function here is O(parameters + bias entries), validation
 * O(entries^2) for the distinct ids (at most 45,000 compares, once per request).
 */
#ifndef DERAS_SAMPLING_H
#define DERAS_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SAMPLING_MAX_LOGPROBS 20
#define SAMPLING_MAX_LOGIT_BIAS 300

typedef struct logit_bias {
    int n;                                   /* entries, 0 .. SAMPLING_MAX_LOGIT_BIAS */
    int32_t ids[SAMPLING_MAX_LOGIT_BIAS];    /* distinct token ids */
    float bias[SAMPLING_MAX_LOGIT_BIAS];     /* added to the logit of ids[i] */
} logit_bias;

/* X(field, KIND, key, flag, arg, default, lo, lo_open, hi, hi_open, cap, worker_optional,
 *   doc) */
#define SAMPLING_PARAMS(X)                                                                       \
    X(temperature, FLOAT, "temperature", "temperature", "T", 1, 0, 0, 100, 0, 0, 0,              \
      "softmax temperature; 0 is greedy")                                                        \
    X(top_p, FLOAT, "top_p", "top-p", "P", 1, 0, 1, 1, 0, 0, 0,                                  \
      "nucleus: the likeliest tokens holding this mass; 1 is off")                               \
    X(top_k, INT, "top_k", "top-k", "K", 0, 0, 0, INT32_MAX, 0, 0, 0,                            \
      "only the K likeliest tokens; 0 is off")                                                   \
    X(min_p, FLOAT, "min_p", "min-p", "P", 0, 0, 0, 1, 0, 0, 0,                                  \
      "only tokens >= this x the likeliest's probability; 0: off")                               \
    X(repetition_penalty, FLOAT, "repetition_penalty", "repetition-penalty", "R", 1, 0, 1,       \
      10, 0, 0, 0, "penalize prompt and output tokens; 1 is off")                                \
    X(presence_penalty, FLOAT, "presence_penalty", "presence-penalty", "P", 0, -2, 0, 2, 0,      \
      0, 0, "subtract from logits of generated tokens; 0 is off")                                \
    X(frequency_penalty, FLOAT, "frequency_penalty", "frequency-penalty", "F", 0, -2, 0, 2,      \
      0, 0, 0, "subtract per occurrence in the output; 0 is off")                                \
    X(n_logprobs, INT, "logprobs", "logprobs", "N", 0, 0, 0, SAMPLING_MAX_LOGPROBS, 0, 1, 0,     \
      "logprobs of each token and its N likeliest alternatives")                                 \
    X(min_tokens, INT, "min_tokens", "min-tokens", "N", 0, 0, 0, INT32_MAX, 0, 0, 1,             \
      "no stop token, end of generation or stop string before N tokens")                         \
    X(logit_bias, BIAS, "logit_bias", "logit-bias", "ID:BIAS", 0, -100, 0, 100, 0, 1, 1,         \
      "add BIAS to token ID's logit before any processor; repeatable")

#define SAMPLING_CTYPE_FLOAT float
#define SAMPLING_CTYPE_INT int
#define SAMPLING_CTYPE_BIAS logit_bias

typedef struct sampling_params {
#define SAMPLING_FIELD(field, kind, ...) SAMPLING_CTYPE_##kind field;
    SAMPLING_PARAMS(SAMPLING_FIELD)
#undef SAMPLING_FIELD
} sampling_params;

typedef enum sampling_kind { SAMPLING_FLOAT, SAMPLING_INT, SAMPLING_BIAS } sampling_kind;

/* Row indices: SAMPLING_I_temperature, ... */
enum sampling_index {
#define SAMPLING_INDEX(field, ...) SAMPLING_I_##field,
    SAMPLING_PARAMS(SAMPLING_INDEX)
#undef SAMPLING_INDEX
    SAMPLING_N_PARAMS
};

/* For name tables: SAMPLING_PARAMS(SAMPLING_KEY) expands to the wire keys, comma-separated. */
#define SAMPLING_KEY(field, kind, key, ...) key,

typedef struct sampling_param_info {
    const char *field, *key, *flag, *arg, *doc;
    sampling_kind kind;
    size_t offset;             /* of the field in sampling_params */
    double def, lo, hi;
    bool lo_open, hi_open;
    bool cap;                  /* above hi (BIAS: more entries) is limit_exceeded */
    bool worker_optional;      /* the worker link may omit it (added after version 1) */
} sampling_param_info;

/* One row per parameter, in SAMPLING_PARAMS order. */
extern const sampling_param_info sampling_param_table[SAMPLING_N_PARAMS];

/* Every parameter at its default (temperature 1, every processor off, no bias). */
void sampling_params_init(sampling_params *p);

/* Parameter i (FLOAT or INT) as a double, and set from one (the caller checked the
 * range). A BIAS map reads as its number of entries and is set with logit_bias_add. */
double sampling_param_get(const sampling_params *p, int i);
void sampling_param_set(sampling_params *p, int i, double v);

/* Whether parameter i of p is its default (BIAS: no entries). */
bool sampling_param_is_default(const sampling_params *p, int i);

/* Whether v is finite and within row pi's bounds. */
bool sampling_param_in_range(const sampling_param_info *pi, double v);

/* The row's bounds as the messages and docs write them: "[0, 100]", "(0, 1]". Returns
 * buf. */
const char *sampling_param_range(const sampling_param_info *pi, char *buf, size_t cap);

/* Add an entry to a logit-bias map: DERAS_ERANGE when it is full or the bias is outside the
 * row's bounds, DERAS_EINVAL when the id is negative or already there. O(entries). */
int logit_bias_add(logit_bias *b, int32_t id, float bias);

/* Every parameter in its bounds, top_k at most the vocabulary, bias ids distinct and
 * inside the vocabulary (vocab <= 0: no vocabulary check). DERAS_ERANGE naming the field
 * and its bounds ("temperature must be in [0, 100], got 250"). */
int sampling_params_validate(const sampling_params *p, int vocab);

#endif
