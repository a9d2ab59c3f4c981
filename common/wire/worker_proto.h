/* SPDX-License-Identifier: Apache-2.0 */
/* worker_proto.h - the internal protocol between deras-router and deras-worker.
 *
 * Transport: ZeroMQ. The router binds a ROUTER socket for workers (ipc:// by default); a
 * worker group's leader connects a DEALER whose routing id is the worker's name. Frames
 * are single msgpack maps with a "type" key, decoded with the same strict, bounded
 * checks as the client protocol (a router must survive a broken or hostile worker too).
 * Workers see token ids only; text never crosses this link.
 *
 * Life of a worker connection:
 *   worker -> HELLO (its identity, model and capacity)
 *   router -> WELCOME (or REFUSE with a reason: version, model mismatch, duplicate name)
 *   worker -> HEARTBEAT every heartbeat_ms with its load
 *   (the load's phase says "starting" until the worker's warm-up step ran, then "ready";
 *   "draining" once it takes no new requests: the router dispatches only to "ready")
 *   router -> SUBMIT / ABORT; worker -> STEP (every token and finish of one engine step,
 *   in one frame) and REJECT (a submit the engine refused: busy, bad request).
 * A router that restarted does not know its workers: it answers any frame other than
 * HELLO from an unknown routing id with REFUSE "register", and the worker (which
 * heartbeats every heartbeat_ms, so this happens within one interval) aborts what it had
 * in flight and says HELLO again. A HELLO from a known name is a reconnect (same pid) or a
 * restart (new pid). While one engine step runs longer than the heartbeat interval, the
 * worker's pulse thread (worker/pulse.h) sends its heartbeat from routing id "<name>/hb";
 * the router counts those as liveness only.
 *
 * A worker that exits says BYE (reason) as its last frame: the router treats whatever of
 * its requests the worker still held as on a dead worker at once (re-dispatched if the
 * client heard nothing yet, else ended with worker_failed naming the reason), rather
 * than after the silence timeout. A worker that vanishes without BYE (kill -9, a crash,
 * a hang) is found by that timeout.
 *
 * Request ids on this link (rid) are the router's own 64-bit ids, never client strings.
 */
#ifndef DERAS_WORKER_PROTO_H
#define DERAS_WORKER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/request/finish_reason.h"
#include "common/request/req_params.h"
#include "common/request/spec_counters.h"
#include "common/wire/protocol.h"

#define WPROTO_VERSION 1
#define WPROTO_MAX_NAME 64
#define WPROTO_MAX_STEP_ENTRIES (1u << 16) /* tokens (and finishes) in one STEP */
#define WPROTO_LOAD_FIELDS 14 /* pairs of a load map before the speculation counters */
#define WPROTO_MAX_GRAMMAR (256u << 10) /* bytes of a SUBMIT's GBNF: the grammar compiler's
                                           source limit (common/grammar/grammar.h) */

enum wproto_type {
    WP_HELLO = 1,    /* worker -> router */
    WP_WELCOME,      /* router -> worker */
    WP_REFUSE,       /* router -> worker */
    WP_HEARTBEAT,    /* worker -> router */
    WP_SUBMIT,       /* router -> worker */
    WP_ABORT,        /* router -> worker */
    WP_STEP,         /* worker -> router */
    WP_REJECT,       /* worker -> router */
    WP_DRAIN,        /* router -> worker: stop taking work, finish in-flight (operations) */
    WP_SHUTDOWN,     /* router -> worker: exit after draining */
    WP_BYE,          /* worker -> router: exiting now; what it still ran is lost (reason) */
};

typedef struct wp_hello {
    char name[WPROTO_MAX_NAME + 1];   /* unique per worker group, e.g. "w0" */
    char device[32];                  /* "cpu", "cuda:0" */
    char model[256];                  /* model path or name as loaded */
    int vocab_size, max_model_len, tp_size;
    int kv_blocks_total, block_size, max_seqs;
    int32_t pid;
    char spec[16];                    /* speculative proposer kind: "none", "ngram", "self",
                                         "draft"; optional on the wire ("" when absent) */
} wp_hello;

/* What a worker is doing, in every load report. A worker is ready only after its model is
 * loaded and one warm-up step ran; it reports draining once it takes no new requests (DRAIN
 * from the router, or a signal). */
enum wp_phase { WP_PHASE_STARTING = 0, WP_PHASE_READY, WP_PHASE_DRAINING };

typedef struct wp_load {
    enum wp_phase phase;              /* "starting", "ready", "draining" on the wire */
    int running, waiting;             /* sequences */
    int64_t queued_tokens;            /* prompt tokens not yet computed */
    int64_t running_tokens;           /* tokens of running sequences */
    int kv_blocks_free, kv_blocks_total;
    double tokens_per_s;              /* generated, recent average */
    uint64_t steps, preemptions, prefix_hit_tokens, prefix_query_tokens;
    uint64_t prompt_tokens, generated_tokens;
    spec_counters spec;               /* speculative decoding since the start (optional on
                                         the wire, 0 when absent) */
} wp_load;

typedef struct wp_submit {
    uint64_t rid;
    const int32_t *prompt_ids;        /* into the decoder's storage */
    int n_prompt;
    req_params params;                /* for engine_add; spec_tokens 0 is sent as absent */
    const char *grammar;              /* structured output: GBNF text (not NUL-terminated,
                                         into the decoder's storage), NULL: none; optional
                                         on the wire ("grammar", absent when NULL) */
    size_t grammar_len;
} wp_submit;

/* One token of one sample, with its logprobs when the request asked for them. */
typedef struct wp_token {
    uint64_t rid;
    int index;
    proto_logprob lp;                 /* lp.token_id is the token; n_top 0 if not asked */
} wp_token;

typedef struct wp_finish {
    uint64_t rid;
    int index;
    finish_reason reason;             /* FINISH_STOP .. FINISH_LAST_SAMPLE, by number */
    int n_prompt, n_generated;
    spec_counters spec;               /* the sample's speculation (0 when it had none) */
} wp_finish;

typedef struct wp_msg {
    enum wproto_type type;
    wp_hello hello;                   /* HELLO */
    char text[256];                   /* REFUSE and BYE reason, REJECT message */
    enum proto_error_code code;       /* REJECT */
    uint64_t rid;                     /* ABORT, REJECT */
    wp_load load;                     /* HEARTBEAT, and in every STEP */
    wp_submit submit;                 /* SUBMIT */
    const wp_token *tokens;           /* STEP: into the decoder's storage */
    int n_tokens;
    const wp_finish *finishes;
    int n_finishes;
    int heartbeat_ms;                 /* WELCOME: how often to heartbeat */
} wp_msg;

typedef struct wp_decoder wp_decoder_t;

/* max_message_bytes bounds every frame (a STEP of a full batch with logprobs fits easily
 * in the default 16 MiB; 0: that default). DERAS_ENOMEM. */
int wp_decoder_new(size_t max_message_bytes, wp_decoder_t **out);
void wp_decoder_destroy(wp_decoder_t **d);
int wp_decode(wp_decoder_t *d, const void *buf, size_t len, wp_msg *out, proto_error *err);

/* Encoders: each replaces the encoder's buffer with one message. */
typedef struct wp_encoder wp_encoder_t;
/* DERAS_ENOMEM. */
int wp_encoder_new(wp_encoder_t **out);
void wp_encoder_destroy(wp_encoder_t **e);

int wp_encode_hello(wp_encoder_t *e, const wp_hello *h, const void **buf, size_t *len);
int wp_encode_welcome(wp_encoder_t *e, int heartbeat_ms, const void **buf, size_t *len);
int wp_encode_refuse(wp_encoder_t *e, const char *reason, const void **buf, size_t *len);
int wp_encode_heartbeat(wp_encoder_t *e, const wp_load *l, const void **buf, size_t *len);
int wp_encode_submit(wp_encoder_t *e, const wp_submit *s, const void **buf, size_t *len);
int wp_encode_abort(wp_encoder_t *e, uint64_t rid, const void **buf, size_t *len);
int wp_encode_reject(wp_encoder_t *e, uint64_t rid, enum proto_error_code code, const char *message,
                     const void **buf, size_t *len);
int wp_encode_drain(wp_encoder_t *e, const void **buf, size_t *len);
int wp_encode_shutdown(wp_encoder_t *e, const void **buf, size_t *len);
int wp_encode_bye(wp_encoder_t *e, const char *reason, const void **buf, size_t *len);

/* STEP is built incrementally during an engine step (no allocation after warm-up):
 * begin, add tokens and finishes as the engine reports them, then finish with the load. */
void wp_step_begin(wp_encoder_t *e);
int wp_step_add_token(wp_encoder_t *e, const wp_token *t);
int wp_step_add_finish(wp_encoder_t *e, const wp_finish *f);
int wp_step_end(wp_encoder_t *e, const wp_load *l, const void **buf, size_t *len);
bool wp_step_empty(const wp_encoder_t *e);

/* "starting", "ready", "draining" ("?" for anything else). */
const char *wp_phase_name(enum wp_phase p);

#endif
