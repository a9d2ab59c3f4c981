/* SPDX-License-Identifier: Apache-2.0 */
/* model_config.c - the hyperparameters of a Llama-family model from GGUF metadata or an HF config.json.
 *
 * Design: two loaders fill the same plain struct and end in model_config_validate(), so
 * every later consumer sees one checked shape whatever the source. Defaults are the ones
 * the source's own software uses (llama.cpp for GGUF, transformers' config classes for
 * config.json), because a checkpoint means what its writer's reader makes of it. Anything
 * that would change the forward pass in a way deras does not implement (biases on Llama
 * projections, other activations, partial rotary, per-layer sliding windows, yarn and
 * friends) is refused here with DERAS_EUNSUPPORTED naming what was found, rather than
 * silently computing something else.
 *
 * Rope: transformers writes either the classic keys (rope_theta + rope_scaling) or, since
 * v5, one rope_parameters object; both are read. llama.cpp writes Llama 3.1's scaling as
 * a tensor of per-frequency divisors (rope_freqs.weight), which is copied into the config
 * (ROPE_SCALING_FACTORS). model_config_rope_inv_freq() reproduces transformers'
 * default/linear/llama3 initialisers in double precision.
 */
#include "model_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json_util.h"
#include "common/base/status.h"

/* Caps that keep every derived size comfortably inside int and int64 arithmetic. */
#define CAP_LAYERS 4096
#define CAP_D_MODEL (1 << 17)
#define CAP_HEADS 4096
#define CAP_D_FF (1 << 20)
#define CAP_VOCAB (1 << 24)
#define CAP_SEQ (1 << 27)

static const char *arch_name(enum model_arch a)
{
    return a == MODEL_ARCH_QWEN2 ? "qwen2" : "llama";
}

static const char *rope_name(enum rope_scaling r)
{
    switch (r) {
    case ROPE_SCALING_NONE: return "none";
    case ROPE_SCALING_LINEAR: return "linear";
    case ROPE_SCALING_LLAMA3: return "llama3";
    case ROPE_SCALING_FACTORS: return "factors";
    default: return "invalid";
    }
}

static int bad(const char *field, const char *why, double v)
{
    return deras_fail(DERAS_EFORMAT, "model config: %s %s (got %g)", field, why, v);
}

int model_config_validate(const model_config *c)
{
    if (!c)
        return deras_fail(DERAS_EINVAL, "model_config_validate: NULL config");
    if (c->arch != MODEL_ARCH_LLAMA && c->arch != MODEL_ARCH_QWEN2)
        return bad("arch", "is not a known architecture", c->arch);
    if (c->n_layers < 1 || c->n_layers > CAP_LAYERS)
        return bad("n_layers", "must be 1 to 4096", c->n_layers);
    if (c->d_model < 1 || c->d_model > CAP_D_MODEL)
        return bad("d_model", "must be 1 to 131072", c->d_model);
    if (c->n_heads < 1 || c->n_heads > CAP_HEADS)
        return bad("n_heads", "must be 1 to 4096", c->n_heads);
    if (c->n_kv_heads < 1 || c->n_kv_heads > c->n_heads)
        return bad("n_kv_heads", "must be 1 to n_heads", c->n_kv_heads);
    if (c->n_heads % c->n_kv_heads)
        return deras_fail(DERAS_EFORMAT, "model config: n_heads %d is not a multiple of "
                          "n_kv_heads %d", c->n_heads, c->n_kv_heads);
    if (c->head_dim < 2 || c->head_dim > MODEL_MAX_HEAD_DIM || c->head_dim % 2)
        return bad("head_dim", "must be even, 2 to 512", c->head_dim);
    if ((int64_t)c->n_heads * c->head_dim > CAP_D_FF)
        return bad("n_heads * head_dim", "is too large", (double)c->n_heads * c->head_dim);
    if (c->d_ff < 1 || c->d_ff > CAP_D_FF)
        return bad("d_ff", "must be 1 to 1048576", c->d_ff);
    if (c->vocab_size < 1 || c->vocab_size > CAP_VOCAB)
        return bad("vocab_size", "must be 1 to 16777216", c->vocab_size);
    if (c->max_seq_len < 1 || c->max_seq_len > CAP_SEQ)
        return bad("max_seq_len", "must be 1 to 134217728", c->max_seq_len);
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return bad("norm_eps", "must be in (0, 1)", c->norm_eps);
    if (!(c->rope_theta > 1 && isfinite(c->rope_theta)))
        return bad("rope_theta", "must be a finite number above 1", c->rope_theta);
    if (c->sliding_window < 0)
        return bad("sliding_window", "must be 0 (off) or positive", c->sliding_window);
    switch (c->rope_scaling) {
    case ROPE_SCALING_NONE:
        break;
    case ROPE_SCALING_LINEAR:
        if (!(c->rope_factor > 0 && isfinite(c->rope_factor)))
            return bad("rope_factor", "must be a positive number", c->rope_factor);
        break;
    case ROPE_SCALING_LLAMA3:
        if (!(c->rope_factor > 0 && isfinite(c->rope_factor)))
            return bad("rope_factor", "must be a positive number", c->rope_factor);
        if (!(c->rope_low_freq_factor > 0 && isfinite(c->rope_low_freq_factor)))
            return bad("rope_low_freq_factor", "must be a positive number",
                       c->rope_low_freq_factor);
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor &&
              isfinite(c->rope_high_freq_factor)))
            return bad("rope_high_freq_factor", "must be above rope_low_freq_factor",
                       c->rope_high_freq_factor);
        if (c->rope_orig_max_pos < 1)
            return bad("rope_orig_max_pos", "must be positive", c->rope_orig_max_pos);
        break;
    case ROPE_SCALING_FACTORS:
        if (c->n_rope_freq_factors != c->head_dim / 2)
            return bad("n_rope_freq_factors", "must be head_dim / 2", c->n_rope_freq_factors);
        for (int i = 0; i < c->n_rope_freq_factors; i++)
            if (!(c->rope_freq_factors[i] > 0 && isfinite(c->rope_freq_factors[i])))
                return bad("rope_freq_factors", "must be positive numbers",
                           c->rope_freq_factors[i]);
        break;
    default:
        return bad("rope_scaling", "is not a known scaling", c->rope_scaling);
    }
    return DERAS_OK;
}

void model_config_rope_inv_freq(const model_config *c, float *inv_freq)
{
    const int half = c->head_dim / 2;
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow((double)c->rope_theta, (double)(2 * i) / c->head_dim);
        switch (c->rope_scaling) {
        case ROPE_SCALING_LINEAR:
            f /= c->rope_factor;
            break;
        case ROPE_SCALING_LLAMA3: {
            /* transformers' _compute_llama3_parameters: long wavelengths are divided by
             * factor, short ones kept, the band between interpolated smoothly */
            const double factor = c->rope_factor, lo = c->rope_low_freq_factor,
                         hi = c->rope_high_freq_factor, old_ctx = c->rope_orig_max_pos;
            const double low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi;
            const double wavelen = 2 * pi / f;
            if (wavelen > low_wavelen) {
                f /= factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (old_ctx / wavelen - lo) / (hi - lo);
                f = (1 - smooth) * f / factor + smooth * f;
            }
            break;
        }
        case ROPE_SCALING_FACTORS:
            f /= c->rope_freq_factors[i];
            break;
        default:
            break;
        }
        inv_freq[i] = (float)f;
    }
}

void model_config_describe(const model_config *c, char *buf, int cap)
{
    if (!buf || cap <= 0)
        return;
    if (!c) {
        snprintf(buf, (size_t)cap, "(no config)");
        return;
    }
    char rope[96];
    switch (c->rope_scaling) {
    case ROPE_SCALING_LINEAR:
        snprintf(rope, sizeof rope, "linear x%g", c->rope_factor);
        break;
    case ROPE_SCALING_LLAMA3:
        snprintf(rope, sizeof rope, "llama3 x%g (%g..%g, orig %d)", c->rope_factor,
                 c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_orig_max_pos);
        break;
    case ROPE_SCALING_FACTORS:
        snprintf(rope, sizeof rope, "%d file factors", c->n_rope_freq_factors);
        break;
    default:
        snprintf(rope, sizeof rope, "%s", rope_name(c->rope_scaling));
    }
    char window[32] = "";
    if (c->sliding_window)
        snprintf(window, sizeof window, ", window %d", c->sliding_window);
    snprintf(buf, (size_t)cap,
             "%s, %d layers, d=%d, heads %d/%d x %d, ff %d, vocab %d, ctx %d, rope theta %g "
             "(%s), eps %g%s%s%s",
             arch_name(c->arch), c->n_layers, c->d_model, c->n_heads, c->n_kv_heads,
             c->head_dim, c->d_ff, c->vocab_size, c->max_seq_len, c->rope_theta, rope,
             c->norm_eps, window, c->qkv_bias ? ", qkv bias" : "",
             c->tied_embeddings ? ", tied" : "");
}

/* ---- GGUF ---- */

struct gguf_ctx {
    const gguf_t *g;
    char arch[16];
};

static const char *akey(const struct gguf_ctx *x, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%s", x->arch, suffix);
    return buf;
}

/* Integer key in [lo, hi]; absent: `def` unless required (then DERAS_ENOTFOUND). */
static int gg_int(const struct gguf_ctx *x, const char *suffix, bool required, int def,
                  int64_t lo, int64_t hi, int *out)
{
    char key[128];
    akey(x, suffix, key, sizeof key);
    if (!gguf_has_key(x->g, key)) {
        if (required)
            return deras_fail(DERAS_ENOTFOUND, "%s: required key '%s' not found",
                              gguf_name(x->g), key);
        *out = def;
        return DERAS_OK;
    }
    int64_t v;
    int rc = gguf_get_int(x->g, key, &v);
    if (rc)
        return rc;
    if (v < lo || v > hi)
        return deras_fail(DERAS_EFORMAT, "%s: key '%s' is %lld, outside %lld..%lld",
                          gguf_name(x->g), key, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return DERAS_OK;
}

static int gg_float(const struct gguf_ctx *x, const char *suffix, bool required, double def,
                    double *out)
{
    char key[128];
    akey(x, suffix, key, sizeof key);
    if (!gguf_has_key(x->g, key)) {
        if (required)
            return deras_fail(DERAS_ENOTFOUND, "%s: required key '%s' not found",
                              gguf_name(x->g), key);
        *out = def;
        return DERAS_OK;
    }
    return gguf_get_float(x->g, key, out);
}

static int gguf_rope(const struct gguf_ctx *x, model_config *c)
{
    const char *file = gguf_name(x->g);
    char key[128];
    double v;
    int rc;
    if ((rc = gg_float(x, "rope.freq_base", false, 10000.0, &v)))
        return rc;
    c->rope_theta = (float)v;

    int rot_dim;
    if ((rc = gg_int(x, "rope.dimension_count", false, c->head_dim, 0, INT32_MAX, &rot_dim)))
        return rc;
    if (rot_dim != c->head_dim)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: key '%s' is %d but head_dim is %d (partial "
                          "rotary embeddings are not supported)", file,
                          akey(x, "rope.dimension_count", key, sizeof key), rot_dim, c->head_dim);

    c->rope_scaling = ROPE_SCALING_NONE;
    akey(x, "rope.scaling.type", key, sizeof key);
    if (gguf_has_key(x->g, key)) {
        const char *type;
        if ((rc = gguf_get_str(x->g, key, &type, NULL)))
            return rc;
        if (!strcmp(type, "linear")) {
            if ((rc = gg_float(x, "rope.scaling.factor", true, 0, &v)))
                return rc;
            c->rope_scaling = ROPE_SCALING_LINEAR;
            c->rope_factor = (float)v;
        } else if (strcmp(type, "none") != 0) {
            return deras_fail(DERAS_EUNSUPPORTED, "%s: key '%s' is '%.32s': only linear rope "
                              "scaling is supported", file, key, type);
        }
    } else if (gguf_has_key(x->g, akey(x, "rope.scale_linear", key, sizeof key))) {
        /* the key older llama.cpp conversions wrote for linear scaling */
        if ((rc = gguf_get_float(x->g, key, &v)))
            return rc;
        if (v != 1.0) {
            c->rope_scaling = ROPE_SCALING_LINEAR;
            c->rope_factor = (float)v;
        }
    }

    tensor_view t;
    if (gguf_find_tensor(x->g, "rope_freqs.weight", &t) == DERAS_OK) {
        const int half = c->head_dim / 2;
        if (c->rope_scaling != ROPE_SCALING_NONE)
            return deras_fail(DERAS_EUNSUPPORTED, "%s: both rope scaling metadata and tensor "
                              "'rope_freqs.weight' are present; combining them is not supported",
                              file);
        if (t.n_dims != 1 || t.shape[0] != half)
            return deras_fail(DERAS_EFORMAT, "%s: tensor 'rope_freqs.weight' must have shape "
                              "(%d) (head_dim / 2), found %d dims, first %lld", file, half,
                              t.n_dims, (long long)t.shape[0]);
        if (t.dtype == DT_UNSUPPORTED || dtype_block_elems(t.dtype) != 1)
            return deras_fail(DERAS_EUNSUPPORTED, "%s: tensor 'rope_freqs.weight' has type %s "
                              "(F32, F16 or BF16 expected)", file, t.type_name);
        if ((rc = dtype_to_f32(t.dtype, t.data, c->rope_freq_factors, half)))
            return rc;
        c->rope_scaling = ROPE_SCALING_FACTORS;
        c->n_rope_freq_factors = half;
    }
    return DERAS_OK;
}

int model_config_from_gguf(const gguf_t *g, model_config *out)
{
    if (!g || !out)
        return deras_fail(DERAS_EINVAL, "model_config_from_gguf: NULL argument");
    const char *file = gguf_name(g);
    model_config c;
    memset(&c, 0, sizeof c);
    struct gguf_ctx x = {.g = g};
    const char *arch;
    int rc = gguf_get_str(g, "general.architecture", &arch, NULL);
    if (rc)
        return rc;
    if (!strcmp(arch, "llama")) {
        c.arch = MODEL_ARCH_LLAMA;
    } else if (!strcmp(arch, "qwen2")) {
        c.arch = MODEL_ARCH_QWEN2;
        c.qkv_bias = true;
    } else {
        return deras_fail(DERAS_EUNSUPPORTED, "%s: architecture '%.64s' is not supported "
                          "(llama and qwen2 are)", file, arch);
    }
    snprintf(x.arch, sizeof x.arch, "%s", arch);

    if ((rc = gg_int(&x, "block_count", true, 0, 1, CAP_LAYERS, &c.n_layers)) ||
        (rc = gg_int(&x, "embedding_length", true, 0, 1, CAP_D_MODEL, &c.d_model)) ||
        (rc = gg_int(&x, "feed_forward_length", true, 0, 1, CAP_D_FF, &c.d_ff)) ||
        (rc = gg_int(&x, "attention.head_count", true, 0, 1, CAP_HEADS, &c.n_heads)) ||
        (rc = gg_int(&x, "attention.head_count_kv", false, c.n_heads, 1, CAP_HEADS,
                     &c.n_kv_heads)) ||
        (rc = gg_int(&x, "context_length", true, 0, 1, CAP_SEQ, &c.max_seq_len)) ||
        (rc = gg_int(&x, "attention.key_length", false, c.d_model / c.n_heads, 1,
                     MODEL_MAX_HEAD_DIM, &c.head_dim)))
        return rc;
    int v_len;
    if ((rc = gg_int(&x, "attention.value_length", false, c.head_dim, 1, MODEL_MAX_HEAD_DIM,
                     &v_len)))
        return rc;
    if (v_len != c.head_dim)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: key '%s.attention.value_length' (%d) differs "
                          "from the key length %d", file, x.arch, v_len, c.head_dim);
    double eps;
    if ((rc = gg_float(&x, "attention.layer_norm_rms_epsilon", true, 0, &eps)))
        return rc;
    c.norm_eps = (float)eps;

    /* vocabulary: explicit key, else the tokenizer's token list, else the embedding rows */
    char key[128];
    tensor_view t;
    if (gguf_has_key(g, akey(&x, "vocab_size", key, sizeof key))) {
        if ((rc = gg_int(&x, "vocab_size", true, 0, 1, CAP_VOCAB, &c.vocab_size)))
            return rc;
    } else if (gguf_has_key(g, "tokenizer.ggml.tokens")) {
        uint64_t n;
        if ((rc = gguf_get_arr_info(g, "tokenizer.ggml.tokens", NULL, &n)))
            return rc;
        if (n < 1 || n > CAP_VOCAB)
            return deras_fail(DERAS_EFORMAT, "%s: key 'tokenizer.ggml.tokens' has %llu entries",
                              file, (unsigned long long)n);
        c.vocab_size = (int)n;
    } else if (gguf_find_tensor(g, "token_embd.weight", &t) == DERAS_OK && t.n_dims == 2 &&
               t.shape[0] >= 1 && t.shape[0] <= CAP_VOCAB) {
        c.vocab_size = (int)t.shape[0];
    } else {
        return deras_fail(DERAS_ENOTFOUND, "%s: no vocabulary size (key '%s', "
                          "'tokenizer.ggml.tokens' or tensor 'token_embd.weight')", file, key);
    }
    if ((rc = gguf_rope(&x, &c)))
        return rc;
    c.tied_embeddings = gguf_find_tensor(g, "output.weight", &t) != DERAS_OK;
    deras_errclear();
    if ((rc = model_config_validate(&c)))
        return deras_fail_ctx(rc, "%s: ", file);
    *out = c;
    return DERAS_OK;
}

/* ---- Hugging Face config.json ---- */

struct hf_ctx {
    const char *path;
    const json_t *root;
};

/* Field `key` of `obj` (where = "" or "rope_scaling." for messages): an integer in
 * [lo, hi]; absent or null gives `def` unless required. */
static int hf_int(const struct hf_ctx *x, const json_t *obj, const char *where, const char *key,
                  bool required, int def, int64_t lo, int64_t hi, int *out)
{
    const json_t *j = json_object_get(obj, key);
    if (!j || json_is_null(j)) {
        if (required)
            return deras_fail(DERAS_ENOTFOUND, "%s: required field '%s%s' not found", x->path,
                              where, key);
        *out = def;
        return DERAS_OK;
    }
    if (!json_is_integer(j))
        return deras_fail(DERAS_EFORMAT, "%s: '%s%s' is %s, expected an integer", x->path,
                          where, key, json_kind(j));
    json_int_t v = json_integer_value(j);
    if (v < lo || v > hi)
        return deras_fail(DERAS_EFORMAT, "%s: '%s%s' is %lld, outside %lld..%lld", x->path, where,
                          key, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return DERAS_OK;
}

static int hf_num(const struct hf_ctx *x, const json_t *obj, const char *where, const char *key,
                  bool required, double def, double *out)
{
    const json_t *j = json_object_get(obj, key);
    if (!j || json_is_null(j)) {
        if (required)
            return deras_fail(DERAS_ENOTFOUND, "%s: required field '%s%s' not found", x->path,
                              where, key);
        *out = def;
        return DERAS_OK;
    }
    if (!json_is_number(j))
        return deras_fail(DERAS_EFORMAT, "%s: '%s%s' is %s, expected a number", x->path, where,
                          key, json_kind(j));
    *out = json_number_value(j);
    return DERAS_OK;
}

static int hf_bool(const struct hf_ctx *x, const char *key, bool def, bool *out)
{
    const json_t *j = json_object_get(x->root, key);
    if (!j || json_is_null(j)) {
        *out = def;
        return DERAS_OK;
    }
    if (!json_is_boolean(j))
        return deras_fail(DERAS_EFORMAT, "%s: '%s' is %s, expected true or false", x->path, key,
                          json_kind(j));
    *out = json_is_true(j);
    return DERAS_OK;
}

/* String field; absent or null gives NULL. */
static int hf_str(const struct hf_ctx *x, const json_t *obj, const char *where, const char *key,
                  const char **out)
{
    const json_t *j = json_object_get(obj, key);
    *out = NULL;
    if (!j || json_is_null(j))
        return DERAS_OK;
    if (!json_is_string(j))
        return deras_fail(DERAS_EFORMAT, "%s: '%s%s' is %s, expected a string", x->path, where,
                          key, json_kind(j));
    *out = json_string_value(j);
    return DERAS_OK;
}

/* Which of the three supported classes, from architectures[0] or model_type. */
static int hf_arch(const struct hf_ctx *x, enum model_arch *arch, bool *mistral)
{
    static const struct { const char *cls, *type; enum model_arch arch; bool mistral; } known[] = {
        {"LlamaForCausalLM", "llama", MODEL_ARCH_LLAMA, false},
        {"MistralForCausalLM", "mistral", MODEL_ARCH_LLAMA, true},
        {"Qwen2ForCausalLM", "qwen2", MODEL_ARCH_QWEN2, false},
    };
    const json_t *archs = json_object_get(x->root, "architectures");
    const char *cls = NULL, *type = NULL;
    if (archs && !json_is_null(archs)) {
        if (!json_is_array(archs) || json_array_size(archs) < 1 ||
            !json_is_string(json_array_get(archs, 0)))
            return deras_fail(DERAS_EFORMAT, "%s: 'architectures' must be a non-empty array of "
                              "strings", x->path);
        cls = json_string_value(json_array_get(archs, 0));
    }
    int rc = hf_str(x, x->root, "", "model_type", &type);
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (cls ? !strcmp(cls, known[i].cls) : type && !strcmp(type, known[i].type)) {
            *arch = known[i].arch;
            *mistral = known[i].mistral;
            return DERAS_OK;
        }
    }
    if (!cls && !type)
        return deras_fail(DERAS_ENOTFOUND, "%s: neither 'architectures' nor 'model_type' says "
                          "what model this is", x->path);
    return deras_fail(DERAS_EUNSUPPORTED, "%s: model %s '%.64s' is not supported "
                      "(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM are)", x->path,
                      cls ? "class" : "type", cls ? cls : type);
}

/* rope_theta and scaling: transformers v5's rope_parameters, else the classic
 * rope_theta + rope_scaling. */
static int hf_rope(const struct hf_ctx *x, model_config *c)
{
    /* as transformers' convert_rope_params_to_dict: a non-empty rope_scaling wins */
    const json_t *params = json_object_get(x->root, "rope_parameters");
    const json_t *scaling = json_object_get(x->root, "rope_scaling");
    const char *where = "rope_scaling.";
    const json_t *p = scaling;
    if (!p || json_is_null(p) || (json_is_object(p) && json_object_size(p) == 0)) {
        p = params;
        where = "rope_parameters.";
    }
    if (p && json_is_null(p))
        p = NULL;
    if (p && !json_is_object(p))
        return deras_fail(DERAS_EFORMAT, "%s: '%.*s' is %s, expected an object or null", x->path,
                          (int)strlen(where) - 1, where, json_kind(p));
    if (p && json_object_get(p, "full_attention") && json_is_object(json_object_get(p, "full_attention")))
        return deras_fail(DERAS_EUNSUPPORTED, "%s: per-layer-type rope parameters are not "
                          "supported", x->path);

    /* theta: inside rope_parameters if there, else top level, else 10000 */
    double theta;
    int rc;
    if (p && json_object_get(p, "rope_theta") && !json_is_null(json_object_get(p, "rope_theta")))
        rc = hf_num(x, p, where, "rope_theta", true, 0, &theta);
    else
        rc = hf_num(x, x->root, "", "rope_theta", false, 10000.0, &theta);
    if (rc)
        return rc;
    c->rope_theta = (float)theta;

    c->rope_scaling = ROPE_SCALING_NONE;
    if (!p)
        return DERAS_OK;
    double prf;
    if ((rc = hf_num(x, p, where, "partial_rotary_factor", false, 1.0, &prf)))
        return rc;
    if (prf != 1.0)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: '%spartial_rotary_factor' is %g (partial "
                          "rotary embeddings are not supported)", x->path, where, prf);
    const char *type = NULL;
    if ((rc = hf_str(x, p, where, "rope_type", &type)))
        return rc;
    if (!type && (rc = hf_str(x, p, where, "type", &type)))
        return rc;
    if (!type || !strcmp(type, "default"))
        return DERAS_OK;
    double factor;
    if (!strcmp(type, "linear")) {
        if ((rc = hf_num(x, p, where, "factor", true, 0, &factor)))
            return rc;
        c->rope_scaling = ROPE_SCALING_LINEAR;
        c->rope_factor = (float)factor;
        return DERAS_OK;
    }
    if (!strcmp(type, "llama3")) {
        double lo, hi;
        if ((rc = hf_num(x, p, where, "factor", true, 0, &factor)) ||
            (rc = hf_num(x, p, where, "low_freq_factor", true, 0, &lo)) ||
            (rc = hf_num(x, p, where, "high_freq_factor", true, 0, &hi)) ||
            (rc = hf_int(x, p, where, "original_max_position_embeddings", false, c->max_seq_len,
                         1, CAP_SEQ, &c->rope_orig_max_pos)))
            return rc;
        c->rope_scaling = ROPE_SCALING_LLAMA3;
        c->rope_factor = (float)factor;
        c->rope_low_freq_factor = (float)lo;
        c->rope_high_freq_factor = (float)hi;
        return DERAS_OK;
    }
    return deras_fail(DERAS_EUNSUPPORTED, "%s: rope type '%.32s' is not supported (default, "
                      "linear and llama3 are)", x->path, type);
}

/* Sliding window: Mistral's sliding_window (null = off, transformers default 4096);
 * Qwen2's use_sliding_window, only when it covers every layer. */
static int hf_window(const struct hf_ctx *x, bool mistral, model_config *c)
{
    int rc;
    c->sliding_window = 0;
    if (mistral) {
        const json_t *j = json_object_get(x->root, "sliding_window");
        int def = j ? 0 : 4096; /* absent: MistralConfig's default; null: off */
        return hf_int(x, x->root, "", "sliding_window", false, def, 0, INT32_MAX,
                      &c->sliding_window);
    }
    if (c->arch != MODEL_ARCH_QWEN2)
        return DERAS_OK;
    bool use;
    int window, max_window_layers;
    if ((rc = hf_bool(x, "use_sliding_window", false, &use)) ||
        (rc = hf_int(x, x->root, "", "sliding_window", false, 4096, 0, INT32_MAX, &window)) ||
        (rc = hf_int(x, x->root, "", "max_window_layers", false, 28, 0, INT32_MAX,
                     &max_window_layers)))
        return rc;
    int n_sliding = 0;
    const json_t *types = json_object_get(x->root, "layer_types");
    if (types && !json_is_null(types)) {
        if (!json_is_array(types) || json_array_size(types) != (size_t)c->n_layers)
            return deras_fail(DERAS_EFORMAT, "%s: 'layer_types' must be an array of %d strings",
                              x->path, c->n_layers);
        for (size_t i = 0; i < json_array_size(types); i++) {
            const char *t = json_string_value(json_array_get(types, i));
            if (!t)
                return deras_fail(DERAS_EFORMAT, "%s: 'layer_types[%zu]' is not a string",
                                  x->path, i);
            if (!strcmp(t, "sliding_attention"))
                n_sliding++;
            else if (strcmp(t, "full_attention") != 0)
                return deras_fail(DERAS_EUNSUPPORTED, "%s: layer type '%.32s' is not supported",
                                  x->path, t);
        }
        if (n_sliding && !use)
            use = true; /* layer_types is what transformers acts on */
    } else if (use) {
        n_sliding = c->n_layers - (max_window_layers < c->n_layers ? max_window_layers
                                                                    : c->n_layers);
    }
    if (!use || n_sliding == 0)
        return DERAS_OK;
    if (n_sliding != c->n_layers)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: a sliding window on %d of %d layers is not "
                          "supported (only all or none)", x->path, n_sliding, c->n_layers);
    if (window < 1)
        return deras_fail(DERAS_EFORMAT, "%s: 'sliding_window' must be positive when used",
                          x->path);
    c->sliding_window = window;
    return DERAS_OK;
}

static int hf_fill(const struct hf_ctx *x, model_config *c)
{
    bool mistral = false;
    int rc = hf_arch(x, &c->arch, &mistral);
    if (rc)
        return rc;
    const json_t *r = x->root;
    if ((rc = hf_int(x, r, "", "hidden_size", true, 0, 1, CAP_D_MODEL, &c->d_model)) ||
        (rc = hf_int(x, r, "", "intermediate_size", true, 0, 1, CAP_D_FF, &c->d_ff)) ||
        (rc = hf_int(x, r, "", "num_hidden_layers", true, 0, 1, CAP_LAYERS, &c->n_layers)) ||
        (rc = hf_int(x, r, "", "num_attention_heads", true, 0, 1, CAP_HEADS, &c->n_heads)) ||
        (rc = hf_int(x, r, "", "num_key_value_heads", false, c->n_heads, 1, CAP_HEADS,
                     &c->n_kv_heads)) ||
        (rc = hf_int(x, r, "", "head_dim", false, c->d_model / c->n_heads, 1,
                     MODEL_MAX_HEAD_DIM, &c->head_dim)) ||
        (rc = hf_int(x, r, "", "vocab_size", true, 0, 1, CAP_VOCAB, &c->vocab_size)))
        return rc;
    int def_ctx = c->arch == MODEL_ARCH_QWEN2 ? 32768 : mistral ? 4096 * 32 : 2048;
    if ((rc = hf_int(x, r, "", "max_position_embeddings", false, def_ctx, 1, CAP_SEQ,
                     &c->max_seq_len)))
        return rc;
    double eps;
    if ((rc = hf_num(x, r, "", "rms_norm_eps", false, 1e-6, &eps)))
        return rc;
    c->norm_eps = (float)eps;
    if ((rc = hf_bool(x, "tie_word_embeddings", false, &c->tied_embeddings)))
        return rc;

    const char *act;
    if ((rc = hf_str(x, r, "", "hidden_act", &act)))
        return rc;
    if (act && strcmp(act, "silu") != 0)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: hidden_act '%.32s' is not supported (silu "
                          "is)", x->path, act);
    c->qkv_bias = c->arch == MODEL_ARCH_QWEN2;
    if (c->arch == MODEL_ARCH_LLAMA) {
        bool attn_bias, mlp_bias;
        if ((rc = hf_bool(x, "attention_bias", false, &attn_bias)) ||
            (rc = hf_bool(x, "mlp_bias", false, &mlp_bias)))
            return rc;
        if (attn_bias || mlp_bias)
            return deras_fail(DERAS_EUNSUPPORTED, "%s: '%s' is true: biases on Llama projections "
                              "are not supported", x->path, attn_bias ? "attention_bias" : "mlp_bias");
    }
    if ((rc = hf_rope(x, c)) || (rc = hf_window(x, mistral, c)))
        return rc;
    return DERAS_OK;
}

int model_config_from_hf_json(const char *path, model_config *out)
{
    if (!path || !out)
        return deras_fail(DERAS_EINVAL, "model_config_from_hf_json: NULL argument");
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        if (json_error_code(&err) == json_error_cannot_open_file)
            return deras_fail(DERAS_EIO, "%s: cannot read: %s", path, err.text);
        return deras_fail(DERAS_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", path,
                          err.text, err.line, err.column);
    }
    model_config c;
    memset(&c, 0, sizeof c);
    struct hf_ctx x = {.path = path, .root = root};
    int rc;
    if (!json_is_object(root)) {
        rc = deras_fail(DERAS_EFORMAT, "%s: top level is %s, expected an object", path,
                        json_kind(root));
        goto fail;
    }
    if ((rc = hf_fill(&x, &c)))
        goto fail;
    deras_errclear();
    if ((rc = model_config_validate(&c))) {
        deras_fail_ctx(rc, "%s: ", path);
        goto fail;
    }
    json_decref(root);
    *out = c;
    return DERAS_OK;
fail:
    json_decref(root);
    return rc;
}
