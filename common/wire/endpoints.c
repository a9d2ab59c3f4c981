/* endpoints.c - default endpoints of the router's sockets (see endpoints.h).
 *
 * The runtime directory is created by whoever binds (the router); a connecting worker
 * needs nothing to exist: ZeroMQ keeps retrying until the socket file appears.
 */
#include "endpoints.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/status.h"

int endpoints_runtime_dir(char *buf, size_t cap)
{
    const char *env = getenv("DERAS_RUNTIME_DIR");
    int n = env && *env ? snprintf(buf, cap, "%s", env)
                        : snprintf(buf, cap, "/tmp/deras-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= cap)
        return deras_fail(DERAS_ERANGE, "runtime directory name longer than %zu bytes", cap);
    return DERAS_OK;
}

static int default_socket(const char *file, char *buf, size_t cap)
{
    char dir[ENDPOINT_MAX];
    int rc = endpoints_runtime_dir(dir, sizeof dir);
    if (rc)
        return rc;
    int n = snprintf(buf, cap, "ipc://%s/%s", dir, file);
    if (n < 0 || (size_t)n >= cap)
        return deras_fail(DERAS_ERANGE, "endpoint ipc://%s/%s longer than %zu bytes", dir, file,
                          cap);
    return DERAS_OK;
}

int endpoints_default_workers(char *buf, size_t cap)
{
    return default_socket("workers.sock", buf, cap);
}

int endpoints_default_clients(char *buf, size_t cap)
{
    return default_socket("clients.sock", buf, cap);
}

int endpoints_default_admin(char *buf, size_t cap)
{
    return default_socket("admin.sock", buf, cap);
}

int endpoints_prepare_bind(const char *endpoint)
{
    if (!endpoint)
        return deras_fail(DERAS_EINVAL, "endpoints_prepare_bind: NULL endpoint");
    if (strncmp(endpoint, "ipc://", 6) != 0)
        return DERAS_OK;
    char dir[ENDPOINT_MAX];
    int n = snprintf(dir, sizeof dir, "%s", endpoint + 6);
    if (n < 0 || (size_t)n >= sizeof dir)
        return deras_fail(DERAS_ERANGE, "endpoint %s: path too long", endpoint);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return DERAS_OK; /* relative file name, or a file in / */
    *slash = '\0';
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return deras_fail(DERAS_EIO, "endpoint %s: cannot create directory %s: %s", endpoint, dir,
                          strerror(errno));
    return DERAS_OK;
}
