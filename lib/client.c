/* libcurl requests and the mapping of HTTP answers to the error contract.
 * Library code: it prints nothing, progress included (a caller's hook). */
#include "client.h"

#include "buf.h"
#include "cleanup.h"
#include "json.h"
#include "xalloc.h"

#include <curl/curl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>

#define CONNECT_TIMEOUT_S 10L
#define REQUEST_TIMEOUT_S 120L

void sl_client_init(struct sl_client *c, const char *server, const char *token)
{
    c->server = server;
    c->token = token;
    c->curl = NULL;
    c->timeout_s = 0;
    c->cancel = NULL;
}

void sl_client_release(struct sl_client *c)
{
    if (c->curl)
        curl_easy_cleanup(c->curl);
    c->curl = NULL;
}

static size_t collect(char *data, size_t size, size_t n, void *userdata)
{
    sl_buf_add(userdata, data, size * n);
    return size * n;
}

/* libcurl calls it about once a second even while no byte moves */
static int check_cancel(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                        curl_off_t ulnow)
{
    const struct sl_client *c = arg;
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    return c->cancel && *c->cancel;
}

static void cleanup_slist(struct curl_slist **l)
{
    curl_slist_free_all(*l);
}

static enum sl_error_kind kind_of_status(long status)
{
    switch (status) {
    case 400:
        return SL_E_INVALID;
    case 401:
        return SL_E_UNAUTHENTICATED;
    case 403:
        return SL_E_FORBIDDEN;
    case 404:
        return SL_E_NOT_FOUND;
    case 405:
        return SL_E_METHOD;
    case 409:
        return SL_E_CONFLICT;
    case 413:
        return SL_E_TOO_LARGE;
    case 415:
        return SL_E_UNSUPPORTED;
    case 422:
        return SL_E_UNPROCESSABLE;
    case 429:
        return SL_E_RATE_LIMITED;
    case 503:
        return SL_E_UNAVAILABLE;
    case 507:
        return SL_E_STORAGE;
    default:
        return status >= 500 ? SL_E_INTERNAL : SL_E_INVALID;
    }
}

/* Fills err from an error answer, with the API's own words when it sent them. */
static int fail_http(long status, const char *method, const char *url, const char *body, size_t len,
                     struct sl_error *err)
{
    cleanup_json json_t *j = json_loadb(body, len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *message = json_string_value(json_object_get(e, "message"));
    enum sl_error_kind kind = kind_of_status(status);

    if (message)
        return sl_fail(err, kind, code, "%s", message);
    if (status == 401)
        return sl_fail(err, kind, "unauthenticated",
                       "the server rejected the credentials: log in again with suanli login");
    return sl_fail(err, kind, code, "%s %s answered HTTP %ld", method, url, status);
}

int sl_client_request(struct sl_client *c, const char *method, const char *path, json_t *body,
                      const char *idempotency_key, json_t **out, struct sl_error *err)
{
    cleanup_free char *url = xasprintf("%s%s", c->server, path);
    cleanup_free char *payload = NULL;
    __attribute__((cleanup(cleanup_slist))) struct curl_slist *headers = NULL;
    cleanup_buf struct sl_buf answer = SL_BUF_INIT;
    char curl_error[CURL_ERROR_SIZE] = "";
    long status = 0;
    CURLcode rc;

    *out = NULL;
    if (!c->curl && !(c->curl = curl_easy_init()))
        return sl_fail(err, SL_E_INTERNAL, "curl", "unable to start libcurl");
    CURL *curl = c->curl;
    curl_easy_reset(curl);
    headers = curl_slist_append(headers, "Accept: application/json");
    if (c->token) {
        cleanup_free char *h = xasprintf("Authorization: Bearer %s", c->token);
        headers = curl_slist_append(headers, h);
    }
    if (idempotency_key) {
        cleanup_free char *h = xasprintf("Idempotency-Key: %s", idempotency_key);
        headers = curl_slist_append(headers, h);
    }
    if (body) {
        payload = json_dumps(body, JSON_COMPACT);
        if (!payload)
            return sl_fail(err, SL_E_INTERNAL, "json", "unable to encode the request body");
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    if (!body && strcmp(method, "GET") != 0)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "suanli-cli");
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, c->timeout_s > 0 ? c->timeout_s : REQUEST_TIMEOUT_S);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->cancel) {
        curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, check_cancel);
        curl_easy_setopt(curl, CURLOPT_XFERINFODATA, c);
        curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    }
    rc = curl_easy_perform(curl);
    if (rc == CURLE_ABORTED_BY_CALLBACK)
        return sl_fail(err, SL_E_UNAVAILABLE, "cancelled", "the request to '%s' was cancelled",
                       c->server);
    if (rc != CURLE_OK) {
        return sl_fail(err, SL_E_UNAVAILABLE, "unreachable",
                       "unable to reach the server at '%s' (%s): check --server or SUANLI_URL",
                       c->server, curl_error[0] ? curl_error : curl_easy_strerror(rc));
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (status == 304)
        return 0;
    if (status < 200 || status > 299)
        return fail_http(status, method, url, answer.data, answer.len, err);
    if (answer.len > 0) {
        json_error_t jerr;
        *out = json_loadb(answer.data, answer.len, 0, &jerr);
        if (!*out) {
            return sl_fail(err, SL_E_INTERNAL, "bad_answer",
                           "'%s' answered something other than JSON (%s): is it a suanli "
                           "server? check --server or SUANLI_URL",
                           url, jerr.text);
        }
    }
    return 0;
}

json_t *sl_client_list(struct sl_client *c, const char *path, size_t page_size,
                       struct sl_error *err)
{
    cleanup_json json_t *all = json_array();
    cleanup_free char *cursor = NULL;
    const char *sep = strchr(path, '?') ? "&" : "?";

    for (;;) {
        cleanup_free char *page_path =
            cursor ? xasprintf("%s%slimit=%zu&cursor=%s", path, sep, page_size, cursor)
                   : xasprintf("%s%slimit=%zu", path, sep, page_size);
        cleanup_json json_t *page = NULL;
        if (sl_client_request(c, "GET", page_path, NULL, NULL, &page, err) < 0)
            return NULL;
        json_t *items = json_object_get(page, "items");
        if (!json_is_array(items)) {
            sl_fail(err, SL_E_INTERNAL, "bad_answer", "'%s' sent no item list", path);
            return NULL;
        }
        json_array_extend(all, items);
        const char *next = json_string_value(json_object_get(page, "next_cursor"));
        free(cursor);
        cursor = next ? sl_client_escape(next) : NULL;
        if (!cursor)
            break;
    }
    return json_pack("{s:O, s:n}", "items", all, "next_cursor");
}

char *sl_client_escape(const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    char *copy = xstrdup(e ? e : "");

    curl_free(e);
    return copy;
}

struct download {
    FILE *file;
    crypto_hash_sha256_state sha;
    long status;
    CURL *curl;
    struct sl_buf *error_body; /* what a failed download said, in part */
};

static size_t download_write(char *data, size_t size, size_t n, void *userdata)
{
    struct download *d = userdata;

    if (!d->status)
        curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, &d->status);
    if (d->status < 200 || d->status > 299) {
        if (d->error_body->len < 65536)
            sl_buf_add(d->error_body, data, size * n);
        return size * n;
    }
    crypto_hash_sha256_update(&d->sha, (const unsigned char *)data, size * n);
    return fwrite(data, size, n, d->file) == n ? size * n : 0;
}

static CURL *prepare(struct sl_client *c, const char *url, struct curl_slist **headers,
                     char *curl_error, struct sl_error *err)
{
    if (!c->curl && !(c->curl = curl_easy_init())) {
        sl_fail(err, SL_E_INTERNAL, "curl", "unable to start libcurl");
        return NULL;
    }
    curl_easy_reset(c->curl);
    if (c->token) {
        cleanup_free char *h = xasprintf("Authorization: Bearer %s", c->token);
        *headers = curl_slist_append(*headers, h);
    }
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_USERAGENT, "suanli-cli");
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    /* no overall limit for archives; a transfer stalled for a minute fails */
    curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    return c->curl;
}

int sl_client_download(struct sl_client *c, const char *path, const char *dest, char *sha256_hex,
                       struct sl_error *err)
{
    cleanup_free char *url = xasprintf("%s%s", c->server, path);
    __attribute__((cleanup(cleanup_slist))) struct curl_slist *headers = NULL;
    char curl_error[CURL_ERROR_SIZE] = "";
    cleanup_buf struct sl_buf error_body = SL_BUF_INIT;
    struct download d = { .error_body = &error_body };
    unsigned char digest[crypto_hash_sha256_BYTES];
    CURL *curl = prepare(c, url, &headers, curl_error, err);

    if (!curl)
        return -1;
    d.curl = curl;
    d.file = fopen(dest, "we");
    if (!d.file)
        return sl_fail_errno(err, "unable to create '%s'", dest);
    fchmod(fileno(d.file), 0600);
    crypto_hash_sha256_init(&d.sha);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, download_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &d);
    CURLcode rc = curl_easy_perform(curl);
    int closed = fclose(d.file);
    if (rc == CURLE_OK && !d.status)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &d.status);
    if (rc != CURLE_OK || closed != 0 || d.status < 200 || d.status > 299) {
        unlink(dest);
        return rc != CURLE_OK
                   ? sl_fail(err, SL_E_UNAVAILABLE, "unreachable", "download of '%s' failed: %s",
                             url, curl_error[0] ? curl_error : curl_easy_strerror(rc))
               : closed != 0
                   ? sl_fail_errno(err, "unable to write '%s'", dest)
                   : fail_http(d.status, "GET", url, error_body.data, error_body.len, err);
    }
    crypto_hash_sha256_final(&d.sha, digest);
    if (sha256_hex)
        sodium_bin2hex(sha256_hex, 65, digest, sizeof(digest));
    return 0;
}

struct resume {
    struct download d;
    uint64_t offset; /* bytes kept from before */
    bool restarted;  /* the server sent the whole file: dest started again */
};

static size_t resume_write(char *data, size_t size, size_t n, void *userdata)
{
    struct resume *r = userdata;

    if (!r->d.status) {
        curl_easy_getinfo(r->d.curl, CURLINFO_RESPONSE_CODE, &r->d.status);
        if (r->d.status == 200 && r->offset) {
            /* the range was not honoured: the whole file comes */
            if (fflush(r->d.file) != 0 || ftruncate(fileno(r->d.file), 0) < 0 ||
                fseeko(r->d.file, 0, SEEK_SET) < 0)
                return 0;
            crypto_hash_sha256_init(&r->d.sha);
            r->offset = 0;
            r->restarted = true;
        }
    }
    return download_write(data, size, n, &r->d);
}

int sl_client_download_resume(struct sl_client *c, const char *path, const char *dest,
                              char *sha256_hex, uint64_t *resumed, struct sl_error *err)
{
    cleanup_free char *url = xasprintf("%s%s", c->server, path);
    __attribute__((cleanup(cleanup_slist))) struct curl_slist *headers = NULL;
    char curl_error[CURL_ERROR_SIZE] = "";
    cleanup_buf struct sl_buf error_body = SL_BUF_INIT;
    struct resume r = { .d = { .error_body = &error_body } };
    unsigned char digest[crypto_hash_sha256_BYTES], buf[1 << 16];
    CURL *curl = prepare(c, url, &headers, curl_error, err);
    struct stat st;
    ssize_t got;

    if (resumed)
        *resumed = 0;
    if (!curl)
        return -1;
    r.d.curl = curl;
    int fd = open(dest, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return sl_fail_errno(err, "unable to open '%s'", dest);
    }
    crypto_hash_sha256_init(&r.d.sha);
    while ((got = read(fd, buf, sizeof(buf))) > 0)
        crypto_hash_sha256_update(&r.d.sha, buf, (size_t)got);
    if (got < 0 || !(r.d.file = fdopen(fd, "r+")) || fseeko(r.d.file, 0, SEEK_END) < 0) {
        sl_fail_errno(err, "unable to read '%s'", dest);
        if (r.d.file)
            fclose(r.d.file);
        else
            close(fd);
        return -1;
    }
    r.offset = (uint64_t)st.st_size;
    if (r.offset) {
        cleanup_free char *h = xasprintf("Range: bytes=%llu-", (unsigned long long)r.offset);
        headers = curl_slist_append(headers, h);
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, resume_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
    CURLcode rc = curl_easy_perform(curl);
    int closed = fclose(r.d.file);
    if (rc == CURLE_OK && !r.d.status)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.d.status);
    if (rc != CURLE_OK || closed != 0)
        /* dest keeps what came: the next call asks for the rest */
        return rc != CURLE_OK
                   ? sl_fail(err, SL_E_UNAVAILABLE, "unreachable", "download of '%s' failed: %s",
                             url, curl_error[0] ? curl_error : curl_easy_strerror(rc))
                   : sl_fail_errno(err, "unable to write '%s'", dest);
    if (r.d.status < 200 || r.d.status > 299) {
        unlink(dest);
        return fail_http(r.d.status, "GET", url, error_body.data, error_body.len, err);
    }
    crypto_hash_sha256_final(&r.d.sha, digest);
    if (sha256_hex)
        sodium_bin2hex(sha256_hex, 65, digest, sizeof(digest));
    if (resumed)
        *resumed = r.offset;
    return 0;
}

/* An upload stalled this long fails; once the body is sent, the server may
 * take this long to answer: it reads an image archive through before it
 * does (server/archive-check.h), a minute or more for a large compressed
 * one, so curl's low-speed limit cannot stand for both. */
#define UPLOAD_STALL_S  60
#define UPLOAD_ANSWER_S 3600

struct upload_progress {
    sl_client_progress_fn *fn;
    void *arg;
    curl_off_t last_ul; /* bytes sent when they last moved */
    int64_t last_s;     /* and when (monotonic seconds) */
    const char *why;    /* why the callback stopped it */
};

static int upload_progress(void *p, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                           curl_off_t ulnow)
{
    struct upload_progress *up = p;
    struct timespec ts;
    (void)dltotal;
    (void)dlnow;

    if (up->fn && ultotal > 0)
        up->fn((int64_t)ulnow, (int64_t)ultotal, up->arg);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (!up->last_s || ulnow != up->last_ul) {
        up->last_ul = ulnow;
        up->last_s = (int64_t)ts.tv_sec;
        return 0;
    }
    bool sent = ultotal > 0 && ulnow >= ultotal;
    if ((int64_t)ts.tv_sec - up->last_s < (sent ? UPLOAD_ANSWER_S : UPLOAD_STALL_S))
        return 0;
    up->why = sent ? "the server did not answer within an hour of the upload"
                   : "the upload stalled for a minute";
    return 1;
}

int sl_client_upload(struct sl_client *c, const char *method, const char *path, const char *src,
                     sl_client_progress_fn *progress, void *arg, json_t **out, struct sl_error *err)
{
    cleanup_free char *url = xasprintf("%s%s", c->server, path);
    __attribute__((cleanup(cleanup_slist))) struct curl_slist *headers = NULL;
    char curl_error[CURL_ERROR_SIZE] = "";
    cleanup_fclose FILE *file = fopen(src, "re");
    struct upload_progress up = { .fn = progress, .arg = arg };
    struct stat st;
    cleanup_buf struct sl_buf answer = SL_BUF_INIT;
    long status = 0;

    *out = NULL;
    if (!file || fstat(fileno(file), &st) < 0)
        return sl_fail_errno(err, "unable to read '%s'", src);
    if (!S_ISREG(st.st_mode))
        return sl_fail(err, SL_E_INVALID, "not_a_file",
                       "'%s' is not a file: tar an OCI layout directory first", src);
    CURL *curl = prepare(c, url, &headers, curl_error, err);
    if (!curl)
        return -1;
    headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    headers = curl_slist_append(headers, "Accept: application/json");
    headers = curl_slist_append(headers, "Expect:");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_READDATA, file);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)st.st_size);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, upload_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &up);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 0L); /* upload_progress watches */
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK) {
        return sl_fail(err, SL_E_UNAVAILABLE, "unreachable",
                       "unable to send '%s' to '%s' (%s): check --server or SUANLI_URL", src,
                       c->server,
                       up.why          ? up.why
                       : curl_error[0] ? curl_error
                                       : curl_easy_strerror(rc));
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (status == 304)
        return 0;
    if (status < 200 || status > 299)
        return fail_http(status, method, url, answer.data, answer.len, err);
    *out = answer.len ? json_loadb(answer.data, answer.len, 0, NULL) : NULL;
    return 0;
}
