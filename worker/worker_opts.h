/* SPDX-License-Identifier: Apache-2.0 */
/* worker_opts.h - what a deras-worker is told: options, their defaults, and their checks.
 *
 * The struct is filled by deras-worker's argument parser (worker/main.c) or by a test,
 * then checked in one place, before anything is loaded, with messages that name the
 * option as the command line spells it. worker_server_new() checks again.
 */
#ifndef DERAS_WORKER_OPTS_H
#define DERAS_WORKER_OPTS_H

#include <stdbool.h>

typedef struct worker_opts {
    const char *model;           /* checkpoint: .gguf file or Hugging Face directory (required) */
    const char *router;          /* the router's worker endpoint; NULL: endpoints_default_workers */
    const char *name;            /* routing id, 1..64 of [A-Za-z0-9._:@-]; NULL: "w<pid>" */
    const char *device;          /* "cpu" or "cuda:N" */
    int threads;                 /* CPU threads, 0: all cores */
    const char *weight_format;   /* --weight-format (loader_weight_format); NULL: as-stored */
    int matmul_mode;             /* enum backend_mm_mode: exact (default) or q8 */
    const char *kv_cache_memory; /* "4GiB" or a fraction of available memory, "0.4" */
    const char *kv_dtype;        /* KV cache element type: f32, f16, bf16 (kv_sizing_dtype);
                                    NULL: the device's default (f32 on the CPU) */
    int max_seqs;                /* sequences per step */
    int max_batch_tokens;        /* tokens per step, >= max_seqs */
    int max_live_seqs;           /* sequences queued + running; 0: 4 x max_seqs */
    int block_size;              /* KV block size in tokens */
    bool prefix_caching;
    int tp_rank, tp_size;        /* tensor-parallel rank and group size (worker/group.h) */
    double tp_timeout_s;         /* group start-up, and any one collective or ring wait */
    double handshake_timeout_s;  /* wait for WELCOME */
    double drain_timeout_s;      /* finishing in-flight work at a stop, then abort */
    int heartbeat_ms;            /* until WELCOME says otherwise */
    int stop_fd;                 /* readable fd: each byte is one stop request; -1: none */
    const char *spec_proposer;   /* speculative decoding: none, ngram, self:L, draft:PATH
                                    (engine/speculative.h); NULL: none */
    int spec_k;                  /* most drafts per sequence per step */
    int spec_max_batch;          /* greedy speculation only while running <= this; 0: always */
    const char *curve_server_key;/* the router's CURVE public key (40 Z85 characters): the link
                                    and heartbeat sockets are CURVE clients; NULL: plain */
    const char *curve_secret_key;/* this worker's CURVE secret key (Z85), the one the router
                                    allows; NULL with a server key: a fresh key pair */
    int test_step_delay_ms;      /* TEST-ONLY, 0 (off) unless a test sets it: every serving step
                                    also sleeps this long (0..600000), so a test can make steps
                                    as long as it needs on any machine. deras-worker reads it
                                    from $DERAS_TEST_STEP_DELAY_MS only; no option sets it */
} worker_opts;

/* The defaults deras-worker documents: device cpu, budget "0.4", 64 sequences, 512 batch
 * tokens, block size 16, prefix caching, tp 0/1 with a 60 s group timeout, handshake
 * 10 s, drain 30 s, heartbeat 1000 ms, stop_fd -1, no speculation (k 4, cut-off
 * SPEC_DEFAULT_MAX_BATCH when on), no test step delay. model, router and name NULL. */
void worker_opts_default(worker_opts *o);

/* Check every option without loading anything. DERAS_EINVAL with a message naming the
 * option (as deras-worker spells it) and the accepted values; --tp-size above 1 needs
 * --name (the ranks find their group by it). */
int worker_opts_check(const worker_opts *o);

/* The speculation options o asks for (--spec-proposer, --spec-k, --spec-max-batch), checked;
 * DERAS_EINVAL naming the option. draft paths point into o->spec_proposer. */
struct spec_opts;
int worker_opts_spec(const worker_opts *o, struct spec_opts *so);

#endif
