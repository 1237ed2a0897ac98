/* Bigger data disks (disk-resize.h). */
#include "disk-resize.h"

#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/log.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "billing.h"
#include "catalog.h"
#include "instances.h"
#include "ledger.h"
#include "migrations.h"
#include "nodes.h"
#include "routes.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int disk_resize_judge(const char *id, const char *host, int64_t have_gib, int64_t want_gib,
                      int64_t max_gib, int64_t room_gib, struct sl_error *err)
{
    if (want_gib < 1 || want_gib > max_gib)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "data_disk_gib must be from 1 to %" PRId64 " (the largest data disk "
                       "this cloud makes), not %" PRId64,
                       max_gib, want_gib);
    if (want_gib == have_gib)
        return 0;
    if (want_gib < have_gib)
        return sl_fail(err, SL_E_CONFLICT, "disk_shrink",
                       "the data disk of instance '%s' is %" PRId64 " GiB and a data disk only "
                       "grows: ext4 cannot shrink while mounted, and your files may not fit in "
                       "%" PRId64 " GiB. For a smaller disk, create an instance with that data "
                       "disk (suanli create --data-disk %" PRId64 "), copy what you keep to it "
                       "(suanli cp, or rsync over ssh), then release this one",
                       id, have_gib, want_gib, want_gib);
    if (want_gib - have_gib > room_gib) {
        if (room_gib <= 0)
            return sl_fail(err, SL_E_CONFLICT, "insufficient_disk",
                           "host '%s' of instance '%s' has no disk room left to grow its data "
                           "disk (%" PRId64 " GiB now). Move it to a host with room: stop it, "
                           "then suanli migrate %s (or clone it), and grow it there",
                           host, id, have_gib, id);
        return sl_fail(err, SL_E_CONFLICT, "insufficient_disk",
                       "host '%s' of instance '%s' has room for %" PRId64 " more GiB of disk "
                       "now, not %" PRId64 ": the most its data disk can grow to there is %" PRId64
                       " GiB. Ask for that or less, or move it to a host with room (stop it, "
                       "then suanli migrate %s) and grow it there",
                       host, id, room_gib, want_gib - have_gib, have_gib + room_gib, id);
    }
    return 1;
}

int disk_resize_extra_per_day(int64_t have_gib, int64_t want_gib, int64_t free_gib, int64_t price,
                              int64_t *out, struct sl_error *err)
{
    int64_t before = have_gib > free_gib ? have_gib - free_gib : 0;
    int64_t after = want_gib > free_gib ? want_gib - free_gib : 0;

    *out = 0;
    if (after <= before || price <= 0)
        return 0;
    return sl_money_mul(price, after - before, out, err);
}

/* What a resize reads of the instance and its host. */
struct resize_row {
    char node_id[SL_ID_MAX], user_id[SL_ID_MAX], region[64], host[256], state[32];
    int64_t have_gib, free_bytes, disks_bytes, promised_gib;
};

static int load(struct store *st, const char *id, struct resize_row *r, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT i.node_id, i.user_id, i.region_id, n.hostname, i.state, i.data_disk_gib,"
        " n.disk_free_bytes, n.instance_disks_bytes,"
        " (SELECT COALESCE(SUM(o.system_disk_gib + o.data_disk_gib), 0) FROM instances o"
        "  WHERE o.node_id = n.id AND o.state != 'released')"
        " FROM instances i JOIN nodes n ON n.id = i.node_id WHERE i.id = ?1",
        DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                       "no instance '%s': list yours with suanli ls", id);
    snprintf(r->node_id, sizeof(r->node_id), "%s", db_text(rows, 0));
    snprintf(r->user_id, sizeof(r->user_id), "%s", db_text(rows, 1));
    snprintf(r->region, sizeof(r->region), "%s", db_text(rows, 2));
    snprintf(r->host, sizeof(r->host), "%s", db_text(rows, 3));
    snprintf(r->state, sizeof(r->state), "%s", db_text(rows, 4));
    r->have_gib = db_int(rows, 5);
    r->free_bytes = db_int(rows, 6);
    r->disks_bytes = db_int(rows, 7);
    r->promised_gib = db_int(rows, 8);
    return 0;
}

/* Its disks must not change under a copy: a clone of it, or its move. */
static int check_not_copied(struct store *st, const char *id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT instance_id FROM clones WHERE source_id = ?1 AND state = 'copying'"
                    " LIMIT 1",
                    DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc)
        return sl_fail(err, SL_E_CONFLICT, "being_cloned",
                       "instance '%s' is being cloned: its disks are being copied to '%s'. Wait "
                       "for the copy to finish (suanli show %s), then grow its data disk",
                       id, db_text(rows, 0), db_text(rows, 0));
    return migrations_check_idle(st, id, err);
}

/* A balance covering one day of what the growth adds (the disk is billed
 * by the day), as a start needs one hour of its rate. */
static int check_balance(struct store *st, const struct resize_row *r, int64_t want_gib,
                         struct sl_error *err)
{
    int64_t price = 0, free_gib = 0, extra, balance, short_by;
    char account[LEDGER_ACCOUNT_MAX], need[SL_MONEY_FORMAT_MAX], have[SL_MONEY_FORMAT_MAX],
        missing[SL_MONEY_FORMAT_MAX];
    int rc =
        catalog_price_at(st, CATALOG_DATA_DISK, r->region, sl_time_now(), &price, &free_gib, err);

    if (rc <= 0)
        return rc; /* no price: nothing billed */
    if (disk_resize_extra_per_day(r->have_gib, want_gib, free_gib, price, &extra, err) < 0)
        return -1;
    if (extra == 0)
        return 0;
    if (ledger_balance(st, ledger_user_account(account, r->user_id), &balance, err) < 0)
        return -1;
    if (balance >= extra)
        return 0;
    if (sl_money_sub(extra, balance, &short_by, err) < 0)
        return -1;
    return sl_fail(err, SL_E_CONFLICT, "insufficient_balance",
                   "a %" PRId64 " GiB data disk costs %s more a day than the %" PRId64
                   " GiB one, and growing needs a balance covering one day of that; the balance "
                   "is %s: top up at least %s",
                   want_gib, sl_money_format(extra, need), r->have_gib,
                   sl_money_format(balance, have), sl_money_format(short_by, missing));
}

int instance_resize_disk(struct server *srv, const char *id, int64_t want_gib, bool *grown,
                         struct sl_error *err)
{
    struct store *st = srv->store;
    struct resize_row r;

    *grown = false;
    if (load(st, id, &r, err) < 0)
        return -1;
    int64_t room = nodes_disk_room_gib(srv, r.free_bytes, r.disks_bytes, r.promised_gib);
    /* the size first: a wrong one is the same answer in any state */
    int rc = disk_resize_judge(id, r.host, r.have_gib, want_gib, srv->cfg.max_data_disk_gib,
                               INT64_MAX, err);
    if (rc <= 0)
        return rc;
    bool running = strcmp(r.state, "running") == 0;
    if (!running && strcmp(r.state, "stopped") != 0)
        return sl_fail(err, SL_E_CONFLICT, "invalid_state",
                       "instance '%s' is %s: a data disk grows while its instance is running "
                       "(online) or stopped (at the next start); try again when it is",
                       id, r.state);
    if (check_not_copied(st, id, err) < 0 ||
        disk_resize_judge(id, r.host, r.have_gib, want_gib, srv->cfg.max_data_disk_gib, room, err) <
            0 ||
        check_balance(st, &r, want_gib, err) < 0)
        return -1;

    char message[160];
    snprintf(message, sizeof(message), "data disk grown from %" PRId64 " to %" PRId64 " GiB%s",
             r.have_gib, want_gib, running ? "" : " (at the next start)");
    if (store_exec(st, "UPDATE instances SET data_disk_gib = ?2, updated_at = ?3 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(want_gib), DB_INT(sl_time_now())), err) < 0 ||
        billing_resize_storage(srv, id, err) < 0 ||
        instance_event(st, id, "disk_resize", r.state, "user", message, err) < 0 ||
        instances_node_changed(st, r.node_id, err) < 0)
        return -1;
    log_info("instances: %s: %s", id, message);
    *grown = true;
    return 0;
}

int api_instances_disk(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t gib = 0;
    bool grown;
    const struct sl_json_field fields[] = {
        { "data_disk_gib", SL_JSON_INT, .required = true, .min = -1000000000, .max = 1000000000,
          .out = &gib },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        instance_resize_disk(req->srv, req->instance.id, gib, &grown, err) < 0)
        return -1;
    json_t *j = instance_json(req->srv, req->instance.id, req->caller.user_id, err);
    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}
