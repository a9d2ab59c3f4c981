/* SPDX-License-Identifier: Apache-2.0 */
/* constraint.h - a request's structured output as the worker enforces it: GBNF text.
 *
 * The client protocol's json_schema, regex, grammar and json_object fields (and what the
 * OpenAI door turns response_format and tool_choice into) all end here as one GBNF
 * grammar (docs/structured_output.md): a JSON Schema through common/schema, a regular
 * expression as `root ::= <its translation>`, JSON mode as common/schema's JSON-object
 * grammar, a grammar as it is. The text is then compiled once (grammar_from_gbnf: no
 * vocabulary work) and its start state parsed under the matchers' budgets (a grammar so
 * ambiguous that it starts with more parse stacks than a matcher keeps cannot be served),
 * so that a grammar the worker could not run is refused here, before
 * admission, with invalid_grammar and the compiler's words (the unsupported keyword or
 * construct named, the line and column of a syntax error, the limit exceeded); the worker
 * gets the text and compiles it again into its cache.
 *
 * Costs: O(schema + grammar) time and memory per request, bounded by the compilers' limits
 * (256 KiB of GBNF, 2^20 grammar elements); allocates the result.
 */
#ifndef DERAS_ROUTER_CONSTRAINT_H
#define DERAS_ROUTER_CONSTRAINT_H

#include <stddef.h>

#include "common/wire/protocol.h"

/* Whether q asks for structured output at all. */
bool constraint_wanted(const proto_request *q);

/* q's structured output as GBNF: PE_NONE with *gbnf (malloc'd, NUL-terminated, the caller
 * frees) and *len; NULL and 0 when q asks for none. Otherwise PE_INVALID_GRAMMAR (or
 * PE_INTERNAL out of memory) with msg filled and *gbnf NULL. */
enum proto_error_code constraint_gbnf(const proto_request *q, char **gbnf, size_t *len, char *msg,
                                      size_t cap);

#endif
