/* SPDX-License-Identifier: Apache-2.0 */
/* chat.h - the model's chat: turning a chat request's messages into the prompt text the
 * model was trained on, and the tokens that end its turn.
 *
 * The model's own chat template (GGUF tokenizer.chat_template; a Hugging Face directory's
 * chat_template.jinja or tokenizer_config.json chat_template: tokenizer_chat_template) is
 * compiled once, when the router starts, by the template interpreter (common/template); a
 * template it cannot compile stops the router with the construct and the line, so no
 * conversation is ever rendered some other way. A render gets what transformers'
 * apply_chat_template passes: messages, tools (null when none), documents (null),
 * add_generation_prompt, bos_token and eos_token (the vocabulary's text of those tokens,
 * where the model has them), then chat_template_kwargs over them. Its text is tokenized
 * without adding BOS/EOS: the template writes them.
 *
 * A model without a template falls back to a built-in format (common/tokenizer/chat.h)
 * chosen by the special tokens its vocabulary has: ChatML (<|im_start|>, <|im_end|>) or
 * Llama 3 (<|start_header_id|>, <|end_header_id|>, <|eot_id|>); those render plain
 * system/user/assistant turns (no tools) and leave BOS to the tokenizer. Without either,
 * chat requests are refused (chat_unsupported).
 *
 * End of turn: the model's end-of-generation ids (tokenizer_is_eog) and the turn-closing
 * tokens its template writes (<|im_end|>, <|eot_id|>, <|eom_id|>, <|end|>, <end_of_turn>)
 * are added to a chat request's stop_token_ids, so a chat ends with finish_reason "stop"
 * at the end of the assistant's turn even where the model's EOS is another token.
 *
 * Costs: start-up compiles the template (O(template size)); a render converts the request's
 * JSON and runs the template under the interpreter's bounds (8 MiB of output, 10^7 steps,
 * about a second at most), allocating per request, never per token.
 */
#ifndef DERAS_ROUTER_CHAT_H
#define DERAS_ROUTER_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/request/req_params.h"
#include "common/tokenizer/tokenizer.h"
#include "common/wire/protocol.h"
#include "router/tool_calls.h"

typedef struct chat chat_t;

/* The chat of the model whose tokenizer is `tok` (borrowed; must outlive the chat), with
 * its own chat template, or with `source` (a NUL-terminated template, copied as compiled:
 * deras-router's --chat-template, vLLM's option of that name) instead when not NULL. *out
 * is NULL first; DERAS_OK with the chat (a model with no template and no built-in format
 * still gets one: it refuses chats). A template the interpreter refuses is its status
 * (DERAS_EFORMAT, DERAS_EUNSUPPORTED) with "chat template: template line N: ..." in the
 * message; DERAS_ENOMEM; DERAS_EINVAL for a NULL argument. O(template size). */
int chat_new(const tokenizer_t *tok, const char *source, chat_t **out);

/* How the template teaches the model to call tools (tool_calls.h; none without a
 * template). */
tool_style chat_tool_style(const chat_t *c);
void chat_destroy(chat_t **c);

/* What renders chats, for the start-up log: "the model's chat template (N bytes)",
 * "built-in ChatML format (the model has no chat template)", or "none ...". */
const char *chat_describe(const chat_t *c);

/* Render the conversation of q (q->messages set) as prompt text. PE_NONE with *text (a
 * malloc'd string the caller frees, *len bytes) and *add_special (whether the tokenizer
 * adds BOS/EOS: only for a built-in format); otherwise the code (chat_unsupported,
 * chat_template_error, internal for out of memory) with msg filled and *text NULL. Cost:
 * bounded by the template's limits; O(conversation) for a built-in format. */
enum proto_error_code chat_render(const chat_t *c, const proto_request *q, char **text,
                                  size_t *len, bool *add_special, char *msg, size_t cap);

/* Add the end-of-turn ids to p->stop_ids, each once (ids already there are not repeated);
 * none for an ignore_eos request, which in a chat runs past the turn's end as vLLM's does
 * (its own stop_token_ids still stop it). DERAS_OK, or DERAS_ERANGE when they do not fit
 * REQ_MAX_STOP_IDS (p unchanged). O(16^2). */
int chat_add_stops(const chat_t *c, req_params *p);

#endif
