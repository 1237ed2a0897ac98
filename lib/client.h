/* The HTTP client of the CLI and the node agent: JSON requests to suanlid
 * over libcurl, with the API's {"error":{"code","message"}} answers turned
 * into struct sl_error. */
#ifndef SL_CLIENT_H
#define SL_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

struct sl_client {
    const char *server; /* base URL without trailing '/', borrowed */
    const char *token;  /* bearer token or NULL, borrowed */
    void *curl;         /* CURL *, made on first use */
    long timeout_s;     /* a request's whole time; 0: two minutes */
    /* when set and true, a request in flight ends within about a second
     * (SL_E_UNAVAILABLE, code "cancelled"): a long-poll's way out */
    const volatile bool *cancel;
};

void sl_client_init(struct sl_client *c, const char *server, const char *token);
void sl_client_release(struct sl_client *c);

/* Sends METHOD server+path with body (may be NULL) as JSON and, when
 * idempotency_key is not NULL, an Idempotency-Key header. On a 2xx answer
 * *out is the parsed body (a new reference) or NULL for an empty one (204).
 * On anything else returns -1 with err filled:
 *   - an HTTP error: kind from the status, code and message from the body;
 *   - no answer at all: SL_E_UNAVAILABLE, code "unreachable", a message that
 *     names the URL and suggests --server / SUANLI_URL. */
int sl_client_request(struct sl_client *c, const char *method, const char *path, json_t *body,
                      const char *idempotency_key, json_t **out, struct sl_error *err);

/* GETs a list route page by page, following next_cursor to the end. path
 * may already hold a query string. Returns a new {"items": [...],
 * "next_cursor": null} object, or NULL with err filled. */
json_t *sl_client_list(struct sl_client *c, const char *path, size_t page_size,
                       struct sl_error *err);

/* GETs path into the file dest (made 0600, replaced when it exists) and, when
 * sha256_hex (65 bytes) is not NULL, the SHA-256 of what arrived. An error
 * answer fails like sl_client_request and leaves no file. No overall timeout:
 * archives are large; a transfer stalled for a minute fails. */
int sl_client_download(struct sl_client *c, const char *path, const char *dest, char *sha256_hex,
                       struct sl_error *err);

/* sl_client_download that resumes: what dest already holds is kept and
 * only the rest is asked for ("Range: bytes=SIZE-"; a server that answers
 * 200 instead sends it whole and dest starts again); sha256_hex covers the
 * whole file. A transfer cut short keeps dest for the next call; an error
 * answer removes it. *resumed (when not NULL) is the bytes kept. */
int sl_client_download_resume(struct sl_client *c, const char *path, const char *dest,
                              char *sha256_hex, uint64_t *resumed, struct sl_error *err);

/* Told how far an upload is: sent of total bytes. */
typedef void sl_client_progress_fn(int64_t sent, int64_t total, void *arg);

/* Sends the file src as the body of METHOD path (application/octet-stream),
 * calling progress (when not NULL) with arg as the bytes go out; *out as
 * in sl_client_request. */
int sl_client_upload(struct sl_client *c, const char *method, const char *path, const char *src,
                     sl_client_progress_fn *progress, void *arg, json_t **out,
                     struct sl_error *err);

/* A newly allocated, URL-escaped copy of s for a path segment or query. */
char *sl_client_escape(const char *s);

#endif
