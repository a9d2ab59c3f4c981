/* SPDX-License-Identifier: Apache-2.0 */
/* make_proto_corpus.c - writes the seed corpora of fuzz_protocol, fuzz_worker_proto and
 * fuzz_admin_proto:
 * one valid frame of every message type, made by the encoders themselves, so the corpus
 * follows the protocol when it changes. Usage (from the fuzz build):
 *   build-fuzz/tests/fuzz/make_proto_corpus tests/fuzz/corpus
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "common/wire/admin_proto.h"
#include "common/wire/protocol.h"
#include "common/base/status.h"
#include "common/wire/worker_proto.h"

static const char *root;

static void put(const char *target, const char *name, const void *buf, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) {
        fprintf(stderr, "make_proto_corpus: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

#define OK(x)                                                                                \
    do {                                                                                     \
        if ((x) != DERAS_OK) {                                                               \
            fprintf(stderr, "make_proto_corpus: %s: %s\n", #x, deras_errmsg());              \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static void client_corpus(void)
{
    const char *t = "fuzz_protocol";
    proto_encoder_t *e = NULL;
    OK(proto_encoder_new(&e));
    const void *buf;
    size_t len;
    static const int32_t ids[] = {1, 15043, 3186, 29991};
    proto_request r = {.prompt = "Write a haiku about the sea.", .prompt_len = 28,
                       .stream = true, .add_special_tokens = true, .has_seed = true,
                       .n_stops = 2, .stops = {"\n\n", "ü"}, .stop_lens = {2, 2},
                       .deadline_ms = 60000};
    req_params *p = &r.params;
    req_params_init(p);
    p->max_tokens = 64;
    p->n = 2;
    p->seed = 42;
    p->n_stop_ids = 1;
    p->stop_ids[0] = 2;
    p->ignore_eos = true;
    p->sp = (sampling_params){.temperature = 0.7f, .top_p = 0.9f, .top_k = 40, .min_p = 0.05f,
                              .repetition_penalty = 1.1f, .presence_penalty = 0.5f,
                              .frequency_penalty = -0.5f, .n_logprobs = 2, .min_tokens = 4};
    OK(logit_bias_add(&p->sp.logit_bias, 13, -100.0f));
    OK(logit_bias_add(&p->sp.logit_bias, 7, 2.5f));
    strcpy(r.id, "req-1");
    OK(proto_encode_request(e, &r, &buf, &len));
    put(t, "request_text", buf, len);
    proto_request q = {.prompt_ids = ids, .n_prompt_ids = 4, .add_special_tokens = true};
    req_params_init(&q.params);
    strcpy(q.id, "req-2");
    OK(proto_encode_request(e, &q, &buf, &len));
    put(t, "request_ids", buf, len);
    OK(proto_encode_cancel(e, "req-1", &buf, &len));
    put(t, "cancel", buf, len);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "type", 4);
    msgpack_pack_str_with_body(&pk, "ping", 4);
    msgpack_pack_str_with_body(&pk, "v", 1);
    msgpack_pack_int(&pk, PROTO_VERSION);
    put(t, "ping", sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);

    proto_logprob lps[2] = {{.token_id = 15043, .logprob = -0.25f, .n_top = 2,
                             .top_ids = {15043, 10994}, .top_logprobs = {-0.25f, -1.75f}},
                            {.token_id = 3186, .logprob = -0.5f, .n_top = 1, .top_ids = {3186},
                             .top_logprobs = {-0.5f}}};
    OK(proto_encode_chunk(e, "req-1", 0, ids + 1, 2, "Hello world", 11, lps, &buf, &len));
    put(t, "chunk", buf, len);
    proto_usage u = {.prompt_tokens = 12, .completion_tokens = 2, .queue_ms = 0.4,
                     .ttft_ms = 35.5, .total_ms = 80.25};
    OK(proto_encode_final(e, "req-1", 0, FINISH_STOP, NULL, &u, NULL, 0, NULL, 0, NULL, &buf, &len));
    put(t, "final_stream", buf, len);
    OK(proto_encode_final(e, "req-2", 1, FINISH_ABORT, "cancelled", &u, "Hello world", 11, ids + 1, 2,
                          lps, &buf, &len));
    put(t, "final_whole", buf, len);
    OK(proto_encode_error(e, "req-3", PE_VALUE_OUT_OF_RANGE,
                          "temperature must be in [0, 100], got 250", &buf, &len));
    put(t, "error", buf, len);
    proto_worker_status w[2] = {{.name = "w0", .state = "ready", .running = 3, .waiting = 1,
                                 .kv_blocks_free = 100, .kv_blocks_total = 512, .served = 77},
                                {.name = "w1", .state = "draining"}};
    OK(proto_encode_pong(e, w, 2, &buf, &len));
    put(t, "pong", buf, len);
    proto_encoder_destroy(&e);
}

static void worker_corpus(void)
{
    const char *t = "fuzz_worker_proto";
    wp_encoder_t *e = NULL;
    OK(wp_encoder_new(&e));
    const void *buf;
    size_t len;
    wp_hello h = {.name = "w0", .device = "cuda:0", .model = "smollm2-135m.gguf",
                  .vocab_size = 49152, .max_model_len = 8192, .tp_size = 1,
                  .kv_blocks_total = 1024, .block_size = 16, .max_seqs = 64, .pid = 1234};
    OK(wp_encode_hello(e, &h, &buf, &len));
    put(t, "hello", buf, len);
    OK(wp_encode_welcome(e, 250, &buf, &len));
    put(t, "welcome", buf, len);
    OK(wp_encode_refuse(e, "model mismatch", &buf, &len));
    put(t, "refuse", buf, len);
    wp_load l = {.phase = WP_PHASE_READY, .running = 2, .waiting = 1, .queued_tokens = 100,
                 .running_tokens = 900,
                 .kv_blocks_free = 800, .kv_blocks_total = 1024, .tokens_per_s = 55.5,
                 .steps = 1000, .preemptions = 1, .prefix_hit_tokens = 64,
                 .prefix_query_tokens = 128, .prompt_tokens = 5000, .generated_tokens = 7000};
    OK(wp_encode_heartbeat(e, &l, &buf, &len));
    put(t, "heartbeat", buf, len);
    static const int32_t ids[] = {1, 9690, 198, 2683};
    wp_submit s = {.rid = 7, .prompt_ids = ids, .n_prompt = 4};
    req_params_init(&s.params);
    s.params.max_tokens = 32;
    s.params.n = 2;
    s.params.seed = 99;
    s.params.n_stop_ids = 1;
    s.params.stop_ids[0] = 2;
    s.params.sp.top_k = 20;
    s.params.sp.n_logprobs = 2;
    s.params.sp.temperature = 0.8f;
    s.params.sp.top_p = 0.95f;
    s.params.sp.min_tokens = 3;
    OK(logit_bias_add(&s.params.sp.logit_bias, 2, 5.0f));
    OK(wp_encode_submit(e, &s, &buf, &len));
    put(t, "submit", buf, len);
    OK(wp_encode_abort(e, 7, &buf, &len));
    put(t, "abort", buf, len);
    OK(wp_encode_reject(e, 8, PE_BUSY, "engine full", &buf, &len));
    put(t, "reject", buf, len);
    OK(wp_encode_drain(e, &buf, &len));
    put(t, "drain", buf, len);
    OK(wp_encode_shutdown(e, &buf, &len));
    put(t, "shutdown", buf, len);
    OK(wp_encode_bye(e, "stopped at once (second SIGTERM)", &buf, &len));
    put(t, "bye", buf, len);
    wp_step_begin(e);
    wp_token a = {.rid = 7, .index = 0, .lp = {.token_id = 504}};
    wp_token b = {.rid = 7, .index = 1, .lp = {.token_id = 28, .logprob = -0.7f, .n_top = 2,
                                               .top_ids = {28, 29}, .top_logprobs = {-0.7f, -1.2f}}};
    wp_finish f = {.rid = 9, .index = 0, .reason = 1, .n_prompt = 12, .n_generated = 32};
    OK(wp_step_add_token(e, &a));
    OK(wp_step_add_token(e, &b));
    OK(wp_step_add_finish(e, &f));
    OK(wp_step_end(e, &l, &buf, &len));
    put(t, "step", buf, len);
    wp_encoder_destroy(&e);
}

static void admin_corpus(void)
{
    const char *t = "fuzz_admin_proto";
    admin_codec_t *c = NULL;
    OK(admin_codec_new(&c));
    const void *buf;
    size_t len;
    static const struct { const char *name; admin_request q; } reqs[] = {
        {"status", {.type = ADMIN_STATUS, .timeout_ms = -1, .wait = true}},
        {"health", {.type = ADMIN_HEALTH, .timeout_ms = -1, .wait = true}},
        {"metrics", {.type = ADMIN_METRICS, .timeout_ms = -1, .wait = true}},
        {"drain", {.type = ADMIN_DRAIN, .worker = "w0", .timeout_ms = 30000, .wait = true}},
        {"drain_all", {.type = ADMIN_DRAIN, .all = true, .timeout_ms = -1, .wait = false}},
        {"undrain", {.type = ADMIN_UNDRAIN, .worker = "w1", .timeout_ms = -1, .wait = true}},
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        OK(admin_encode_request(c, &reqs[i].q, &buf, &len));
        put(t, reqs[i].name, buf, len);
    }
    admin_codec_destroy(&c);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_proto_corpus CORPUS_DIR\n");
        return 2;
    }
    root = argv[1];
    client_corpus();
    worker_corpus();
    admin_corpus();
    return 0;
}
