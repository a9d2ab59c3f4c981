/* SPDX-License-Identifier: Apache-2.0 */
/* mapped_file.c - a regular file mapped read-only (see mapped_file.h). */
#include "mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/status.h"

int mapped_file_open(const char *path, size_t min_size, const char *what, void **data,
                     size_t *size)
{
    if (!path || !data || !size)
        return deras_fail(DERAS_EINVAL, "mapped_file_open: NULL argument");
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return deras_fail(DERAS_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return deras_fail(DERAS_EIO, "%s: not a regular file", path);
    }
    if ((size_t)st.st_size < min_size || st.st_size == 0) {
        close(fd);
        return deras_fail(DERAS_EFORMAT, "%s: %lld bytes is too short for %s", path,
                          (long long)st.st_size, what);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return deras_fail(DERAS_EIO, "%s: mmap of %lld bytes failed: %s", path,
                          (long long)st.st_size, strerror(errno));
    *data = map;
    *size = (size_t)st.st_size;
    return DERAS_OK;
}

void mapped_file_close(void *data, size_t size)
{
    if (data)
        munmap(data, size);
}
