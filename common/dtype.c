/* dtype.c - see dtype.h. Not yet implemented. */
#include "dtype.h"
