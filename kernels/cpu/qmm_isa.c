/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_isa.c - which path of qmatmul.h runs: CPU detection, $DERAS_CPU_ISA, forcing.
 *
 * On first use (pthread_once) the CPU is asked once with __builtin_cpu_supports (which
 * also checks that the OS saves the wide registers; F16C through CPUID, which clang 14's
 * builtin does not know) and each path's table is composed:
 * the AVX-512 path takes its VNNI integer kernels only where the CPU has AVX512-VNNI, its
 * bf16 dot products only with AVX512-BF16 and its packed strip kernels only with VNNI, and
 * the AVX2 kernels for those otherwise, so
 * every entry runs on any CPU that passes the path's check. Nothing compiled for AVX2 or
 * AVX-512 is reached before that check: those files hold only kernels (target
 * attributes) and the tables are data. The active path is one atomic int; reading it is
 * the only per-call cost.
 */
#include <pthread.h>
#ifdef __x86_64__
#include <cpuid.h>
#endif
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "kernels/cpu/qmatmul.h"
#include "kernels/cpu/qmm_impl.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int best = QMM_ISA_SCALAR;
static int active = QMM_ISA_SCALAR; /* or a negative status from $DERAS_CPU_ISA */
static char env_error[160];
static qmm_path path_scalar;
#ifdef QMM_X86
static bool has_vnni, has_bf16;
static qmm_path path_avx2, path_avx512;
#endif

static const char *const names[] = {"scalar", "avx2", "avx512"};

const char *qmm_isa_name(int isa)
{
    return isa >= 0 && isa <= QMM_ISA_AVX512 ? names[isa] : "unknown";
}

int qmm_isa_parse(const char *name, int *isa)
{
    for (int i = 0; name && isa && i <= QMM_ISA_AVX512; i++)
        if (!strcmp(name, names[i])) {
            *isa = i;
            return DERAS_OK;
        }
    return deras_fail(DERAS_EINVAL, "cpu path '%s' is not one of scalar, avx2, avx512",
                      name ? name : "(null)");
}

#ifdef QMM_X86
/* CPUID leaf 1, ECX bit 29, counted only where AVX state is usable, as libgcc counts it
 * (common/cli/version.c does the same). */
static bool has_f16c(void)
{
    unsigned int eax, ebx, ecx, edx;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C);
}
#endif

/* The first feature `isa` needs that this CPU lacks, NULL when it has them all. */
static const char *missing_feature(int isa)
{
#ifdef QMM_X86
    if (isa >= QMM_ISA_AVX2) {
        if (!__builtin_cpu_supports("avx2"))
            return "avx2";
        if (!__builtin_cpu_supports("fma"))
            return "fma";
        if (!has_f16c())
            return "f16c";
    }
    if (isa >= QMM_ISA_AVX512) {
        if (!__builtin_cpu_supports("avx512f"))
            return "avx512f";
        if (!__builtin_cpu_supports("avx512bw"))
            return "avx512bw";
        if (!__builtin_cpu_supports("avx512vl"))
            return "avx512vl";
    }
    return NULL;
#else
    return isa == QMM_ISA_SCALAR ? NULL : "x86-64";
#endif
}

#ifdef QMM_X86
static void compose(void)
{
    memcpy(path_avx2.exact, qmm_avx2_exact, sizeof path_avx2.exact);
    memcpy(path_avx2.q8, qmm_avx2_q8, sizeof path_avx2.q8);
    path_avx2.act = qmm_avx2_act;
    path_avx512 = path_avx2;
    memcpy(path_avx512.exact, qmm_avx512_exact, sizeof path_avx512.exact);
    path_avx512.decode = qmm_avx512_decode;
    if (has_vnni)
        for (int f = 0; f < QF_COUNT; f++)
            if (qmm_avx512_vnni[f][0].fn)
                memcpy(path_avx512.q8[f], qmm_avx512_vnni[f], sizeof path_avx512.q8[f]);
    if (has_bf16)
        memcpy(path_avx512.q8[QF_BF16], qmm_avx512_bf16, sizeof path_avx512.q8[QF_BF16]);
    memcpy(path_avx2.packed, qmm_pack_avx2, sizeof path_avx2.packed);
    memcpy(path_avx512.packed, has_vnni ? qmm_pack_avx512 : qmm_pack_avx2,
           sizeof path_avx512.packed);
}
#endif

static void init(void)
{
    path_scalar = qmm_path_scalar;
    memcpy(path_scalar.packed, qmm_pack_scalar, sizeof path_scalar.packed);
#ifdef QMM_X86
    __builtin_cpu_init();
    has_vnni = __builtin_cpu_supports("avx512vnni");
    has_bf16 = __builtin_cpu_supports("avx512bf16");
    compose();
#endif
    for (int i = QMM_ISA_AVX512; i > QMM_ISA_SCALAR && best == QMM_ISA_SCALAR; i--)
        if (!missing_feature(i))
            best = i;
    active = best;
    const char *env = getenv("DERAS_CPU_ISA");
    int isa;
    if (!env || !*env)
        return;
    if (qmm_isa_parse(env, &isa)) {
        active = DERAS_EINVAL;
        snprintf(env_error, sizeof env_error, "DERAS_CPU_ISA=%.32s: not one of scalar, avx2, avx512",
                 env);
    } else if (missing_feature(isa)) {
        active = DERAS_EUNSUPPORTED;
        snprintf(env_error, sizeof env_error, "DERAS_CPU_ISA=%s: this CPU lacks %s", env,
                 missing_feature(isa));
    } else {
        active = isa;
    }
}

int qmm_isa_best(void)
{
    pthread_once(&once, init);
    return best;
}

int qmm_isa_active(void)
{
    pthread_once(&once, init);
    int isa = __atomic_load_n(&active, __ATOMIC_RELAXED);
    return isa < 0 ? deras_fail(isa, "%s", env_error) : isa;
}

int qmm_isa_force(int isa)
{
    pthread_once(&once, init);
    if (isa < QMM_ISA_SCALAR || isa > QMM_ISA_AVX512)
        return deras_fail(DERAS_EINVAL, "qmm_isa_force: unknown path %d", isa);
    const char *missing = missing_feature(isa);
    if (missing)
        return deras_fail(DERAS_EUNSUPPORTED, "cpu path %s: this CPU lacks %s", names[isa],
                          missing);
    __atomic_store_n(&active, isa, __ATOMIC_RELAXED);
    return DERAS_OK;
}

int qmm_path_active(const qmm_path **out)
{
    int isa = qmm_isa_active();
    if (isa < 0)
        return isa;
    *out = &path_scalar;
#ifdef QMM_X86
    if (isa == QMM_ISA_AVX512)
        *out = &path_avx512;
    else if (isa == QMM_ISA_AVX2)
        *out = &path_avx2;
#endif
    return DERAS_OK;
}
