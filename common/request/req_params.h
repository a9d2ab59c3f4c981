/* SPDX-License-Identifier: Apache-2.0 */
/* req_params.h - what a request asks of the engine, as one struct from the protocol decoder
 * to engine_add.
 *
 * The router decodes a client's request into a req_params (protocol.h), keeps it in its
 * record of the request (router/requests.h), sends it to a worker in SUBMIT
 * (worker_proto.h), and the worker hands it to engine_add (engine/engine.h): every hop
 * passes the struct whole, none copies field by field. What is not here stays where it is
 * used: the prompt (text in the router, ids from the router on), stop strings and
 * streaming (the router's text side), ids, deadlines.
 *
 * req_params_validate is the one statement of the rules that tie fields together; the
 * decoders check each field as it arrives (with the wire's codes) and call it after the
 * walk, the engine calls it with the vocabulary. Costs: O(stop ids + sampling
 * parameters); nothing allocates.
 */
#ifndef DERAS_REQ_PARAMS_H
#define DERAS_REQ_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/request/sampling.h"

#define REQ_MAX_N 16           /* samples per request */
#define REQ_MAX_STOP_IDS 16
#define REQ_MAX_SPEC_TOKENS 16 /* drafts per step a request may ask for */
#define REQ_DEFAULT_MAX_TOKENS 256

typedef struct req_params {
    int max_tokens;               /* tokens to generate at most, >= 1 */
    int n;                        /* samples, 1 .. REQ_MAX_N; sample i draws from seed + i */
    uint64_t seed;
    bool ignore_eos;              /* the model's end-of-generation tokens do not stop */
    int n_stop_ids;
    int32_t stop_ids[REQ_MAX_STOP_IDS]; /* token ids that end a sample */
    int spec_tokens;              /* drafts per step at most: 0 the worker's default, -1 no
                                     speculation, else 1 .. REQ_MAX_SPEC_TOKENS */
    sampling_params sp;
} req_params;

/* The protocol's defaults: max_tokens 256, n 1, seed 0, no stop ids, the worker's
 * speculation, sampling_params_init. */
void req_params_init(req_params *p);

/* Every field in its range (vocab > 0: top_k and the logit-bias ids inside the
 * vocabulary; see sampling_params_validate) and min_tokens at most max_tokens.
 * DERAS_ERANGE naming the field and its bounds. */
int req_params_validate(const req_params *p, int vocab);

#endif
