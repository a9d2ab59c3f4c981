/* SPDX-License-Identifier: Apache-2.0 */
/* version.c - the --version text of every program (see version.h). */
#include "version.h"

#include <cpuid.h>

#ifndef DERAS_VERSION
#define DERAS_VERSION "unknown"
#endif
#ifndef DERAS_GIT_REVISION
#define DERAS_GIT_REVISION "unknown"
#endif
#ifndef DERAS_BUILD_TYPE
#define DERAS_BUILD_TYPE "unknown"
#endif

const char *deras_version(void)
{
    return DERAS_VERSION;
}

const char *deras_git_revision(void)
{
    return DERAS_GIT_REVISION;
}

void version_print(const char *prog, FILE *f)
{
    fprintf(f, "%s %s (git %s, %s)\n", prog, DERAS_VERSION, DERAS_GIT_REVISION, DERAS_BUILD_TYPE);
#ifdef DERAS_HAVE_CUDA
    const char *built = "plugin built";
#else
    const char *built = "no plugin in this build (nvcc was not found)";
#endif
    fprintf(f, "cuda: %s\n", built);
    fputs("cpu: x86-64", f);
    __builtin_cpu_init();
#define FEATURE(name)                    \
    if (__builtin_cpu_supports(name))    \
        fputs(" " name, f);
    FEATURE("avx2") FEATURE("fma")
    /* "f16c" is unknown to __builtin_cpu_supports in older clang (14, the fuzz build's
     * compiler): CPUID leaf 1, ECX bit 29, counted only where AVX state is usable, as
     * libgcc counts it. */
    unsigned int eax, ebx, ecx, edx;
    if (__builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
        (ecx & bit_F16C))
        fputs(" f16c", f);
    FEATURE("avx512f") FEATURE("avx512bw") FEATURE("avx512vl") FEATURE("avx512vnni")
    FEATURE("avx512bf16")
#undef FEATURE
    fputs(" (detected; the CPU kernels are plain C + OpenBLAS today)\n", f);
}
