/* gguf.c - see gguf.h. Not yet implemented. */
#include "gguf.h"
