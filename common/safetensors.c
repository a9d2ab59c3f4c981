/* safetensors.c - see safetensors.h. Not yet implemented. */
#include "safetensors.h"
