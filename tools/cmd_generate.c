/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_generate.c - `deras generate`: one completion from a model on this machine.
 *
 * Loads a checkpoint (GGUF file or Hugging Face directory), tokenizes the prompt (wrapped
 * in the model's chat format with --chat), prefills it in chunks, then decodes one token at
 * a time, streaming text to stdout as it is produced: tokens go through the streaming
 * detokenizer (no broken UTF-8) and the stop-string matcher (no partial stop strings).
 * Timings go to stderr at the end: prompt and generation tokens per second.
 *
 * It runs the same engine a worker runs (scheduler, paged KV cache, sampler) with one
 * sequence and a cache just big enough for prompt + max_tokens. Stop strings are matched
 * on the text here; a match aborts the request in the engine.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "common/tokenizer/chat.h"
#include "common/tokenizer/stop_matcher.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/loader.h"
#include "kernels/backend.h"
#include "tools/commands.h"
#include "tools/sampling_flags.h"

#define MAX_STOPS 16
#define PREFILL_CHUNK 512

typedef struct gen_args {
    char model[4096];
    const char *prompt;
    const char *system;
    const char *device;
    const char *weight_format; /* NULL: as stored */
    const char *kv_dtype; /* NULL: the device's default */
    bool chat;
    int threads, block_size, matmul_mode;
    req_params params;    /* one sample; the sampling flags come from the table */
    bool has_seed;
    const char *stops[MAX_STOPS];
    int n_stops;
} gen_args;

#define MAX_OPTIONS 64

/* The defaults: greedy (the engine's sampling_params_default), unlike a router's. */
static void defaults(gen_args *a)
{
    memset(a, 0, sizeof *a);
    cli_default_model(a->model, sizeof a->model);
    a->device = "cpu";
    a->block_size = 16;
    req_params_init(&a->params);
    sampling_params_default(&a->params.sp);
}

static void usage(FILE *f)
{
    fputs("usage: deras generate [options] --prompt TEXT\n"
          "\n"
          "  --model PATH            .gguf file or Hugging Face model directory\n"
          "                          (default: the cached test model)\n"
          "  --prompt TEXT           prompt text (required)\n"
          "  --chat                  wrap the prompt as a user message in the model's chat format\n"
          "  --system TEXT           system message for --chat (default: the template's own)\n"
          "  --max-tokens N          tokens to generate (default 256)\n"
          "  --seed N                sampling seed (same seed and inputs: same output)\n"
          "  --stop TEXT             stop string, repeatable (at most 16)\n"
          "  --stop-token-id ID      stop token, repeatable (at most 16)\n"
          "  --ignore-eos            do not stop at the model's end-of-generation tokens\n"
          "  --threads N             CPU threads (default: all cores)\n"
          "  --matmul-mode M         exact (default) or q8: products on quantized weights with\n"
          "                          f32 or int8 activations (docs/engine.md)\n"
          "  --device DEV            cpu (default)\n"
          "  --weight-format F       as-stored (default: the file's formats, used in place on\n"
          "                          the CPU) or f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1:\n"
          "                          every matrix converted at load\n"
          "  --kv-dtype T            KV cache element type: f32 (default on the CPU), f16, bf16\n"
          "  --block-size N          KV block size in tokens (default 16)\n",
          f);
    gen_args d;
    defaults(&d);
    sampling_flags_usage(f, &d.params.sp, NULL); /* --logprobs N: printed to stderr */
}

static int parse_args(int argc, char **argv, gen_args *a)
{
    enum { O_MODEL = 256, O_PROMPT, O_CHAT, O_SYSTEM, O_MAXTOK, O_SEED, O_STOP, O_STOPID,
           O_IGNEOS, O_THREADS, O_DEVICE, O_BLOCK, O_WEIGHTS, O_KVDTYPE, O_MMMODE, O_HELP };
    static const struct option own[] = {
        {"model", required_argument, 0, O_MODEL},
        {"prompt", required_argument, 0, O_PROMPT},
        {"chat", no_argument, 0, O_CHAT},
        {"system", required_argument, 0, O_SYSTEM},
        {"max-tokens", required_argument, 0, O_MAXTOK},
        {"seed", required_argument, 0, O_SEED},
        {"stop", required_argument, 0, O_STOP},
        {"stop-token-id", required_argument, 0, O_STOPID},
        {"ignore-eos", no_argument, 0, O_IGNEOS},
        {"threads", required_argument, 0, O_THREADS},
        {"device", required_argument, 0, O_DEVICE},
        {"kv-dtype", required_argument, 0, O_KVDTYPE},
        {"block-size", required_argument, 0, O_BLOCK},
        {"weight-format", required_argument, 0, O_WEIGHTS},
        {"matmul-mode", required_argument, 0, O_MMMODE},
        {"help", no_argument, 0, O_HELP},
    };
    struct option opts[MAX_OPTIONS];
    int n_opts = (int)(sizeof own / sizeof own[0]);
    memcpy(opts, own, sizeof own);
    sampling_flags_options(NULL, opts, &n_opts, MAX_OPTIONS);
    defaults(a);
    req_params *p = &a->params;
    long l;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int applied = sampling_flags_apply(&p->sp, c, optarg);
        if (applied < 0)
            return 2;
        if (applied)
            continue;
        switch (c) {
        case O_MODEL: snprintf(a->model, sizeof a->model, "%s", optarg); break;
        case O_PROMPT: a->prompt = optarg; break;
        case O_CHAT: a->chat = true; break;
        case O_SYSTEM: a->system = optarg; break;
        case O_MAXTOK:
            if (cli_int("--max-tokens", optarg, 1, 1 << 20, &l)) return 2;
            p->max_tokens = (int)l;
            break;
        case O_SEED:
            if (cli_u64("--seed", optarg, &p->seed)) return 2;
            a->has_seed = true;
            break;
        case O_STOP:
            if (a->n_stops == MAX_STOPS || !*optarg) {
                fprintf(stderr, "--stop: at most %d non-empty stop strings\n", MAX_STOPS);
                return 2;
            }
            a->stops[a->n_stops++] = optarg;
            break;
        case O_STOPID:
            if (p->n_stop_ids == REQ_MAX_STOP_IDS) {
                fprintf(stderr, "--stop-token-id: at most %d\n", REQ_MAX_STOP_IDS);
                return 2;
            }
            if (cli_int("--stop-token-id", optarg, 0, 1L << 30, &l)) return 2;
            p->stop_ids[p->n_stop_ids++] = (int32_t)l;
            break;
        case O_IGNEOS: p->ignore_eos = true; break;
        case O_THREADS:
            if (cli_int("--threads", optarg, 0, 1024, &l)) return 2;
            a->threads = (int)l;
            break;
        case O_DEVICE: a->device = optarg; break;
        case O_WEIGHTS:
            if (loader_weight_format(optarg, NULL, NULL)) {
                fprintf(stderr, "generate: %s\n", deras_errmsg());
                return 2;
            }
            a->weight_format = optarg;
            break;
        case O_KVDTYPE: a->kv_dtype = optarg; break;
        case O_MMMODE:
            if (backend_mm_mode_parse(optarg, &a->matmul_mode)) {
                fprintf(stderr, "generate: --matmul-mode: %s\n", deras_errmsg());
                return 2;
            }
            break;
        case O_BLOCK:
            if (cli_int("--block-size", optarg, 1, 256, &l)) return 2;
            a->block_size = (int)l;
            break;
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "generate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    int kv_dtype;
    if (kv_sizing_dtype(a->device, a->kv_dtype, &kv_dtype)) {
        fprintf(stderr, "--kv-dtype: %s\n", deras_errmsg());
        return 2;
    }
    if (!a->prompt) {
        fprintf(stderr, "generate: --prompt is required\n\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* The prompt as token ids, wrapped in the chat format when asked. *ids is malloc'd. */
static int tokenize_prompt(const gen_args *a, const tokenizer_t *tok, int32_t **ids, int *n)
{
    char *text = NULL;
    const char *src = a->prompt;
    int rc;
    if (a->chat) {
        chat_format cf;
        if ((rc = chat_format_detect(tokenizer_chat_template(tok), &cf)))
            return deras_fail_ctx(rc, "--chat: ");
        chat_msg msgs[2];
        size_t n_msgs = 0;
        const char *sys = a->system ? a->system : (cf.default_system[0] ? cf.default_system : NULL);
        if (sys)
            msgs[n_msgs++] = (chat_msg){"system", sys};
        msgs[n_msgs++] = (chat_msg){"user", a->prompt};
        if ((rc = chat_format_render(&cf, msgs, n_msgs, true, &text)))
            return rc;
        src = text;
    }
    size_t len = strlen(src), need = 0;
    size_t cap = len + 16;
    *ids = malloc(cap * sizeof(int32_t));
    if (!*ids) {
        free(text);
        return deras_fail(DERAS_ENOMEM, "out of memory");
    }
    rc = tokenizer_encode(tok, src, len, true, true, *ids, cap, &need);
    free(text);
    if (rc) {
        free(*ids);
        *ids = NULL;
        return rc;
    }
    *n = (int)need;
    return DERAS_OK;
}

static void print_logprobs(const tokenizer_t *tok, int i, const sample_result *r)
{
    fprintf(stderr, "[%d] %d %s logprob=%.4f |", i, r->token, tokenizer_token_text(tok, r->token),
            r->logprob);
    for (int k = 0; k < r->n_top; k++)
        fprintf(stderr, " %d:%.4f", r->top_ids[k], r->top_logprobs[k]);
    fputc('\n', stderr);
}

/* Streaming state shared with the engine callbacks. */
typedef struct gen_stream {
    const tokenizer_t *tok;
    detok_t *dt;
    stop_matcher_t *sm;
    char *piece, *out;      /* detokenizer piece, stop-matcher output */
    size_t piece_cap, out_cap;
    bool log_probs, stopped_by_string, finished;
    finish_reason why;
    int n_gen, err;
    int min_tokens;         /* stop strings count only in the text after this many tokens */
    double t_first;
} gen_stream;

static void on_token(void *ctx, uint64_t id, int index, const sample_result *r)
{
    gen_stream *g = ctx;
    if (g->n_gen++ == 0)
        g->t_first = cli_now();
    if (g->log_probs)
        print_logprobs(g->tok, g->n_gen - 1, r);
    if (g->stopped_by_string)
        return;
    size_t n_piece, n_out;
    int stop = -1;
    if ((g->err = detok_push(g->dt, r->token, g->piece, g->piece_cap, &n_piece)))
        return;
    if (g->n_gen <= g->min_tokens) /* min_tokens: no stop string yet, the matcher holds none */
        fwrite(g->piece, 1, n_piece, stdout);
    else if ((g->err = stop_matcher_push(g->sm, g->piece, n_piece, g->out, g->out_cap, &n_out,
                                         &stop)))
        return;
    else
        fwrite(g->out, 1, n_out, stdout);
    fflush(stdout);
    g->stopped_by_string = stop >= 0; /* the caller aborts the request after this step */
}

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    gen_stream *g = ctx;
    g->finished = true;
    g->why = end->why;
}

/* Release what the detokenizer and the stop matcher still hold (natural end). */
static int flush_stream(gen_stream *g)
{
    size_t n_piece, n_out;
    int stop = -1, rc;
    if ((rc = detok_flush(g->dt, g->piece, g->piece_cap, &n_piece)))
        return rc;
    if (g->n_gen <= g->min_tokens) { /* the matcher saw nothing */
        fwrite(g->piece, 1, n_piece, stdout);
        return DERAS_OK;
    }
    if ((rc = stop_matcher_push(g->sm, g->piece, n_piece, g->out, g->out_cap, &n_out, &stop)))
        return rc;
    fwrite(g->out, 1, n_out, stdout);
    if (stop >= 0) {
        g->stopped_by_string = true;
        return DERAS_OK;
    }
    if ((rc = stop_matcher_flush(g->sm, g->out, g->out_cap, &n_out)))
        return rc;
    fwrite(g->out, 1, n_out, stdout);
    return DERAS_OK;
}

static int generate(const gen_args *a)
{
    loader_t *l = NULL;
    const tokenizer_t *tok = NULL;
    engine_t *e = NULL;
    int32_t *ids = NULL;
    gen_stream g = {0};
    int n_prompt = 0, rc;
    int progress_last = -100;
    loader_opts lo = {.model = a->model, .device = a->device, .threads = a->threads,
                      .matmul_mode = a->matmul_mode,
                      .block_size = a->block_size, .kv_dtype = a->kv_dtype, .max_seqs = 1,
                      .max_batch_tokens = PREFILL_CHUNK, .max_live_seqs = 1,
                      .progress = cli_progress, .progress_ctx = &progress_last,
                      .weight_format = a->weight_format};
    if ((rc = loader_open(&lo, &l)) || (rc = loader_tokenizer(l, &tok)) ||
        (rc = tokenize_prompt(a, tok, &ids, &n_prompt)))
        goto fail;
    const model_config *cfg = loader_config(l);
    const int max_tokens = a->params.max_tokens;
    if (n_prompt + max_tokens > cfg->max_seq_len) {
        rc = deras_fail(DERAS_ECONTEXT,
                        "context_length_exceeded: prompt %d + max_tokens %d = %d tokens exceeds "
                        "the model's context length %d",
                        n_prompt, max_tokens, n_prompt + max_tokens, cfg->max_seq_len);
        goto fail;
    }
    /* one sequence: a cache just big enough for prompt + max_tokens, and prefill chunks no
     * longer than the prompt */
    if ((rc = loader_size_seqs(l, 1, n_prompt + max_tokens)))
        goto fail;
    kv_sizing_log(loader_kv(l));
    loader_model_opts(l)->max_batch_tokens = n_prompt < PREFILL_CHUNK ? n_prompt : PREFILL_CHUNK;
    g.tok = tok;
    g.log_probs = a->params.sp.n_logprobs > 0;
    g.min_tokens = a->params.sp.min_tokens;
    if ((rc = stop_matcher_new(a->stops, a->n_stops, &g.sm)))
        goto fail;
    if ((rc = detok_new(tok, true, false, &g.dt)))
        goto fail;
    g.piece_cap = detok_max_output(g.dt);
    g.out_cap = stop_matcher_out_cap(g.sm);
    g.piece = malloc(g.piece_cap);
    g.out = malloc(g.out_cap);
    if (!g.piece || !g.out) {
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
        goto fail;
    }
    engine_callbacks cb = {on_token, on_finish, &g};
    if ((rc = loader_build_model(l)) || (rc = loader_build_engine(l, &cb, NULL, NULL)))
        goto fail;
    e = loader_engine(l);
    engine_request req = {.id = 1, .prompt = ids, .n_prompt = n_prompt, .params = a->params};
    if (!a->has_seed)
        req.params.seed = (uint64_t)(cli_now() * 1e9);
    if ((rc = engine_add(e, &req)))
        goto fail;

    double t0 = cli_now();
    while (engine_has_work(e)) {
        if ((rc = engine_step(e, NULL)) || (rc = g.err))
            goto fail;
        if (g.stopped_by_string && !g.finished && (rc = engine_abort(e, req.id)))
            goto fail;
    }
    if (!g.stopped_by_string && (rc = flush_stream(&g)))
        goto fail;
    double t2 = cli_now(), t1 = g.n_gen ? g.t_first : t2;
    const char *finish = finish_reason_name(g.stopped_by_string ? FINISH_STOP : g.why);
    fputc('\n', stdout);
    fflush(stdout);
    fprintf(stderr,
            "prompt: %d tokens in %.3f s (%.1f tok/s); generation: %d tokens in %.3f s "
            "(%.1f tok/s decode); finish: %s\n",
            n_prompt, t1 - t0, n_prompt / (t1 - t0), g.n_gen, t2 - t1,
            g.n_gen > 1 ? (g.n_gen - 1) / (t2 - t1) : 0.0, finish);
    rc = DERAS_OK;

fail:
    if (rc)
        fprintf(stderr, "deras generate: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
    free(g.piece);
    free(g.out);
    free(ids);
    stop_matcher_destroy(&g.sm);
    detok_destroy(&g.dt);
    loader_destroy(&l);
    return rc ? 1 : 0;
}

int cmd_generate(int argc, char **argv)
{
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    return rc ? rc : generate(&a);
}
