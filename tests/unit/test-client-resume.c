/* lib/client.c, sl_client_download_resume: a download cut short goes on
 * from the bytes kept (Range), a server that ignores the range sends the
 * whole file and it starts again, an error answer leaves nothing, and the
 * SHA-256 always covers the whole file. A tiny HTTP server on loopback, in a
 * thread, plays suanlid's part. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/client.h"
#include "../../lib/crypto.h"
#include "../../lib/file.h"
#include "../../lib/xalloc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static char body[10000];

struct server {
    int fd, port;
    bool honour_range; /* answer 206 for "Range: bytes=N-" */
    int status;        /* else this status with the whole body */
    char request[4096];
};

static void *serve(void *p)
{
    struct server *s = p;
    int c = accept(s->fd, NULL, NULL);
    size_t len = 0;

    if (c < 0)
        return NULL;
    while (len < sizeof(s->request) - 1 && !strstr(s->request, "\r\n\r\n")) {
        ssize_t n = read(c, s->request + len, sizeof(s->request) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        s->request[len] = '\0';
    }
    const char *range = strstr(s->request, "Range: bytes=");
    size_t from = range && s->honour_range ? strtoul(range + 13, NULL, 10) : 0;
    char head[256];
    int n;
    if (s->status != 200)
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d No\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                     "Connection: close\r\n\r\n{}",
                     s->status);
    else
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     from ? "206 Partial Content" : "200 OK", sizeof(body) - from);
    if (write(c, head, (size_t)n) < 0 ||
        (s->status == 200 && write(c, body + from, sizeof(body) - from) < 0))
        fprintf(stderr, "serve: write failed\n");
    close(c);
    return NULL;
}

static int run(struct server *s, const char *dest, char *sha, uint64_t *kept, struct sl_error *err)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof(a);
    pthread_t t;

    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (bind(s->fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s->fd, 1) < 0 ||
        getsockname(s->fd, (struct sockaddr *)&a, &alen) < 0)
        return -1;
    s->port = ntohs(a.sin_port);
    pthread_create(&t, NULL, serve, s);
    cleanup_free char *url = xasprintf("http://127.0.0.1:%d", s->port);
    struct sl_client c;
    sl_client_init(&c, url, "tok");
    int rc = sl_client_download_resume(&c, "/v1/x", dest, sha, kept, err);
    sl_client_release(&c);
    pthread_join(t, NULL);
    close(s->fd);
    return rc;
}

static void whole_sha(char *hex)
{
    sl_sha256_hex(body, sizeof(body), hex);
}

static bool file_is_body(const char *path)
{
    size_t len;
    FILE *f = fopen(path, "r");
    char *got = xmalloc(sizeof(body) + 1);
    len = f ? fread(got, 1, sizeof(body) + 1, f) : 0;
    if (f)
        fclose(f);
    bool same = len == sizeof(body) && memcmp(got, body, len) == 0;
    free(got);
    return same;
}

TEST(download_resumes_from_the_bytes_kept)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *dest = test_path("x.part");
    char sha[65], want[65];
    uint64_t kept;

    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (char)('a' + i * 7 % 26);
    whole_sha(want);
    /* the first 3000 bytes came before the transfer was cut */
    CHECK_EQ_INT(sl_file_write(dest, body, 3000, 0600, 0, &err), 0);
    struct server s = { .honour_range = true, .status = 200 };
    CHECK_EQ_INT(run(&s, dest, sha, &kept, &err), 0);
    CHECK_CONTAINS(s.request, "Range: bytes=3000-");
    CHECK_EQ_INT(kept, 3000);
    CHECK_STR(sha, want);
    CHECK(file_is_body(dest));

    /* a server that ignores the range: the file starts again, whole */
    CHECK_EQ_INT(sl_file_write(dest, "garbage!", 8, 0600, 0, &err), 0);
    struct server s2 = { .honour_range = false, .status = 200 };
    CHECK_EQ_INT(run(&s2, dest, sha, &kept, &err), 0);
    CHECK_EQ_INT(kept, 0);
    CHECK_STR(sha, want);
    CHECK(file_is_body(dest));

    /* nothing kept: no Range asked */
    unlink(dest);
    struct server s3 = { .honour_range = true, .status = 200 };
    CHECK_EQ_INT(run(&s3, dest, sha, &kept, &err), 0);
    CHECK(!strstr(s3.request, "Range:"));
    CHECK_STR(sha, want);

    /* an error answer leaves nothing to resume */
    struct server s4 = { .status = 404 };
    CHECK_EQ_INT(run(&s4, dest, sha, &kept, &err), -1);
    CHECK(access(dest, F_OK) < 0);
}
