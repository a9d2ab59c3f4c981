/* chat.c - see chat.h. Not yet implemented. */
#include "chat.h"
