/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_kvcalc.c - `deras kvcalc`: how much KV cache a model needs and how much fits on a device.
 *
 * A calculator, not a loader: the model's hyperparameters come from a built-in preset, a
 * config.json, or the metadata of a .gguf file or a Hugging Face directory's config.json,
 * and no tensor is read or checked, so a config.json alone is enough. From them it prints
 * the KV bytes per token (with the formula and its numbers), per block, per sequence of
 * --seq-len tokens (rounded up to whole blocks), per batch, the weights per
 * tensor-parallel rank and, given --device-memory, the KV budget left after the weights
 * and how many blocks, tokens and sequences it holds. --json prints the same numbers as
 * one JSON object. The arithmetic is common/checkpoint/kv_math.c; this file parses, composes and
 * prints. The KV element type follows the rule the workers apply (engine/kv_sizing.h's
 * kv_sizing_dtype): --device cpu (the default, as deras-worker's) keeps f32 unless
 * --kv-dtype says f16 or bf16, a CUDA device its activation type; so the bytes printed
 * are those a worker with the same --device and --kv-dtype allocates (test_kv_dtype
 * checks it). --device any drops the rule (fp8 too, default fp16) for what-if sizing of
 * other servers. Exit status: 0 done, 1 a model that cannot be read, 2 a bad option or
 * value.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/checkpoint/gguf.h"
#include "common/checkpoint/kv_math.h"
#include "common/checkpoint/model_config.h"
#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "engine/kv_sizing.h"
#include "tools/commands.h"

typedef struct kvc_args {
    const char *model, *config, *preset;
    bool list_presets, json, help;
    long seq_len; /* 0: the model's context length */
    long batch, block_size, tp;
    const char *device;     /* backend spec whose rule picks the KV dtype, or "any" */
    const char *kv_name;    /* --kv-dtype as given, or NULL: the device's default */
    enum kvmath_dtype kv_dtype, weight_dtype;
    bool has_weight_dtype;
    uint64_t device_bytes; /* 0: no device plan */
    double utilization;
} kvc_args;

/* Everything printed, computed once for both output forms. */
typedef struct kvc_result {
    model_config cfg;
    const char *name, *source;  /* preset name and repository, or the path given */
    int64_t seq_len;
    kvmath_shard shard;
    uint64_t token_bytes;       /* per rank */
    uint64_t block_bytes;       /* per rank */
    kvmath_seq seq;             /* per rank */
    uint64_t batch_bytes;       /* per rank */
    kvmath_params params;       /* whole model */
    kvmath_params params_rank;  /* rank 0's share */
    uint64_t weight_bytes;      /* whole model */
    uint64_t weight_bytes_rank;
    bool has_plan;
    kvmath_plan plan;           /* per rank */
    int64_t max_seqs;
    int64_t batch_blocks;
    bool batch_fits;
} kvc_result;

static void usage(FILE *f)
{
    fputs("usage: deras kvcalc (--preset NAME | --model PATH | --config FILE) [options]\n"
          "       deras kvcalc --list-presets\n"
          "\n"
          "KV-cache and weight memory of a model, and what fits on a device.\n"
          "\n"
          "  --preset NAME             a built-in architecture (see --list-presets)\n"
          "  --model PATH              .gguf file, Hugging Face directory, or config.json\n"
          "                            (hyperparameters only: no tensor is read)\n"
          "  --config FILE             a Hugging Face config.json\n"
          "  --list-presets            list the built-in architectures\n"
          "  --seq-len N               tokens per sequence (default: the model's context length)\n"
          "  --batch N                 sequences (default 1)\n"
          "  --device DEV              the deras device whose KV cache to size: cpu (default,\n"
          "                            as deras-worker's), cuda:N, cuda:N:bf16, cuda:N:fp16; or\n"
          "                            any (no device rule: what-if sizing, fp8 allowed)\n"
          "  --kv-dtype fp32|fp16|bf16|fp8  KV cache element type (also --dtype); default: the\n"
          "                            device's (cpu fp32, cuda:N bf16, cuda:N:fp16 fp16, any\n"
          "                            fp16); refused where the device does not keep it\n"
          "  --weight-dtype DTYPE      weight element type (default: the KV dtype)\n"
          "  --block-size N            tokens per KV block (default 16)\n"
          "  --tp N                    tensor-parallel ranks (default 1); sizes are per rank\n"
          "  --device-memory SIZE      memory of one device: 80GiB, 24GB, 141e9 (B, KB, MB,\n"
          "                            GB, TB are powers of 1000; KiB, MiB, GiB, TiB of 1024)\n"
          "  --memory-utilization F    fraction of it deras may use (default 0.9)\n"
          "  --json                    print one JSON object instead of text\n",
          f);
}

static int parse_dtype(const char *opt, const char *s, enum kvmath_dtype *out)
{
    if (kvmath_dtype_parse(s, out)) {
        fprintf(stderr, "%s: %s\n", opt, deras_errmsg());
        return -1;
    }
    return 0;
}

/* 0 to go on, 2 for a usage error (message printed). */
static int parse_args(int argc, char **argv, kvc_args *a)
{
    enum { O_MODEL = 256, O_CONFIG, O_PRESET, O_LIST, O_SEQ, O_BATCH, O_DTYPE, O_WDTYPE,
           O_BLOCK, O_TP, O_DEVICE, O_DEVMEM, O_UTIL, O_JSON, O_HELP };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},
        {"config", required_argument, 0, O_CONFIG},
        {"preset", required_argument, 0, O_PRESET},
        {"list-presets", no_argument, 0, O_LIST},
        {"seq-len", required_argument, 0, O_SEQ},
        {"batch", required_argument, 0, O_BATCH},
        {"dtype", required_argument, 0, O_DTYPE},
        {"kv-dtype", required_argument, 0, O_DTYPE},
        {"device", required_argument, 0, O_DEVICE},
        {"weight-dtype", required_argument, 0, O_WDTYPE},
        {"block-size", required_argument, 0, O_BLOCK},
        {"tp", required_argument, 0, O_TP},
        {"device-memory", required_argument, 0, O_DEVMEM},
        {"memory-utilization", required_argument, 0, O_UTIL},
        {"json", no_argument, 0, O_JSON},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    memset(a, 0, sizeof *a);
    a->batch = 1;
    a->block_size = 16;
    a->tp = 1;
    a->device = "cpu";
    a->utilization = 0.9;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: a->model = optarg; break;
        case O_CONFIG: a->config = optarg; break;
        case O_PRESET: a->preset = optarg; break;
        case O_LIST: a->list_presets = true; break;
        case O_SEQ:
            if (cli_int("--seq-len", optarg, 1, 1L << 30, &a->seq_len)) return 2;
            break;
        case O_BATCH:
            if (cli_int("--batch", optarg, 1, 1L << 30, &a->batch)) return 2;
            break;
        case O_DTYPE:
            if (parse_dtype("--kv-dtype", optarg, &a->kv_dtype)) return 2;
            a->kv_name = optarg;
            break;
        case O_DEVICE: a->device = optarg; break;
        case O_WDTYPE:
            if (parse_dtype("--weight-dtype", optarg, &a->weight_dtype)) return 2;
            a->has_weight_dtype = true;
            break;
        case O_BLOCK:
            if (cli_int("--block-size", optarg, 1, 1L << 16, &a->block_size)) return 2;
            break;
        case O_TP:
            if (cli_int("--tp", optarg, 1, 4096, &a->tp)) return 2;
            break;
        case O_DEVMEM:
            if (kvmath_parse_size(optarg, &a->device_bytes)) {
                fprintf(stderr, "--device-memory: %s\n", deras_errmsg());
                return 2;
            }
            if (!a->device_bytes) {
                fprintf(stderr, "--device-memory: must be more than 0 bytes, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_UTIL:
            if (cli_float("--memory-utilization", optarg, 1e-6, 1, &a->utilization)) return 2;
            break;
        case O_JSON: a->json = true; break;
        case O_HELP: a->help = true; break;
        default:
            fputs("Run `deras kvcalc --help` for the options.\n", stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvcalc: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (a->help || a->list_presets)
        return 0;
    int n_sources = !!a->model + !!a->config + !!a->preset;
    if (n_sources != 1) {
        fprintf(stderr, "kvcalc: %s\nRun `deras kvcalc --help` for the options.\n",
                n_sources ? "give only one of --preset, --model and --config"
                          : "a model is required: --preset NAME, --model PATH or --config FILE");
        return 2;
    }
    if (strcmp(a->device, "any")) { /* the workers' rule */
        int dt;
        if (kv_sizing_dtype(a->device, a->kv_name, &dt) || kvmath_dtype_from_deras(dt, &a->kv_dtype)) {
            fprintf(stderr, "kvcalc: --device %s --kv-dtype %s: %s\n", a->device,
                    a->kv_name ? a->kv_name : "(default)", deras_errmsg());
            return 2;
        }
    } else if (!a->kv_name) {
        a->kv_dtype = KVMATH_FP16;
    }
    if (!a->has_weight_dtype)
        a->weight_dtype = a->kv_dtype;
    return 0;
}

/* A config from a .gguf (by its magic), a directory's config.json, or a config.json. */
static int load_model_config(const char *path, model_config *cfg)
{
    struct stat st;
    if (stat(path, &st))
        return deras_fail(DERAS_EIO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + sizeof "/config.json";
        char *json = malloc(n);
        if (!json)
            return deras_fail(DERAS_ENOMEM, "out of memory");
        snprintf(json, n, "%s/config.json", path);
        int rc = model_config_from_hf_json(json, cfg);
        free(json);
        return rc;
    }
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return deras_fail(DERAS_EIO, "%s: %s", path, strerror(errno));
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got != sizeof magic || memcmp(magic, "GGUF", 4))
        return model_config_from_hf_json(path, cfg);
    gguf_t *g = NULL;
    int rc = gguf_open(path, &g);
    if (!rc)
        rc = model_config_from_gguf(g, cfg);
    gguf_destroy(&g);
    return rc;
}

static void list_presets(void)
{
    printf("%-16s %6s %6s %9s %5s %6s %7s %7s %12s %14s  %s\n", "preset", "layers", "hidden",
           "heads/kv", "hdim", "ff", "vocab", "ctx", "KV B/token", "parameters", "source");
    for (int i = 0; i < kvmath_n_presets(); i++) {
        const kvmath_preset *p = kvmath_preset_at(i);
        const model_config *c = &p->config;
        uint64_t tb = 0;
        kvmath_params pc = {0};
        kvmath_token_bytes(c, 1, KVMATH_FP16, &tb);
        kvmath_params_count(c, 1, &pc);
        char heads[24];
        snprintf(heads, sizeof heads, "%d/%d", c->n_heads, c->n_kv_heads);
        printf("%-16s %6d %6d %9s %5d %6d %7d %7d %12llu %14lld  %s\n", p->name, c->n_layers,
               c->d_model, heads, c->head_dim, c->d_ff, c->vocab_size, c->max_seq_len,
               (unsigned long long)tb, (long long)pc.total, p->source);
    }
    printf("(KV bytes per token at fp16, tensor-parallel size 1)\n");
}

/* Exit status 2 for what the options asked that this model cannot do, 1 otherwise. */
static int compute(const kvc_args *a, kvc_result *r)
{
    int rc;
    r->seq_len = a->seq_len ? a->seq_len : r->cfg.max_seq_len;
    if ((rc = kvmath_shard_heads(&r->cfg, (int)a->tp, &r->shard))) {
        fprintf(stderr, "--tp %ld: %s\n", a->tp, deras_errmsg());
        return 2;
    }
    if ((rc = kvmath_token_bytes(&r->cfg, (int)a->tp, a->kv_dtype, &r->token_bytes)) ||
        (rc = kvmath_block_bytes(r->token_bytes, (int)a->block_size, &r->block_bytes)) ||
        (rc = kvmath_seq_size(r->token_bytes, (int)a->block_size, r->seq_len, &r->seq)) ||
        (rc = kvmath_batch_bytes(&r->seq, a->batch, &r->batch_bytes)) ||
        (rc = kvmath_params_count(&r->cfg, 1, &r->params)) ||
        (rc = kvmath_params_count(&r->cfg, (int)a->tp, &r->params_rank)) ||
        (rc = kvmath_weight_bytes(&r->params, a->weight_dtype, &r->weight_bytes)) ||
        (rc = kvmath_weight_bytes(&r->params_rank, a->weight_dtype, &r->weight_bytes_rank)))
        goto fail;
    if (a->device_bytes) {
        if ((rc = kvmath_plan_device(a->device_bytes, a->utilization, r->weight_bytes_rank,
                                     r->block_bytes, (int)a->block_size, &r->plan)))
            goto fail;
        r->has_plan = true;
        r->max_seqs = kvmath_plan_max_seqs(&r->plan, r->seq.n_blocks);
        if (__builtin_mul_overflow(r->seq.n_blocks, (int64_t)a->batch, &r->batch_blocks))
            r->batch_blocks = INT64_MAX;
        r->batch_fits = r->plan.weights_fit && r->batch_blocks <= r->plan.n_usable_blocks;
    }
    return 0;
fail:
    if (rc == DERAS_ERANGE) {
        fprintf(stderr, "kvcalc: --seq-len %lld x --batch %ld: the sizes are too large (%s)\n",
                (long long)r->seq_len, a->batch, deras_errmsg());
        return 2;
    }
    fprintf(stderr, "deras kvcalc: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
    return 1;
}

/* ---- text ---- */

/* "2.00 GiB (2147483648 bytes)" */
static const char *sz(char *buf, size_t cap, uint64_t n)
{
    char h[32];
    kvmath_format_bytes(n, h, sizeof h);
    if (n < 1024)
        snprintf(buf, cap, "%s", h);
    else
        snprintf(buf, cap, "%s (%llu bytes)", h, (unsigned long long)n);
    return buf;
}

/* "6.74 B", "134.52 M", "19616" */
static const char *count(char *buf, size_t cap, int64_t n)
{
    if (n >= 1000000000)
        snprintf(buf, cap, "%lld (%.2f B)", (long long)n, n / 1e9);
    else if (n >= 1000000)
        snprintf(buf, cap, "%lld (%.2f M)", (long long)n, n / 1e6);
    else
        snprintf(buf, cap, "%lld", (long long)n);
    return buf;
}

static void print_text(const kvc_args *a, const kvc_result *r)
{
    const model_config *c = &r->cfg;
    const bool tp = a->tp > 1;
    const char *per_rank = tp ? " per rank" : "";
    char b1[64], b2[64], desc[512];
    model_config_describe(c, desc, sizeof desc);

    if (r->source)
        printf("model           %s (%s)\n", r->name, r->source);
    else
        printf("model           %s\n", r->name);
    printf("                %s\n", desc);
    printf("parameters      %s", count(b1, sizeof b1, r->params.total));
    if (tp)
        printf("; %s on rank 0 of %ld", count(b2, sizeof b2, r->params_rank.total), a->tp);
    printf("\nweights         %s, %s%s\n", kvmath_dtype_name(a->weight_dtype),
           sz(b1, sizeof b1, r->weight_bytes_rank), per_rank);
    if (tp) {
        printf("tensor parallel %ld ranks: %d query head%s and %d KV head%s per rank", a->tp,
               r->shard.n_heads, r->shard.n_heads == 1 ? "" : "s", r->shard.n_kv_heads,
               r->shard.n_kv_heads == 1 ? "" : "s");
        if (r->shard.kv_replicas > 1)
            printf(" (more ranks than KV heads: each KV head is replicated on %d ranks)",
                   r->shard.kv_replicas);
        printf("\n");
    }

    printf("\nKV cache        %s, block size %ld%s", kvmath_dtype_name(a->kv_dtype),
           a->block_size, tp ? ", sizes per rank" : "");
    if (strcmp(a->device, "any"))
        printf(" (what a worker on %s allocates)", a->device);
    printf("\n");
    printf("  per token     2 (K, V) x %d layers x %d KV head%s%s x %d head_dim x %d byte%s = %s\n",
           c->n_layers, r->shard.n_kv_heads, r->shard.n_kv_heads == 1 ? "" : "s",
           tp ? " per rank" : "", c->head_dim, kvmath_dtype_size(a->kv_dtype),
           kvmath_dtype_size(a->kv_dtype) == 1 ? "" : "s",
           sz(b1, sizeof b1, r->token_bytes));
    printf("  per block     %ld tokens = %s\n", a->block_size, sz(b1, sizeof b1, r->block_bytes));
    printf("  per sequence  %lld tokens = %lld blocks", (long long)r->seq.n_tokens,
           (long long)r->seq.n_blocks);
    if (r->seq.n_slots != r->seq.n_tokens)
        printf(" (rounded up to %lld token slots)", (long long)r->seq.n_slots);
    printf(" = %s\n", sz(b1, sizeof b1, r->seq.bytes));
    printf("  batch of %-4ld %s\n", a->batch, sz(b1, sizeof b1, r->batch_bytes));
    if (c->sliding_window)
        printf("  note          sliding window %d only masks attention: the cache keeps every "
               "token\n", c->sliding_window);
    if (r->seq_len > c->max_seq_len)
        printf("  note          --seq-len %lld is beyond the model's context length %d\n",
               (long long)r->seq_len, c->max_seq_len);

    if (!r->has_plan)
        return;
    const kvmath_plan *p = &r->plan;
    printf("\ndevice          %s", sz(b1, sizeof b1, p->device_bytes));
    printf(" x %g = %s usable%s\n", p->utilization, sz(b2, sizeof b2, p->usable_bytes), per_rank);
    printf("  weights       %s\n", sz(b1, sizeof b1, p->weight_bytes));
    if (!p->weights_fit) {
        printf("  KV budget     none: the weights do not fit in the usable memory\n");
        printf("  batch         %ld x %lld tokens does not fit\n", a->batch,
               (long long)r->seq_len);
        return;
    }
    printf("  KV budget     %s\n", sz(b1, sizeof b1, p->budget));
    printf("  KV blocks     %lld blocks = %s, %.2f%% of the budget\n", (long long)p->n_blocks,
           sz(b1, sizeof b1, p->kv_bytes), 100.0 * p->budget_used);
    printf("  tokens        %lld (%lld usable blocks x %d; block 0 is the null block)\n",
           (long long)p->n_tokens, (long long)p->n_usable_blocks, p->block_size);
    printf("  sequences     %lld of %lld tokens at once\n", (long long)r->max_seqs,
           (long long)r->seq_len);
    printf("  batch         %ld x %lld tokens needs %lld of %lld blocks: %s\n", a->batch,
           (long long)r->seq_len, (long long)r->batch_blocks, (long long)p->n_usable_blocks,
           r->batch_fits ? "fits" : "does not fit");
}

/* ---- JSON ---- */

static json_t *ju64(uint64_t v)
{
    return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

static json_t *params_json(const kvmath_params *p)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "embedding", (json_int_t)p->embedding,
                     "attention", (json_int_t)p->attn, "mlp", (json_int_t)p->mlp, "norms",
                     (json_int_t)p->norms, "lm_head", (json_int_t)p->lm_head, "total",
                     (json_int_t)p->total);
}

static int print_json(const kvc_args *a, const kvc_result *r)
{
    const model_config *c = &r->cfg;
    json_t *o = json_object(), *m = json_object(), *kv = json_object(), *w = json_object();
    if (!o || !m || !kv || !w) {
        json_decref(o), json_decref(m), json_decref(kv), json_decref(w);
        return deras_fail(DERAS_ENOMEM, "out of memory");
    }
    json_object_set_new(m, "name", json_string(r->name));
    json_object_set_new(m, "source", r->source ? json_string(r->source) : json_null());
    json_object_set_new(m, "arch", json_string(c->arch == MODEL_ARCH_QWEN2 ? "qwen2" : "llama"));
    json_object_set_new(m, "n_layers", json_integer(c->n_layers));
    json_object_set_new(m, "d_model", json_integer(c->d_model));
    json_object_set_new(m, "n_heads", json_integer(c->n_heads));
    json_object_set_new(m, "n_kv_heads", json_integer(c->n_kv_heads));
    json_object_set_new(m, "head_dim", json_integer(c->head_dim));
    json_object_set_new(m, "d_ff", json_integer(c->d_ff));
    json_object_set_new(m, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(m, "max_seq_len", json_integer(c->max_seq_len));
    json_object_set_new(m, "tied_embeddings", json_boolean(c->tied_embeddings));
    json_object_set_new(m, "qkv_bias", json_boolean(c->qkv_bias));
    json_object_set_new(m, "sliding_window", json_integer(c->sliding_window));
    json_object_set_new(o, "model", m);

    json_object_set_new(o, "tp_size", json_integer(a->tp));
    json_object_set_new(o, "n_heads_per_rank", json_integer(r->shard.n_heads));
    json_object_set_new(o, "n_kv_heads_per_rank", json_integer(r->shard.n_kv_heads));
    json_object_set_new(o, "kv_replicas", json_integer(r->shard.kv_replicas));

    /* KV sizes are per rank (the whole model when tp_size is 1) */
    json_object_set_new(kv, "device", strcmp(a->device, "any") ? json_string(a->device) : json_null());
    json_object_set_new(kv, "dtype", json_string(kvmath_dtype_name(a->kv_dtype)));
    json_object_set_new(kv, "dtype_bytes", json_integer(kvmath_dtype_size(a->kv_dtype)));
    json_object_set_new(kv, "block_size", json_integer(a->block_size));
    json_object_set_new(kv, "bytes_per_token", ju64(r->token_bytes));
    json_object_set_new(kv, "bytes_per_block", ju64(r->block_bytes));
    json_object_set_new(kv, "seq_len", json_integer(r->seq.n_tokens));
    json_object_set_new(kv, "blocks_per_seq", json_integer(r->seq.n_blocks));
    json_object_set_new(kv, "token_slots_per_seq", json_integer(r->seq.n_slots));
    json_object_set_new(kv, "bytes_per_seq", ju64(r->seq.bytes));
    json_object_set_new(kv, "batch", json_integer(a->batch));
    json_object_set_new(kv, "bytes_per_batch", ju64(r->batch_bytes));
    json_object_set_new(o, "kv_cache", kv);

    json_object_set_new(w, "dtype", json_string(kvmath_dtype_name(a->weight_dtype)));
    json_object_set_new(w, "params", params_json(&r->params));
    json_object_set_new(w, "params_per_rank", params_json(&r->params_rank));
    json_object_set_new(w, "bytes", ju64(r->weight_bytes));
    json_object_set_new(w, "bytes_per_rank", ju64(r->weight_bytes_rank));
    json_object_set_new(o, "weights", w);

    if (r->has_plan) {
        const kvmath_plan *p = &r->plan;
        json_t *d = json_object();
        if (!d) {
            json_decref(o);
            return deras_fail(DERAS_ENOMEM, "out of memory");
        }
        json_object_set_new(d, "memory_bytes", ju64(p->device_bytes));
        json_object_set_new(d, "memory_utilization", json_real(p->utilization));
        json_object_set_new(d, "usable_bytes", ju64(p->usable_bytes));
        json_object_set_new(d, "weight_bytes", ju64(p->weight_bytes));
        json_object_set_new(d, "weights_fit", json_boolean(p->weights_fit));
        json_object_set_new(d, "kv_budget_bytes", ju64(p->budget));
        json_object_set_new(d, "kv_blocks", json_integer(p->n_blocks));
        json_object_set_new(d, "kv_usable_blocks", json_integer(p->n_usable_blocks));
        json_object_set_new(d, "kv_tokens", json_integer(p->n_tokens));
        json_object_set_new(d, "kv_bytes", ju64(p->kv_bytes));
        json_object_set_new(d, "kv_budget_used", json_real(p->budget_used));
        json_object_set_new(d, "max_seqs", json_integer(r->max_seqs));
        json_object_set_new(d, "batch_blocks", json_integer(r->batch_blocks));
        json_object_set_new(d, "batch_fits", json_boolean(r->batch_fits));
        json_object_set_new(o, "device", d);
    } else {
        json_object_set_new(o, "device", json_null());
    }

    char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(o);
    if (!s)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    puts(s);
    free(s);
    return DERAS_OK;
}

int cmd_kvcalc(int argc, char **argv)
{
    kvc_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    if (a.help) {
        usage(stdout);
        return 0;
    }
    if (a.list_presets) {
        list_presets();
        return 0;
    }

    kvc_result r;
    memset(&r, 0, sizeof r);
    if (a.preset) {
        const kvmath_preset *p = kvmath_preset_find(a.preset);
        if (!p) {
            fprintf(stderr, "--preset: unknown preset '%s'; known:", a.preset);
            for (int i = 0; i < kvmath_n_presets(); i++)
                fprintf(stderr, " %s", kvmath_preset_at(i)->name);
            fprintf(stderr, "\n");
            return 2;
        }
        r.cfg = p->config;
        r.name = p->name;
        r.source = p->source;
    } else {
        r.name = a.model ? a.model : a.config;
        rc = a.model ? load_model_config(a.model, &r.cfg)
                     : model_config_from_hf_json(a.config, &r.cfg);
        if (rc) {
            fprintf(stderr, "deras kvcalc: %s: %s (%s)\n", a.model ? "--model" : "--config",
                    deras_errmsg(), deras_status_name(rc));
            return 1;
        }
    }
    if ((rc = compute(&a, &r)))
        return rc;
    if (a.json && r.seq_len > r.cfg.max_seq_len)
        fprintf(stderr, "kvcalc: note: --seq-len %lld is beyond the model's context length %d\n",
                (long long)r.seq_len, r.cfg.max_seq_len);
    if (!a.json) {
        print_text(&a, &r);
        return 0;
    }
    if ((rc = print_json(&a, &r))) {
        fprintf(stderr, "deras kvcalc: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
        return 1;
    }
    return 0;
}
