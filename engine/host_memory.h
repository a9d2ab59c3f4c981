/* SPDX-License-Identifier: Apache-2.0 */
/* host_memory.h - how much memory this process may still take on the host, and where that
 * number came from: the least of the system's MemAvailable and, for every memory cgroup
 * the process is in (cgroup v2, or v1's memory controller), its limit less what the group
 * uses (reclaimable page cache counted as free). Containers and systemd units with
 * MemoryMax= are sized by their limit, not by the host's free memory.
 *
 * Where it reads (each overridable, for tests and odd mounts): /proc/meminfo
 * ($DERAS_MEMINFO), /proc/self/cgroup ($DERAS_PROC_CGROUP), the cgroup file systems under
 * /sys/fs/cgroup ($DERAS_CGROUP_ROOT). Cost: a few small file reads; at start only.
 */
#ifndef DERAS_HOST_MEMORY_H
#define DERAS_HOST_MEMORY_H

#include <stdint.h>

typedef struct host_memory {
    uint64_t available;  /* bytes */
    char source[256];    /* e.g. "MemAvailable" or "cgroup /a/b: memory.max 4.00 GiB, 1.20 GiB in use" */
} host_memory;

/* DERAS_EIO when not even MemAvailable can be read; a cgroup file that cannot be read is
 * skipped (no limit known there). */
int host_memory_available(host_memory *out);

#endif
