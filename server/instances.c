#include "instances.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "billing.h"
#include "catalog.h"
#include "ledger.h"
#include "nodes.h"
#include "ports.h"
#include "secrets.h"
#include "stops.h"

#include <crypt.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

struct gpu_model {
    char id[SL_ID_MAX];
    char name[128];
    int64_t cpu_cores, memory_mib;
};

static int find_gpu_model(struct store *st, const char *name_or_id, struct gpu_model *m,
                          struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT id, name, cpu_cores_per_gpu, memory_mib_per_gpu FROM gpu_models"
                    " WHERE id = ?1 OR lower(name) = lower(?1)",
                    DB_ARGS(DB_TEXT(name_or_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_gpu_model",
                       "no GPU model '%s': see the models and prices with suanli market",
                       name_or_id);
    snprintf(m->id, sizeof(m->id), "%s", db_text(rows, 0));
    snprintf(m->name, sizeof(m->name), "%s", db_text(rows, 1));
    m->cpu_cores = db_int(rows, 2);
    m->memory_mib = db_int(rows, 3);
    return 0;
}

int instance_event(struct store *st, const char *instance_id, const char *kind, const char *state,
                   const char *reason, const char *message, struct sl_error *err)
{
    return store_exec(st,
                      "INSERT INTO events (instance_id, user_id, kind, state, reason, message,"
                      " created_at) SELECT id, user_id, ?2, ?3, ?4, ?5, ?6 FROM instances"
                      " WHERE id = ?1",
                      DB_ARGS(DB_TEXT(instance_id), DB_TEXT(kind), DB_TEXT(state ? state : ""),
                              DB_TEXT(reason ? reason : ""), DB_TEXT(message ? message : ""),
                              DB_INT(sl_time_now())),
                      err) < 0
               ? -1
               : 0;
}

static int bump_node(struct store *st, const char *node_id, struct sl_error *err)
{
    return store_exec(st, "UPDATE nodes SET desired_revision = desired_revision + 1 WHERE id = ?1",
                      DB_ARGS(DB_TEXT(node_id)), err) < 0
               ? -1
               : 0;
}

/* The hourly rate of n GPUs of model in region, or of no-GPU mode. */
static int hourly_rate(struct store *st, const char *model_id, int64_t n, const char *region,
                       bool nogpu, int64_t *rate, struct sl_error *err)
{
    int64_t price;

    if (catalog_hourly_price(st, nogpu ? NULL : model_id, region, &price, err) < 0)
        return -1;
    return sl_money_mul(price, nogpu ? 1 : n, rate, err);
}

/* Starting needs a balance that covers an hour at the rate (DESIGN.md 4). */
static int check_balance(struct store *st, const char *user_id, int64_t rate, struct sl_error *err)
{
    char account[LEDGER_ACCOUNT_MAX], need[SL_MONEY_FORMAT_MAX], have[SL_MONEY_FORMAT_MAX],
        missing[SL_MONEY_FORMAT_MAX];
    int64_t balance;

    if (ledger_balance(st, ledger_user_account(account, user_id), &balance, err) < 0)
        return -1;
    if (balance >= rate)
        return 0;
    return sl_fail(err, SL_E_CONFLICT, "insufficient_balance",
                   "starting needs a balance covering one hour (%s); the balance is %s: top up "
                   "at least %s",
                   sl_money_format(rate, need), sl_money_format(balance, have),
                   sl_money_format(rate - balance, missing));
}

static int check_may_start(struct server *srv, const char *user_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store, "SELECT role, verification FROM users WHERE id = ?1",
                    DB_ARGS(DB_TEXT(user_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_user", "no user '%s'", user_id);
    if (srv->cfg.require_verification && strcmp(db_text(rows, 0), "admin") != 0 &&
        strcmp(db_text(rows, 1), "approved") != 0)
        return sl_fail(err, SL_E_FORBIDDEN, "verification_required",
                       "instances need real-name verification first (state: %s): suanli verify "
                       "--name NAME --id-number NUMBER",
                       db_text(rows, 1));
    return 0;
}

/* Reserves n free GPUs of model on node for instance: 0, or 1 when there
 * are too few (nothing reserved then). */
static int reserve_gpus(struct store *st, const char *node_id, const char *model_id, int64_t n,
                        const char *instance_id, struct sl_error *err)
{
    int changed = store_exec(
        st,
        "UPDATE gpus SET instance_id = ?4 WHERE node_id = ?1 AND idx IN"
        " (SELECT idx FROM gpus WHERE node_id = ?1 AND gpu_model_id = ?2"
        "  AND instance_id IS NULL ORDER BY idx LIMIT ?3)",
        DB_ARGS(DB_TEXT(node_id), DB_TEXT(model_id), DB_INT(n), DB_TEXT(instance_id)), err);
    if (changed < 0)
        return -1;
    if (changed == n)
        return 0;
    /* too few: give back what was taken */
    if (store_exec(st, "UPDATE gpus SET instance_id = NULL WHERE instance_id = ?1",
                   DB_ARGS(DB_TEXT(instance_id)), err) < 0)
        return -1;
    return 1;
}

int instance_free_gpus(struct store *st, const char *instance_id, struct sl_error *err)
{
    return store_exec(st, "UPDATE gpus SET instance_id = NULL WHERE instance_id = ?1",
                      DB_ARGS(DB_TEXT(instance_id)), err) < 0
               ? -1
               : 0;
}

/* The lowest free SSH port of node's range. */
static int pick_port(struct store *st, const char *node_id, int64_t *port, struct sl_error *err)
{
    int64_t lo, hi, candidate;
    cleanup_rows struct db_rows *range =
        store_query(st, "SELECT ssh_port_min, ssh_port_max FROM nodes WHERE id = ?1",
                    DB_ARGS(DB_TEXT(node_id)), err);

    if (!range || db_next(range, err) < 0)
        return -1;
    lo = db_int(range, 0);
    hi = db_int(range, 1);
    cleanup_rows struct db_rows *used =
        store_query(st,
                    "SELECT ssh_port FROM instances WHERE node_id = ?1 AND state != 'released'"
                    " AND ssh_port BETWEEN ?2 AND ?3 ORDER BY ssh_port",
                    DB_ARGS(DB_TEXT(node_id), DB_INT(lo), DB_INT(hi)), err);
    if (!used)
        return -1;
    candidate = lo;
    int rc;
    while ((rc = db_next(used, err)) == 1 && db_int(used, 0) <= candidate)
        candidate = db_int(used, 0) + 1;
    if (rc < 0)
        return -1;
    if (candidate > hi)
        return sl_fail(err, SL_E_CONFLICT, "no_ports",
                       "host '%s' has no free SSH port left: ask the operator", node_id);
    *port = candidate;
    return 0;
}

/* Best fit: among online hosts of the region holding the image, the one
 * with the fewest free GPUs of the model that still has enough and room for
 * the disks asked (nodes_disk_room_gib), so large holes stay for large
 * requests. */
static int pick_node(struct server *srv, const struct instance_request *rq,
                     const struct gpu_model *m, char *node_id, char *region, struct sl_error *err)
{
    int64_t cutoff = sl_time_now() - srv->cfg.node_offline_after;
    int64_t disks = srv->cfg.system_disk_gib + rq->data_disk_gib, most_room = INT64_MIN;
    bool gpus_and_image = false;
    int rc;
    {
        cleanup_rows struct db_rows *rows = store_query(
            srv->store,
            "SELECT n.id, n.region_id, COUNT(*) AS free, n.disk_free_bytes,"
            " n.instance_disks_bytes, (SELECT COALESCE(SUM(i.system_disk_gib + i.data_disk_gib),"
            " 0) FROM instances i WHERE i.node_id = n.id AND i.state != 'released')"
            " FROM nodes n"
            " JOIN gpus g ON g.node_id = n.id AND g.gpu_model_id = ?1 AND g.instance_id IS NULL"
            " JOIN node_images ni ON ni.node_id = n.id AND ni.name = ?4 AND ni.state = 'ready'"
            " WHERE n.last_heartbeat > ?2 AND (?3 IS NULL OR n.region_id = ?3)"
            " GROUP BY n.id HAVING COUNT(*) >= ?5 ORDER BY free, n.id",
            DB_ARGS(DB_TEXT(m->id), DB_INT(cutoff), DB_TEXT(rq->region), DB_TEXT(rq->image),
                    DB_INT(rq->gpus)),
            err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1) {
            int64_t room =
                nodes_disk_room_gib(srv, db_int(rows, 3), db_int(rows, 4), db_int(rows, 5));
            gpus_and_image = true;
            if (room >= disks) {
                snprintf(node_id, SL_ID_MAX, "%s", db_text(rows, 0));
                snprintf(region, 64, "%s", db_text(rows, 1));
                return 0;
            }
            if (room > most_room)
                most_room = room;
        }
        if (rc < 0)
            return -1;
    }
    /* explain the refusal with what there is */
    if (gpus_and_image) {
        int64_t fits = most_room - srv->cfg.system_disk_gib;
        if (fits >= 1)
            return sl_fail(err, SL_E_CONFLICT, "insufficient_disk",
                           "no host with %" PRId64 " free %s has room for a %" PRId64
                           " GiB data disk (plus the %" PRId64 " GiB system disk): the most "
                           "that fits now is a %" PRId64 " GiB data disk. Ask for a smaller "
                           "data disk (data_disk_gib, suanli create --data-disk), another "
                           "region, or try again later",
                           rq->gpus, m->name, rq->data_disk_gib, srv->cfg.system_disk_gib, fits);
        return sl_fail(err, SL_E_CONFLICT, "insufficient_disk",
                       "no host with %" PRId64 " free %s has disk room left for another "
                       "instance (a %" PRId64 " GiB system disk and a data disk): try another "
                       "region, or again later",
                       rq->gpus, m->name, srv->cfg.system_disk_gib);
    }
    int64_t most = 0;
    if (store_get_int(srv->store,
                      "SELECT COALESCE(MAX(c), 0) FROM (SELECT COUNT(*) AS c FROM gpus g"
                      " JOIN nodes n ON n.id = g.node_id WHERE g.gpu_model_id = ?1"
                      " AND g.instance_id IS NULL AND n.last_heartbeat > ?2"
                      " AND (?3 IS NULL OR n.region_id = ?3) GROUP BY g.node_id)",
                      DB_ARGS(DB_TEXT(m->id), DB_INT(cutoff), DB_TEXT(rq->region)), &most, err) < 0)
        return -1;
    if (most >= rq->gpus)
        return sl_fail(err, SL_E_CONFLICT, "image_unavailable",
                       "no host with %" PRId64 " free %s holds image '%s' yet: try again when "
                       "it is built (suanli image ls)",
                       rq->gpus, m->name, rq->image);
    return sl_fail(err, SL_E_CONFLICT, "no_capacity",
                   "no host%s%s has %" PRId64 " free %s right now (the most free on one host: "
                   "%" PRId64 "): ask for fewer GPUs, another region, or try again later",
                   rq->region ? " in region " : "", rq->region ? rq->region : "", rq->gpus, m->name,
                   most);
}

/* A renter holds at most instances.max_per_user instances that are not
 * released; checked inside the placement transaction, so concurrent creates
 * cannot pass it together. */
static int check_instance_limit(struct server *srv, const char *user_id, struct sl_error *err)
{
    int64_t held;

    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM instances WHERE user_id = ?1 AND state != 'released'",
                      DB_ARGS(DB_TEXT(user_id)), &held, err) < 0)
        return -1;
    if (held < srv->cfg.max_instances_per_user)
        return 0;
    return sl_fail(
        err, SL_E_CONFLICT, "too_many_instances",
        "you hold %" PRId64 " instances, the most one account may (stopped ones "
        "count: their disks are kept): release one you no longer need (suanli release ID) "
        "or ask the operator for a higher limit",
        held);
}

#define ROOT_PASSWORD_CONTEXT "root_password:%s"

/* A crypt(3) SHA-512 hash ("$6$salt$hash") of password: what the node needs
 * to set it (chpasswd -e), and nothing it could log in elsewhere with. */
static char *root_password_crypt(const char *password, struct sl_error *err)
{
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    cleanup_free struct crypt_data *data = xzalloc(sizeof(*data));
    const char *hash = NULL;

    if (!crypt_gensalt_rn("$6$", 0, NULL, 0, salt, sizeof(salt)) ||
        !(hash = crypt_rn(password, salt, data, sizeof(*data))) || hash[0] != '$') {
        sl_fail_errno(err, "unable to hash a root password with crypt(3) SHA-512");
        return NULL;
    }
    return xstrdup(hash);
}

/* The root password as stored: sealed for the owner's eyes (secrets.h),
 * and its hash for the node. */
static int root_password_new(struct server *srv, const char *id, char **sealed, char **hash,
                             struct sl_error *err)
{
    char password[17], context[SL_ID_MAX + 32];

    sl_random_hex(password, 8);
    snprintf(context, sizeof(context), ROOT_PASSWORD_CONTEXT, id);
    *hash = root_password_crypt(password, err);
    if (!*hash)
        return -1;
    *sealed = secrets_seal(srv, context, password);
    sodium_memzero(password, sizeof(password));
    return 0;
}

int instances_seal_secrets(struct server *srv, struct sl_error *err)
{
    struct store *st = srv->store;
    cleanup_tx struct store *tx = NULL;
    cleanup_json json_t *todo = json_array();
    int64_t sealed = 0, hashed = 0;
    size_t i;
    json_t *row;
    int rc;

    if (secrets_rewrite_begin(st, err) < 0)
        return -1;
    tx = st;
    {
        /* read whole before anything is written */
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT id, root_password, root_password_crypt = '' AND state != 'released'"
                        " FROM instances WHERE root_password NOT LIKE 's1:%'"
                        " OR (root_password_crypt = '' AND state != 'released')",
                        DB_NO_ARGS, err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1)
            json_array_append_new(todo, json_pack("[s, s, b]", db_text(rows, 0), db_text(rows, 1),
                                                  (int)db_int(rows, 2)));
        if (rc < 0)
            return -1;
    }
    json_array_foreach(todo, i, row)
    {
        const char *id = json_string_value(json_array_get(row, 0));
        const char *stored = json_string_value(json_array_get(row, 1));
        bool needs_hash = json_is_true(json_array_get(row, 2));
        char context[SL_ID_MAX + 32];
        snprintf(context, sizeof(context), ROOT_PASSWORD_CONTEXT, id);
        cleanup_free char *plain = secrets_open(srv, context, stored, err);
        if (!plain)
            return -1;
        cleanup_free char *hash = needs_hash ? root_password_crypt(plain, err) : NULL;
        if (needs_hash && !hash)
            return -1;
        cleanup_free char *seal =
            secrets_is_sealed(stored) ? xstrdup(stored) : secrets_seal(srv, context, plain);
        sealed += !secrets_is_sealed(stored);
        hashed += hash != NULL;
        sodium_memzero(plain, strlen(plain));
        if (store_exec(st,
                       "UPDATE instances SET root_password = ?2,"
                       " root_password_crypt = COALESCE(?3, root_password_crypt) WHERE id = ?1",
                       DB_ARGS(DB_TEXT(id), DB_TEXT(seal), DB_TEXT(hash)), err) < 0)
            return -1;
    }
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    if (sealed && secrets_scrub_log(st, err) < 0)
        return -1;
    if (sealed || hashed)
        log_info("instances: sealed %" PRId64 " root password%s stored in plaintext before, "
                 "hashed %" PRId64 " for their nodes",
                 sealed, sealed == 1 ? "" : "s", hashed);
    return 0;
}

int sched_place(struct server *srv, const struct instance_request *rq, char *id,
                struct sl_error *err)
{
    struct store *st = srv->store;
    struct gpu_model m;
    char node_id[SL_ID_MAX], region[64];
    int64_t exists, rate, port = 0, now = sl_time_now();
    cleanup_tx struct store *tx = NULL;
    const char *plan = rq->plan ? rq->plan : "payg";
    int64_t period;

    if (billing_plan_period(plan, &period, err) < 0)
        return -1;
    bool prepaid = period > 0;
    if (rq->gpus < 1 || rq->gpus > srv->cfg.max_gpus_per_instance)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "gpus must be from 1 to %" PRId64 " (no-GPU mode is a start option)",
                       srv->cfg.max_gpus_per_instance);
    if (rq->data_disk_gib < 1 || rq->data_disk_gib > srv->cfg.max_data_disk_gib)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "data_disk_gib must be from 1 to %" PRId64, srv->cfg.max_data_disk_gib);
    if (find_gpu_model(st, rq->gpu_model, &m, err) < 0)
        return -1;
    if (store_get_int(st, "SELECT COUNT(*) FROM images WHERE name = ?1",
                      DB_ARGS(DB_TEXT(rq->image)), &exists, err) < 0)
        return -1;
    if (!exists)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_image",
                       "no image '%s': list them with suanli image ls", rq->image);
    if (rq->region) {
        if (store_get_int(st, "SELECT COUNT(*) FROM regions WHERE id = ?1",
                          DB_ARGS(DB_TEXT(rq->region)), &exists, err) < 0)
            return -1;
        if (!exists)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_region",
                           "no region '%s': list them with suanli regions", rq->region);
    }
    if (check_may_start(srv, rq->user_id, err) < 0)
        return -1;
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    if (check_instance_limit(srv, rq->user_id, err) < 0 ||
        pick_node(srv, rq, &m, node_id, region, err) < 0 ||
        hourly_rate(st, m.id, rq->gpus, region, false, &rate, err) < 0 ||
        (!prepaid && check_balance(st, rq->user_id, rate, err) < 0) ||
        pick_port(st, node_id, &port, err) < 0)
        return -1;
    sl_id_new(id, "i-");
    int rc = reserve_gpus(st, node_id, m.id, rq->gpus, id, err);
    if (rc != 0)
        return rc < 0 ? -1 : sl_fail(err, SL_E_INTERNAL, NULL, "BUG: GPUs vanished while placing");
    cleanup_free char *sealed = NULL, *hash = NULL;
    if (root_password_new(srv, id, &sealed, &hash, err) < 0)
        return -1;
    if (store_exec(st,
                   "INSERT INTO instances (id, user_id, name, region_id, node_id, gpu_model_id,"
                   " gpus, image, system_disk_gib, data_disk_gib, ssh_port, root_password,"
                   " root_password_crypt, state, desired, created_at, updated_at) VALUES (?1, ?2,"
                   " ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, 'creating', 'running', ?14,"
                   " ?14)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(rq->user_id), DB_TEXT(rq->name ? rq->name : id),
                           DB_TEXT(region), DB_TEXT(node_id), DB_TEXT(m.id), DB_INT(rq->gpus),
                           DB_TEXT(rq->image), DB_INT(srv->cfg.system_disk_gib),
                           DB_INT(rq->data_disk_gib), DB_INT(port), DB_TEXT(sealed), DB_TEXT(hash),
                           DB_INT(now)),
                   err) < 0 ||
        instance_event(st, id, "create", "creating", "user", NULL, err) < 0 ||
        billing_open_storage(srv, id, err) < 0 ||
        ports_create_defaults(srv, id, rq->image, err) < 0 ||
        (prepaid && billing_plan_set(srv, id, plan, rq->auto_renew, err) < 0) ||
        bump_node(st, node_id, err) < 0)
        return -1;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    log_info("instances: placed %s on %s (%" PRId64 " x %s, port %" PRId64 ")", id, node_id,
             rq->gpus, m.name, port);
    return 0;
}

struct instance_row {
    char node_id[SL_ID_MAX], model_id[SL_ID_MAX], region[64], state[16], user_id[SL_ID_MAX];
    int64_t gpus;
};

static int load(struct store *st, const char *id, struct instance_row *r, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT node_id, gpu_model_id, region_id, state, gpus, user_id FROM instances"
                    " WHERE id = ?1",
                    DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                       "no instance '%s': list yours with suanli ls", id);
    snprintf(r->node_id, sizeof(r->node_id), "%s", db_text(rows, 0));
    snprintf(r->model_id, sizeof(r->model_id), "%s", db_text(rows, 1));
    snprintf(r->region, sizeof(r->region), "%s", db_text(rows, 2));
    snprintf(r->state, sizeof(r->state), "%s", db_text(rows, 3));
    r->gpus = db_int(rows, 4);
    snprintf(r->user_id, sizeof(r->user_id), "%s", db_text(rows, 5));
    return 0;
}

int instance_hold_gpus(struct store *st, const char *id, struct sl_error *err)
{
    struct instance_row r;
    int64_t held;

    if (load(st, id, &r, err) < 0 ||
        store_get_int(st, "SELECT COUNT(*) FROM gpus WHERE instance_id = ?1", DB_ARGS(DB_TEXT(id)),
                      &held, err) < 0)
        return -1;
    if (held >= r.gpus)
        return 0;
    if (instance_free_gpus(st, id, err) < 0)
        return -1;
    int rc = reserve_gpus(st, r.node_id, r.model_id, r.gpus, id, err);
    if (rc < 0)
        return -1;
    if (rc == 1)
        return sl_fail(err, SL_E_CONFLICT, "gpus_unavailable",
                       "the host of instance '%s' has fewer than %" PRId64 " free GPUs now "
                       "(its disks live there). Ways out: start it in no-GPU mode (suanli "
                       "start --no-gpu %s), wait for GPUs to free up, or clone it to "
                       "another host",
                       id, r.gpus, id);
    return 0;
}

static int set_state(struct store *st, const char *id, const char *state, const char *desired,
                     const char *extra_sql_mode, struct sl_error *err)
{
    if (store_exec(st,
                   "UPDATE instances SET state = ?2, desired = ?3, mode = COALESCE(?4, mode),"
                   " state_message = '', updated_at = ?5 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(state), DB_TEXT(desired), DB_TEXT(extra_sql_mode),
                           DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    return 0;
}

static bool in(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(s, *set) == 0)
            return true;
    return false;
}

int instance_stop(struct server *srv, const char *id, const char *reason, struct sl_error *err)
{
    static const char *const stoppable[] = { "creating", "running", "starting", "failed", NULL };
    struct store *st = srv->store;
    struct instance_row r;

    if (load(st, id, &r, err) < 0)
        return -1;
    if (strcmp(r.state, "stopped") == 0 || strcmp(r.state, "stopping") == 0)
        return 0;
    if (!in(r.state, stoppable))
        return sl_fail(err, SL_E_CONFLICT, "invalid_state", "instance '%s' is %s: it cannot stop",
                       id, r.state);
    /* billing stops when the stop is asked for, not when it is done */
    if (set_state(st, id, "stopping", "stopped", NULL, err) < 0 ||
        /* a stop ends any scheduled stop and idle period (server/stops.c) */
        store_exec(st,
                   "UPDATE instances SET stopped_at = ?2, release_warnings = 0, stop_at = NULL,"
                   " idle_since = NULL, idle_warned = 0 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(sl_time_now())), err) < 0 ||
        billing_close(srv, id, false, err) < 0 ||
        instance_event(st, id, "stop", "stopping", reason, NULL, err) < 0)
        return -1;
    return bump_node(st, r.node_id, err);
}

int instance_start(struct server *srv, const char *id, const char *mode, struct sl_error *err)
{
    struct store *st = srv->store;
    struct instance_row r;
    bool nogpu = strcmp(mode, "nogpu") == 0;
    int64_t rate;
    bool prepaid;

    if (load(st, id, &r, err) < 0 || billing_plan_active(st, id, &prepaid, err) < 0)
        return -1;
    if (strcmp(r.state, "running") == 0 || strcmp(r.state, "starting") == 0)
        return 0;
    if (strcmp(r.state, "stopped") != 0 && strcmp(r.state, "failed") != 0)
        return sl_fail(err, SL_E_CONFLICT, "invalid_state",
                       "instance '%s' is %s: wait until it is stopped, then start it", id, r.state);
    if (check_may_start(srv, r.user_id, err) < 0 ||
        hourly_rate(st, r.model_id, r.gpus, r.region, nogpu, &rate, err) < 0 ||
        (!prepaid && check_balance(st, r.user_id, rate, err) < 0))
        return -1;
    if (nogpu) {
        /* a plan keeps its GPUs even while they are not used */
        if (!prepaid && instance_free_gpus(st, id, err) < 0)
            return -1;
    } else if (instance_hold_gpus(st, id, err) < 0) {
        return -1;
    }
    /* a new generation: the node retries even a start that failed before */
    if (store_exec(st, "UPDATE instances SET generation = generation + 1 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id)), err) < 0 ||
        set_state(st, id, "starting", "running", nogpu ? "nogpu" : "gpu", err) < 0 ||
        store_exec(st, "UPDATE instances SET stopped_at = NULL WHERE id = ?1", DB_ARGS(DB_TEXT(id)),
                   err) < 0 ||
        instance_event(st, id, "start", "starting", "user", nogpu ? "no-GPU mode" : NULL, err) < 0)
        return -1;
    return bump_node(st, r.node_id, err);
}

int instance_restart(struct server *srv, const char *id, struct sl_error *err)
{
    struct store *st = srv->store;
    struct instance_row r;

    if (load(st, id, &r, err) < 0)
        return -1;
    if (strcmp(r.state, "running") != 0)
        return sl_fail(err, SL_E_CONFLICT, "invalid_state",
                       "instance '%s' is %s: only a running instance restarts (use start)", id,
                       r.state);
    if (store_exec(st,
                   "UPDATE instances SET generation = generation + 1, state = 'starting',"
                   " updated_at = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(sl_time_now())), err) < 0 ||
        instance_event(st, id, "restart", "starting", "user", NULL, err) < 0)
        return -1;
    return bump_node(st, r.node_id, err);
}

int instance_release(struct server *srv, const char *id, const char *reason, struct sl_error *err)
{
    struct store *st = srv->store;
    struct instance_row r;

    if (load(st, id, &r, err) < 0)
        return -1;
    if (strcmp(r.state, "released") == 0 || strcmp(r.state, "releasing") == 0)
        return 0;
    /* the unused part of a plan comes back; nothing is billed after this */
    if (billing_plan_end(srv, id, reason, err) < 0 || billing_close(srv, id, true, err) < 0 ||
        set_state(st, id, "releasing", "released", NULL, err) < 0 ||
        store_exec(st, "UPDATE instances SET released_at = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(sl_time_now())), err) < 0 ||
        instance_event(st, id, "release", "releasing", reason, NULL, err) < 0)
        return -1;
    return bump_node(st, r.node_id, err);
}

static json_t *gpu_indices(struct store *st, const char *id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT idx FROM gpus WHERE instance_id = ?1 ORDER BY idx", DB_ARGS(DB_TEXT(id)), err);
    cleanup_json json_t *out = json_array();
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(out, json_integer(db_int(rows, 0)));
    return rc < 0 ? NULL : TAKE_PTR(out);
}

/* What the instance costs: its plan, what it has been charged, its rate
 * now, and when a stopped one will be released. Columns 23..26 of
 * instance_json's query. Consumes j. */
static json_t *billing_json(struct server *srv, json_t *j, struct db_rows *rows,
                            struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *state = json_string_value(json_object_get(j, "state"));
    const char *plan = json_string_value(json_object_get(j, "plan"));
    int64_t charged, rate;

    if (billing_instance_charged(srv->store, id, &charged, &rate, err) < 0) {
        json_decref(j);
        return NULL;
    }
    bool prepaid = strcmp(plan, "payg") != 0;
    bool counting = !prepaid && strcmp(state, "stopped") == 0 && !db_null(rows, 25);
    json_object_set_new(j, "plan_expires_at", prepaid ? api_time(db_int(rows, 23)) : json_null());
    json_object_set_new(j, "auto_renew", json_boolean(prepaid && db_int(rows, 24)));
    json_object_set_new(j, "plan_price_micros", json_integer(prepaid ? db_int(rows, 26) : 0));
    json_object_set_new(j, "stopped_at",
                        db_null(rows, 25) ? json_null() : api_time(db_int(rows, 25)));
    json_object_set_new(j, "release_at",
                        counting ? api_time(db_int(rows, 25) + srv->cfg.release_after)
                                 : json_null());
    json_object_set_new(j, "charged_micros", json_integer(charged));
    json_object_set_new(j, "rate_per_hour_micros", json_integer(rate));
    return j;
}

int instance_require_owned(struct store *st, const char *id, const char *user_id,
                           struct sl_error *err)
{
    int64_t n;

    if (store_get_int(
            st, "SELECT COUNT(*) FROM instances WHERE id = ?1 AND (?2 IS NULL OR user_id = ?2)",
            DB_ARGS(DB_TEXT(id), DB_TEXT(user_id)), &n, err) < 0)
        return -1;
    return n ? 0
             : sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                       "no instance '%s': list yours with suanli ls", id);
}

json_t *instance_json(struct server *srv, const char *id, const char *user_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT i.id, i.name, i.user_id, i.region_id, i.node_id, m.name, i.gpus, i.image,"
        " i.state, i.desired, i.mode, i.plan, m.cpu_cores_per_gpu * i.gpus,"
        " m.memory_mib_per_gpu * i.gpus, i.system_disk_gib, i.data_disk_gib, n.address,"
        " i.ssh_port, i.root_password, i.state_message, i.created_at, i.updated_at,"
        " (SELECT COUNT(*) FROM gpus g WHERE g.node_id = i.node_id AND g.simulated = 1"
        "  AND g.gpu_model_id = i.gpu_model_id) > 0,"
        " i.plan_expires_at, i.plan_auto_renew, i.stopped_at, i.plan_price_micros"
        " FROM instances i JOIN gpu_models m ON m.id = i.gpu_model_id"
        " JOIN nodes n ON n.id = i.node_id WHERE i.id = ?1 AND (?2 IS NULL OR i.user_id = ?2)",
        DB_ARGS(DB_TEXT(id), DB_TEXT(user_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return NULL;
    if (rc == 0) {
        sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                "no instance '%s': list yours with suanli ls", id);
        return NULL;
    }
    json_t *gpus = gpu_indices(srv->store, id, err);
    if (!gpus)
        return NULL;
    bool nogpu = strcmp(db_text(rows, 10), "nogpu") == 0;
    char context[SL_ID_MAX + 32];
    snprintf(context, sizeof(context), ROOT_PASSWORD_CONTEXT, db_text(rows, 0));
    cleanup_free char *password = secrets_open(srv, context, db_text(rows, 18), err);
    if (!password) {
        json_decref(gpus);
        return NULL;
    }
    cleanup_free char *command =
        xasprintf("ssh -p %" PRId64 " root@%s", db_int(rows, 17), db_text(rows, 16));
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:o, s:b, s:s, s:s, s:s, s:s, s:s, s:f, s:I, s:I,"
        " s:I, s:{s:s, s:I, s:s, s:s, s:s}, s:s, s:o, s:o}",
        "id", db_text(rows, 0), "name", db_text(rows, 1), "user_id", db_text(rows, 2), "region",
        db_text(rows, 3), "node_id", db_text(rows, 4), "gpu_model", db_text(rows, 5), "gpus",
        (json_int_t)db_int(rows, 6), "gpu_indices", gpus, "simulated_gpus", (int)db_int(rows, 22),
        "image", db_text(rows, 7), "state", db_text(rows, 8), "desired", db_text(rows, 9), "mode",
        db_text(rows, 10), "plan", db_text(rows, 11), "cpu_cores",
        nogpu ? (double)srv->cfg.nogpu_millicores / 1000.0 : (double)db_int(rows, 12), "memory_mib",
        (json_int_t)(nogpu ? srv->cfg.nogpu_memory_mib : db_int(rows, 13)), "system_disk_gib",
        (json_int_t)db_int(rows, 14), "data_disk_gib", (json_int_t)db_int(rows, 15), "ssh", "host",
        db_text(rows, 16), "port", (json_int_t)db_int(rows, 17), "user", "root", "password",
        password, "command", command, "state_message", db_text(rows, 19), "created_at",
        api_time(db_int(rows, 20)), "updated_at", api_time(db_int(rows, 21)));
    if (!j)
        return NULL;
    j = billing_json(srv, j, rows, err);
    if (j && ports_instance_json(srv, j, err) < 0) {
        json_decref(j);
        return NULL;
    }
    return j ? stops_json(srv, j, err) : NULL;
}

static json_t *authorized_keys(struct store *st, const char *user_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st, "SELECT public_key FROM ssh_keys WHERE user_id = ?1 ORDER BY rowid",
                    DB_ARGS(DB_TEXT(user_id)), err);
    struct sl_buf b;
    int rc;

    if (!rows)
        return NULL;
    sl_buf_init(&b);
    while ((rc = db_next(rows, err)) == 1)
        sl_buf_addf(&b, "%s\n", db_text(rows, 0));
    json_t *j = rc < 0 ? NULL : json_string(b.data);
    sl_buf_release(&b);
    return j;
}

json_t *instances_desired(struct server *srv, const char *node_id, struct sl_error *err)
{
    struct store *st = srv->store;
    int64_t revision;
    int rc;

    if (store_get_int(st, "SELECT desired_revision FROM nodes WHERE id = ?1",
                      DB_ARGS(DB_TEXT(node_id)), &revision, err) < 0)
        return NULL;
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT i.id, i.desired, i.generation, i.image, i.mode, m.cpu_cores_per_gpu * i.gpus,"
        " m.memory_mib_per_gpu * i.gpus, i.system_disk_gib, i.data_disk_gib, i.ssh_port,"
        " i.root_password_crypt, i.user_id FROM instances i"
        " JOIN gpu_models m ON m.id = i.gpu_model_id"
        " WHERE i.node_id = ?1 AND i.state != 'released' ORDER BY i.seq",
        DB_ARGS(DB_TEXT(node_id)), err);
    if (!rows)
        return NULL;
    cleanup_json json_t *items = json_array();
    while ((rc = db_next(rows, err)) == 1) {
        const char *id = db_text(rows, 0);
        bool nogpu = strcmp(db_text(rows, 4), "nogpu") == 0;
        /* a plan keeps its GPUs in no-GPU mode; they are not attached */
        json_t *gpus = nogpu ? json_array() : gpu_indices(st, id, err);
        json_t *keys = gpus ? authorized_keys(st, db_text(rows, 11), err) : NULL;
        if (!keys) {
            json_decref(gpus);
            return NULL;
        }
        json_array_append_new(
            items,
            json_pack(
                "{s:s, s:s, s:I, s:s, s:s, s:o, s:I, s:I, s:I, s:I, s:I, s:s, s:o}", "id", id,
                "desired", db_text(rows, 1), "generation", (json_int_t)db_int(rows, 2), "image",
                db_text(rows, 3), "mode", db_text(rows, 4), "gpus", gpus, "cpu_millicores",
                (json_int_t)(nogpu ? srv->cfg.nogpu_millicores : db_int(rows, 5) * 1000),
                "memory_mib", (json_int_t)(nogpu ? srv->cfg.nogpu_memory_mib : db_int(rows, 6)),
                "system_disk_gib", (json_int_t)db_int(rows, 7), "data_disk_gib",
                (json_int_t)db_int(rows, 8), "ssh_port", (json_int_t)db_int(rows, 9),
                "root_password_crypt", db_text(rows, 10), "authorized_keys", keys));
    }
    if (rc < 0 || ports_desired(srv, items, err) < 0)
        return NULL;
    cleanup_rows struct db_rows *images = store_query(
        st,
        "SELECT i.name, i.recipe FROM images i JOIN nodes n ON n.id = ?1"
        " WHERE i.recipe != '' AND (i.region_id = '' OR i.region_id = n.region_id) ORDER BY i.name",
        DB_ARGS(DB_TEXT(node_id)), err);
    if (!images)
        return NULL;
    cleanup_json json_t *wanted = json_array();
    while ((rc = db_next(images, err)) == 1) {
        const char *recipe = db_text(images, 1);
        if (strncmp(recipe, "upload:", 7) == 0)
            json_array_append_new(wanted, json_pack("{s:s, s:s, s:s}", "name", db_text(images, 0),
                                                    "recipe", "upload", "sha256", recipe + 7));
        else
            json_array_append_new(
                wanted, json_pack("{s:s, s:s}", "name", db_text(images, 0), "recipe", recipe));
    }
    if (rc < 0)
        return NULL;
    return json_pack("{s:I, s:O, s:O}", "revision", (json_int_t)revision, "instances", items,
                     "images", wanted);
}

/* At most this many `oom` events per report: a loop that keeps running out
 * of memory catches up over a few heartbeats instead of in one. */
#define OOM_EVENTS_PER_REPORT 20

/* One `oom` event per process the kernel killed. oom_kills counts since the
 * container started (a new one starts at 0), so what is already recorded is
 * the number of `oom` events since the instance's latest `running` event. */
static int record_oom_kills(struct store *st, const char *id, int64_t oom_kills,
                            struct sl_error *err)
{
    int64_t recorded;
    int rc;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT COUNT(*) FROM events WHERE instance_id = ?1 AND kind = 'oom'"
                        " AND seq > (SELECT COALESCE(MAX(seq), 0) FROM events"
                        " WHERE instance_id = ?1 AND kind = 'running')",
                        DB_ARGS(DB_TEXT(id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        recorded = rc ? db_int(rows, 0) : 0;
    }
    for (int64_t n = recorded; n < oom_kills && n < recorded + OOM_EVENTS_PER_REPORT; n++) {
        if (instance_event(st, id, "oom", "running", "node",
                           "out of memory: a process went past the instance's memory limit and"
                           " was killed",
                           err) < 0)
            return -1;
    }
    return 0;
}

/* One reported instance: moves the recorded state along when the node has
 * reached what was asked, and records processes killed for lack of memory.
 * Fields: id, state (running|stopped|absent|failed), generation, message,
 * and oom_kills (running only: the OOM killer's count since the container
 * started, from its memory cgroup). */
static int apply_one(struct server *srv, const char *node_id, json_t *rep, struct sl_error *err)
{
    struct store *st = srv->store;
    const char *id = NULL, *state = NULL, *message = NULL;
    int64_t generation = 0, oom_kills = 0;
    const struct sl_json_field f[] = {
        { "id", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &id },
        { "state", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 16, .out = &state },
        { "generation", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &generation },
        { "message", SL_JSON_STRING, .max_len = 500, .multiline = true, .out = &message },
        { "oom_kills", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &oom_kills },
    };
    char now_state[16], desired[16];
    int64_t want_generation;
    int rc;

    if (sl_json_fields(rep, f, ARRAY_SIZE(f), err) < 0)
        return -1;
    {
        cleanup_rows struct db_rows *rows = store_query(
            st, "SELECT state, desired, generation FROM instances WHERE id = ?1 AND node_id = ?2",
            DB_ARGS(DB_TEXT(id), DB_TEXT(node_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            return 0; /* not ours to track: the node will be told to drop it */
        snprintf(now_state, sizeof(now_state), "%s", db_text(rows, 0));
        snprintf(desired, sizeof(desired), "%s", db_text(rows, 1));
        want_generation = db_int(rows, 2);
    }
    const char *next = NULL, *kind = NULL;
    if (strcmp(state, "failed") == 0 && strcmp(now_state, "failed") != 0 &&
        strcmp(desired, "running") == 0) {
        next = "failed";
        kind = "failed";
    } else if (strcmp(desired, "running") == 0 && strcmp(state, "running") == 0 &&
               generation >= want_generation && strcmp(now_state, "running") != 0 &&
               strcmp(now_state, "failed") != 0) {
        next = "running";
        kind = "running";
    } else if (strcmp(desired, "stopped") == 0 &&
               (strcmp(state, "stopped") == 0 || strcmp(state, "absent") == 0) &&
               strcmp(now_state, "stopped") != 0) {
        next = "stopped";
        kind = "stopped";
    } else if (strcmp(desired, "released") == 0 && strcmp(state, "absent") == 0) {
        next = "released";
        kind = "released";
    }
    if (!next) {
        if (oom_kills > 0 && strcmp(state, "running") == 0 && strcmp(now_state, "running") == 0)
            return record_oom_kills(st, id, oom_kills, err);
        return 0;
    }
    if (store_exec(st,
                   "UPDATE instances SET state = ?2, state_message = ?3, updated_at = ?4"
                   " WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(next), DB_TEXT(message ? message : ""),
                           DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    /* the meter runs from the moment the node says it runs */
    if (strcmp(next, "running") == 0 && billing_open_compute(srv, id, err) < 0)
        return -1;
    if (strcmp(next, "failed") == 0 && billing_close(srv, id, false, err) < 0)
        return -1;
    /* GPUs go back to the pool once nothing runs on them, unless a plan
     * keeps them */
    bool prepaid;
    if (strcmp(next, "running") != 0 && (billing_plan_active(st, id, &prepaid, err) < 0 ||
                                         (!prepaid && instance_free_gpus(st, id, err) < 0)))
        return -1;
    return instance_event(st, id, kind, next, "node", message, err);
}

int instances_apply_report(struct server *srv, const char *node_id, json_t *report,
                           struct sl_error *err)
{
    size_t i;
    json_t *rep;

    json_array_foreach(report, i, rep)
    {
        if (apply_one(srv, node_id, rep, err) < 0) {
            sl_error_prefix(err, "instances[%zu]", i);
            return -1;
        }
    }
    return 0;
}
