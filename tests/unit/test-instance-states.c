/* Instance states and transitions (server/instance-states.c) against the
 * if-chains they replaced, every input; the API_INSTANCE route flag
 * (server/api.c) and names unique per renter (server/sched.c, migration 7),
 * driven in-process. */
#include "fake-io.h"
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/crypto.h"
#include "../../lib/timefmt.h"
#include "../../server/api.h"
#include "../../server/instance-states.h"
#include "../../server/store.h"

#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const states[] = { "creating", "starting",  "running",  "stopping",
                                      "stopped",  "releasing", "released", "failed" };
static const char *const reports[] = { "running", "stopped", "absent", "failed" };
static const char *const desireds[] = { "running", "stopped", "released" };

#define N(a) (sizeof(a) / sizeof((a)[0]))

TEST(names_round_trip)
{
    for (size_t i = 0; i < N(states); i++) {
        int s = instance_state_parse(states[i]);
        if (CHECK(s >= 0))
            CHECK_STR(instance_state_name(s), states[i]);
    }
    for (int s = 0; s < INSTANCE_STATE_COUNT; s++)
        CHECK_EQ_INT(instance_state_parse(instance_state_name(s)), s);
    CHECK(instance_state_name(INSTANCE_STATE_COUNT) == NULL);
    CHECK(instance_state_name((enum instance_state) - 1) == NULL);
    CHECK_EQ_INT(instance_state_parse("all"), -1);
    CHECK_EQ_INT(instance_state_parse("Running"), -1);
    CHECK_EQ_INT(instance_state_parse(""), -1);
    CHECK_EQ_INT(instance_state_parse(NULL), -1);
    CHECK_EQ_INT(instance_report_parse("absent"), REPORT_ABSENT);
    CHECK_EQ_INT(instance_report_parse("running"), REPORT_RUNNING);
    CHECK_EQ_INT(instance_report_parse("stopping"), -1);
    CHECK_EQ_INT(instance_report_parse(NULL), -1);
}

static bool is(const char *s, const char *a)
{
    return strcmp(s, a) == 0;
}

/* The verbs as server/instances.c decided before the table: 'a' applies,
 * 'n' nothing to do, 'r' refused. */
static char old_verb(enum instance_verb verb, const char *state)
{
    switch (verb) {
    case VERB_STOP:
        if (is(state, "stopped") || is(state, "stopping"))
            return 'n';
        return is(state, "creating") || is(state, "running") || is(state, "starting") ||
                       is(state, "failed")
                   ? 'a'
                   : 'r';
    case VERB_START:
        if (is(state, "running") || is(state, "starting"))
            return 'n';
        return is(state, "stopped") || is(state, "failed") ? 'a' : 'r';
    case VERB_RESTART:
        return is(state, "running") ? 'a' : 'r';
    case VERB_RELEASE:
        return is(state, "released") || is(state, "releasing") ? 'n' : 'a';
    case VERB_COUNT:
        break;
    }
    return '?';
}

TEST(verbs_match_the_chains_they_replaced)
{
    static const char outcome[] = {
        [VERB_APPLIES] = 'a', [VERB_ALREADY] = 'n', [VERB_REFUSED] = 'r'
    };

    for (int v = 0; v < VERB_COUNT; v++) {
        for (size_t i = 0; i < N(states); i++) {
            char got = outcome[instance_verb_check(v, instance_state_parse(states[i]))];
            if (got != old_verb(v, states[i]))
                test_fail(__FILE__, __LINE__, "verb %d in %s: %c, was %c", v, states[i], got,
                          old_verb(v, states[i]));
        }
        /* every refusal says what to do */
        if (v != VERB_RELEASE)
            CHECK(strlen(instance_verb_refusal(v)) > 5);
    }
    CHECK_EQ_INT(instance_verb_next(VERB_STOP), INSTANCE_STOPPING);
    CHECK_EQ_INT(instance_verb_desired(VERB_STOP), INSTANCE_STOPPED);
    CHECK_EQ_INT(instance_verb_next(VERB_START), INSTANCE_STARTING);
    CHECK_EQ_INT(instance_verb_desired(VERB_START), INSTANCE_RUNNING);
    CHECK_EQ_INT(instance_verb_next(VERB_RESTART), INSTANCE_STARTING);
    CHECK_EQ_INT(instance_verb_desired(VERB_RESTART), INSTANCE_RUNNING);
    CHECK_EQ_INT(instance_verb_next(VERB_RELEASE), INSTANCE_RELEASING);
    CHECK_EQ_INT(instance_verb_desired(VERB_RELEASE), INSTANCE_RELEASED);
    /* a state out of range is refused, never read past the table */
    CHECK_EQ_INT(instance_verb_check(VERB_RELEASE, INSTANCE_STATE_COUNT), VERB_REFUSED);
}

/* A report as instance-sync.c's former if-chain applied it: the next state,
 * or NULL. */
static const char *old_report(const char *now, const char *desired, const char *state, bool current)
{
    if (is(state, "failed") && !is(now, "failed") && is(desired, "running"))
        return "failed";
    if (is(desired, "running") && is(state, "running") && current && !is(now, "running") &&
        !is(now, "failed"))
        return "running";
    if (is(desired, "stopped") && (is(state, "stopped") || is(state, "absent")) &&
        !is(now, "stopped"))
        return "stopped";
    if (is(desired, "released") && is(state, "absent"))
        return "released";
    return NULL;
}

TEST(reports_match_the_chain_they_replaced)
{
    size_t moves = 0;

    for (size_t n = 0; n < N(states); n++)
        for (size_t d = 0; d < N(desireds); d++)
            for (size_t r = 0; r < N(reports); r++)
                for (int current = 0; current <= 1; current++) {
                    const char *want = old_report(states[n], desireds[d], reports[r], current);
                    /* the one change: a released instance stays released (no
                     * second `released` event from a late report) */
                    if (want && is(states[n], "released"))
                        want = NULL;
                    enum instance_state next = INSTANCE_STATE_COUNT;
                    bool moved = instance_after_report(
                        instance_state_parse(states[n]), instance_state_parse(desireds[d]),
                        instance_report_parse(reports[r]), current, &next);
                    const char *got = moved ? instance_state_name(next) : NULL;
                    moves += moved;
                    if (!test_str_equal(got, want))
                        test_fail(__FILE__, __LINE__, "%s, desired %s, reported %s%s: %s, was %s",
                                  states[n], desireds[d], reports[r],
                                  current ? "" : " (old generation)", got ? got : "stays",
                                  want ? want : "stays");
                }
    CHECK(moves > 10);
}

TEST(report_examples)
{
    enum instance_state next;

    /* sshd answered: creating and starting become running */
    CHECK(instance_after_report(INSTANCE_CREATING, INSTANCE_RUNNING, REPORT_RUNNING, true, &next) &&
          next == INSTANCE_RUNNING);
    CHECK(instance_after_report(INSTANCE_STARTING, INSTANCE_RUNNING, REPORT_RUNNING, true, &next) &&
          next == INSTANCE_RUNNING);
    /* the old container of a restart is not the restart */
    CHECK(
        !instance_after_report(INSTANCE_STARTING, INSTANCE_RUNNING, REPORT_RUNNING, false, &next));
    /* a failed start stays failed until a new start */
    CHECK(!instance_after_report(INSTANCE_FAILED, INSTANCE_RUNNING, REPORT_RUNNING, true, &next));
    CHECK(instance_after_report(INSTANCE_STOPPING, INSTANCE_STOPPED, REPORT_ABSENT, true, &next) &&
          next == INSTANCE_STOPPED);
    CHECK(
        instance_after_report(INSTANCE_RELEASING, INSTANCE_RELEASED, REPORT_ABSENT, true, &next) &&
        next == INSTANCE_RELEASED);
    /* disks still there: not released yet */
    CHECK(
        !instance_after_report(INSTANCE_RELEASING, INSTANCE_RELEASED, REPORT_STOPPED, true, &next));
    /* out of range: nothing */
    CHECK(!instance_after_report(INSTANCE_STATE_COUNT, INSTANCE_RUNNING, REPORT_RUNNING, true,
                                 &next));
    CHECK(!instance_after_report(INSTANCE_CREATING, INSTANCE_RUNNING, REPORT_COUNT, true, &next));
}

TEST(predicates)
{
    for (int s = 0; s < INSTANCE_STATE_COUNT; s++) {
        const char *name = instance_state_name(s);
        CHECK_EQ_INT(instance_state_gone(s), is(name, "released") || is(name, "releasing"));
        CHECK_EQ_INT(instance_state_up(s),
                     is(name, "running") || is(name, "starting") || is(name, "creating"));
    }
}

/* Every route that names an instance has the dispatcher find it: a new
 * route cannot forget the ownership check. */
TEST(instance_routes_are_flagged)
{
    size_t flagged = 0;

    for (size_t i = 0; i < api_routes_count; i++) {
        const struct api_route *r = &api_routes[i];
        bool names = strstr(r->pattern, "/v1/instances/{id}") == r->pattern ||
                     strstr(r->pattern, "/instances/{instance}");
        if (names != !!(r->flags & API_INSTANCE))
            test_fail(__FILE__, __LINE__, "%s %s: API_INSTANCE %s", r->method, r->pattern,
                      names ? "missing" : "on a route naming no instance");
        flagged += names;
    }
    CHECK(flagged >= 14);
}

/* ---- the dispatcher, in-process (as tests/unit/test-api.c drives it) ---- */

struct call {
    int status;
    json_t *json;
};

static void call_release(struct call *c)
{
    json_decref(c->json);
    memset(c, 0, sizeof(*c));
}

static const char *code_of(const struct call *c)
{
    return json_string_value(json_object_get(json_object_get(c->json, "error"), "code"));
}

static const char *message_of(const struct call *c)
{
    return json_string_value(json_object_get(json_object_get(c->json, "error"), "message"));
}

/* token: a bearer token or NULL; query: "name=value" or NULL. */
static struct call call(struct server *srv, const char *method, const char *path, const char *body,
                        const char *token, const char *query)
{
    char auth[256], qname[32] = "", qvalue[128] = "";
    struct fake_io io = { 0 };
    struct api_response res;
    struct call c = { 0 };
    const char *ctype;
    size_t len;

    if (token) {
        snprintf(auth, sizeof(auth), "Bearer %s", token);
        io.headers[0][0] = "Authorization";
        io.headers[0][1] = auth;
    }
    if (query && sscanf(query, "%31[^=]=%127s", qname, qvalue) == 2) {
        io.query[0][0] = qname;
        io.query[0][1] = qvalue;
    }
    struct api_request req = {
        .srv = srv,
        .method = method,
        .path = path,
        .body = body ? body : "",
        .body_len = body ? strlen(body) : 0,
        .remote_addr = "192.0.2.9",
        .io = fake_io_of(&io),
    };
    api_response_init(&res);
    api_dispatch(&req, &res);
    c.status = res.status;
    cleanup_free char *text = api_response_body(&res, &len, &ctype);
    if (len > 0)
        c.json = json_loadb(text, len, 0, NULL);
    api_response_release(&res);
    return c;
}

static void exec_ok(struct store *st, const char *sql)
{
    struct sl_error err = SL_ERROR_INIT;
    if (store_exec(st, sql, DB_NO_ARGS, &err) < 0)
        test_fail(__FILE__, __LINE__, "%s: %s", sql, err.message);
}

/* Registers email, logs in: the session token (freed by the caller) and
 * the user's id. */
static char *renter(struct server *srv, const char *email, char id[SL_ID_MAX])
{
    char body[256];
    struct sl_error err = SL_ERROR_INIT;

    snprintf(body, sizeof(body), "{\"email\": \"%s\", \"password\": \"correct horse\"}", email);
    struct call c = call(srv, "POST", "/v1/users", body, NULL, NULL);
    CHECK_EQ_INT(c.status, 201);
    call_release(&c);
    c = call(srv, "POST", "/v1/sessions", body, NULL, NULL);
    char *token = NULL;
    if (CHECK_EQ_INT(c.status, 201))
        token = strdup(json_string_value(json_object_get(c.json, "token")));
    call_release(&c);
    cleanup_rows struct db_rows *rows = store_query(
        srv->store, "SELECT id FROM users WHERE email = ?1", DB_ARGS(DB_TEXT(email)), &err);
    if (CHECK(rows) && CHECK_EQ_INT(db_next(rows, &err), 1))
        snprintf(id, SL_ID_MAX, "%s", db_text(rows, 0));
    return token;
}

/* An instance row of user_id on node n-1, as placement would leave it. */
static void add_instance(struct server *srv, const char *id, const char *user_id, const char *name,
                         const char *state, int64_t port)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *desired = is(state, "released") || is(state, "releasing") ? "released" : "running";

    if (store_exec(srv->store,
                   "INSERT INTO instances (id, user_id, name, region_id, node_id, gpu_model_id,"
                   " gpus, image, system_disk_gib, data_disk_gib, ssh_port, root_password,"
                   " state, desired, created_at, updated_at) VALUES (?1, ?2, ?3, 'r-1', 'n-1',"
                   " 'gm-1', 1, 'debian-12', 20, 5, ?6, 'pw', ?4, ?5, 1, 1)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(user_id), DB_TEXT(name), DB_TEXT(state),
                           DB_TEXT(desired), DB_INT(port)),
                   &err) < 0)
        test_fail(__FILE__, __LINE__, "insert %s: %s", id, err.message);
}

struct world {
    struct server srv;
    char *a, *b; /* tokens */
    char a_id[SL_ID_MAX], b_id[SL_ID_MAX];
};

static void world_init(struct world *w)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server *srv = &w->srv;

    memset(w, 0, sizeof(*w));
    if (sl_config_defaults(server_options, server_options_count, &srv->cfg, &err) < 0)
        test_fail(__FILE__, __LINE__, "config defaults: %s", err.message);
    srv->cfg.require_verification = false;
    srv->store = test_store();
    randombytes_buf(srv->id_hash_key, sizeof(srv->id_hash_key));
    srv->started_at = sl_time_now();
    w->a = renter(srv, "a@example.com", w->a_id);
    w->b = renter(srv, "b@example.com", w->b_id);
    exec_ok(srv->store, "INSERT INTO regions (id, name, created_at) VALUES ('r-1', 'one', 1)");
    exec_ok(srv->store, "INSERT INTO gpu_models (id, name, vram_mib, cpu_cores_per_gpu,"
                        " memory_mib_per_gpu, created_at) VALUES ('gm-1', 'RTX 4090', 24576, 8,"
                        " 32768, 1)");
    exec_ok(srv->store, "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                        " ssh_port_min, ssh_port_max, created_at) VALUES ('n-1', 'h', '192.0.2.1',"
                        " 'r-1', 'x', 30000, 30100, 1)");
    exec_ok(srv->store, "INSERT INTO images (name, kind, created_at) VALUES ('debian-12', 'base',"
                        " 1)");
    /* ready on the host: a renter may create from it (sched.c check_image) */
    exec_ok(srv->store, "INSERT INTO node_images (node_id, name, state, updated_at)"
                        " VALUES ('n-1', 'debian-12', 'ready', 1)");
}

static void world_release(struct world *w)
{
    free(w->a);
    free(w->b);
    sl_config_release(server_options, server_options_count, &w->srv.cfg);
}

/* A route's path with {id} and {port} filled in. */
static void route_path(const struct api_route *r, const char *id, char *path, size_t n)
{
    size_t used = 0;

    for (const char *p = r->pattern; *p && used + 1 < n;) {
        const char *with = strncmp(p, "{id}", 4) == 0     ? id
                           : strncmp(p, "{port}", 6) == 0 ? "8080"
                                                          : NULL;
        if (with) {
            used += (size_t)snprintf(path + used, n - used, "%s", with);
            p = strchr(p, '}') + 1;
        } else {
            path[used++] = *p++;
        }
    }
    path[used < n ? used : n - 1] = '\0';
}

static int64_t events_of(struct server *srv, const char *id)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t n = -1;

    store_get_int(srv->store, "SELECT COUNT(*) FROM events WHERE instance_id = ?1",
                  DB_ARGS(DB_TEXT(id)), &n, &err);
    return n;
}

TEST(api_instance_flag_hides_others_instances)
{
    struct world w;
    world_init(&w);
    add_instance(&w.srv, "i-aaaa", w.a_id, "nb", "running", 30000);
    size_t routes = 0;

    for (size_t i = 0; i < api_routes_count; i++) {
        const struct api_route *r = &api_routes[i];
        if (strncmp(r->pattern, "/v1/instances/{id}", 18) != 0)
            continue;
        char mine[128], ghost[128];
        route_path(r, "i-aaaa", mine, sizeof(mine));
        route_path(r, "i-nosuch", ghost, sizeof(ghost));
        const char *body = strcmp(r->method, "GET") == 0 ? NULL : "{\"port\": 8080}";
        /* B: the same 404 as for an instance that does not exist, whatever
         * the body */
        struct call theirs = call(&w.srv, r->method, mine, body, w.b, NULL);
        struct call none = call(&w.srv, r->method, ghost, body, w.b, NULL);
        struct call bad = call(&w.srv, r->method, mine, "{not json", w.b, NULL);
        if (!CHECK_EQ_INT(theirs.status, 404) || !CHECK_STR(code_of(&theirs), "no_such_instance"))
            printf("    %s %s\n", r->method, mine);
        CHECK_EQ_INT(none.status, 404);
        CHECK_EQ_INT(bad.status, 404);
        CHECK_STR(code_of(&bad), "no_such_instance");
        /* the message names what was asked for, and says what to do */
        CHECK_STR(message_of(&theirs), "no instance 'i-aaaa': list yours with suanli ls");
        CHECK_STR(message_of(&none), "no instance 'i-nosuch': list yours with suanli ls");
        call_release(&theirs);
        call_release(&none);
        call_release(&bad);
        routes++;
    }
    CHECK(routes >= 12);
    /* none of it touched A's instance */
    CHECK_EQ_INT(events_of(&w.srv, "i-aaaa"), 0);
    int64_t running = 0;
    struct sl_error err = SL_ERROR_INIT;
    store_get_int(w.srv.store,
                  "SELECT COUNT(*) FROM instances WHERE id = 'i-aaaa'"
                  " AND state = 'running' AND desired = 'running'",
                  DB_NO_ARGS, &running, &err);
    CHECK_EQ_INT(running, 1);
    /* A gets past the check on every route: whatever the handler says, not
     * the 404 of the instance */
    for (size_t i = 0; i < api_routes_count; i++) {
        const struct api_route *r = &api_routes[i];
        if (strncmp(r->pattern, "/v1/instances/{id}", 18) != 0)
            continue;
        char mine[128];
        route_path(r, "i-aaaa", mine, sizeof(mine));
        const char *body = strcmp(r->method, "GET") == 0          ? NULL
                           : strstr(r->pattern, "/ports") != NULL ? "{\"port\": 8080}"
                                                                  : "{}";
        struct call own = call(&w.srv, r->method, mine, body, w.a, NULL);
        if (!CHECK(own.status < 500 && !test_str_equal(code_of(&own), "no_such_instance")))
            printf("    %s %s: %d %s\n", r->method, mine, own.status, code_of(&own));
        call_release(&own);
    }
    CHECK(events_of(&w.srv, "i-aaaa") > 0);
    world_release(&w);
}

TEST(released_instances_per_route)
{
    struct world w;
    world_init(&w);
    add_instance(&w.srv, "i-gone", w.a_id, "old", "released", 30001);

    /* history stays readable */
    struct call c = call(&w.srv, "GET", "/v1/instances/i-gone", NULL, w.a, NULL);
    CHECK_EQ_INT(c.status, 200);
    CHECK_STR(json_string_value(json_object_get(c.json, "state")), "released");
    call_release(&c);
    c = call(&w.srv, "GET", "/v1/instances/i-gone/events", NULL, w.a, NULL);
    CHECK_EQ_INT(c.status, 200);
    call_release(&c);
    /* its ports are gone */
    c = call(&w.srv, "GET", "/v1/instances/i-gone/ports", NULL, w.a, NULL);
    CHECK_EQ_INT(c.status, 409);
    CHECK_STR(code_of(&c), "instance_released");
    call_release(&c);
    c = call(&w.srv, "POST", "/v1/instances/i-gone/ports", "{\"port\": 8080}", w.a, NULL);
    CHECK_STR(code_of(&c), "instance_released");
    call_release(&c);
    /* releasing again does nothing; starting is refused with what to do */
    c = call(&w.srv, "POST", "/v1/instances/i-gone/release", NULL, w.a, NULL);
    CHECK_EQ_INT(c.status, 200);
    call_release(&c);
    c = call(&w.srv, "POST", "/v1/instances/i-gone/start", NULL, w.a, NULL);
    CHECK_EQ_INT(c.status, 409);
    CHECK_STR(code_of(&c), "invalid_state");
    CHECK_CONTAINS(message_of(&c), "is released: wait until it is stopped");
    call_release(&c);
    c = call(&w.srv, "POST", "/v1/instances/i-gone/idle-stop", "{\"inherit\": true}", w.a, NULL);
    CHECK_EQ_INT(c.status, 409);
    call_release(&c);
    world_release(&w);
}

TEST(node_routes_resolve_the_nodes_own_instances)
{
    struct world w;
    world_init(&w);
    exec_ok(w.srv.store, "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                         " ssh_port_min, ssh_port_max, created_at) VALUES ('n-2', 'h2',"
                         " '192.0.2.2', 'r-1', 'y', 30000, 30100, 1)");
    add_instance(&w.srv, "i-here", w.a_id, "here", "running", 30002);
    add_instance(&w.srv, "i-done", w.a_id, "done", "released", 30003);
    /* node n-2's token: its hash is what auth looks up */
    char hash[SL_HASH_HEX_MAX];
    sl_sha256_hex("sl_node_two_token", strlen("sl_node_two_token"), hash);
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(store_exec(w.srv.store, "UPDATE nodes SET token_hash = ?1 WHERE id = 'n-2'",
                            DB_ARGS(DB_TEXT(hash)), &err),
                 1);

    /* another node's instance, and a released one: 404 */
    struct call c = call(&w.srv, "GET", "/v1/nodes/n-2/instances/i-here/metadata", NULL,
                         "sl_node_two_token", NULL);
    CHECK_EQ_INT(c.status, 404);
    CHECK_STR(code_of(&c), "no_such_instance");
    CHECK_CONTAINS(message_of(&c), "no instance 'i-here' on node 'n-2'");
    call_release(&c);
    c = call(&w.srv, "POST", "/v1/nodes/n-2/instances/i-here/stop", NULL, "sl_node_two_token",
             NULL);
    CHECK_EQ_INT(c.status, 404);
    call_release(&c);
    CHECK_EQ_INT(store_exec(w.srv.store, "UPDATE instances SET node_id = 'n-2' WHERE id != ''",
                            DB_NO_ARGS, &err),
                 2);
    c = call(&w.srv, "GET", "/v1/nodes/n-2/instances/i-done/metadata", NULL, "sl_node_two_token",
             NULL);
    CHECK_EQ_INT(c.status, 404);
    call_release(&c);
    /* its own: the metadata, with the owner's balance */
    c = call(&w.srv, "GET", "/v1/nodes/n-2/instances/i-here/metadata", NULL, "sl_node_two_token",
             NULL);
    CHECK_EQ_INT(c.status, 200);
    CHECK_STR(json_string_value(json_object_get(c.json, "instance_id")), "i-here");
    CHECK(json_is_integer(json_object_get(c.json, "balance_micros")));
    call_release(&c);
    /* a renter's token is not a node's */
    c = call(&w.srv, "GET", "/v1/nodes/n-2/instances/i-here/metadata", NULL, w.a, NULL);
    CHECK(c.status == 401 || c.status == 404);
    call_release(&c);
    world_release(&w);
}

TEST(names_unique_per_renter)
{
    struct world w;
    world_init(&w);
    add_instance(&w.srv, "i-nb", w.a_id, "nb", "stopped", 30004);
    add_instance(&w.srv, "i-old", w.a_id, "old", "released", 30005);

    /* a second "nb" for A: 409, naming the one that has it */
    const char *nb = "{\"name\": \"nb\", \"gpu_model\": \"RTX 4090\", \"image\": \"debian-12\","
                     " \"data_disk_gib\": 5}";
    struct call c = call(&w.srv, "POST", "/v1/instances", nb, w.a, NULL);
    CHECK_EQ_INT(c.status, 409);
    CHECK_STR(code_of(&c), "name_taken");
    CHECK_CONTAINS(message_of(&c), "'nb' (i-nb): choose another name");
    call_release(&c);
    /* B may use it; and a released instance's name is free again: both go
     * on to placement, which finds no host here */
    c = call(&w.srv, "POST", "/v1/instances", nb, w.b, NULL);
    CHECK_STR(code_of(&c), "no_capacity");
    call_release(&c);
    c = call(&w.srv, "POST", "/v1/instances",
             "{\"name\": \"old\", \"gpu_model\": \"RTX 4090\", \"image\": \"debian-12\"}", w.a,
             NULL);
    CHECK_STR(code_of(&c), "no_capacity");
    call_release(&c);

    /* the list resolves a name, exactly, among the caller's own */
    c = call(&w.srv, "GET", "/v1/instances", NULL, w.a, "name=nb");
    CHECK_EQ_INT(c.status, 200);
    json_t *items = json_object_get(c.json, "items");
    if (CHECK_EQ_INT(json_array_size(items), 1))
        CHECK_STR(json_string_value(json_object_get(json_array_get(items, 0), "id")), "i-nb");
    call_release(&c);
    c = call(&w.srv, "GET", "/v1/instances", NULL, w.b, "name=nb");
    CHECK_EQ_INT(json_array_size(json_object_get(c.json, "items")), 0);
    call_release(&c);
    c = call(&w.srv, "GET", "/v1/instances", NULL, w.a, "name=NB");
    CHECK_EQ_INT(json_array_size(json_object_get(c.json, "items")), 0);
    call_release(&c);
    c = call(&w.srv, "GET", "/v1/instances", NULL, w.a, "name=n%");
    CHECK_EQ_INT(json_array_size(json_object_get(c.json, "items")), 0);
    call_release(&c);
    /* released ones only when asked for */
    c = call(&w.srv, "GET", "/v1/instances", NULL, w.a, "name=old");
    CHECK_EQ_INT(json_array_size(json_object_get(c.json, "items")), 0);
    call_release(&c);
    world_release(&w);
}

/* the unique index holds it even past the code */
TEST(names_unique_in_the_store)
{
    struct world v;
    world_init(&v);
    add_instance(&v.srv, "i-one", v.a_id, "same", "running", 30006);
    struct sl_error err = SL_ERROR_INIT;
    CHECK(store_exec(v.srv.store,
                     "INSERT INTO instances (id, user_id, name, region_id, node_id, gpu_model_id,"
                     " gpus, image, system_disk_gib, data_disk_gib, ssh_port, root_password,"
                     " state, desired, created_at, updated_at) VALUES ('i-two', ?1, 'same', 'r-1',"
                     " 'n-1', 'gm-1', 1, 'debian-12', 20, 5, 30007, 'pw', 'creating', 'running',"
                     " 1, 1)",
                     DB_ARGS(DB_TEXT(v.a_id)), &err) < 0);
    world_release(&v);
}

TEST(list_name_parameter_checked)
{
    struct world w;
    world_init(&w);
    struct call c = call(&w.srv, "GET", "/v1/instances", NULL, w.a, "state=sleeping");
    CHECK_EQ_INT(c.status, 400);
    call_release(&c);
    char longq[128];
    snprintf(longq, sizeof(longq), "name=%070d", 7);
    c = call(&w.srv, "GET", "/v1/instances", NULL, w.a, longq);
    CHECK_EQ_INT(c.status, 400);
    CHECK_STR(code_of(&c), "invalid_parameter");
    call_release(&c);
    world_release(&w);
}

/* ---- migration 7 over names shared before it ---- */

extern const char *const sqlite_migrations[];

static int64_t count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *stmt = NULL;
    int64_t n = -1;

    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
        n = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    return n;
}

TEST(migration_7_keeps_old_duplicates)
{
    sqlite3 *db = NULL;
    char *msg = NULL;

    if (!CHECK_EQ_INT(sqlite3_open(":memory:", &db), SQLITE_OK))
        return;
    for (int i = 0; i < 6; i++)
        if (!CHECK_EQ_INT(sqlite3_exec(db, sqlite_migrations[i], NULL, NULL, &msg), SQLITE_OK)) {
            printf("    migration %d: %s\n", i + 1, msg);
            sqlite3_free(msg);
        }
    /* u1 named three instances "x" (one released) and two "y"; u2 one "x" */
    static const char *const rows[][4] = {
        { "i-1", "u1", "x", "running" },  { "i-2", "u1", "x", "stopped" },
        { "i-3", "u1", "x", "released" }, { "i-4", "u1", "x", "creating" },
        { "i-5", "u1", "y", "running" },  { "i-6", "u1", "y", "failed" },
        { "i-7", "u2", "x", "running" },  { "i-8", "u1", "z", "released" },
        { "i-9", "u1", "z", "released" },
    };
    for (size_t i = 0; i < N(rows); i++) {
        char sql[512];
        snprintf(sql, sizeof(sql),
                 "INSERT INTO instances (id, user_id, name, region_id, node_id, gpu_model_id,"
                 " gpus, image, system_disk_gib, data_disk_gib, ssh_port, root_password, state,"
                 " desired, created_at, updated_at) VALUES ('%s', '%s', '%s', 'r', 'n', 'g', 1,"
                 " 'img', 20, 5, %zu, 'pw', '%s', 'running', 1, 1)",
                 rows[i][0], rows[i][1], rows[i][2], 30000 + i, rows[i][3]);
        CHECK_EQ_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    }
    if (!CHECK_EQ_INT(sqlite3_exec(db, sqlite_migrations[6], NULL, NULL, &msg), SQLITE_OK)) {
        printf("    migration 7: %s\n", msg);
        sqlite3_free(msg);
    }
    /* names kept; the later duplicates point at the oldest */
    CHECK_EQ_INT(count(db, "SELECT COUNT(*) FROM instances WHERE name = 'x' AND user_id = 'u1'"),
                 4);
    CHECK_EQ_INT(count(db, "SELECT COUNT(*) FROM instances WHERE name_shared_with IS NOT NULL"), 3);
    CHECK_EQ_INT(count(db, "SELECT COUNT(*) FROM instances WHERE name_shared_with = 'i-1'"
                           " AND id IN ('i-2', 'i-4')"),
                 2);
    CHECK_EQ_INT(count(db, "SELECT COUNT(*) FROM instances WHERE name_shared_with = 'i-5'"
                           " AND id = 'i-6'"),
                 1);
    /* the index holds from now on */
    CHECK(sqlite3_exec(db,
                       "INSERT INTO instances (id, user_id, name, region_id, node_id,"
                       " gpu_model_id, gpus, image, system_disk_gib, data_disk_gib, ssh_port,"
                       " root_password, state, desired, created_at, updated_at) VALUES ('i-10',"
                       " 'u2', 'x', 'r', 'n', 'g', 1, 'img', 20, 5, 31000, 'pw', 'creating',"
                       " 'running', 1, 1)",
                       NULL, NULL, NULL) != SQLITE_OK);
    CHECK_EQ_INT(sqlite3_exec(db,
                              "INSERT INTO instances (id, user_id, name, region_id, node_id,"
                              " gpu_model_id, gpus, image, system_disk_gib, data_disk_gib,"
                              " ssh_port, root_password, state, desired, created_at, updated_at)"
                              " VALUES ('i-11', 'u2', 'z', 'r', 'n', 'g', 1, 'img', 20, 5, 31001,"
                              " 'pw', 'creating', 'running', 1, 1)",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);
}
