/* The API edge: requests in, JSON out, independent of the HTTP library so the
 * fuzzer and unit tests drive the same code as libmicrohttpd (http.c).
 *
 * A handler fills `res` and returns 0, or returns -1 with `err` filled; the
 * dispatcher turns the error into its status and
 * {"error":{"code":...,"message":...}}. */
#ifndef SL_API_H
#define SL_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/buf.h"
#include "../lib/error.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "server.h"

#define API_MAX_PARAMS 4

struct api_io {
    /* header and query lookups of the transport; NULL when absent */
    const char *(*header)(void *ctx, const char *name);
    const char *(*query)(void *ctx, const char *name);
    const char *(*cookie)(void *ctx, const char *name);
    void *ctx;
};

struct api_caller {
    bool authenticated;
    bool admin;
    char user_id[SL_ID_MAX];
    char token_id[SL_ID_MAX];
    char token_kind[8];      /* "session" or "api" */
    bool via_cookie;         /* the credential came in the session cookie */
    char node_id[SL_ID_MAX]; /* set for a node agent's token; then no user */
};

/* The instance an API_INSTANCE route names, as the dispatcher found it
 * before the handler ran. */
struct api_instance {
    char id[SL_ID_MAX];
    char user_id[SL_ID_MAX]; /* its owner */
    char node_id[SL_ID_MAX]; /* its host */
    char state[16];          /* as recorded (instance-states.h) */
};

/* Where an event stream resumes (event-stream.h): the last event seq,
 * instance revision and ledger entry seq its client has. */
struct event_cursor {
    int64_t event_seq, instance_rev, ledger_seq;
};

struct api_request {
    struct server *srv;
    const char *method;
    const char *path;
    const char *body;
    size_t body_len;
    const char *remote_addr; /* the client: the peer, or what a trusted proxy says */
    /* Filled by the transport from what a trusted proxy says
     * (X-Forwarded-Proto, X-Forwarded-Host); else false and NULL: the Host
     * header is then the host. */
    bool https;
    const char *forwarded_host;
    /* the transport can hold the answer back until the node's desired
     * state changes (api_response.wait); false in a resumed request */
    bool may_wait;
    /* the transport can answer with an event stream (api_response.stream) */
    bool may_stream;
    struct api_io io;
    /* filled by the dispatcher */
    const struct api_route *route;
    const char *params[API_MAX_PARAMS];
    char param_buf[512];
    struct api_caller caller;
    struct api_instance instance; /* API_INSTANCE routes */
    json_t *json;                 /* parsed body, owned */
    /* what the route's prepare made, before any transaction; the
     * dispatcher frees it with prepared_free */
    void *prepared;
    void (*prepared_free)(void *prepared);
    /* API_UPLOAD routes: the body, streamed to a file by the transport */
    const char *upload_path;
    uint64_t upload_size;
    char upload_sha256[65];
};

struct api_response {
    int status;
    json_t *json; /* owned; serialised by the dispatcher */
    char *raw;    /* owned; used instead of json (e.g. /metrics) */
    size_t raw_len;
    const char *content_type;
    struct sl_buf headers; /* "Name: value\r\n" lines */
    int file_fd;           /* >= 0: send this file (file_size bytes) as the body; owned */
    uint64_t file_size;
    uint64_t file_offset; /* where in file_fd the body starts (a Range answer) */
    /* Set by a handler of a request that may_wait: instead of answering,
     * the transport waits until node_id's desired revision passes after,
     * or `seconds` pass, then runs the request again without may_wait
     * (server/desired-wait.h). */
    struct {
        bool requested;
        char node_id[SL_ID_MAX];
        int64_t after;
        int64_t seconds;
    } wait;
    /* Set by GET /v1/events/stream's handler when the request may_stream:
     * the transport answers with user_id's event stream from `from` (from
     * now unless resume) instead of the body (server/event-stream.h). */
    struct {
        bool requested;
        bool resume;
        struct event_cursor from;
        char user_id[SL_ID_MAX];
        char token_id[SL_ID_MAX]; /* the credential: revoked or expired, the stream ends */
    } stream;
};

typedef int (*api_handler_fn)(struct api_request *req, struct api_response *res,
                              struct sl_error *err);

enum api_route_flags {
    API_PUBLIC = 1 << 0,         /* no credentials needed */
    API_ADMIN = 1 << 1,          /* admins only; others get 404 */
    API_NO_IDEMPOTENCY = 1 << 2, /* never replay (responses hold secrets) */
    API_RAW_BODY = 1 << 3,       /* body is not parsed as JSON */
    API_OWN_TX = 1 << 4,         /* the handler manages its transactions */
    API_NODE = 1 << 5,           /* node agents only, and only about themselves */
    API_QUIET = 1 << 6,          /* agents' steady traffic (reads, heartbeats): debug level */
    API_UPLOAD = 1 << 7,         /* admins only; the body is streamed to a file, not parsed */
    /* The route names an instance, which the dispatcher finds before the
     * handler runs (req->instance), inside the handler's transaction: a
     * renter's route's {id} must be one of the caller's instances (any
     * state: the handler decides what a released one gets); a node route's
     * {instance} (with API_NODE) one the calling node holds, not released.
     * Anything else is 404 no_such_instance, as for an id that does not
     * exist, before the body is read. Admins are renters here: their own
     * instances only. */
    API_INSTANCE = 1 << 8,
    API_FRONT = 1 << 9, /* the front door's nginx only, with the front's token (front.h) */
    /* with API_INSTANCE on a renter's route that only reads: an admin's
     * {id} may be any instance, not only their own (others still get 404) */
    API_ADMIN_READS = 1 << 10,
};

struct api_route {
    const char *method;
    const char *pattern; /* "/v1/tokens/{id}" */
    api_handler_fn handler;
    unsigned flags;
    /* NULL, or costly work that needs no store, done after authentication
     * and before the transaction (and idempotency's), so that other
     * writers do not wait for it; it leaves its result in req->prepared */
    int (*prepare)(struct api_request *req, struct sl_error *err);
};

extern const struct api_route api_routes[];
extern const size_t api_routes_count;

void api_response_init(struct api_response *res);
void api_response_release(struct api_response *res);

/* Runs one request to completion: always fills res (status, body). */
void api_dispatch(struct api_request *req, struct api_response *res);

/* Serialises res into a body the transport sends; caller frees. */
char *api_response_body(struct api_response *res, size_t *len, const char **content_type);

/* Helpers for handlers. */
int api_body_fields(struct api_request *req, const struct sl_json_field *fields, size_t n,
                    struct sl_error *err);
void api_reply(struct api_response *res, int status, json_t *json);
/* {"error":{"code":...,"message":...}}; bytes of message that are not valid
 * UTF-8 (quoted from a request) become '?'. Returns a new reference. */
json_t *api_error_json(const char *code, const char *message);
void api_add_header(struct api_response *res, const char *name, const char *value);
const char *api_query(struct api_request *req, const char *name);
const char *api_header(struct api_request *req, const char *name);

/* Pagination: ?limit=N&cursor=C, where the cursor is an opaque integer.
 * Fills limit (default 50) and after (0 for the first page). */
int api_page_params(struct api_request *req, int64_t *limit, int64_t *after, struct sl_error *err);

/* Steps rows whose column 0 is the keyset position (a sequence), turns
 * each row into an item with row_json, and replies 200 with the page. */
int api_reply_rows(struct api_response *res, struct db_rows *rows,
                   json_t *(*row_json)(struct db_rows *rows, void *ctx), void *ctx, int64_t limit,
                   struct sl_error *err);

/* One row of "SELECT seq, instance_id, kind, state, reason, message,
 * created_at FROM events" as GET /v1/events lists it (api-billing.c). */
json_t *api_event_json(struct db_rows *rows, void *ctx);

/* Time and money as the API writes them. */
json_t *api_time(int64_t t);

/* The route for method and path, without filling parameters; NULL if none.
 * The transport uses it to stream API_UPLOAD bodies to disk. */
const struct api_route *api_route_lookup(const char *method, const char *path);

/* The route table's index of req->route, for metrics. */
size_t api_route_index(const struct api_route *route);

#endif
