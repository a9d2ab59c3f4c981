/* SPDX-License-Identifier: Apache-2.0 */
/* proto_chat.h - the chat fields of a client request (`messages`, `tools`,
 * `chat_template_kwargs`) between msgpack and JSON values (internal to the wire room:
 * protocol.c decodes, protocol_enc.c encodes; not a public header).
 *
 * A chat template reads the conversation as transformers hands it over: lists and dicts of
 * strings, numbers, booleans and null. The decoder checks the parts of that shape the
 * protocol fixes (docs/protocol.md, "Chat"): every message a map with a known role, content
 * a string or a list of text parts, the other keys each with its type; tool calls, tool
 * definitions and the template's keyword arguments are free-form values (any nesting the
 * frame's scan allowed, map keys strings, numbers finite, no bin or ext). What passes is
 * converted to jansson values, which tmpl_render takes as its context.
 *
 * Cost: O(objects) time; one jansson allocation per container, string and number, so at
 * most the frame scan's object cap of them (about 100 bytes each), and the strings' bytes.
 * Runs once per chat request, never per token.
 */
#ifndef DERAS_PROTO_CHAT_H
#define DERAS_PROTO_CHAT_H

#include <jansson.h>
#include <msgpack.h>

#include "protocol.h"

/* Decode `messages`: an array of 1..PROTO_MAX_MESSAGES messages. On success *out is a new
 * JSON array the caller owns; on failure *out is NULL, err is filled (invalid_field,
 * limit_exceeded, invalid_utf8, value_out_of_range; internal on out of memory) and the
 * status is DERAS_EFORMAT (DERAS_ENOMEM out of memory). */
int proto_chat_messages(const msgpack_object *o, json_t **out, proto_error *err);

/* Decode `tools`: an array of at most PROTO_MAX_TOOLS maps (free-form). Same contract. */
int proto_chat_tools(const msgpack_object *o, json_t **out, proto_error *err);

/* Decode `chat_template_kwargs`: a map of at most PROTO_MAX_TEMPLATE_KWARGS string keys to
 * free-form values, none of them one of the names the router sets itself (messages, tools,
 * add_generation_prompt, bos_token, eos_token). Same contract. */
int proto_chat_kwargs(const msgpack_object *o, json_t **out, proto_error *err);

/* Decode a free-form map named `field` (a request's json_schema): any nesting the frame's
 * scan allowed, string keys, finite numbers. Same contract. */
int proto_chat_map(const msgpack_object *o, const char *field, json_t **out, proto_error *err);

/* Pack a JSON value as msgpack (the encoder side: what the decoders above take back).
 * msgpack-c's 0 or -1 (out of memory). O(size of j). */
int proto_chat_pack(msgpack_packer *pk, const json_t *j);

#endif
