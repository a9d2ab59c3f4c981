/* checkpoint.c - see checkpoint.h. Not yet implemented. */
#include "checkpoint.h"
