/* SPDX-License-Identifier: Apache-2.0 */
/* tool_calls.h - OpenAI tool calling on the router: the grammar that makes a model call a
 * tool (tool_choice "required" or a named function), and the parser that turns the model's
 * tool-call text back into OpenAI `tool_calls`, whole or streamed.
 *
 * Styles. A model writes tool calls the way its chat template taught it; the style is read
 * from the template's text (tool_style_of_template):
 *   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, repeated for
 *                parallel calls (Hermes 2/3, Qwen 2.5/3, and the templates that copy them);
 *   llama3_json  {"name": "f", "parameters": {...}} as the whole reply, several separated
 *                by ';' (Llama 3.1-3.3: "Respond in the format {"name": function name,
 *                "parameters": ...}"); "arguments" is read as well;
 *   none         a template with no known style: `auto` parses nothing (the reply is text),
 *                and `required` / named calls are enforced and parsed in the llama3_json
 *                form, the plainest JSON a model can be made to write.
 *
 * The grammar (tools_grammar): each function's `parameters` JSON Schema compiled to GBNF
 * (common/schema; no parameters: "{}"), its rules renamed apart (f<i>-...), inside the
 * style's frame with the function's name fixed; `required` allows any of the tools (and,
 * for hermes with parallel_tool_calls, one or more calls), a named function that one only.
 *
 * The parser (tool_parser) is fed the sample's text as it arrives. Hermes: text outside
 * <tool_call>...</tool_call> is content (a possible tag's prefix is held back until it is
 * decided), each complete block whose JSON holds a "name" becomes a call, and a block that
 * does not parse is content, as written. llama3_json: a reply whose first non-blank byte is
 * '{' is held to the end and read as calls; if it is not calls after all it is content.
 * Each call gets an id ("call_" + 24 hex digits) and its arguments as compact JSON text.
 *
 * Costs: tools_grammar O(tools' schemas + their grammars); the parser O(text) with the held
 * part copied once; allocations only as its buffers grow, never per token once warm.
 */
#ifndef DERAS_ROUTER_TOOL_CALLS_H
#define DERAS_ROUTER_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/request/proto_error.h"
#include "router/openai_response.h"

typedef enum tool_style {
    TOOL_STYLE_NONE = 0, TOOL_STYLE_HERMES, TOOL_STYLE_LLAMA3_JSON
} tool_style;

/* "none", "hermes", "llama3_json". */
const char *tool_style_name(tool_style s);
/* The style name (as --tool-call-parser spells it) into *out; false for an unknown name. */
bool tool_style_parse(const char *name, tool_style *out);
/* The style a chat template's source teaches (NULL: none). O(template). */
tool_style tool_style_of_template(const char *source);

/* The GBNF that makes the model call a tool: `name` NULL for any of tools (tool_choice
 * "required"), else that function; parallel: hermes may write several calls. tools is the
 * checked OpenAI array ({"type": "function", "function": {"name", "parameters"?}}).
 * PE_NONE with *gbnf (malloc'd, NUL-terminated) and *len, or PE_INVALID_GRAMMAR naming the
 * function whose parameters do not compile (PE_INTERNAL out of memory) with msg filled. */
enum proto_error_code tools_grammar(tool_style style, const json_t *tools, const char *name,
                                    bool parallel, char **gbnf, size_t *len, char *msg,
                                    size_t cap);

/* One sample's tool-call parser. A value the caller embeds; tool_parser_free releases its
 * buffer. */
typedef struct tool_parser {
    tool_style style;
    int state;
    oai_buf held;            /* text not yet decided */
    oai_buf blanks;          /* blanks after a call, emitted only if text follows */
    int n_calls;
    uint64_t id_seed;        /* call ids: id_seed and the call's number, hashed */
} tool_parser;

/* Start (or restart) p for a sample: style (TOOL_STYLE_NONE parses nothing: every byte is
 * content), id_seed distinct per sample and request. Keeps the buffer's capacity. */
void tool_parser_start(tool_parser *p, tool_style style, uint64_t id_seed);
/* Feed text[0..n); what is decided content is appended to *content (raw text), each call
 * completed to *calls as an OpenAI tool call object, comma-separated after any already
 * there (delta: with its "index", as a streamed delta carries it). */
void tool_parser_feed(tool_parser *p, const char *text, size_t n, bool delta, oai_buf *content,
                      oai_buf *calls);
/* The sample ended: decide what is held (calls or content). */
void tool_parser_finish(tool_parser *p, bool delta, oai_buf *content, oai_buf *calls);
void tool_parser_free(tool_parser *p);

#endif
