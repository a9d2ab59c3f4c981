/* SPDX-License-Identifier: Apache-2.0 */
/* sampling_flags.h - the sampling parameters' command-line flags, from the one table
 * (common/request/sampling.h): --temperature T, --top-k K, ... for `deras generate`, which
 * runs the engine here, and for `deras complete` and `deras bench` (through
 * client_flags.h), which send them to a router. Names, argument names, bounds and the
 * help text are the table's, so a new parameter gets its flag without an edit here.
 *
 * Each flag's getopt code is SAMPLING_FLAGS_CODE + its table index. Values are checked
 * against the row's bounds (open ends included) before anything runs, with the same
 * words as the wire ("--top-p: expected a number in (0, 1], got '0'"). A BIAS row's flag
 * takes ID:BIAS and repeats, one map entry each time. Costs: O(table), O(entries) per
 * bias entry.
 */
#ifndef DERAS_SAMPLING_FLAGS_H
#define DERAS_SAMPLING_FLAGS_H

#include <getopt.h>
#include <stdio.h>

#include "common/request/sampling.h"

#define SAMPLING_FLAGS_CODE 3000

/* Append the table's flags, except those named in `exclude` (NULL-terminated, or NULL),
 * to out[*n ..] while *n < cap - 1; out stays zero-terminated. */
void sampling_flags_options(const char *const *exclude, struct option *out, int *n, int cap);

/* Apply getopt code c with its argument to p: 1 applied, 0 not a sampling flag, -1 a bad
 * value (the message is printed: exit with status 2). */
int sampling_flags_apply(sampling_params *p, int c, const char *arg);

/* One help line per flag not excluded, "  --top-p P  doc (default D)", the defaults read
 * from `def` (the command's own: deras generate is greedy by default). */
void sampling_flags_usage(FILE *f, const sampling_params *def, const char *const *exclude);

#endif
