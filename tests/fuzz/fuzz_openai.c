/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_openai.c - libFuzzer target for the OpenAI-compatible request parser
 * (router/openai_request.h, openai_response.h).
 *
 * The first byte picks the kind (completions or chat), the rest is the body. A refusal must
 * be DERAS_EFORMAT with a code, a non-empty message and nothing left to free; an accepted
 * request must hold exactly one prompt form, parameters that req_params_validate accepts,
 * caps respected, and logprobs consistent. Every output encoder then runs over the
 * accepted request's stop strings as text, and what it writes must parse back as JSON.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "router/openai_response.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            abort();                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    oai_kind kind = data[0] & 1 ? OAI_CHAT : OAI_COMPLETIONS;
    proto_limits lim;
    proto_limits_default(&lim);
    oai_request r;
    oai_error e;
    int rc = oai_parse(kind, (const char *)data + 1, size - 1, &lim, &r, &e);
    if (rc) {
        CHECK(rc == DERAS_EFORMAT);
        CHECK(e.code > PE_NONE && e.code < PE_N_CODES && e.message[0]);
        CHECK(!r.root && !r.messages && !r.ids);
        return 0;
    }
    const proto_request *q = &r.q;
    int forms = !!q->prompt + !!q->prompt_ids + !!q->messages;
    CHECK(forms == 1);
    CHECK(kind == OAI_CHAT ? q->messages != NULL : q->messages == NULL);
    CHECK(req_params_validate(&q->params, 0) == DERAS_OK);
    CHECK(q->params.n >= 1 && q->params.n <= REQ_MAX_N);
    CHECK(q->params.max_tokens >= 1 && q->params.max_tokens <= lim.max_tokens);
    CHECK(q->n_stops >= 0 && q->n_stops <= PROTO_MAX_STOPS);
    CHECK(!r.logprobs || q->params.sp.n_logprobs >= 1);
    CHECK(r.top_logprobs >= 0 && r.top_logprobs <= SAMPLING_MAX_LOGPROBS);

    oai_buf b = {0}, choices = {0};
    for (int i = 0; i < q->n_stops; i++) {
        oai_piece p = {.index = i, .text = q->stops[i], .n_text = q->stop_lens[i],
                       .finish = i & 1 ? "stop" : NULL, .role = i == 0};
        oai_put_choice(&choices, kind, NULL, &p, i == 0);
        oai_put_chunk(&b, kind, "id", 1, r.model, NULL, &p);
    }
    b.n = 0;
    oai_put_response(&b, kind, "id", 1, r.model, &choices, 1, 2);
    oai_buf_put(&b, "", 1);
    json_t *v = b.failed ? NULL : json_loads(b.p, 0, NULL);
    CHECK(b.failed || v);
    json_decref(v);
    oai_buf_free(&b);
    oai_buf_free(&choices);
    oai_request_free(&r);
    return 0;
}
