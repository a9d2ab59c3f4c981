/* SPDX-License-Identifier: Apache-2.0 */
/* oai_chunk.h - what a load generator reads from one OpenAI streaming chunk (the JSON of a
 * server-sent `data:` event), without building the JSON tree.
 *
 * `deras bench --http` reads every chunk of every request; a full parse (jansson: a value
 * allocated per member) was a third of the client's CPU on the machine the server shares
 * with it. This scanner walks the text once, checks it is one JSON object (strings with
 * their escapes, numbers, literals, nesting at most OAI_CHUNK_MAX_DEPTH) and picks out
 * the few members the bench needs; it allocates nothing. An "error" member is only
 * flagged: such a rare event is read with a full parser.
 *
 * Costs: O(length), no allocation.
 */
#ifndef DERAS_TOOLS_OAI_CHUNK_H
#define DERAS_TOOLS_OAI_CHUNK_H

#include <stdbool.h>
#include <stddef.h>

#define OAI_CHUNK_MAX_DEPTH 64

typedef struct oai_chunk {
    bool error;                  /* the object has an "error" member */
    const char *id;              /* "id": its escaped text inside the quotes; NULL: none */
    size_t id_len;
    bool choice;                 /* "choices" starts with an object */
    const char *finish;          /* its "finish_reason" (escaped text); NULL: null, absent */
    size_t finish_len;
    bool text;                   /* its "text" or "delta"."content" is a non-empty string */
    bool usage;                  /* a "usage" object */
    long long prompt_tokens, completion_tokens; /* its integers; -1 when absent */
} oai_chunk;

/* Scan p[0..n) (one JSON object, whitespace around it allowed). DERAS_OK with *out
 * filled, or DERAS_EFORMAT (not one well-formed object, or nested too deep). Members of
 * an unexpected type read as absent; of a repeated member, the last counts. */
int oai_chunk_scan(const char *p, size_t n, oai_chunk *out);

#endif
