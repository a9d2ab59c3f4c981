/* SPDX-License-Identifier: Apache-2.0 */
/* version.h - what every deras program says to --version: the version, the git revision it
 * was built from, the build type, whether this build has the CUDA plugin, and the CPU
 * features of this machine.
 *
 *   deras 0.1.0 (git 9f7951b, Release)
 *   cuda: plugin built
 *   cpu: x86-64 avx2 fma f16c avx512f ... (detected; ...)
 *
 * Programs with a CUDA backend add what the plugin says here (backend_describe_cuda in
 * kernels/backend.h). Cost: a few cpuid queries.
 */
#ifndef DERAS_VERSION_H
#define DERAS_VERSION_H

#include <stdio.h>

/* "0.1.0" */
const char *deras_version(void);
/* "9f7951b", "9f7951b-dirty", or "unknown" outside a git checkout */
const char *deras_git_revision(void);

/* The lines above, for program `prog`, to f. */
void version_print(const char *prog, FILE *f);

#endif
