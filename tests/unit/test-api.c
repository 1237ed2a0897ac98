/* server/api.c: the dispatcher driven in-process, as the fuzzer and http.c
 * drive it: routing, authentication, idempotency and limits. */
#include "fake-io.h"
#include "harness.h"

#include "../../lib/crypto.h"
#include "../../lib/timefmt.h"
#include "../../server/api.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>

static void server_init(struct server *srv)
{
    struct sl_error err = SL_ERROR_INIT;

    memset(srv, 0, sizeof(*srv));
    if (sl_config_defaults(server_options, server_options_count, &srv->cfg, &err) < 0)
        test_fail(__FILE__, __LINE__, "config defaults: %s", err.message);
    srv->store = test_store();
    randombytes_buf(srv->id_hash_key, sizeof(srv->id_hash_key));
    srv->started_at = sl_time_now();
}

static void server_release(struct server *srv)
{
    sl_config_release(server_options, server_options_count, &srv->cfg);
}

/* One call's outcome: status, headers and the body parsed as JSON. */
struct call {
    int status;
    json_t *json;
    char *body;
    char *headers;
};

static void call_release(struct call *c)
{
    json_decref(c->json);
    free(c->body);
    free(c->headers);
    memset(c, 0, sizeof(*c));
}

static struct call dispatch(struct server *srv, const char *method, const char *path,
                            const char *body, size_t body_len, struct fake_io *io)
{
    struct fake_io none = { 0 };
    struct api_request req = {
        .srv = srv,
        .method = method,
        .path = path,
        .body = body ? body : "",
        .body_len = body ? body_len : 0,
        .remote_addr = "192.0.2.7",
        .io = fake_io_of(io ? io : &none),
    };
    struct api_response res;
    struct call c = { 0 };
    const char *ctype;
    size_t len;

    api_response_init(&res);
    api_dispatch(&req, &res);
    c.status = res.status;
    c.body = api_response_body(&res, &len, &ctype);
    c.headers = strdup(res.headers.data);
    if (len > 0)
        c.json = json_loadb(c.body, len, 0, NULL);
    api_response_release(&res);
    return c;
}

static struct call call_json(struct server *srv, const char *method, const char *path,
                             const char *body, struct fake_io *io)
{
    return dispatch(srv, method, path, body, body ? strlen(body) : 0, io);
}

static const char *error_code(const struct call *c)
{
    return json_string_value(json_object_get(json_object_get(c->json, "error"), "code"));
}

static const char *error_message(const struct call *c)
{
    return json_string_value(json_object_get(json_object_get(c->json, "error"), "message"));
}

#define CHECK_ERROR(c, want_status, want_code)                                                     \
    do {                                                                                           \
        CHECK_EQ_INT((c)->status, want_status);                                                    \
        CHECK_STR(error_code(c), want_code);                                                       \
        CHECK(error_message(c) && error_message(c)[0]);                                            \
    } while (0)

TEST(unknown_route_and_wrong_method)
{
    struct server srv;
    server_init(&srv);

    struct call c = call_json(&srv, "GET", "/v1/nope", NULL, NULL);
    CHECK_ERROR(&c, 404, "not_found");
    call_release(&c);
    c = call_json(&srv, "GET", "/", NULL, NULL);
    CHECK_ERROR(&c, 404, "not_found");
    call_release(&c);
    c = call_json(&srv, "GET", "/v1/tokens/a/b", NULL, NULL);
    CHECK_ERROR(&c, 404, "not_found");
    call_release(&c);
    c = call_json(&srv, "GET", "/v1/tokens/", NULL, NULL);
    CHECK_ERROR(&c, 404, "not_found");
    call_release(&c);
    /* a path of bytes that are not UTF-8 still gets a JSON error */
    c = call_json(&srv, "GET", "/v1/\xff\xfe", NULL, NULL);
    CHECK_ERROR(&c, 404, "not_found");
    call_release(&c);

    /* parameters too long to hold name nothing: 404, no handler runs with
     * parameters missing */
    char long_path[4200];
    snprintf(long_path, sizeof(long_path), "/v1/nodes/%03000d/uploads/%0900d", 1, 2);
    c = call_json(&srv, "GET", long_path, NULL, NULL);
    CHECK_ERROR(&c, 404, "not_found");
    call_release(&c);

    c = call_json(&srv, "DELETE", "/v1/me", NULL, NULL);
    CHECK_ERROR(&c, 405, "method_not_allowed");
    call_release(&c);
    c = call_json(&srv, "PUT", "/v1/users", "{}", NULL);
    CHECK_ERROR(&c, 405, "method_not_allowed");
    call_release(&c);

    c = call_json(&srv, "GET", "/healthz", NULL, NULL);
    CHECK_EQ_INT(c.status, 200);
    call_release(&c);
    server_release(&srv);
}

TEST(credentials_required)
{
    struct server srv;
    server_init(&srv);

    struct call c = call_json(&srv, "GET", "/v1/me", NULL, NULL);
    CHECK_ERROR(&c, 401, "unauthenticated");
    call_release(&c);

    struct fake_io bad = { .headers = { { "Authorization", "Bearer sl_nottherightone" } } };
    c = call_json(&srv, "GET", "/v1/me", NULL, &bad);
    CHECK_ERROR(&c, 401, "invalid_token");
    call_release(&c);

    struct fake_io basic = { .headers = { { "Authorization", "Basic dXNlcjpwdw==" } } };
    c = call_json(&srv, "GET", "/v1/me", NULL, &basic);
    CHECK_EQ_INT(c.status, 401);
    call_release(&c);

    struct fake_io cookie = { .cookies = { { "suanli_session", "sl_forged" } } };
    c = call_json(&srv, "GET", "/v1/balance", NULL, &cookie);
    CHECK_ERROR(&c, 401, "invalid_token");
    call_release(&c);

    /* a public route ignores bad credentials */
    c = call_json(&srv, "GET", "/healthz", NULL, &bad);
    CHECK_EQ_INT(c.status, 200);
    call_release(&c);
    server_release(&srv);
}

/* Registers email and logs in; returns the session token (caller frees). */
static char *register_and_login(struct server *srv, const char *email)
{
    char body[256];

    snprintf(body, sizeof(body), "{\"email\": \"%s\", \"password\": \"correct horse\"}", email);
    struct call c = call_json(srv, "POST", "/v1/users", body, NULL);
    if (!CHECK_EQ_INT(c.status, 201))
        printf("    register: %s\n", c.body);
    call_release(&c);

    c = call_json(srv, "POST", "/v1/sessions", body, NULL);
    char *token = NULL;
    if (CHECK_EQ_INT(c.status, 201)) {
        const char *t = json_string_value(json_object_get(c.json, "token"));
        if (CHECK(t))
            token = strdup(t);
        CHECK_CONTAINS(c.headers, "Set-Cookie: suanli_session=");
    } else {
        printf("    login: %s\n", c.body);
    }
    call_release(&c);
    return token;
}

TEST(register_login_me)
{
    struct server srv;
    server_init(&srv);

    char *token = register_and_login(&srv, "Alice@Example.com");
    if (!token) {
        server_release(&srv);
        return;
    }
    char auth[128];
    snprintf(auth, sizeof(auth), "Bearer %s", token);
    struct fake_io io = { .headers = { { "Authorization", auth } } };
    struct call c = call_json(&srv, "GET", "/v1/me", NULL, &io);
    CHECK_EQ_INT(c.status, 200);
    CHECK_STR(json_string_value(json_object_get(c.json, "email")), "alice@example.com");
    CHECK_STR(json_string_value(json_object_get(c.json, "role")), "renter");
    call_release(&c);

    /* the same token as the session cookie */
    struct fake_io cookie = { .cookies = { { "suanli_session", token } } };
    c = call_json(&srv, "GET", "/v1/me", NULL, &cookie);
    CHECK_EQ_INT(c.status, 200);
    call_release(&c);

    /* a wrong password is 401, a second registration 409 */
    c = call_json(&srv, "POST", "/v1/sessions",
                  "{\"email\": \"alice@example.com\", \"password\": \"wrong horse\"}", NULL);
    CHECK_ERROR(&c, 401, "invalid_credentials");
    call_release(&c);
    c = call_json(&srv, "POST", "/v1/users",
                  "{\"email\": \"ALICE@example.com\", \"password\": \"another one\"}", NULL);
    CHECK_ERROR(&c, 409, "email_taken");
    call_release(&c);

    /* logging out ends the token */
    c = call_json(&srv, "DELETE", "/v1/sessions/current", NULL, &io);
    CHECK_EQ_INT(c.status, 204);
    call_release(&c);
    c = call_json(&srv, "GET", "/v1/me", NULL, &io);
    CHECK_ERROR(&c, 401, "invalid_token");
    call_release(&c);
    CHECK_EQ_INT(store_tx_depth(srv.store), 0);
    free(token);
    server_release(&srv);
}

TEST(bad_bodies)
{
    struct server srv;
    server_init(&srv);

    struct call c = call_json(&srv, "POST", "/v1/users", "[1]", NULL);
    CHECK_ERROR(&c, 400, "invalid_json");
    call_release(&c);
    c = call_json(&srv, "POST", "/v1/users", "{\"email\": \"a@b\"", NULL);
    CHECK_ERROR(&c, 400, "invalid_json");
    call_release(&c);
    c = call_json(&srv, "POST", "/v1/users",
                  "{\"email\": \"a@b\", \"password\": \"12345678\","
                  " \"admin\": true}",
                  NULL);
    CHECK_ERROR(&c, 400, "unknown_field");
    call_release(&c);
    c = call_json(&srv, "POST", "/v1/users", "{\"email\": \"a@b\"}", NULL);
    CHECK_ERROR(&c, 400, "missing_field");
    call_release(&c);
    c = call_json(&srv, "POST", "/v1/users", NULL, NULL);
    CHECK_EQ_INT(c.status, 400);
    call_release(&c);
    c = call_json(&srv, "POST", "/v1/users", "{\"email\": \"a@b\", \"password\": \"short\"}", NULL);
    CHECK_ERROR(&c, 400, "weak_password");
    call_release(&c);
    CHECK_EQ_INT(store_tx_depth(srv.store), 0);
    server_release(&srv);
}

TEST(admin_route_hidden_from_renters)
{
    struct server srv;
    server_init(&srv);

    char *token = register_and_login(&srv, "bob@example.com");
    if (!token) {
        server_release(&srv);
        return;
    }
    char auth[128];
    snprintf(auth, sizeof(auth), "Bearer %s", token);
    struct fake_io io = { .headers = { { "Authorization", auth } } };
    static const char *const admin_paths[][2] = {
        { "GET", "/v1/admin/users" },
        { "GET", "/v1/admin/ledger/check" },
        { "POST", "/v1/admin/users/u-x/credit" },
        { "PATCH", "/v1/admin/gpu-models/g-x" },
    };
    for (size_t i = 0; i < sizeof(admin_paths) / sizeof(admin_paths[0]); i++) {
        struct call c = call_json(&srv, admin_paths[i][0], admin_paths[i][1], "{}", &io);
        CHECK_ERROR(&c, 404, "not_found");
        call_release(&c);
    }
    /* anonymous callers are told to log in, as on any private route */
    struct call c = call_json(&srv, "GET", "/v1/admin/users", NULL, NULL);
    CHECK_EQ_INT(c.status, 401);
    call_release(&c);

    /* once an admin, the route answers */
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(store_exec(srv.store, "UPDATE users SET role = 'admin'", DB_NO_ARGS, &err), 1);
    struct fake_io q = { .headers = { { "Authorization", auth } },
                         .query = { { "email", "BOB@example.com" } } };
    c = call_json(&srv, "GET", "/v1/admin/users", NULL, &q);
    CHECK_EQ_INT(c.status, 200);
    CHECK_EQ_INT(json_array_size(json_object_get(c.json, "items")), 1);
    call_release(&c);
    free(token);
    server_release(&srv);
}

TEST(idempotency_key_replay)
{
    struct server srv;
    server_init(&srv);
    struct sl_error err = SL_ERROR_INIT;
    const char *body = "{\"email\": \"carol@example.com\", \"password\": \"correct horse\"}";
    struct fake_io io = { .headers = { { "Idempotency-Key", "key-0001" } } };

    struct call first = call_json(&srv, "POST", "/v1/users", body, &io);
    CHECK_EQ_INT(first.status, 201);
    CHECK(!strstr(first.headers, "Idempotent-Replayed"));
    struct call again = call_json(&srv, "POST", "/v1/users", body, &io);
    CHECK_EQ_INT(again.status, 201);
    CHECK_STR(again.body, first.body);
    CHECK_CONTAINS(again.headers, "Idempotent-Replayed: true");
    int64_t users = -1;
    CHECK_EQ_INT(store_get_int(srv.store, "SELECT COUNT(*) FROM users", DB_NO_ARGS, &users, &err),
                 1);
    CHECK_EQ_INT(users, 1);
    call_release(&again);

    /* the key with another body is refused, and nothing is done */
    const char *other = "{\"email\": \"dave@example.com\", \"password\": \"correct horse\"}";
    again = call_json(&srv, "POST", "/v1/users", other, &io);
    CHECK_ERROR(&again, 422, "idempotency_key_reused");
    call_release(&again);
    CHECK_EQ_INT(store_get_int(srv.store, "SELECT COUNT(*) FROM users", DB_NO_ARGS, &users, &err),
                 1);
    CHECK_EQ_INT(users, 1);

    /* a refusal is replayed as well */
    struct fake_io io2 = { .headers = { { "Idempotency-Key", "key-0002" } } };
    again = call_json(&srv, "POST", "/v1/users", body, &io2);
    CHECK_ERROR(&again, 409, "email_taken");
    call_release(&again);
    again = call_json(&srv, "POST", "/v1/users", body, &io2);
    CHECK_ERROR(&again, 409, "email_taken");
    CHECK_CONTAINS(again.headers, "Idempotent-Replayed: true");
    call_release(&again);

    /* bad keys */
    struct fake_io bad = { .headers = { { "Idempotency-Key", "has space" } } };
    again = call_json(&srv, "POST", "/v1/users", other, &bad);
    CHECK_ERROR(&again, 400, "invalid_idempotency_key");
    call_release(&again);
    struct fake_io empty = { .headers = { { "Idempotency-Key", "" } } };
    again = call_json(&srv, "POST", "/v1/users", other, &empty);
    CHECK_ERROR(&again, 400, "invalid_idempotency_key");
    call_release(&again);
    CHECK_EQ_INT(store_tx_depth(srv.store), 0);
    call_release(&first);
    server_release(&srv);
}

TEST(body_too_large)
{
    struct server srv;
    server_init(&srv);
    size_t n = (size_t)srv.cfg.max_body_bytes + 1;
    char *body = malloc(n);

    if (!CHECK(body)) {
        server_release(&srv);
        return;
    }
    memset(body, ' ', n);
    body[0] = '{';
    body[n - 1] = '}';
    struct call c = dispatch(&srv, "POST", "/v1/users", body, n, NULL);
    CHECK_ERROR(&c, 413, "body_too_large");
    call_release(&c);
    /* exactly the limit is read (and here refused as JSON without fields) */
    c = dispatch(&srv, "POST", "/v1/users", body, n - 1, NULL);
    CHECK(c.status != 413);
    call_release(&c);
    free(body);
    server_release(&srv);
}
