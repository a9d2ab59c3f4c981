/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint.c - one door to a model's weights, whether a GGUF file or a Hugging Face directory.
 *
 * Design: open resolves everything. The config is read first; from it follows the exact
 * list of tensors (role x layer) the forward pass will ask for and each one's shape in
 * Hugging Face layout. Every one is then looked up by its file-specific name, its shape
 * and dtype checked, and its view stored in a table indexed by role and layer, so later
 * calls are array lookups that cannot fail for a reason the file controls. HF shards are
 * opened once each (the index's weight_map says which file holds which tensor); views
 * point into their mappings, which live as long as the checkpoint.
 *
 * Reading rows dequantizes straight into the caller's buffer, one stored row at a time,
 * so no scratch is needed. GGUF files of the llama architecture store Q and K rows
 * permuted for interleaved RoPE (convert_hf_to_gguf.py: per head, reshape (2, hd/2) and
 * swap, i.e. HF row h*hd + j*hd/2 + i is stored at h*hd + 2*i + j); reading a Q/K row
 * maps it back, so any row range, head-aligned or not, comes out in HF order. qwen2 GGUF
 * files are not permuted.
 */
#include "checkpoint.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "common/base/status.h"

struct entry {
    bool present;
    tensor_view v;
    const char *file; /* for messages: the GGUF or shard path */
    int64_t rows, cols;
    size_t row_bytes;
};

struct checkpoint {
    int refs;          /* references: checkpoint_open's and checkpoint_retain's (atomic) */
    char *path;
    model_config cfg;
    gguf_t *gguf;
    char *hf_dir;
    st_file_t **shards;
    int n_shards;
    bool permuted_qk;
    struct entry *entries; /* [role * n_layers + layer]; global roles use layer 0 */
    uint64_t file_bytes;
};

static bool is_layer_role(enum ckpt_tensor t)
{
    return t >= CKPT_ATTN_NORM && t < CKPT_N_TENSORS;
}

static const char *role_name(enum ckpt_tensor t)
{
    static const char *names[CKPT_N_TENSORS] = {
        "token embedding", "output norm", "output", "attention norm", "attention q",
        "attention k", "attention v", "attention q bias", "attention k bias",
        "attention v bias", "attention output", "ffn norm", "ffn gate", "ffn up", "ffn down",
    };
    return t >= 0 && t < CKPT_N_TENSORS ? names[t] : "?";
}

/* File-specific tensor name of a role. */
static void tensor_name(bool gguf, enum ckpt_tensor t, int layer, char *buf, size_t cap)
{
    static const char *gguf_names[CKPT_N_TENSORS] = {
        "token_embd.weight", "output_norm.weight", "output.weight", "attn_norm.weight",
        "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
        "attn_v.bias", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
        "ffn_up.weight", "ffn_down.weight",
    };
    static const char *hf_names[CKPT_N_TENSORS] = {
        "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias",
        "self_attn.v_proj.bias", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    };
    if (!is_layer_role(t))
        snprintf(buf, cap, "%s", gguf ? gguf_names[t] : hf_names[t]);
    else if (gguf)
        snprintf(buf, cap, "blk.%d.%s", layer, gguf_names[t]);
    else
        snprintf(buf, cap, "model.layers.%d.%s", layer, hf_names[t]);
}

/* Expected HF-layout shape: rows 0 means a vector of `cols` elements. */
static void expected_shape(const model_config *c, enum ckpt_tensor t, int64_t *rows,
                           int64_t *cols)
{
    const int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    *rows = 0;
    switch (t) {
    case CKPT_TOK_EMBD: case CKPT_OUTPUT: *rows = c->vocab_size; *cols = c->d_model; break;
    case CKPT_OUTPUT_NORM: case CKPT_ATTN_NORM: case CKPT_FFN_NORM: *cols = c->d_model; break;
    case CKPT_ATTN_Q: *rows = q; *cols = c->d_model; break;
    case CKPT_ATTN_K: case CKPT_ATTN_V: *rows = kv; *cols = c->d_model; break;
    case CKPT_ATTN_Q_BIAS: *cols = q; break;
    case CKPT_ATTN_K_BIAS: case CKPT_ATTN_V_BIAS: *cols = kv; break;
    case CKPT_ATTN_OUT: *rows = c->d_model; *cols = q; break;
    case CKPT_FFN_GATE: case CKPT_FFN_UP: *rows = c->d_ff; *cols = c->d_model; break;
    case CKPT_FFN_DOWN: *rows = c->d_model; *cols = c->d_ff; break;
    default: *cols = 0; break;
    }
}

static bool role_expected(const model_config *c, enum ckpt_tensor t)
{
    if (t == CKPT_OUTPUT)
        return !c->tied_embeddings;
    if (t == CKPT_ATTN_Q_BIAS || t == CKPT_ATTN_K_BIAS || t == CKPT_ATTN_V_BIAS)
        return c->qkv_bias;
    return true;
}

static struct entry *entry_at(const struct checkpoint *c, enum ckpt_tensor t, int layer)
{
    return &c->entries[(size_t)t * (size_t)c->cfg.n_layers + (size_t)(is_layer_role(t) ? layer : 0)];
}

static void shape_str(const tensor_view *v, char *buf, size_t cap)
{
    size_t o = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < v->n_dims && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, d ? ", %lld" : "%lld", (long long)v->shape[d]);
    if (o < cap)
        snprintf(buf + o, cap - o, ")");
}

/* Check a found view against the role's expected shape and dtype; fill the entry. */
static int accept_view(struct checkpoint *c, enum ckpt_tensor t, const char *file,
                       const tensor_view *v, struct entry *e)
{
    int64_t rows, cols;
    expected_shape(&c->cfg, t, &rows, &cols);
    bool ok = rows ? (v->n_dims == 2 && v->shape[0] == rows && v->shape[1] == cols)
                   : (v->n_dims == 1 && v->shape[0] == cols);
    if (!ok) {
        char found[96], want[64];
        shape_str(v, found, sizeof found);
        if (rows)
            snprintf(want, sizeof want, "(%lld, %lld)", (long long)rows, (long long)cols);
        else
            snprintf(want, sizeof want, "(%lld)", (long long)cols);
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s' (%s): expected shape %s, found %s",
                          file, v->name, role_name(t), want, found);
    }
    if (v->dtype == DT_UNSUPPORTED || !dtype_supported(v->dtype))
        return deras_fail(DERAS_EUNSUPPORTED, "%s: tensor '%s' (%s): type %s is not one deras "
                          "computes with", file, v->name, role_name(t), v->type_name);
    size_t row_bytes;
    int rc = dtype_nbytes(v->dtype, cols, &row_bytes);
    if (rc)
        return deras_fail_ctx(rc, "%s: tensor '%s': ", file, v->name);
    e->present = true;
    e->v = *v;
    e->file = file;
    e->rows = rows ? rows : 1;
    e->cols = cols;
    e->row_bytes = row_bytes;
    c->file_bytes += v->n_bytes;
    return DERAS_OK;
}

/* The role x layer table; its size comes from the config, so loaders call this right
 * after reading it. */
static int alloc_entries(struct checkpoint *c)
{
    c->entries = calloc((size_t)CKPT_N_TENSORS * (size_t)c->cfg.n_layers, sizeof *c->entries);
    if (!c->entries)
        return deras_fail(DERAS_ENOMEM, "%s: out of memory", c->path);
    return DERAS_OK;
}

/* ---- GGUF ---- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int open_gguf(struct checkpoint *c)
{
    int rc = gguf_open(c->path, &c->gguf);
    if (rc == DERAS_EFORMAT && (ends_with(c->path, ".safetensors") || ends_with(c->path, ".json")))
        return deras_fail(rc, "%s: not a GGUF file (open a Hugging Face checkpoint by its "
                          "directory)", c->path);
    if (rc)
        return rc;
    if ((rc = model_config_from_gguf(c->gguf, &c->cfg)) || (rc = alloc_entries(c)))
        return rc;
    const char *arch = NULL;
    gguf_get_str(c->gguf, "general.architecture", &arch, NULL);
    c->permuted_qk = arch && !strcmp(arch, "llama");
    const char *file = gguf_name(c->gguf);
    char name[96];
    for (int t = 0; t < CKPT_N_TENSORS; t++) {
        int n = is_layer_role((enum ckpt_tensor)t) ? c->cfg.n_layers : 1;
        for (int l = 0; l < n; l++) {
            tensor_name(true, (enum ckpt_tensor)t, l, name, sizeof name);
            tensor_view v;
            bool expected = role_expected(&c->cfg, (enum ckpt_tensor)t);
            if (gguf_find_tensor(c->gguf, name, &v) != DERAS_OK) {
                if (expected)
                    return deras_fail(DERAS_ENOTFOUND, "%s: tensor '%s' (%s) is missing", file,
                                      name, role_name((enum ckpt_tensor)t));
                continue;
            }
            if (!expected) {
                if (t == CKPT_OUTPUT)
                    continue; /* cannot happen: tied means absent */
                return deras_fail(DERAS_EUNSUPPORTED, "%s: tensor '%s' is present but the %s "
                                  "architecture has no such bias", file, name, arch);
            }
            if ((rc = accept_view(c, (enum ckpt_tensor)t, file, &v,
                                  entry_at(c, (enum ckpt_tensor)t, l))))
                return rc;
        }
    }
    /* llama.cpp's llama loads optional output-projection and MLP biases; deras has none */
    static const char *extra[] = {"attn_output.bias", "ffn_gate.bias", "ffn_up.bias",
                                  "ffn_down.bias"};
    for (int l = 0; l < c->cfg.n_layers; l++)
        for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, extra[k]);
            if (gguf_find_tensor(c->gguf, name, NULL) == DERAS_OK)
                return deras_fail(DERAS_EUNSUPPORTED, "%s: tensor '%s' is present; biases on "
                                  "this projection are not supported", file, name);
        }
    deras_errclear();
    return DERAS_OK;
}

/* ---- Hugging Face directory ---- */

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Open the shards named by the index (each once) and return the weight map in *map. */
static int open_index(struct checkpoint *c, const char *index_path, json_t **map_out,
                      json_t **root_out)
{
    json_error_t err;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return deras_fail(json_error_code(&err) == json_error_cannot_open_file ? DERAS_EIO
                                                                                : DERAS_EFORMAT,
                          "%s: %s (line %d)", index_path, err.text, err.line);
    *root_out = root;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map))
        return deras_fail(DERAS_EFORMAT, "%s: 'weight_map' must be an object", index_path);
    size_t n = json_object_size(map);
    c->shards = calloc(n ? n : 1, sizeof *c->shards);
    char **names = calloc(n ? n : 1, sizeof *names);
    int rc = DERAS_OK;
    if (!c->shards || !names) {
        free(names);
        return deras_fail(DERAS_ENOMEM, "%s: out of memory", index_path);
    }
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        const char *shard = json_string_value(val);
        if (!shard || !*shard || strchr(shard, '/') || !strcmp(shard, "..")) {
            rc = deras_fail(DERAS_EFORMAT, "%s: weight_map['%.96s'] must be a file name in the "
                            "same directory", index_path, key);
            goto done;
        }
        bool seen = false;
        for (int i = 0; i < c->n_shards && !seen; i++)
            seen = !strcmp(names[i], shard);
        if (seen)
            continue;
        char *p = join(c->hf_dir, shard);
        if (!p) {
            rc = deras_fail(DERAS_ENOMEM, "out of memory");
            goto done;
        }
        rc = st_open(p, &c->shards[c->n_shards]);
        free(p);
        if (rc)
            goto done;
        names[c->n_shards++] = (char *)shard;
    }
    *map_out = map;
done:
    free(names);
    return rc;
}

static int shard_index(const struct checkpoint *c, const char *shard)
{
    for (int i = 0; i < c->n_shards; i++) {
        const char *name = st_name(c->shards[i]);
        const char *base = strrchr(name, '/');
        if (!strcmp(base ? base + 1 : name, shard))
            return i;
    }
    return -1;
}

static int open_hf(struct checkpoint *c)
{
    json_t *index_root = NULL, *map = NULL;
    char *cfg_path = NULL, *st_path = NULL, *index_path = NULL;
    int rc = DERAS_ENOMEM;
    c->hf_dir = strdup(c->path);
    cfg_path = join(c->path, "config.json");
    st_path = join(c->path, "model.safetensors");
    index_path = join(c->path, "model.safetensors.index.json");
    if (!c->hf_dir || !cfg_path || !st_path || !index_path) {
        deras_fail(rc, "out of memory");
        goto done;
    }
    if (!is_file(cfg_path)) {
        rc = deras_fail(DERAS_ENOTFOUND, "%s: no config.json in this directory (a Hugging Face "
                        "model directory needs one)", c->path);
        goto done;
    }
    if ((rc = model_config_from_hf_json(cfg_path, &c->cfg)) || (rc = alloc_entries(c)))
        goto done;
    if (is_file(index_path)) {
        if ((rc = open_index(c, index_path, &map, &index_root)))
            goto done;
    } else if (is_file(st_path)) {
        c->shards = calloc(1, sizeof *c->shards);
        if (!c->shards) {
            rc = deras_fail(DERAS_ENOMEM, "out of memory");
            goto done;
        }
        if ((rc = st_open(st_path, &c->shards[0])))
            goto done;
        c->n_shards = 1;
    } else {
        rc = deras_fail(DERAS_ENOTFOUND, "%s: neither model.safetensors nor "
                        "model.safetensors.index.json found", c->path);
        goto done;
    }

    char name[128];
    for (int t = 0; t < CKPT_N_TENSORS; t++) {
        if (!role_expected(&c->cfg, (enum ckpt_tensor)t))
            continue; /* a tied config's lm_head, if saved anyway, is not used */
        int n = is_layer_role((enum ckpt_tensor)t) ? c->cfg.n_layers : 1;
        for (int l = 0; l < n; l++) {
            tensor_name(false, (enum ckpt_tensor)t, l, name, sizeof name);
            int si = 0;
            if (map) {
                const char *shard = json_string_value(json_object_get(map, name));
                si = shard ? shard_index(c, shard) : -1;
                if (si < 0) {
                    rc = deras_fail(DERAS_ENOTFOUND, "%s: tensor '%s' (%s) is not in the "
                                    "weight_map", index_path, name,
                                    role_name((enum ckpt_tensor)t));
                    goto done;
                }
            }
            tensor_view v;
            const char *file = st_name(c->shards[si]);
            if (st_find_tensor(c->shards[si], name, &v) != DERAS_OK) {
                rc = deras_fail(DERAS_ENOTFOUND, "%s: tensor '%s' (%s) is missing", file, name,
                                role_name((enum ckpt_tensor)t));
                goto done;
            }
            if ((rc = accept_view(c, (enum ckpt_tensor)t, file, &v,
                                  entry_at(c, (enum ckpt_tensor)t, l))))
                goto done;
        }
    }
    deras_errclear();
    rc = DERAS_OK;
done:
    if (index_root)
        json_decref(index_root);
    free(cfg_path);
    free(st_path);
    free(index_path);
    return rc;
}

/* ---- public ---- */

int checkpoint_open(const char *path, checkpoint_t **out)
{
    if (!path || !out)
        return deras_fail(DERAS_EINVAL, "checkpoint_open: NULL argument");
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return deras_fail(DERAS_EIO, "%s: no such file or directory", path);
    struct checkpoint *c = calloc(1, sizeof *c);
    int rc = DERAS_ENOMEM;
    if (!c)
        return deras_fail(rc, "%s: out of memory", path);
    c->refs = 1;
    c->path = strdup(path);
    if (!c->path) {
        deras_fail(rc, "%s: out of memory", path);
        goto fail;
    }
    if ((rc = S_ISDIR(st.st_mode) ? open_hf(c) : open_gguf(c)))
        goto fail;
    *out = c;
    return DERAS_OK;
fail:
    checkpoint_destroy(&c);
    return rc;
}

void checkpoint_destroy(checkpoint_t **cp)
{
    if (!cp || !*cp)
        return;
    struct checkpoint *c = *cp;
    *cp = NULL;
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    gguf_destroy(&c->gguf);
    for (int i = 0; i < c->n_shards; i++)
        st_destroy(&c->shards[i]);
    free(c->shards);
    free(c->entries);
    free(c->hf_dir);
    free(c->path);
    free(c);
}

checkpoint_t *checkpoint_retain(const checkpoint_t *c)
{
    struct checkpoint *m = (struct checkpoint *)c; /* the count is the one mutable field */
    if (m)
        __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    return m;
}

const model_config *checkpoint_config(const checkpoint_t *c)
{
    return c ? &c->cfg : NULL;
}

const char *checkpoint_role_name(enum ckpt_tensor t)
{
    return role_name(t);
}

const char *checkpoint_path(const checkpoint_t *c)
{
    return c ? c->path : "";
}

const gguf_t *checkpoint_gguf(const checkpoint_t *c)
{
    return c ? c->gguf : NULL;
}

const char *checkpoint_hf_dir(const checkpoint_t *c)
{
    return c ? c->hf_dir : NULL;
}

/* The entry for (t, layer), or an error for bad arguments and absent tensors. */
static int lookup(const checkpoint_t *c, enum ckpt_tensor t, int layer, const struct entry **e)
{
    if (!c)
        return deras_fail(DERAS_EINVAL, "checkpoint: NULL checkpoint");
    if ((int)t < 0 || t >= CKPT_N_TENSORS)
        return deras_fail(DERAS_EINVAL, "%s: tensor role %d is not a role", c->path, (int)t);
    if (is_layer_role(t) && (layer < 0 || layer >= c->cfg.n_layers))
        return deras_fail(DERAS_ERANGE, "%s: layer %d outside 0..%d", c->path, layer,
                          c->cfg.n_layers - 1);
    *e = entry_at(c, t, layer);
    if (!(*e)->present)
        return deras_fail(DERAS_ENOTFOUND, "%s: the checkpoint has no %s tensor%s", c->path,
                          role_name(t), t == CKPT_OUTPUT ? " (embeddings are tied)" : "");
    return DERAS_OK;
}

bool checkpoint_has(const checkpoint_t *c, enum ckpt_tensor t, int layer)
{
    if (!c || (int)t < 0 || t >= CKPT_N_TENSORS)
        return false;
    if (is_layer_role(t) && (layer < 0 || layer >= c->cfg.n_layers))
        return false;
    return entry_at(c, t, layer)->present;
}

int checkpoint_shape(const checkpoint_t *c, enum ckpt_tensor t, int layer, int64_t *rows,
                     int64_t *cols)
{
    const struct entry *e;
    int rc = lookup(c, t, layer, &e);
    if (rc)
        return rc;
    if (rows)
        *rows = e->rows;
    if (cols)
        *cols = e->cols;
    return DERAS_OK;
}

/* Where row r (Hugging Face order) of tensor t is stored: GGUF's llama Q/K rows are
 * permuted for interleaved RoPE, within each head. */
static int64_t stored_row(const checkpoint_t *c, enum ckpt_tensor t, int64_t r)
{
    if (!c->permuted_qk || (t != CKPT_ATTN_Q && t != CKPT_ATTN_K))
        return r;
    const int64_t hd = c->cfg.head_dim, half = hd / 2, h = r / hd, w = r % hd;
    return h * hd + 2 * (w % half) + w / half;
}

int checkpoint_read_rows(const checkpoint_t *c, enum ckpt_tensor t, int layer, int64_t row0,
                         int64_t n_rows, float *dst)
{
    const struct entry *e;
    int rc = lookup(c, t, layer, &e);
    if (rc)
        return rc;
    if (row0 < 0 || n_rows < 0 || row0 > e->rows || n_rows > e->rows - row0)
        return deras_fail(DERAS_ERANGE, "%s: %lld rows from row %lld of tensor '%s' requested, "
                          "it has %lld", e->file, (long long)n_rows, (long long)row0,
                          e->v.name, (long long)e->rows);
    if (n_rows == 0)
        return DERAS_OK;
    if (!dst)
        return deras_fail(DERAS_EINVAL, "checkpoint_read_rows: dst is NULL");
    const uint8_t *base = e->v.data;
    for (int64_t r = row0; r < row0 + n_rows; r++) {
        const int64_t stored = stored_row(c, t, r);
        rc = dtype_to_f32(e->v.dtype, base + (size_t)stored * e->row_bytes,
                          dst + (r - row0) * e->cols, e->cols);
        if (rc)
            return deras_fail_ctx(rc, "%s: tensor '%s': ", e->file, e->v.name);
    }
    return DERAS_OK;
}

/* Rows [row0, +n_rows) and columns [col0, +n_cols) lie inside tensor e; DERAS_ERANGE naming
 * both otherwise. */
static int check_window(const struct entry *e, int64_t row0, int64_t n_rows, int64_t col0,
                        int64_t n_cols)
{
    if (row0 < 0 || n_rows < 0 || row0 > e->rows || n_rows > e->rows - row0 || col0 < 0 ||
        n_cols < 0 || col0 > e->cols || n_cols > e->cols - col0)
        return deras_fail(DERAS_ERANGE, "%s: rows %lld+%lld, columns %lld+%lld of tensor '%s' "
                          "requested, it is (%lld, %lld)", e->file, (long long)row0,
                          (long long)n_rows, (long long)col0, (long long)n_cols, e->v.name,
                          (long long)e->rows, (long long)e->cols);
    return DERAS_OK;
}

int checkpoint_read_cols(const checkpoint_t *c, enum ckpt_tensor t, int layer, int64_t row0,
                         int64_t n_rows, int64_t col0, int64_t n_cols, float *dst,
                         float *scratch)
{
    const struct entry *e;
    int rc = lookup(c, t, layer, &e);
    if (rc)
        return rc;
    if ((rc = check_window(e, row0, n_rows, col0, n_cols)))
        return rc;
    if (n_rows == 0 || n_cols == 0)
        return DERAS_OK;
    const int64_t blk = dtype_block_elems(e->v.dtype);
    const bool aligned = blk > 0 && col0 % blk == 0 && n_cols % blk == 0;
    if (!dst || (!aligned && !scratch))
        return deras_fail(DERAS_EINVAL, "checkpoint_read_cols: dst or scratch is NULL");
    const uint8_t *base = e->v.data;
    const size_t skip = aligned ? (size_t)(col0 / blk) * dtype_block_bytes(e->v.dtype) : 0;
    for (int64_t r = row0; r < row0 + n_rows; r++) {
        const int64_t stored = stored_row(c, t, r);
        const uint8_t *row = base + (size_t)stored * e->row_bytes;
        float *out = dst + (r - row0) * n_cols;
        if (aligned) {
            rc = dtype_to_f32(e->v.dtype, row + skip, out, n_cols);
        } else {
            rc = dtype_to_f32(e->v.dtype, row, scratch, e->cols);
            if (!rc)
                memcpy(out, scratch + col0, (size_t)n_cols * sizeof(float));
        }
        if (rc)
            return deras_fail_ctx(rc, "%s: tensor '%s': ", e->file, e->v.name);
    }
    return DERAS_OK;
}

int checkpoint_dtype(const checkpoint_t *c, enum ckpt_tensor t, int layer)
{
    return checkpoint_has(c, t, layer) ? entry_at(c, t, layer)->v.dtype : DT_UNSUPPORTED;
}

int checkpoint_read_stored(const checkpoint_t *c, enum ckpt_tensor t, int layer, int64_t row0,
                           int64_t n_rows, int64_t col0, int64_t n_cols, void *dst)
{
    const struct entry *e;
    int rc = lookup(c, t, layer, &e);
    if (rc)
        return rc;
    if ((rc = check_window(e, row0, n_rows, col0, n_cols)))
        return rc;
    const int64_t blk = dtype_block_elems(e->v.dtype);
    if (blk <= 0 || col0 % blk || n_cols % blk)
        return deras_fail(DERAS_EFORMAT, "%s: tensor '%s' (%s): columns %lld+%lld are not whole "
                          "blocks", e->file, e->v.name, dtype_name(e->v.dtype), (long long)col0,
                          (long long)n_cols);
    if (!dst)
        return deras_fail(DERAS_EINVAL, "checkpoint_read_stored: dst is NULL");
    const size_t bb = dtype_block_bytes(e->v.dtype), skip = (size_t)(col0 / blk) * bb;
    const size_t len = (size_t)(n_cols / blk) * bb;
    const uint8_t *base = e->v.data;
    for (int64_t r = row0; r < row0 + n_rows; r++) {
        const int64_t stored = stored_row(c, t, r);
        memcpy((uint8_t *)dst + (size_t)(r - row0) * len, base + (size_t)stored * e->row_bytes + skip,
               len);
    }
    return DERAS_OK;
}

int checkpoint_stored_rows(const checkpoint_t *c, enum ckpt_tensor t, int layer,
                           const void **data, size_t *row_bytes, int *qk_perm_hd)
{
    const struct entry *e;
    int rc = lookup(c, t, layer, &e);
    if (rc)
        return rc;
    if (data)
        *data = e->v.data;
    if (row_bytes)
        *row_bytes = e->row_bytes;
    if (qk_perm_hd)
        *qk_perm_hd = c->permuted_qk && (t == CKPT_ATTN_Q || t == CKPT_ATTN_K) ? c->cfg.head_dim
                                                                              : 0;
    return DERAS_OK;
}

void checkpoint_prefetch(const void *p, size_t n)
{
    if (!p || !n)
        return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = (uintptr_t)p + n;
    madvise((void *)lo, hi - lo, MADV_WILLNEED); /* advice: a failure changes nothing */
    for (uintptr_t a = (uintptr_t)p; a < hi; a = (a & ~(page - 1)) + page)
        (void)*(const volatile unsigned char *)a;
}

void checkpoint_release(const void *p, size_t n)
{
    if (!p || !n)
        return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)p + n) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

uint64_t checkpoint_file_bytes(const checkpoint_t *c)
{
    return c ? c->file_bytes : 0;
}
