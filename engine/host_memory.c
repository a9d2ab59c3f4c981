/* SPDX-License-Identifier: Apache-2.0 */
/* host_memory.c - available host memory, cgroup limits included (see host_memory.h). */
#include "host_memory.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/status.h"
#include "common/checkpoint/kv_math.h"

#define NO_LIMIT (1ull << 62) /* v1 says "no limit" as a number near 2^63 */

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

/* The first "key value" line of a file whose key matches, value in *out. */
static bool read_key(const char *path, const char *key, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[256];
    bool found = false;
    size_t klen = strlen(key);
    while (!found && fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen) && (line[klen] == ' ' || line[klen] == ':')) {
            unsigned long long v;
            found = sscanf(line + klen + 1, " %llu", &v) == 1;
            *out = v;
        }
    fclose(f);
    return found;
}

/* A file holding one number; "max" means no limit. */
static bool read_value(const char *dir, const char *name, uint64_t *out)
{
    char path[PATH_MAX], text[64];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return false;
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    if (!ok)
        return false;
    if (!strncmp(text, "max", 3)) {
        *out = UINT64_MAX;
        return true;
    }
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text)
        return false;
    *out = v;
    return true;
}

/* Walk dir and its parents up to root (inclusive of dir, exclusive of root's parent) and
 * lower *best to the tightest group's room: limit - usage + reclaimable page cache. */
static void walk(const char *root, const char *cg_path, const char *limit_file,
                 const char *usage_file, const char *inactive_key, const char *kind,
                 host_memory *best)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", cg_path);
    for (;;) {
        char dir[PATH_MAX], stat_path[PATH_MAX];
        if (snprintf(dir, sizeof dir, "%s%s", root, rel) >= (int)sizeof dir)
            return;
        uint64_t limit, usage, inactive = 0;
        if (read_value(dir, limit_file, &limit) && limit < NO_LIMIT &&
            read_value(dir, usage_file, &usage)) {
            if (snprintf(stat_path, sizeof stat_path, "%s/memory.stat", dir) < (int)sizeof stat_path)
                read_key(stat_path, inactive_key, &inactive);
            uint64_t used = usage > inactive ? usage - inactive : 0;
            uint64_t room = limit > used ? limit - used : 0;
            if (room < best->available) {
                char lim_s[32], used_s[32];
                kvmath_format_bytes(limit, lim_s, sizeof lim_s);
                kvmath_format_bytes(used, used_s, sizeof used_s);
                best->available = room;
                /* a long path keeps its end, which names the unit or container */
                const char *name = *rel ? rel : "/";
                size_t nlen = strlen(name);
                const char *tail = nlen > 120 ? name + nlen - 120 : name;
                snprintf(best->source, sizeof best->source, "cgroup %s %s%.120s: %s %s, %s in use",
                         kind, tail != name ? "..." : "", tail, limit_file, lim_s, used_s);
            }
        }
        char *slash = strrchr(rel, '/');
        if (!slash || !*rel)
            return;
        *slash = '\0'; /* the parent; "" is the root itself */
        if (!*rel && !strcmp(cg_path, "/"))
            return;
    }
}

int host_memory_available(host_memory *out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "host_memory_available: NULL out");
    const char *meminfo = env_or("DERAS_MEMINFO", "/proc/meminfo");
    uint64_t kib;
    if (!read_key(meminfo, "MemAvailable", &kib))
        return deras_fail(DERAS_EIO, "cannot read MemAvailable from %s", meminfo);
    out->available = kib * 1024;
    snprintf(out->source, sizeof out->source, "MemAvailable");

    const char *root = env_or("DERAS_CGROUP_ROOT", "/sys/fs/cgroup");
    FILE *f = fopen(env_or("DERAS_PROC_CGROUP", "/proc/self/cgroup"), "r");
    if (!f)
        return DERAS_OK; /* no cgroups known: MemAvailable it is */
    char line[PATH_MAX + 64];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *controllers = c1 + 1, *path = c2 + 1;
        char base[PATH_MAX];
        if (!*controllers) { /* cgroup v2: at the root, or under unified/ on a hybrid system */
            char probe[PATH_MAX];
            snprintf(probe, sizeof probe, "%s/cgroup.controllers", root);
            snprintf(base, sizeof base, access(probe, F_OK) == 0 ? "%s" : "%s/unified", root);
            walk(base, path, "memory.max", "memory.current", "inactive_file", "v2", out);
        } else {
            char list[256];
            snprintf(list, sizeof list, ",%s,", controllers);
            if (!strstr(list, ",memory,"))
                continue;
            snprintf(base, sizeof base, "%s/memory", root);
            walk(base, path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                 "total_inactive_file", "v1", out);
        }
    }
    fclose(f);
    return DERAS_OK;
}
