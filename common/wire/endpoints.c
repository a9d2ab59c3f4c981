/* SPDX-License-Identifier: Apache-2.0 */
/* endpoints.c - default endpoints of the router's sockets (see endpoints.h).
 *
 * The runtime directory is created by whoever binds (the router); a connecting worker
 * needs nothing to exist: ZeroMQ keeps retrying until the socket file appears.
 */
#include "endpoints.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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

int endpoints_dir_trusted(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        struct stat lst;
        if (lstat(dir, &lst) == 0 && S_ISLNK(lst.st_mode))
            return deras_fail(DERAS_EINVAL, "directory %s is a symbolic link: not trusted (it "
                              "could be pointed elsewhere)", dir);
        return deras_fail(err == ENOTDIR ? DERAS_EINVAL : DERAS_EIO, "directory %s: %s", dir,
                          strerror(err));
    }
    struct stat st;
    int rc = fstat(fd, &st);
    close(fd);
    if (rc)
        return deras_fail(DERAS_EIO, "directory %s: %s", dir, strerror(errno));
    const uid_t me = getuid();
    const bool sticky = (st.st_mode & S_ISVTX) != 0;
    if (st.st_uid != me && !(st.st_uid == 0 && sticky))
        return deras_fail(DERAS_EINVAL, "directory %s belongs to uid %u, not to this user (uid "
                          "%u): refusing to trust it (remove it, or point DERAS_RUNTIME_DIR "
                          "elsewhere)", dir, (unsigned)st.st_uid, (unsigned)me);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky)
        return deras_fail(DERAS_EINVAL, "directory %s has mode %04o: others may write to it, so "
                          "they could replace its sockets (chmod go-w it)", dir,
                          (unsigned)(st.st_mode & 07777));
    return DERAS_OK;
}

int endpoints_runtime_dir_checked(char *buf, size_t cap)
{
    int rc = endpoints_runtime_dir(buf, cap);
    if (rc)
        return rc;
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
        return deras_fail(DERAS_EIO, "runtime directory %s: %s", buf, strerror(errno));
    if ((rc = endpoints_dir_trusted(buf)))
        return rc;
    /* a runtime directory of our own is private: sticky shared ones (/tmp) are not runtime
     * directories */
    struct stat st;
    if (stat(buf, &st) == 0 && st.st_uid != getuid())
        return deras_fail(DERAS_EINVAL, "runtime directory %s belongs to uid %u, not to this "
                          "user", buf, (unsigned)st.st_uid);
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

bool endpoints_ipc_live(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return false;
    memcpy(sa.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return live;
}

int endpoints_default_admin_for_client(char *buf, size_t cap)
{
    const char *env = getenv("DERAS_RUNTIME_DIR");
    if ((!env || !*env) && endpoints_ipc_live(ENDPOINTS_UNITS_RUNTIME_DIR "/admin.sock")) {
        int n = snprintf(buf, cap, "ipc://" ENDPOINTS_UNITS_RUNTIME_DIR "/admin.sock");
        return n < 0 || (size_t)n >= cap ? deras_fail(DERAS_ERANGE, "endpoint buffer too small")
                                         : DERAS_OK;
    }
    return endpoints_default_admin(buf, cap);
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
    int rc = endpoints_dir_trusted(dir);
    return rc ? deras_fail_ctx(rc, "endpoint %s: ", endpoint) : DERAS_OK;
}

int endpoint_tcp_parse(const char *endpoint, char *host, size_t host_cap, int *port)
{
    if (!endpoint || !host || host_cap < 2 || !port)
        return deras_fail(DERAS_EINVAL, "endpoint_tcp_parse: NULL argument");
    if (strncmp(endpoint, "tcp://", 6))
        return deras_fail(DERAS_EINVAL, "%.200s: not a tcp:// endpoint", endpoint);
    const char *hp = endpoint + 6;
    if (strchr(hp, ';'))
        return deras_fail(DERAS_EINVAL, "%.200s: the SOURCE;DESTINATION form is not accepted: give "
                          "one HOST:PORT", endpoint);
    const char *colon = strrchr(hp, ':');
    if (!colon || colon == hp)
        return deras_fail(DERAS_EINVAL, "%.200s: expected tcp://HOST:PORT", endpoint);
    const char *h = hp, *h_end = colon;
    if (*h == '[') { /* an IPv6 literal */
        if (h_end - h < 3 || h_end[-1] != ']')
            return deras_fail(DERAS_EINVAL, "%.200s: an IPv6 host goes in brackets: [::1]:PORT",
                              endpoint);
        h++, h_end--;
    }
    size_t n = (size_t)(h_end - h);
    if (n == 0 || n >= host_cap || n > 253)
        return deras_fail(DERAS_EINVAL, "%.200s: empty or overlong host", endpoint);
    if (hp[0] == '[' && !memchr(h, ':', n))
        return deras_fail(DERAS_EINVAL, "%.200s: brackets hold an IPv6 address", endpoint);
    for (const char *c = h; c < h_end; c++) {
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '.' || *c == '-' || *c == '_' ||
                  (*c == ':' && hp[0] == '[') || (*c == '*' && n == 1) ||
                  (*c == '%' && hp[0] == '['); /* fe80::1%eth0 */
        if (!ok)
            return deras_fail(DERAS_EINVAL, "%.200s: character '%c' in the host", endpoint, *c);
    }
    memcpy(host, h, n);
    host[n] = '\0';
    const char *p = colon + 1;
    if (!strcmp(p, "*")) {
        *port = 0;
        return DERAS_OK;
    }
    long v = 0;
    for (const char *c = p; *c; c++) {
        if (*c < '0' || *c > '9' || c - p >= 5)
            return deras_fail(DERAS_EINVAL, "%.200s: the port must be 1..65535 or *", endpoint);
        v = v * 10 + (*c - '0');
    }
    if (!*p || v < 1 || v > 65535)
        return deras_fail(DERAS_EINVAL, "%.200s: the port must be 1..65535 or *", endpoint);
    *port = (int)v;
    return DERAS_OK;
}

static bool addr_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

int endpoint_tcp_loopback(const char *endpoint, bool *loopback)
{
    char host[256];
    int port, rc = endpoint_tcp_parse(endpoint, host, sizeof host, &port);
    if (rc)
        return rc;
    *loopback = false;
    if (!strcmp(host, "*"))
        return DERAS_OK;
    if (!strcmp(host, "lo")) { /* the loopback interface, as libzmq binds it by name */
        *loopback = true;
        return DERAS_OK;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return DERAS_OK; /* an interface name (eth0) or nothing: beyond loopback, fail closed */
    bool all = res != NULL;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        all = all && addr_loopback(a->ai_addr);
    freeaddrinfo(res);
    *loopback = all;
    return DERAS_OK;
}
