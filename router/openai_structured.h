/* SPDX-License-Identifier: Apache-2.0 */
/* openai_structured.h - the OpenAI request fields that constrain the output: response_format,
 * vLLM's guided_json / guided_regex / guided_grammar / guided_choice, tools, tool_choice and
 * parallel_tool_calls (openai_request.h, "Structured output", has what each means). Part of
 * the request codec (openai_request.c calls these); the grammar that enforces tool_choice is
 * built later by the router (tool_calls.h), which knows the chat template's style.
 *
 * Costs: O(field size); guided_choice allocates its grammar, guided_json given as text its
 * parse.
 */
#ifndef DERAS_ROUTER_OPENAI_STRUCTURED_H
#define DERAS_ROUTER_OPENAI_STRUCTURED_H

#include <jansson.h>

#include "router/openai_request.h"

/* Field k (value v, not null) if it is one of these: DERAS_OK, or DERAS_EFORMAT with *e
 * filled; -1 when k is none of them. */
int oai_structured_field(oai_error *e, oai_kind kind, const char *k, const json_t *v,
                         oai_request *r);

/* After every field: at most one structured output; tool_choice required or named needs
 * tools (the named one among them) and excludes the others. DERAS_OK or DERAS_EFORMAT. */
int oai_structured_check(oai_error *e, oai_request *r);

#endif
