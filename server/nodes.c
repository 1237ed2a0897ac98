#include "nodes.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "billing.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MAX_GPUS_PER_NODE 64

int nodes_join_token_create(struct server *srv, const char *region, int64_t ttl, int64_t max_uses,
                            const char *by, char *id, char *secret, struct sl_error *err)
{
    char hash[SL_HASH_HEX_MAX];
    int64_t n, now = sl_time_now();

    if (store_get_int(srv->store, "SELECT COUNT(*) FROM regions WHERE id = ?1",
                      DB_ARGS(DB_TEXT(region)), &n, err) < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_region",
                       "no region '%s': list them with suanli regions", region);
    sl_token_new(secret);
    sl_sha256_hex(secret, strlen(secret), hash);
    sl_id_new(id, "join-");
    return store_exec(srv->store,
                      "INSERT INTO join_tokens (id, hash, region_id, created_by, created_at,"
                      " expires_at, max_uses) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                      DB_ARGS(DB_TEXT(id), DB_TEXT(hash), DB_TEXT(region), DB_TEXT(by), DB_INT(now),
                              DB_INT(now + ttl), DB_INT(max_uses)),
                      err) < 0
               ? -1
               : 0;
}

/* Takes one use of the join token: the check and the count are one UPDATE
 * inside the enrollment's write transaction, so two hosts enrolling at once
 * with a single-use token make one node. */
static int join_token_use(struct store *st, const char *token, char *region, size_t region_size,
                          struct sl_error *err)
{
    char hash[SL_HASH_HEX_MAX];
    int64_t now = sl_time_now();
    int rc;

    sl_sha256_hex(token, strlen(token), hash);
    int changed = store_exec(st,
                             "UPDATE join_tokens SET uses = uses + 1 WHERE hash = ?1"
                             " AND expires_at > ?2 AND (max_uses IS NULL OR uses < max_uses)",
                             DB_ARGS(DB_TEXT(hash), DB_INT(now)), err);
    if (changed < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT region_id, expires_at, uses, max_uses FROM join_tokens WHERE hash = ?1",
        DB_ARGS(DB_TEXT(hash)), err);
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 1 && changed == 1) {
        snprintf(region, region_size, "%s", db_text(rows, 0));
        return 0;
    }
    if (rc == 1 && db_int(rows, 1) > now)
        return sl_fail(err, SL_E_UNAUTHENTICATED, "join_token_used",
                       "the join token has been used (%" PRId64 " of %" PRId64
                       " uses): a host enrolls once; make a new token with suanli admin "
                       "join-token create --region %s (--uses N lets N hosts join with one)",
                       db_int(rows, 2), db_int(rows, 3), db_text(rows, 0));
    return sl_fail(err, SL_E_UNAUTHENTICATED, "invalid_join_token",
                   "the join token is not valid or has expired: make a new one with "
                   "suanli admin join-token create --region R");
}

/* What a host may promise to instance disks, in GiB: the free bytes of its
 * data directory plus what its instance disk files already take, less
 * nodes.disk_reserve_gib, plus nodes.disk_overcommit_percent of that. The
 * disks are sparse files: promising more than this lets one renter filling
 * their disk fill every disk of the host. */
static int64_t nodes_disk_capacity_gib(const struct server *srv, int64_t free_bytes,
                                       int64_t disks_bytes)
{
    __int128 holds =
        (__int128)free_bytes + disks_bytes - ((__int128)srv->cfg.disk_reserve_gib << 30);

    if (holds <= 0)
        return 0;
    return (int64_t)(holds * (100 + srv->cfg.disk_overcommit_percent) / 100 >> 30);
}

int64_t nodes_disk_room_gib(const struct server *srv, int64_t free_bytes, int64_t disks_bytes,
                            int64_t promised_gib)
{
    return nodes_disk_capacity_gib(srv, free_bytes, disks_bytes) - promised_gib;
}

/* The request fields of an inventory object (shared by enroll and heartbeat). */
static int nodes_check_inventory(json_t *inv, struct sl_error *err)
{
    int64_t cpu = 0, mem = 0, disk_total = 0, disk_free = 0, free_bytes = 0, disks_bytes = 0;
    const char *driver = NULL, *cuda = NULL, *agent = NULL;
    const struct sl_json_field fields[] = {
        { "cpu_cores", SL_JSON_INT, .required = true, .min = 1, .max = 4096, .out = &cpu },
        { "memory_mib", SL_JSON_INT, .required = true, .min = 1, .max = 1LL << 32, .out = &mem },
        { "disk_total_gib", SL_JSON_INT, .min = 0, .max = 1LL << 32, .out = &disk_total },
        { "disk_free_gib", SL_JSON_INT, .min = 0, .max = 1LL << 32, .out = &disk_free },
        { "disk_free_bytes", SL_JSON_INT, .min = 0, .max = INT64_MAX / 4, .out = &free_bytes },
        { "instance_disks_bytes", SL_JSON_INT, .min = 0, .max = INT64_MAX / 4,
          .out = &disks_bytes },
        { "driver_version", SL_JSON_STRING, .max_len = 64, .out = &driver },
        { "cuda_version", SL_JSON_STRING, .max_len = 64, .out = &cuda },
        { "agent_version", SL_JSON_STRING, .max_len = 64, .out = &agent },
        { "gpus", SL_JSON_ARRAY, .max_len = MAX_GPUS_PER_NODE },
    };
    size_t i;
    json_t *g;

    if (sl_json_fields(inv, fields, ARRAY_SIZE(fields), err) < 0) {
        sl_error_prefix(err, "inventory");
        return -1;
    }
    json_array_foreach(json_object_get(inv, "gpus"), i, g)
    {
        int64_t index = 0, vram = 0;
        const char *uuid = NULL, *name = NULL;
        bool simulated = false;
        const struct sl_json_field gf[] = {
            { "index", SL_JSON_INT, .required = true, .min = 0, .max = MAX_GPUS_PER_NODE - 1,
              .out = &index },
            { "uuid", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 96, .out = &uuid },
            { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 96, .out = &name },
            { "vram_mib", SL_JSON_INT, .required = true, .min = 1, .max = 1 << 24, .out = &vram },
            { "simulated", SL_JSON_BOOL, .out = &simulated },
        };
        if (sl_json_fields(g, gf, ARRAY_SIZE(gf), err) < 0) {
            sl_error_prefix(err, "inventory.gpus[%zu]", i);
            return -1;
        }
    }
    return 0;
}

/* The catalog model a GPU's name stands for: the longest catalog name found
 * in it, ignoring ASCII case ("NVIDIA GeForce RTX 4090" is "RTX 4090"); of
 * names as long, the first by id. Matched here, not in SQL: substring
 * functions differ between SQL dialects (store.h). */
static int match_model(struct store *st, const char *gpu_name, char *model_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st, "SELECT id, name FROM gpu_models ORDER BY id", DB_NO_ARGS, err);
    size_t best = 0;
    int rc;

    model_id[0] = '\0';
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        const char *name = db_text(rows, 1);
        size_t n = strlen(name);
        if (n > best && strcasestr(gpu_name, name)) {
            best = n;
            snprintf(model_id, SL_ID_MAX, "%s", db_text(rows, 0));
        }
    }
    return rc < 0 ? -1 : 0;
}

static bool inventory_has_index(json_t *gpus, int64_t idx)
{
    size_t i;
    json_t *g;

    json_array_foreach(gpus, i, g)
    {
        if (json_integer_value(json_object_get(g, "index")) == idx)
            return true;
    }
    return false;
}

static int sync_gpus(struct store *st, const char *node_id, json_t *gpus, struct sl_error *err)
{
    size_t i;
    json_t *g;

    json_array_foreach(gpus, i, g)
    {
        const char *name = json_string_value(json_object_get(g, "name"));
        char model[SL_ID_MAX];
        if (match_model(st, name, model, err) < 0)
            return -1;
        if (store_exec(st,
                       "INSERT INTO gpus (node_id, idx, uuid, name, gpu_model_id, vram_mib,"
                       " simulated) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                       " ON CONFLICT (node_id, idx) DO UPDATE SET uuid = excluded.uuid,"
                       " name = excluded.name, gpu_model_id = excluded.gpu_model_id,"
                       " vram_mib = excluded.vram_mib, simulated = excluded.simulated",
                       DB_ARGS(DB_TEXT(node_id),
                               DB_INT(json_integer_value(json_object_get(g, "index"))),
                               DB_TEXT(json_string_value(json_object_get(g, "uuid"))),
                               DB_TEXT(name), DB_TEXT(model[0] ? model : NULL),
                               DB_INT(json_integer_value(json_object_get(g, "vram_mib"))),
                               DB_INT(json_is_true(json_object_get(g, "simulated")))),
                       err) < 0)
            return -1;
    }
    /* a GPU gone from the host leaves the pool, unless an instance holds it:
     * that one stays, so no reservation is lost while the host recovers */
    cleanup_free int64_t *gone = NULL;
    size_t n_gone = 0;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st, "SELECT idx FROM gpus WHERE node_id = ?1 AND instance_id IS NULL",
                        DB_ARGS(DB_TEXT(node_id)), err);
        int rc;
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1) {
            int64_t idx = db_int(rows, 0);
            if (inventory_has_index(gpus, idx))
                continue;
            gone = xrealloc(gone, (n_gone + 1) * sizeof(*gone));
            gone[n_gone++] = idx;
        }
        if (rc < 0)
            return -1;
    }
    for (size_t k = 0; k < n_gone; k++)
        if (store_exec(st, "DELETE FROM gpus WHERE node_id = ?1 AND idx = ?2",
                       DB_ARGS(DB_TEXT(node_id), DB_INT(gone[k])), err) < 0)
            return -1;
    return 0;
}

static int update_inventory(struct store *st, const char *node_id, json_t *inv,
                            struct sl_error *err)
{
#define INT_OF(k)    DB_INT(json_integer_value(json_object_get(inv, k)))
#define STRING_OF(k) DB_TEXT(json_string_value(json_object_get(inv, k)) ?: "")
    json_t *free_bytes = json_object_get(inv, "disk_free_bytes");
    json_t *disks_bytes = json_object_get(inv, "instance_disks_bytes");
    /* an agent that does not report bytes: its GiB stand in, and no disk
     * allocated yet (the placement check is stricter, never looser) */
    if (store_exec(
            st,
            "UPDATE nodes SET cpu_cores = ?2, memory_mib = ?3, disk_total_gib = ?4,"
            " disk_free_gib = ?5, driver_version = ?6, cuda_version = ?7,"
            " agent_version = ?8, last_heartbeat = ?9, disk_free_bytes = ?10,"
            " instance_disks_bytes = ?11 WHERE id = ?1",
            DB_ARGS(DB_TEXT(node_id), INT_OF("cpu_cores"), INT_OF("memory_mib"),
                    INT_OF("disk_total_gib"), INT_OF("disk_free_gib"), STRING_OF("driver_version"),
                    STRING_OF("cuda_version"), STRING_OF("agent_version"), DB_INT(sl_time_now()),
                    DB_INT(free_bytes
                               ? json_integer_value(free_bytes)
                               : json_integer_value(json_object_get(inv, "disk_free_gib")) << 30),
                    DB_INT(disks_bytes ? json_integer_value(disks_bytes) : 0)),
            err) < 0)
        return -1;
#undef INT_OF
#undef STRING_OF
    return sync_gpus(st, node_id, json_object_get(inv, "gpus"), err);
}

int nodes_enroll(struct server *srv, const char *join_token, const char *hostname,
                 const char *address, json_t *inventory, char *node_id, char *node_token,
                 struct sl_error *err)
{
    struct store *st = srv->store;
    char hash[SL_HASH_HEX_MAX], region[64];
    int64_t now = sl_time_now();

    if (nodes_check_inventory(inventory, err) < 0 ||
        join_token_use(st, join_token, region, sizeof(region), err) < 0)
        return -1;
    sl_token_new(node_token);
    sl_sha256_hex(node_token, strlen(node_token), hash);
    sl_id_new(node_id, "n-");
    if (store_exec(st,
                   "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                   " ssh_port_min, ssh_port_max, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
                   " ?7, ?8)",
                   DB_ARGS(DB_TEXT(node_id), DB_TEXT(hostname), DB_TEXT(address), DB_TEXT(region),
                           DB_TEXT(hash), DB_INT(srv->cfg.ssh_port_min),
                           DB_INT(srv->cfg.ssh_port_max), DB_INT(now)),
                   err) < 0 ||
        update_inventory(st, node_id, inventory, err) < 0)
        return -1;
    log_info("nodes: enrolled %s (%s, %s) in region %s", node_id, hostname, address, region);
    return 0;
}

int nodes_heartbeat(struct server *srv, const char *node_id, json_t *inventory,
                    struct sl_error *err)
{
    if (nodes_check_inventory(inventory, err) < 0 || billing_host_reported(srv, node_id, err) < 0)
        return -1;
    /* a lost host is back: its instances show their states again */
    int back = store_exec(srv->store,
                          "UPDATE nodes SET lost_at = NULL WHERE id = ?1 AND lost_at IS NOT NULL",
                          DB_ARGS(DB_TEXT(node_id)), err);
    if (back < 0)
        return -1;
    if (back > 0)
        log_info("nodes: %s reports again after it was lost", node_id);
    return update_inventory(srv->store, node_id, inventory, err);
}

static json_t *gpus_json(struct store *st, const char *node_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT g.idx, g.uuid, g.name, m.name, g.vram_mib, g.simulated, g.instance_id"
        " FROM gpus g LEFT JOIN gpu_models m ON m.id = g.gpu_model_id WHERE g.node_id = ?1"
        " ORDER BY g.idx",
        DB_ARGS(DB_TEXT(node_id)), err);
    cleanup_json json_t *out = json_array();
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(
            out,
            json_pack("{s:I, s:s, s:s, s:o, s:I, s:b, s:o}", "index", (json_int_t)db_int(rows, 0),
                      "uuid", db_text(rows, 1), "name", db_text(rows, 2), "model",
                      db_null(rows, 3) ? json_null() : json_string(db_text(rows, 3)), "vram_mib",
                      (json_int_t)db_int(rows, 4), "simulated", (int)db_int(rows, 5), "instance_id",
                      db_null(rows, 6) ? json_null() : json_string(db_text(rows, 6))));
    return rc < 0 ? NULL : TAKE_PTR(out);
}

/* The instances of the host not released: [{id, state, plan, user_id}]. */
static json_t *node_instances_json(struct store *st, const char *node_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT id, state, plan, user_id FROM instances WHERE node_id = ?1"
                    " AND state != 'released' ORDER BY seq",
                    DB_ARGS(DB_TEXT(node_id)), err);
    cleanup_json json_t *out = json_array();
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s}", "id", db_text(rows, 0),
                                             "state", db_text(rows, 1), "plan", db_text(rows, 2),
                                             "user_id", db_text(rows, 3)));
    return rc < 0 ? NULL : TAKE_PTR(out);
}

json_t *nodes_json(struct server *srv, const char *node_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT id, hostname, address, region_id, cpu_cores, memory_mib, disk_total_gib,"
        " disk_free_gib, driver_version, cuda_version, agent_version, last_heartbeat,"
        " created_at, disk_free_bytes, instance_disks_bytes,"
        " (SELECT COALESCE(SUM(i.system_disk_gib + i.data_disk_gib), 0) FROM instances i"
        "  WHERE i.node_id = nodes.id AND i.state != 'released'),"
        " cordoned_at, draining_at, cordon_reason FROM nodes WHERE id = ?1"
        " AND removed_at IS NULL",
        DB_ARGS(DB_TEXT(node_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return NULL;
    if (rc == 0) {
        sl_fail(err, SL_E_NOT_FOUND, "no_such_node", "no node '%s'", node_id);
        return NULL;
    }
    int64_t last = db_null(rows, 11) ? 0 : db_int(rows, 11);
    enum node_condition condition = nodes_condition(&srv->cfg, last, sl_time_now());
    json_t *gpus = gpus_json(srv->store, node_id, err);
    if (!gpus)
        return NULL;
    size_t i, free = 0, simulated = 0;
    json_t *g;
    json_array_foreach(gpus, i, g)
    {
        free += json_is_null(json_object_get(g, "instance_id"));
        simulated += json_is_true(json_object_get(g, "simulated"));
    }
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:o, s:o,"
        " s:o, s:I, s:I, s:b}",
        "id", db_text(rows, 0), "hostname", db_text(rows, 1), "address", db_text(rows, 2), "region",
        db_text(rows, 3), "state", nodes_condition_name(condition), "cpu_cores",
        (json_int_t)db_int(rows, 4), "memory_mib", (json_int_t)db_int(rows, 5), "disk_total_gib",
        (json_int_t)db_int(rows, 6), "disk_free_gib", (json_int_t)db_int(rows, 7), "driver_version",
        db_text(rows, 8), "cuda_version", db_text(rows, 9), "agent_version", db_text(rows, 10),
        "last_heartbeat", last ? api_time(last) : json_null(), "created_at",
        api_time(db_int(rows, 12)), "gpus", gpus, "gpus_total", (json_int_t)json_array_size(gpus),
        "gpus_free", (json_int_t)free, "simulated", simulated > 0);
    if (!j)
        return NULL;
    /* what the instance disks may take here, and what they were promised */
    json_object_set_new(
        j, "disk",
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "free_bytes", (json_int_t)db_int(rows, 13),
                  "instance_disks_bytes", (json_int_t)db_int(rows, 14), "reserve_gib",
                  (json_int_t)srv->cfg.disk_reserve_gib, "overcommit_percent",
                  (json_int_t)srv->cfg.disk_overcommit_percent, "capacity_gib",
                  (json_int_t)nodes_disk_capacity_gib(srv, db_int(rows, 13), db_int(rows, 14)),
                  "promised_gib", (json_int_t)db_int(rows, 15)));
    /* the operator's marks, and what still lives there (a drain's
     * progress; what a remove waits for) */
    json_object_set_new(j, "cordoned", json_boolean(!db_null(rows, 16)));
    json_object_set_new(j, "draining", json_boolean(!db_null(rows, 17)));
    json_object_set_new(j, "cordoned_at",
                        db_null(rows, 16) ? json_null() : api_time(db_int(rows, 16)));
    json_object_set_new(j, "cordon_reason", json_string(db_text(rows, 18)));
    json_t *instances = node_instances_json(srv->store, node_id, err);
    if (!instances) {
        json_decref(j);
        return NULL;
    }
    json_object_set_new(j, "instances", instances);
    return j;
}

int nodes_apply_images(struct server *srv, const char *node_id, json_t *images,
                       struct sl_error *err)
{
    struct store *st = srv->store;
    size_t i;
    json_t *img;

    if (store_exec(st, "DELETE FROM node_images WHERE node_id = ?1", DB_ARGS(DB_TEXT(node_id)),
                   err) < 0)
        return -1;
    json_array_foreach(images, i, img)
    {
        const char *name = NULL, *state = NULL, *os = NULL, *python = NULL, *cuda = NULL,
                   *framework = NULL, *message = NULL, *source = NULL;
        int64_t size = 0;
        const struct sl_json_field f[] = {
            { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 128,
              .out = &name },
            { "state", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 16,
              .out = &state },
            { "os", SL_JSON_STRING, .max_len = 128, .out = &os },
            { "python", SL_JSON_STRING, .max_len = 64, .out = &python },
            { "cuda", SL_JSON_STRING, .max_len = 64, .out = &cuda },
            { "framework", SL_JSON_STRING, .max_len = 128, .out = &framework },
            { "size_bytes", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &size },
            { "message", SL_JSON_STRING, .max_len = 1000, .multiline = true, .out = &message },
            /* what a build or import is of: "upload:SHA256" or "recipe:NAME" */
            { "source", SL_JSON_STRING, .max_len = 100, .out = &source },
        };
        if (sl_json_fields(img, f, ARRAY_SIZE(f), err) < 0) {
            sl_error_prefix(err, "images[%zu]", i);
            return -1;
        }
        if (strcmp(state, "ready") && strcmp(state, "building") && strcmp(state, "failed"))
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "images[%zu].state must be ready, building or failed", i);
        /* a build or import of an image since deleted and made again from
         * another archive or recipe says nothing of the new one (the host
         * learns of it at its next desired state) */
        int64_t stale = 0;
        if (source &&
            store_get_int(st,
                          "SELECT COUNT(*) FROM images WHERE name = ?1 AND ?2 !="
                          " CASE WHEN recipe LIKE 'upload:%' OR recipe LIKE 'layer:%' THEN recipe"
                          " ELSE 'recipe:' || recipe"
                          " END",
                          DB_ARGS(DB_TEXT(name), DB_TEXT(source)), &stale, err) < 0)
            return -1;
        if (stale)
            continue;
        if (store_exec(st,
                       "INSERT INTO node_images (node_id, name, state, os, python, cuda,"
                       " framework, size_bytes, message, updated_at) VALUES (?1, ?2, ?3, ?4,"
                       " ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (node_id, name) DO UPDATE SET"
                       " state = excluded.state, os = excluded.os, python = excluded.python,"
                       " cuda = excluded.cuda, framework = excluded.framework,"
                       " size_bytes = excluded.size_bytes, message = excluded.message,"
                       " updated_at = excluded.updated_at",
                       DB_ARGS(DB_TEXT(node_id), DB_TEXT(name), DB_TEXT(state),
                               DB_TEXT(os ? os : ""), DB_TEXT(python ? python : ""),
                               DB_TEXT(cuda ? cuda : ""), DB_TEXT(framework ? framework : ""),
                               DB_INT(size), DB_TEXT(message ? message : ""),
                               DB_INT(sl_time_now())),
                       err) < 0)
            return -1;
    }
    return 0;
}
