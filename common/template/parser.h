/* SPDX-License-Identifier: Apache-2.0 */
/* parser.h - tokens to a compiled template's syntax tree (ast.h), with every refusal made
 * at compile time: syntax errors and what Jinja2 also rejects when compiling
 * (DERAS_EFORMAT), and constructs this interpreter does not implement
 * (DERAS_EUNSUPPORTED), each "template line N: ...". Cost: O(tokens). */
#ifndef DERAS_TEMPLATE_PARSER_H
#define DERAS_TEMPLATE_PARSER_H

#include "ast.h"
#include "lexer.h"

/* Parse `tk` (ending in T_EOF) into *root (an N_BODY in `arena`); names are interned into
 * `syms`. Nesting deeper than max_depth is refused. */
int parse_template(struct arena *arena, symtab *syms, const tokens *tk, int max_depth,
                   struct node **root);

#endif
