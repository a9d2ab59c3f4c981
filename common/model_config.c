/* model_config.c - see model_config.h. Not yet implemented. */
#include "model_config.h"
