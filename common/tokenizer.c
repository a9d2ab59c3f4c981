/* tokenizer.c - see tokenizer.h. Not yet implemented. */
#include "tokenizer.h"
