/* libFuzzer harness for the API edge: api_dispatch() with every route of the
 * table, every kind of caller, any path parameter, query and body.
 *
 * Input layout (every field is optional: a short input reads as zeros):
 *
 *   byte 0   route: index into api_routes, modulo api_routes_count; 0xff is
 *            always the nodes' proxy-auth route (seeds stay valid when the
 *            table grows)
 *   byte 1   caller (bits 0-1: anonymous, renter, admin, token from the
 *            input; on node routes (API_NODE) the admin's slot is the
 *            harness's node, with its token), bit 2 Idempotency-Key, bit 3
 *            credentials as the session
 *            cookie instead of Authorization, bit 4 sign a webhook, bit 5 the
 *            method from the input instead of the route's, bit 6 a path from
 *            the input instead of the route's, bit 7 allow the password routes
 *   byte 2   query parameters present: bit i sends query_names[i]; bit 5
 *            replaces "@R", "@A", "@G" in the body with the renter's id, the
 *            admin's id, the seeded GPU model's id
 *   then     for each {param} of the pattern: a choice byte (0 renter id,
 *            1 admin id, 2 GPU model id, 3 the renter's token id, 4 the
 *            node's id, else a string of that length & 0x7f read from the
 *            input, any bytes: '/', '%', invalid UTF-8); then what the flags
 *            asked for: the method (a byte: below 0x80 an index into
 *            methods[], else a string of length & 0x7f), the path, the
 *            bearer token, the Idempotency-Key, always a webhook clock skew
 *            byte (x 4 seconds), the queries; strings are a length byte and
 *            that many bytes
 *   proxy    on the proxy-auth route only, what the node's nginx sends
 *            (node/proxy.c): X-Original-Host (a choice byte: 0..3 the
 *            seeded instance's private, public and Jupyter ports and an
 *            unpublished one, else a string as above), X-Original-URI
 *            (0 "/?suanli_token=" + the private port's token, 1 "/", else a
 *            string), then Cookie, X-Original-Referer,
 *            X-Original-Authorization, X-Original-Method,
 *            X-Original-Sec-Fetch-Site and -Mode as strings (length 0:
 *            absent); in all of them "@T" becomes the private port's
 *            token, "@S" the owner's session, "@O" another renter's
 *            session, "@I" the instance's id
 *   rest     the request body, in a buffer of exactly its size (no NUL)
 *
 * What is skipped, and why: POST /v1/users and POST /v1/sessions hash a
 * password with argon2id (about 50 ms), 1000 times the cost of any other
 * request, so they would eat the run. They are fuzzed only when bit 7 of byte
 * 1 is set, and then only with bodies that fail before the hash: an input
 * whose body would reach it (a JSON object whose "password" is a string, of
 * 8 characters or more for registration) is skipped (returns -1, so libFuzzer
 * does not keep it). The integration tests cover the successful paths.
 *
 * Invariants checked on every request (abort() with the request printed):
 * a status from 100 to 599 and never 500 (an internal error is a bug here:
 * the store is private and never busy), no transaction left open, a body that
 * is a JSON object on JSON routes (204: empty), and on an error status a body
 * {"error":{"code":"...","message":"..."}} with non-empty strings.
 *
 * On the proxy-auth route also (the renter boundary, docs/design/access.md):
 * a pass (204) only for the seeded instance's host, and for its private port
 * only when the request holds its token or the owner's session (in a cookie:
 * only from the same origin, or a GET navigation); what a pass
 * hands to the instance (X-Suanli-URI, -Cookie, -Referer, -Authorization)
 * holds no suanli credential, no line break, and the URI starts with '/'.
 * The filters themselves (ports-filter.c) are run on the raw inputs as well:
 * none leaves a credential, each is idempotent, a Cookie without suanli's
 * cookies passes byte for byte, and host parsing ignores case.
 *
 * FUZZ_API_TRACE=1 prints each request and the start of its answer, to check
 * what a seed does: build-fuzz/fuzz-api tests/fuzz/corpus/<seed>. */
#include "../../lib/cleanup.h"
#include "../../lib/crypto.h"
#include "../../lib/log.h"
#include "../../lib/timefmt.h"
#include "../../lib/xalloc.h"
#include "../../server/accounts.h"
#include "../../server/api.h"
#include "../../server/auth.h"
#include "../../server/catalog.h"
#include "../../server/nodes.h"
#include "../../server/ports.h"
#include "../../server/routes.h"
#include "../../server/secrets.h"
#include "../../server/server.h"

#include <ctype.h>
#include <ftw.h>
#include <sodium.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define WEBHOOK_SECRET "fuzz-webhook-secret"
#define REMOTE_ADDR    "192.0.2.7"
/* Requests pile rows up (the ledger is append-only; the market and the ledger
 * check read everything): every RUNS_PER_STORE inputs the harness starts over
 * with a new store, which costs two argon2id hashes, and every RUNS_PER_RESET
 * it clears the rows whose limits would close paths (tokens, SSH keys,
 * verifications, failed logins). */
#define RUNS_PER_STORE 16384
#define RUNS_PER_RESET 512

void __sanitizer_set_death_callback(void (*callback)(void));

struct identity {
    char user_id[SL_ID_MAX];
    char token[SL_TOKEN_MAX];
    char token_id[SL_ID_MAX];
};

static struct server srv;
static char data_dir[4096];
static struct identity renter, admin;
static char gpu_model_id[SL_ID_MAX];
/* the proxy's world: a node, an instance of a third user on it with a
 * private (6006), a public (6008) and a Jupyter (8888) port */
static char node_id[SL_ID_MAX], node_token[SL_TOKEN_MAX];
static char instance_id[SL_ID_MAX], port_token[PORTS_TOKEN_HEX];
static char owner_session[SL_TOKEN_MAX], other_session[SL_TOKEN_MAX];
static const struct api_route *proxy_route;
static bool trace; /* FUZZ_API_TRACE=1: print each request and its answer */

static const char *const query_names[] = { "limit", "cursor", "email", "state", "region" };
#define N_QUERIES (sizeof(query_names) / sizeof(query_names[0]))

static const char *const methods[] = { "GET", "POST", "DELETE", "PATCH", "PUT", "HEAD", "OPTIONS" };

/* One request as the input described it; strings owned, NUL-terminated. */
struct fuzz_request {
    char *method_in;
    char *path;
    char *bearer;
    char *authorization; /* "Bearer " + credential */
    char *idempotency_key;
    char *query[N_QUERIES];
    char timestamp[32];
    char signature[80];
    const char *credential; /* bearer or cookie value */
    bool cookie;
    bool signed_webhook;
    /* the proxy-auth route's headers, NULL when absent */
    char *original_host;
    char *original_uri;
    char *proxy_cookie;
    char *original_referer;
    char *original_authorization;
    char *original_method;
    char *fetch_site;
    char *fetch_mode;
};

struct reader {
    const uint8_t *p;
    size_t left;
};

static uint8_t take_byte(struct reader *r)
{
    if (!r->left)
        return 0;
    r->left--;
    return *r->p++;
}

static char *take_string(struct reader *r, size_t n)
{
    char *s;

    if (n > r->left)
        n = r->left;
    s = xmalloc(n + 1);
    memcpy(s, r->p, n);
    s[n] = '\0';
    r->p += n;
    r->left -= n;
    return s;
}

static char *take_counted(struct reader *r)
{
    return take_string(r, take_byte(r));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup_data_dir(void)
{
    if (data_dir[0])
        nftw(data_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    data_dir[0] = '\0';
}

static void close_state(void);

static void at_exit(void)
{
    close_state();
    sl_config_release(server_options, server_options_count, &srv.cfg);
}

static void die(const char *what, const struct sl_error *err)
{
    fprintf(stderr, "fuzz-api: %s: %s\n", what, err ? err->message : "");
    cleanup_data_dir();
    exit(1);
}

static void make_token(struct identity *who, const char *name)
{
    struct sl_error err = SL_ERROR_INIT;

    if (auth_token_create(srv.store, who->user_id, "api", name, 0, who->token, who->token_id,
                          &err) < 0)
        die("token", &err);
}

static void make_user(struct identity *who, const char *email, const char *role)
{
    struct sl_error err = SL_ERROR_INIT;

    if (accounts_create_user(&srv, email, "Fuzz", "fuzz password 1", role, who->user_id, &err) < 0)
        die("user", &err);
    make_token(who, "fuzz");
}

/* The node (enrolled as an agent is), the instance's owner with a session,
 * the instance on the node (a bare row: only the proxy reads it) and its
 * ports, as placement publishes them. */
static void open_proxy_world(void)
{
    struct sl_error err = SL_ERROR_INIT;
    struct identity owner;
    char join_id[SL_ID_MAX], join[SL_TOKEN_MAX], tok_id[SL_ID_MAX];
    cleanup_json json_t *inventory =
        json_pack("{s:i, s:i, s:[]}", "cpu_cores", 4, "memory_mib", 8192, "gpus");

    if (store_begin(srv.store, &err) < 0 ||
        nodes_join_token_create(&srv, "fz-1", 3600, 1, admin.user_id, join_id, join, &err) < 0 ||
        nodes_enroll(&srv, join, "fuzz-node", "192.0.2.9", inventory, node_id, node_token, &err) <
            0 ||
        store_commit(srv.store, &err) < 0)
        die("node", &err);
    if (accounts_create_user(&srv, "owner@example.com", "Owner", "fuzz password 1", "renter",
                             owner.user_id, &err) < 0 ||
        auth_token_create(srv.store, owner.user_id, "session", "s", 0, owner_session, tok_id,
                          &err) < 0 ||
        auth_token_create(srv.store, renter.user_id, "session", "s", 0, other_session, tok_id,
                          &err) < 0)
        die("owner", &err);
    sl_id_new(instance_id, "i-");
    if (store_exec(srv.store,
                   "INSERT INTO instances (id, user_id, name, region_id, node_id, gpu_model_id,"
                   " gpus, image, system_disk_gib, data_disk_gib, ssh_port, root_password,"
                   " state, desired, created_at, updated_at) VALUES (?1, ?2, 'fz', 'fz-1', ?3,"
                   " ?4, 1, 'debian-12', 20, 50, 2222, '', 'running', 'running', ?5, ?5)",
                   DB_ARGS(DB_TEXT(instance_id), DB_TEXT(owner.user_id), DB_TEXT(node_id),
                           DB_TEXT(gpu_model_id), DB_INT(sl_time_now())),
                   &err) < 0 ||
        ports_insert(&srv, instance_id, 6006, false, "", &err) < 0 ||
        ports_insert(&srv, instance_id, 6008, true, "", &err) < 0 ||
        ports_insert(&srv, instance_id, 8888, false, PORTS_RECIPE_APP, &err) < 0)
        die("instance", &err);
    /* the private port's token, as its owner's link shows it */
    cleanup_json json_t *inst = json_pack("{s:s}", "id", instance_id);
    if (ports_instance_json(&srv, inst, &err) < 0)
        die("ports", &err);
    const char *access = json_string_value(
        json_object_get(json_array_get(json_object_get(inst, "services"), 0), "access_url"));
    const char *t = access ? strstr(access, PORTS_QUERY "=") : NULL;
    if (!t)
        die("ports", NULL);
    snprintf(port_token, sizeof(port_token), "%s", t + strlen(PORTS_QUERY) + 1);
}

/* A fresh store in a new temporary directory: the two users with their
 * tokens, a small catalog and the proxy's world. */
static void open_state(void)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *tmp = getenv("TMPDIR");

    snprintf(data_dir, sizeof(data_dir), "%s/suanli-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(data_dir)) {
        data_dir[0] = '\0';
        perror("fuzz-api: mkdtemp");
        exit(1);
    }
    char *uri = xasprintf("sqlite:%s/suanli.db", data_dir);
    srv.store = store_open(uri, &err);
    free(uri);
    if (!srv.store || store_migrate(srv.store, &err) < 0)
        die("store", &err);
    /* the fuzzer wants speed, not durability: no fsync per commit */
    if (store_exec(srv.store, "PRAGMA synchronous=OFF", DB_NO_ARGS, &err) < 0)
        die("store", &err);
    randombytes_buf(srv.id_hash_key, sizeof(srv.id_hash_key));
    secrets_init(&srv);
    make_user(&admin, "admin@localhost", "admin");
    make_user(&renter, "renter@example.com", "renter");
    if (catalog_region_create(srv.store, "fz-1", "Fuzz region", false, &err) < 0 ||
        catalog_gpu_model_create(srv.store, "Fuzz GPU", 24576, 16, 65536, 1000000, false, NULL,
                                 gpu_model_id, &err) < 0 ||
        catalog_price_set(srv.store, CATALOG_DATA_DISK, "", 7000, 50, false, NULL, &err) < 0)
        die("catalog", &err);
    open_proxy_world();
    srv.started_at = sl_time_now();
}

static void close_state(void)
{
    store_close(srv.store);
    srv.store = NULL;
    cleanup_data_dir();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct sl_error err = SL_ERROR_INIT;
    (void)argc;
    (void)argv;

    if (sl_config_defaults(server_options, server_options_count, &srv.cfg, &err) < 0 ||
        sl_config_set(server_options, server_options_count, &srv.cfg, "payments.webhook_secret",
                      WEBHOOK_SECRET, &err) < 0)
        die("configuration", &err);
    sl_log_threshold = SL_LOG_ERROR;
    trace = getenv("FUZZ_API_TRACE") != NULL;
    if (sl_crypto_init(&err) < 0)
        die("crypto", &err);
    atexit(at_exit);
    __sanitizer_set_death_callback(cleanup_data_dir);
    for (size_t i = 0; i < api_routes_count; i++)
        if (api_routes[i].handler == api_proxy_auth)
            proxy_route = &api_routes[i];
    if (!proxy_route)
        die("no proxy-auth route in the table", NULL);
    open_state();
    return 0;
}

static const char *io_header(void *ctx, const char *name)
{
    struct fuzz_request *f = ctx;

    if (strcasecmp(name, "X-Original-Host") == 0)
        return f->original_host;
    if (strcasecmp(name, "X-Original-URI") == 0)
        return f->original_uri;
    if (strcasecmp(name, "Cookie") == 0)
        return f->proxy_cookie;
    if (strcasecmp(name, "X-Original-Referer") == 0)
        return f->original_referer;
    if (strcasecmp(name, "X-Original-Authorization") == 0)
        return f->original_authorization;
    if (strcasecmp(name, "X-Original-Method") == 0)
        return f->original_method;
    if (strcasecmp(name, "X-Original-Sec-Fetch-Site") == 0)
        return f->fetch_site;
    if (strcasecmp(name, "X-Original-Sec-Fetch-Mode") == 0)
        return f->fetch_mode;
    if (strcasecmp(name, "Authorization") == 0)
        return f->credential && !f->cookie ? f->authorization : NULL;
    if (strcasecmp(name, "Idempotency-Key") == 0)
        return f->idempotency_key;
    if (strcasecmp(name, "X-Suanli-Timestamp") == 0)
        return f->signed_webhook ? f->timestamp : NULL;
    if (strcasecmp(name, "X-Suanli-Signature") == 0)
        return f->signed_webhook ? f->signature : NULL;
    return NULL;
}

static const char *io_query(void *ctx, const char *name)
{
    struct fuzz_request *f = ctx;

    for (size_t i = 0; i < N_QUERIES; i++)
        if (strcmp(name, query_names[i]) == 0)
            return f->query[i];
    return NULL;
}

static const char *io_cookie(void *ctx, const char *name)
{
    struct fuzz_request *f = ctx;

    return f->cookie && strcmp(name, AUTH_COOKIE) == 0 ? f->credential : NULL;
}

static void fuzz_request_release(struct fuzz_request *f)
{
    free(f->method_in);
    free(f->path);
    free(f->bearer);
    free(f->authorization);
    free(f->idempotency_key);
    for (size_t i = 0; i < N_QUERIES; i++)
        free(f->query[i]);
    free(f->original_host);
    free(f->original_uri);
    free(f->proxy_cookie);
    free(f->original_referer);
    free(f->original_authorization);
    free(f->original_method);
    free(f->fetch_site);
    free(f->fetch_mode);
    memset(f, 0, sizeof(*f));
}

/* The route's pattern with each {param} filled from the input. */
static char *build_path(const char *pattern, struct reader *r)
{
    struct sl_buf b;

    sl_buf_init(&b);
    for (const char *p = pattern; *p;) {
        if (*p != '{') {
            sl_buf_add(&b, p++, 1);
            continue;
        }
        const char *end = strchr(p, '}');
        p = end ? end + 1 : p + strlen(p);
        uint8_t choice = take_byte(r);
        switch (choice) {
        case 0:
            sl_buf_addf(&b, "%s", renter.user_id);
            break;
        case 1:
            sl_buf_addf(&b, "%s", admin.user_id);
            break;
        case 2:
            sl_buf_addf(&b, "%s", gpu_model_id);
            break;
        case 3:
            sl_buf_addf(&b, "%s", renter.token_id);
            break;
        case 4:
            sl_buf_addf(&b, "%s", node_id);
            break;
        default: {
            char *s = take_string(r, choice & 0x7f);
            sl_buf_addf(&b, "%s", s);
            free(s);
        }
        }
    }
    size_t len;
    return sl_buf_detach(&b, &len);
}

/* The body with "@R", "@A", "@G" replaced by the ids the fuzzer cannot guess. */
static uint8_t *substitute_ids(const uint8_t *body, size_t len, size_t *out_len)
{
    struct sl_buf b;

    sl_buf_init(&b);
    for (size_t i = 0; i < len; i++) {
        const char *id = NULL;
        if (body[i] == '@' && i + 1 < len) {
            id = body[i + 1] == 'R'   ? renter.user_id
                 : body[i + 1] == 'A' ? admin.user_id
                 : body[i + 1] == 'G' ? gpu_model_id
                                      : NULL;
        }
        if (id) {
            sl_buf_addf(&b, "%s", id);
            i++;
        } else {
            sl_buf_add(&b, &body[i], 1);
        }
    }
    char *s = sl_buf_detach(&b, out_len);
    /* exactly out_len bytes, so a read past the body is an ASan error */
    uint8_t *exact = xmalloc(*out_len ? *out_len : 1);
    memcpy(exact, s, *out_len);
    free(s);
    return exact;
}

/* True when the body would reach an argon2id hash (see the top comment). */
static bool reaches_password_hash(const struct api_route *route, const uint8_t *body, size_t len)
{
    bool login = strcmp(route->pattern, "/v1/sessions") == 0;
    json_t *j, *password;
    bool hashes;

    if (strcmp(route->method, "POST") != 0 || (!login && strcmp(route->pattern, "/v1/users") != 0))
        return false;
    j = json_loadb((const char *)body, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    password = json_is_object(j) ? json_object_get(j, "password") : NULL;
    hashes = json_is_string(password) && (login || json_string_length(password) >= 8);
    json_decref(j);
    return hashes;
}

/* A proxy header from the input: "@T", "@S", "@O", "@I" replaced (see the
 * top comment); NULL when its length is 0. */
static char *take_proxy_string(struct reader *r)
{
    cleanup_free char *raw = take_counted(r);
    struct sl_buf b;

    if (!*raw)
        return NULL;
    sl_buf_init(&b);
    for (const char *p = raw; *p; p++) {
        const char *sub = NULL;
        if (p[0] == '@' && p[1])
            sub = p[1] == 'T'   ? port_token
                  : p[1] == 'S' ? owner_session
                  : p[1] == 'O' ? other_session
                  : p[1] == 'I' ? instance_id
                                : NULL;
        if (sub) {
            sl_buf_adds(&b, sub);
            p++;
        } else {
            sl_buf_add(&b, p, 1);
        }
    }
    return sl_buf_detach(&b, NULL);
}

/* The proxy-auth route's headers (see the top comment). */
static void take_proxy_headers(struct fuzz_request *f, struct reader *r)
{
    static const unsigned ports[] = { 6006, 6008, 8888, 7000 };
    uint8_t host = take_byte(r);

    if (host < 4)
        f->original_host = xasprintf("%s-%u.%s%s", instance_id, ports[host],
                                     srv.cfg.services_domain, host == 1 ? ":8080" : "");
    else
        f->original_host = take_proxy_string(r);
    uint8_t uri = take_byte(r);
    if (uri == 0)
        f->original_uri = xasprintf("/?" PORTS_QUERY "=%s", port_token);
    else if (uri == 1)
        f->original_uri = xstrdup("/");
    else
        f->original_uri = take_proxy_string(r);
    f->proxy_cookie = take_proxy_string(r);
    f->original_referer = take_proxy_string(r);
    f->original_authorization = take_proxy_string(r);
    f->original_method = take_proxy_string(r);
    f->fetch_site = take_proxy_string(r);
    f->fetch_mode = take_proxy_string(r);
}

static void print_escaped(const char *label, const void *data, size_t len)
{
    const unsigned char *p = data;

    fprintf(stderr, "  %s (%zu bytes): \"", label, len);
    for (size_t i = 0; i < len && i < 4096; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\')
            fputc(p[i], stderr);
        else
            fprintf(stderr, "\\x%02x", p[i]);
    }
    fprintf(stderr, "\"%s\n", len > 4096 ? "..." : "");
}

static void print_string(const char *label, const char *s)
{
    if (s)
        print_escaped(label, s, strlen(s));
}

__attribute__((noreturn, format(printf, 6, 7))) static void
fail(const struct api_request *req, const struct fuzz_request *f, int status, const char *body,
     size_t body_len, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "fuzz-api: invariant broken: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    print_string("method", req->method);
    print_string("path", req->path);
    print_string("credential", f->credential);
    fprintf(stderr, "  credential as %s\n", f->cookie ? "cookie" : "Authorization header");
    print_string("Idempotency-Key", f->idempotency_key);
    if (f->signed_webhook)
        fprintf(stderr, "  signed webhook, timestamp %s\n", f->timestamp);
    for (size_t i = 0; i < N_QUERIES; i++)
        print_string(query_names[i], f->query[i]);
    print_string("X-Original-Host", f->original_host);
    print_string("X-Original-URI", f->original_uri);
    print_string("Cookie", f->proxy_cookie);
    print_string("X-Original-Referer", f->original_referer);
    print_string("X-Original-Authorization", f->original_authorization);
    print_string("X-Original-Method", f->original_method);
    print_string("X-Original-Sec-Fetch-Site", f->fetch_site);
    print_string("X-Original-Sec-Fetch-Mode", f->fetch_mode);
    print_escaped("body", req->body, req->body_len);
    fprintf(stderr, "  status %d\n", status);
    print_escaped("response", body, body_len);
    cleanup_data_dir();
    abort();
}

/* The value of header name in a response's "Name: value\r\n" lines, copied
 * into out; false when absent. */
static bool response_header(const struct api_response *res, const char *name, char *out,
                            size_t size)
{
    const char *p = res->headers.data ? res->headers.data : "";
    size_t n = strlen(name);

    for (; *p; p = strstr(p, "\r\n") ? strstr(p, "\r\n") + 2 : p + strlen(p)) {
        if (strncasecmp(p, name, n) == 0 && p[n] == ':' && p[n + 1] == ' ') {
            size_t len = strcspn(p + n + 2, "\r\n");
            snprintf(out, size, "%.*s", (int)len, p + n + 2);
            return true;
        }
    }
    return false;
}

/* Whether a Cookie header holds a cookie that suanli reads, by a parser of
 * this file's own: pairs split at ';', blanks around the name dropped. */
static bool has_suanli_cookie(const char *cookie)
{
    for (const char *p = cookie ? cookie : ""; *p;) {
        size_t len = strcspn(p, ";");
        size_t start = 0, end = len;
        while (start < len && (p[start] == ' ' || p[start] == '\t'))
            start++;
        const char *eq = memchr(p + start, '=', len - start);
        if (eq)
            end = (size_t)(eq - p);
        while (end > start && (p[end - 1] == ' ' || p[end - 1] == '\t'))
            end--;
        if ((end - start == strlen(PORTS_COOKIE) &&
             strncasecmp(p + start, PORTS_COOKIE, end - start) == 0) ||
            (end - start == strlen(AUTH_COOKIE) &&
             strncasecmp(p + start, AUTH_COOKIE, end - start) == 0))
            return true;
        p += len;
        if (*p)
            p++;
    }
    return false;
}

static bool has_line_break(const char *s)
{
    return s && strpbrk(s, "\r\n");
}

/* The filters on the raw inputs, whatever the route answered. */
static void check_filters(const struct api_request *req, const struct fuzz_request *f)
{
    char id[SL_ID_MAX], id2[SL_ID_MAX], t[PORTS_TOKEN_HEX];
    int64_t port = 0, port2 = 0;

    if (f->original_host) {
        cleanup_free char *lower = xstrdup(f->original_host);
        for (char *p = lower; *p; p++)
            *p = (char)tolower((unsigned char)*p);
        bool a = ports_parse_host(f->original_host, srv.cfg.services_domain, id, &port);
        bool b = ports_parse_host(lower, srv.cfg.services_domain, id2, &port2);
        if (a != b || (a && (strcmp(id, id2) != 0 || port != port2)))
            fail(req, f, 0, "", 0, "host parsing depends on case");
        if (a && (!sl_id_valid(id, "i-") || port < 1 || port > 65535))
            fail(req, f, 0, "", 0, "host parsed into id '%s' port %" PRId64, id, port);
    }
    cleanup_free char *uri = ports_uri_filter(f->original_uri);
    if (uri) {
        cleanup_free char *again = ports_uri_filter(uri);
        if (uri[0] != '/' || ports_uri_token(uri, t, sizeof(t)) || has_line_break(uri) || !again ||
            strcmp(again, uri) != 0)
            fail(req, f, 0, uri, strlen(uri), "the URI filter left a token or is not idempotent");
    }
    cleanup_free char *referer = ports_referer_filter(f->original_referer);
    if (referer && (ports_uri_token(referer, t, sizeof(t)) || has_line_break(referer)))
        fail(req, f, 0, referer, strlen(referer), "the Referer filter left a token");
    cleanup_free char *cookie = ports_cookie_filter(f->proxy_cookie);
    if (cookie) {
        cleanup_free char *again = ports_cookie_filter(cookie);
        if (has_suanli_cookie(cookie) || has_line_break(cookie) || !again ||
            strcmp(again, cookie) != 0)
            fail(req, f, 0, cookie, strlen(cookie),
                 "the Cookie filter left a suanli cookie or is not idempotent");
    }
    if (f->proxy_cookie && *f->proxy_cookie && !has_suanli_cookie(f->proxy_cookie) &&
        !strpbrk(f->proxy_cookie, "\r\n") && (!cookie || strcmp(cookie, f->proxy_cookie) != 0)) {
        /* control bytes other than tab make the filter drop the header */
        bool control = false;
        for (const char *p = f->proxy_cookie; *p; p++)
            control |= ((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f;
        if (!control)
            fail(req, f, 0, cookie ? cookie : "", cookie ? strlen(cookie) : 0,
                 "the Cookie filter changed a header without suanli cookies");
    }
}

/* What a proxy-auth answer lets through (see the top comment). */
static void check_proxy_answer(const struct api_request *req, const struct fuzz_request *f,
                               const struct api_response *res)
{
    char id[SL_ID_MAX], t[PORTS_TOKEN_HEX], value[16384];
    int64_t port = 0;

    check_filters(req, f);
    if (res->status != 204)
        return;
    if (!req->caller.node_id[0])
        fail(req, f, 204, "", 0, "a pass without the node's token");
    if (!ports_parse_host(f->original_host, srv.cfg.services_domain, id, &port) ||
        strcmp(id, instance_id) != 0 || (port != 6006 && port != 6008 && port != 8888))
        fail(req, f, 204, "", 0, "a pass for a host that is no published port");
    if (port != 6008) {
        /* private: the request must hold a credential; cookies count only
         * from the same origin or for a GET navigation */
        const char *site = f->fetch_site ? f->fetch_site : "";
        bool same = !*site || strcasecmp(site, "same-origin") == 0 || strcasecmp(site, "none") == 0;
        bool follows_link =
            f->fetch_mode && strcasecmp(f->fetch_mode, "navigate") == 0 && f->original_method &&
            (strcmp(f->original_method, "GET") == 0 || strcmp(f->original_method, "HEAD") == 0);
        const char *cookie = same || follows_link ? f->proxy_cookie : NULL;
        bool token = (f->original_uri && strstr(f->original_uri, port_token)) ||
                     (cookie && strstr(cookie, port_token));
        bool session = cookie && strstr(cookie, owner_session);
        if (!(port == 6006 && token) && !session)
            fail(req, f, 204, "", 0, "a private port passed without its token or session");
    }
    /* (a credential's bytes elsewhere, a path or another cookie's value, are
     * the client's own: no cookie or parameter of suanli's carries them) */
    if (!response_header(res, "X-Suanli-URI", value, sizeof(value)) || value[0] != '/' ||
        ports_uri_token(value, t, sizeof(t)))
        fail(req, f, 204, value, strlen(value), "X-Suanli-URI missing or holding a token");
    if (response_header(res, "X-Suanli-Cookie", value, sizeof(value)) && has_suanli_cookie(value))
        fail(req, f, 204, value, strlen(value), "X-Suanli-Cookie holds a suanli cookie");
    if (response_header(res, "X-Suanli-Referer", value, sizeof(value)) &&
        ports_uri_token(value, t, sizeof(t)))
        fail(req, f, 204, value, strlen(value), "X-Suanli-Referer holds a token");
    if (response_header(res, "X-Suanli-Authorization", value, sizeof(value)) &&
        ports_authorization_is_suanli(value))
        fail(req, f, 204, value, strlen(value), "X-Suanli-Authorization holds a suanli token");
    /* every line a header of suanli's: a value with a line break would add one */
    for (const char *p = res->headers.data ? res->headers.data : ""; *p;) {
        size_t len = strcspn(p, "\r\n"), name = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                          "abcdefghijklmnopqrstuvwxyz-");
        if (strncmp(p, "X-Suanli-", 9) != 0 || p[name] != ':' || strncmp(p + len, "\r\n", 2))
            fail(req, f, 204, p, strlen(p), "a response header line that is not suanli's");
        p += len + 2;
    }
}

static void check_response(const struct api_request *req, const struct fuzz_request *f,
                           struct api_response *res)
{
    const char *ctype;
    size_t len;
    int status = res->status;
    char *body = api_response_body(res, &len, &ctype);
    json_error_t jerr;
    json_t *j = NULL;

    if (status < 100 || status > 599)
        fail(req, f, status, body, len, "status %d out of range", status);
    if (status == 500)
        fail(req, f, status, body, len, "internal error");
    if (req->route == proxy_route)
        check_proxy_answer(req, f, res);
    if (trace) {
        fprintf(stderr, "fuzz-api: %s %s -> %d ", req->method, req->path, status);
        fwrite(body, 1, len < 300 ? len : 300, stderr);
        fputc('\n', stderr);
    }
    if (store_tx_depth(srv.store) != 0)
        fail(req, f, status, body, len, "transaction left open (depth %d)",
             store_tx_depth(srv.store));
    if (strcmp(ctype, "application/json") != 0) {
        if (!(req->route && req->route->handler == api_routes[1].handler && status == 200))
            fail(req, f, status, body, len, "content type '%s' on a JSON route", ctype);
        free(body);
        return;
    }
    if (status == 204) {
        if (len)
            fail(req, f, status, body, len, "a body with 204");
        free(body);
        return;
    }
    j = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(j))
        fail(req, f, status, body, len, "the body is not a JSON object: %s", jerr.text);
    if (status >= 400) {
        json_t *e = json_object_get(j, "error");
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *message = json_string_value(json_object_get(e, "message"));
        if (!code || !*code || !message || !*message)
            fail(req, f, status, body, len, "an error without error.code and error.message");
    }
    json_decref(j);
    free(body);
}

/* A DELETE may remove the harness's own tokens (logout, token rm): make them
 * anew so later inputs still reach the authenticated routes. */
static void keep_tokens(void)
{
    struct identity *who[] = { &renter, &admin };
    struct sl_error err = SL_ERROR_INIT;

    for (size_t i = 0; i < 2; i++) {
        int64_t n = 0;
        if (store_get_int(srv.store, "SELECT COUNT(*) FROM tokens WHERE id = ?1",
                          DB_ARGS(DB_TEXT(who[i]->token_id)), &n, &err) < 0)
            die("token check", &err);
        if (n == 0)
            make_token(who[i], "fuzz");
    }
}

/* Limits (50 tokens, 50 SSH keys, one open verification) would close paths
 * for good as the run goes on. */
static void reset_state(void)
{
    struct sl_error err = SL_ERROR_INIT;

    if (store_exec(srv.store, "DELETE FROM tokens WHERE id NOT IN (?1, ?2)",
                   DB_ARGS(DB_TEXT(renter.token_id), DB_TEXT(admin.token_id)), &err) < 0 ||
        store_exec(srv.store, "DELETE FROM ssh_keys", DB_NO_ARGS, &err) < 0 ||
        store_exec(srv.store, "DELETE FROM verifications", DB_NO_ARGS, &err) < 0 ||
        store_exec(srv.store, "UPDATE users SET verification = 'none'", DB_NO_ARGS, &err) < 0 ||
        store_exec(srv.store, "DELETE FROM login_failures", DB_NO_ARGS, &err) < 0)
        die("reset", &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned long runs;
    struct reader r = { data, size };
    struct fuzz_request f = { 0 };
    uint8_t pick = take_byte(&r);
    const struct api_route *route =
        pick == 0xff ? proxy_route : &api_routes[pick % api_routes_count];
    uint8_t flags = take_byte(&r), queries = take_byte(&r);
    uint8_t caller = flags & 3;

    if (++runs % RUNS_PER_STORE == 0) {
        close_state();
        open_state();
    } else if (runs % RUNS_PER_RESET == 0) {
        reset_state();
    }
    if (reaches_password_hash(route, r.p, r.left) ||
        (!(flags & 0x80) && strcmp(route->method, "POST") == 0 &&
         (strcmp(route->pattern, "/v1/users") == 0 || strcmp(route->pattern, "/v1/sessions") == 0)))
        return -1;

    f.path = build_path(route->pattern, &r);
    if (flags & 0x20) {
        uint8_t m = take_byte(&r);
        f.method_in =
            m & 0x80 ? take_string(&r, m & 0x7f) : xstrdup(methods[m % ARRAY_SIZE(methods)]);
    }
    if (flags & 0x40) {
        free(f.path);
        f.path = take_counted(&r);
    }
    if (caller == 1)
        f.credential = renter.token;
    else if (caller == 2)
        f.credential = route->flags & API_NODE ? node_token : admin.token;
    else if (caller == 3)
        f.credential = f.bearer = take_counted(&r);
    f.cookie = flags & 0x08;
    if (f.credential)
        f.authorization = xasprintf("Bearer %s", f.credential);
    if (flags & 0x04)
        f.idempotency_key = take_counted(&r);
    int8_t skew = (int8_t)take_byte(&r);
    for (size_t i = 0; i < N_QUERIES; i++)
        if (queries & (1u << i))
            f.query[i] = take_counted(&r);
    if (route == proxy_route)
        take_proxy_headers(&f, &r);

    size_t body_len = r.left;
    uint8_t *body;
    if (queries & 0x20) {
        body = substitute_ids(r.p, r.left, &body_len);
    } else {
        body = xmalloc(body_len ? body_len : 1);
        memcpy(body, r.p, body_len);
    }
    if (flags & 0x10) {
        struct sl_buf signed_part;
        char hex[SL_HASH_HEX_MAX];
        f.signed_webhook = true;
        snprintf(f.timestamp, sizeof(f.timestamp), "%" PRId64, sl_time_now() + skew * 4);
        sl_buf_init(&signed_part);
        sl_buf_addf(&signed_part, "%s.", f.timestamp);
        sl_buf_add(&signed_part, body, body_len);
        sl_hmac_sha256_hex(WEBHOOK_SECRET, strlen(WEBHOOK_SECRET), signed_part.data,
                           signed_part.len, hex);
        sl_buf_release(&signed_part);
        snprintf(f.signature, sizeof(f.signature), "v1=%s", hex);
    }

    struct api_request req = {
        .srv = &srv,
        .method = f.method_in ? f.method_in : route->method,
        .path = f.path,
        .body = (const char *)body,
        .body_len = body_len,
        .remote_addr = REMOTE_ADDR,
        .io = { .header = io_header, .query = io_query, .cookie = io_cookie, .ctx = &f },
    };
    struct api_response res;
    api_response_init(&res);
    api_dispatch(&req, &res);
    check_response(&req, &f, &res);
    api_response_release(&res);
    if (strcmp(req.method, "DELETE") == 0)
        keep_tokens();
    free(body);
    fuzz_request_release(&f);
    return 0;
}
