/* SPDX-License-Identifier: Apache-2.0 */
/* lexer.h - template source to tokens, as Jinja2's lexer with transformers' settings
 * (trim_blocks, lstrip_blocks, keep_trailing_newline off).
 *
 * The source is first normalised as Jinja2 does: \r\n and \r become \n and one final
 * newline is dropped. Text between tags becomes T_DATA with the whitespace control applied
 * ({%- / -%} strip all whitespace, lstrip_blocks strips a block or comment tag's
 * indentation, trim_blocks the newline after a block or comment tag, {%+ / +%} keep);
 * comments disappear; {% raw %} bodies are data. Inside tags come names, numbers, strings
 * (escapes decoded) and operators; an end delimiter counts only while brackets are
 * balanced, so {{ {'a': {}} }} works. Token text points into the normalised source or
 * the arena. Cost: O(source) time, one token array.
 */
#ifndef DERAS_TEMPLATE_LEXER_H
#define DERAS_TEMPLATE_LEXER_H

#include <stddef.h>
#include <stdint.h>

#include "ast.h"

enum tok_type {
    T_EOF,
    T_DATA,
    T_VAR_BEGIN,   /* {{ */
    T_VAR_END,     /* }} */
    T_BLOCK_BEGIN, /* {% */
    T_BLOCK_END,   /* %} */
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP, /* op: one of the OP_* below */
};

enum {
    OP_ADD, OP_SUB, OP_DIV, OP_FLOORDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE, OP_LBRACKET,
    OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_EQ, OP_NE, OP_GT, OP_GTEQ,
    OP_LT, OP_LTEQ, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON,
};

typedef struct token {
    uint8_t type;
    uint8_t op;
    int line;
    const char *s; /* T_DATA, T_NAME, T_STRING (decoded): the text */
    size_t len;
    int64_t i;     /* T_INT */
    double f;      /* T_FLOAT */
} token;

typedef struct tokens {
    token *v;
    size_t n, cap;
} tokens;

/* Tokenize src[0..n) (valid UTF-8 is checked here) into *out (ending with T_EOF); strings
 * go to `arena`. DERAS_EFORMAT "template line N: ..." for what Jinja2's lexer rejects
 * (an unclosed comment or string, an unexpected character, unbalanced brackets),
 * DERAS_ENOMEM. */
int lex(struct arena *arena, const char *src, size_t n, tokens *out);
void tokens_free(tokens *t);

/* The operator's text, for messages ("+", "}}" ...). */
const char *lex_op_text(int op);

#endif
