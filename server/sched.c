/* Placement (sched.h): the host, GPUs, SSH port and disk room of a new
 * instance, within the renter's limit, name space and balance. */
#include "sched.h"

#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/log.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "billing.h"
#include "catalog.h"
#include "instance-passwords.h"
#include "instance-sync.h"
#include "instances.h"
#include "ledger.h"
#include "nodes.h"
#include "ports.h"

#include <inttypes.h>
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
    int64_t balance, short_by;

    if (ledger_balance(st, ledger_user_account(account, user_id), &balance, err) < 0)
        return -1;
    if (balance >= rate)
        return 0;
    if (sl_money_sub(rate, balance, &short_by, err) < 0)
        return -1;
    return sl_fail(err, SL_E_CONFLICT, "insufficient_balance",
                   "starting needs a balance covering one hour (%s); the balance is %s: top up "
                   "at least %s",
                   sl_money_format(rate, need), sl_money_format(balance, have),
                   sl_money_format(short_by, missing));
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

int sched_reserve_gpus(struct store *st, const char *node_id, const char *model_id, int64_t n,
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

/* Names are unique per renter among the instances not released, so a name
 * names one instance wherever an id would (the CLI resolves it with
 * GET /v1/instances?name=). Checked inside the placement transaction, like
 * the limit; migration 7's unique index holds it too. */
static int check_name_free(struct store *st, const char *user_id, const char *name,
                           struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT id FROM instances WHERE user_id = ?1 AND name = ?2"
                    " AND state != 'released' ORDER BY seq LIMIT 1",
                    DB_ARGS(DB_TEXT(user_id), DB_TEXT(name)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    return sl_fail(err, SL_E_CONFLICT, "name_taken",
                   "you already have an instance named '%s' (%s): choose another name, or "
                   "release that one first (suanli release %s)",
                   name, db_text(rows, 0), db_text(rows, 0));
}

int sched_check_start(struct server *srv, const char *user_id, const char *model_id, int64_t gpus,
                      const char *region, bool nogpu, bool prepaid, struct sl_error *err)
{
    int64_t rate;

    if (check_may_start(srv, user_id, err) < 0 ||
        hourly_rate(srv->store, model_id, gpus, region, nogpu, &rate, err) < 0)
        return -1;
    return prepaid ? 0 : check_balance(srv->store, user_id, rate, err);
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
        (rq->name && check_name_free(st, rq->user_id, rq->name, err) < 0) ||
        pick_node(srv, rq, &m, node_id, region, err) < 0 ||
        hourly_rate(st, m.id, rq->gpus, region, false, &rate, err) < 0 ||
        (!prepaid && check_balance(st, rq->user_id, rate, err) < 0) ||
        pick_port(st, node_id, &port, err) < 0)
        return -1;
    sl_id_new(id, "i-");
    int rc = sched_reserve_gpus(st, node_id, m.id, rq->gpus, id, err);
    if (rc != 0)
        return rc < 0 ? -1 : sl_fail(err, SL_E_INTERNAL, NULL, "BUG: GPUs vanished while placing");
    cleanup_free char *sealed = NULL, *hash = NULL;
    if (instance_password_new(srv, id, &sealed, &hash, err) < 0)
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
        instances_node_changed(st, node_id, err) < 0)
        return -1;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    log_info("instances: placed %s on %s (%" PRId64 " x %s, port %" PRId64 ")", id, node_id,
             rq->gpus, m.name, port);
    return 0;
}
