/* server/billing-storage.c and the renter-wide meters of billing-meter.c:
 * file storage per renter and region billed on its sampled use, saved
 * images per renter billed on their layers' bytes, both per GiB-day over a
 * free size, counted in whole MiB (docs/design/billing.md, "Storage
 * meters"). The expected charges are computed here from the samples alone:
 * each interval between two samples at the lower of them, nothing before
 * the first sample that shows use over the free size, nothing past the last
 * sample while samples come. Also: migration 14 rebuilds `meters` on a
 * database of schema 13 keeping every row, its sequence, indexes and
 * triggers. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/json.h"
#include "../../lib/timefmt.h"
#include "../../lib/xalloc.h"
#include "../../server/billing.h"
#include "../../server/catalog.h"
#include "../../server/ledger.h"
#include "../../server/storage.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>

#define DAY 86400
#define MIB (1024LL * 1024)
#define GIB (1024LL * MIB)

static int64_t fake_now;

static int64_t clock_now(void)
{
    return fake_now;
}

static void must(int rc, const struct sl_error *err, const char *what)
{
    if (rc < 0)
        test_fail(__FILE__, __LINE__, "%s: %s", what, err->message);
}

static int64_t one_int(struct store *st, const char *sql, const struct db_arg *args)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t v = 0;

    if (store_get_int(st, sql, args, &v, &err) != 1)
        test_fail(__FILE__, __LINE__, "%s: %s", sql, err.message);
    return v;
}

/* MiB over the free size, rounded down: a byte over is not a MiB over. */
TEST(storage_quantity_is_whole_mib_over_the_free_size)
{
    CHECK_EQ_INT(billing_storage_mib_over(0, 20), 0);
    CHECK_EQ_INT(billing_storage_mib_over(-5, 20), 0);
    CHECK_EQ_INT(billing_storage_mib_over(20 * GIB, 20), 0);
    CHECK_EQ_INT(billing_storage_mib_over(20 * GIB + 1, 20), 0);
    CHECK_EQ_INT(billing_storage_mib_over(20 * GIB + MIB - 1, 20), 0);
    CHECK_EQ_INT(billing_storage_mib_over(20 * GIB + MIB, 20), 1);
    CHECK_EQ_INT(billing_storage_mib_over(21 * GIB + 3 * MIB + 17, 20), 1027);
    CHECK_EQ_INT(billing_storage_mib_over(5 * GIB + 1, 0), 5 * 1024);
    /* a free size too large to hold in bytes bills nothing, never wraps */
    CHECK_EQ_INT(billing_storage_mib_over(INT64_MAX, INT64_MAX / 2), 0);
    CHECK_EQ_INT(billing_storage_mib_over(INT64_MAX, 0), INT64_MAX / MIB);
}

static void setup(struct store *st)
{
    struct sl_error err = SL_ERROR_INIT;
    char account[LEDGER_ACCOUNT_MAX];

    must(catalog_region_create(st, "store-1", "Storage", false, &err), &err, "region");
    must(store_exec(st,
                    "INSERT INTO users (id, email, name, password_hash, created_at)"
                    " VALUES ('u-st', 'st@example.com', 's', 'x', ?1)",
                    DB_ARGS(DB_INT(fake_now)), &err),
         &err, "user");
    must(ledger_open_account(st, ledger_user_account(account, "u-st"), "u-st", &err), &err,
         "account");
    must(ledger_open_account(st, BILLING_REVENUE_ACCOUNT, NULL, &err), &err, "revenue");
    must(store_exec(st,
                    "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                    " ssh_port_min, ssh_port_max, created_at, last_heartbeat)"
                    " VALUES ('n-st', 'h', '127.0.0.1', 'store-1', 'hash', 30000, 30099, ?1,"
                    " ?1)",
                    DB_ARGS(DB_INT(fake_now)), &err),
         &err, "node");
}

/* A host reports the renter's directory holding `used` bytes (the path a
 * heartbeat takes: storage_apply_report), in one transaction. */
static void sample(struct store *st, int64_t used)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *report =
        json_pack("[{s:I, s:I, s:I}]", "number", (json_int_t)1, "used_bytes", (json_int_t)used,
                  "size_bytes", (json_int_t)(100 * GIB));

    must(store_begin(st, &err), &err, "begin");
    must(storage_apply_report(st, "n-st", report, &err), &err, "report");
    must(store_commit(st, &err), &err, "commit");
}

static void settle(struct server *srv)
{
    struct sl_error err = SL_ERROR_INIT;
    struct billing_stats stats = { 0 };

    must(billing_settle(srv, &stats, &err), &err, "billing_settle");
}

static void books_check(struct store *st, int64_t want_total)
{
    struct sl_error err = SL_ERROR_INIT;
    char account[LEDGER_ACCOUNT_MAX];
    struct billing_check c;
    int64_t balance = 0;

    must(billing_check(st, &c, &err), &err, "billing_check");
    CHECK_EQ_INT(
        c.bad_charged + c.bad_sums + c.bad_positions + c.bad_keys + c.bad_txns + c.bad_renters, 0);
    CHECK_EQ_INT(c.charges_total, want_total);
    CHECK_EQ_INT(c.ledger_charges, want_total);
    must(ledger_balance(st, ledger_user_account(account, "u-st"), &balance, &err), &err, "balance");
    CHECK_EQ_INT(balance, -want_total);
}

/* floor(q MiB * price per GiB-day * seconds / (1024 MiB * 86400 s)) */
static int64_t cost(int64_t mib, int64_t price, int64_t seconds)
{
    return (int64_t)((__int128)mib * price * seconds / (1024 * DAY));
}

/* The use rises, holds, falls and vanishes; the meter follows at the
 * samples' seconds, a fall dated back to the sample before it, and the
 * books hold at every step. */
TEST(file_storage_bills_each_interval_at_the_lower_sample)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server srv = { .store = test_store() };
    struct store *st = srv.store;
    const int64_t price = 5003; /* micros per GiB-day: every floor has a remainder */

    sl_time_set_clock(clock_now);
    fake_now = 1767225600 + 5 * 3600;
    setup(st);
    must(catalog_price_set(st, CATALOG_FILE_STORAGE, "store-1", price, 1, false, NULL, &err), &err,
         "price");
    must(storage_dir_ensure(st, "u-st", "store-1", &err), &err, "dir");
    if (!test_ok())
        return;

    /* within the free size: no meter */
    sample(st, GIB / 2);
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM meters", NULL), 0);

    /* 3 GiB + 5 MiB + 1 byte: 2053 MiB over, from this second */
    fake_now += 100;
    int64_t t1 = fake_now;
    sample(st, 3 * GIB + 5 * MIB + 1);
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM meters WHERE ended_at IS NULL", NULL), 1);
    CHECK_EQ_INT(one_int(st, "SELECT quantity FROM meters", NULL), 2053);
    CHECK_EQ_INT(one_int(st, "SELECT started_at FROM meters", NULL), t1);
    CHECK_EQ_INT(one_int(st, "SELECT period_s FROM meters", NULL), 1024 * DAY);
    CHECK_EQ_INT(one_int(st,
                         "SELECT COUNT(*) FROM meters WHERE instance_id = '' AND node_id = ''"
                         " AND region_id = 'store-1' AND item = 'file_storage'",
                         NULL),
                 1);

    /* the same use again: the meter goes on; settled to the last sample,
     * not to now */
    fake_now += 200;
    int64_t t2 = fake_now;
    sample(st, 3 * GIB + 5 * MIB + 100);
    fake_now += 40;
    settle(&srv);
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM meters", NULL), 1);
    CHECK_EQ_INT(one_int(st, "SELECT billed_until FROM meters", NULL), t2);
    books_check(st, cost(2053, price, t2 - t1));

    /* a rise: billed from its sample, the old quantity up to it */
    fake_now += 60;
    int64_t t3 = fake_now;
    sample(st, 11 * GIB);
    CHECK_EQ_INT(one_int(st, "SELECT ended_at FROM meters WHERE seq = 1", NULL), t3);
    CHECK_EQ_INT(one_int(st, "SELECT quantity FROM meters WHERE ended_at IS NULL", NULL),
                 10 * 1024);
    CHECK_EQ_INT(one_int(st, "SELECT started_at FROM meters WHERE ended_at IS NULL", NULL), t3);

    /* a fall: the interval since the sample before is billed at the new,
     * lower use (the 10 GiB meter ends at t3 and charged nothing) */
    fake_now += 500;
    int64_t t4 = fake_now;
    sample(st, 2 * GIB);
    CHECK_EQ_INT(one_int(st, "SELECT ended_at FROM meters WHERE seq = 2", NULL), t3);
    CHECK_EQ_INT(one_int(st, "SELECT charged_micros FROM meters WHERE seq = 2", NULL), 0);
    CHECK_EQ_INT(one_int(st, "SELECT quantity FROM meters WHERE ended_at IS NULL", NULL), 1024);
    CHECK_EQ_INT(one_int(st, "SELECT started_at FROM meters WHERE ended_at IS NULL", NULL), t3);
    fake_now += 10;
    settle(&srv);
    books_check(st, cost(2053, price, t3 - t1) + cost(1024, price, t4 - t3));

    /* no more samples (nothing mounts it): after BILLING_SAMPLE_LIVE_S the
     * meter runs to now at the last use, across a midnight */
    fake_now += BILLING_SAMPLE_LIVE_S + DAY;
    settle(&srv);
    CHECK_EQ_INT(one_int(st, "SELECT billed_until FROM meters WHERE ended_at IS NULL", NULL),
                 fake_now);
    int64_t t5 = fake_now;
    /* the rows: the first meter's (ended), the running one's whole day */
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM charges WHERE item = 'file_storage'", NULL), 2);
    CHECK_EQ_INT(one_int(st, "SELECT settled_until FROM meters WHERE ended_at IS NULL", NULL),
                 t5 / DAY * DAY);
    CHECK_EQ_INT(one_int(st,
                         "SELECT COUNT(*) FROM charges WHERE period_from / 86400 !="
                         " (period_to - 1) / 86400",
                         NULL),
                 0);
    books_check(st, cost(2053, price, t3 - t1) + cost(1024, price, t5 - t3));

    /* the renter deletes everything: the meter ends (at the sample before,
     * or where it was settled, whichever is later) and none opens */
    fake_now += 30;
    sample(st, 0);
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM meters WHERE ended_at IS NULL", NULL), 0);
    CHECK_EQ_INT(one_int(st, "SELECT MAX(ended_at) FROM meters", NULL), t5);
    settle(&srv);
    books_check(st, cost(2053, price, t3 - t1) + cost(1024, price, t5 - t3));
    /* keys: settle:USER:METER:N, the renter's own (no host bills them) */
    CHECK(one_int(st, "SELECT COUNT(*) FROM ledger_txns WHERE idempotency_key LIKE 'settle:u-st:%'",
                  NULL) >= 3);
    CHECK_EQ_INT(one_int(st,
                         "SELECT COUNT(*) FROM ledger_txns WHERE idempotency_key LIKE 'settle:%'"
                         " AND idempotency_key NOT LIKE 'settle:u-st:%'",
                         NULL),
                 0);
    sl_time_set_clock(NULL);
}

/* Saved images: the sum of the renter's stored layers over the free size,
 * from the second a layer is stored or an image deleted; images being
 * saved, failed ones and other renters' are not counted. */
TEST(image_storage_follows_the_saved_layers)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server srv = { .store = test_store() };
    struct store *st = srv.store;
    const int64_t price = 7001;

    sl_time_set_clock(clock_now);
    fake_now = 1767225600 + 7 * 3600;
    setup(st);
    must(catalog_price_set(st, CATALOG_IMAGE_STORAGE, "", price, 2, false, NULL, &err), &err,
         "price");
    static const struct {
        const char *name, *owner, *parent, *save_state;
        int64_t bytes;
    } images[] = {
        { "mine-1", "u-st", "debian-12", "", 2 * GIB + 10 * MIB },
        { "mine-2", "u-st", "mine-1", "", 700 * MIB + 3 },
        { "saving", "u-st", "debian-12", "saving", 50 * GIB },
        { "failed", "u-st", "debian-12", "failed", 50 * GIB },
        { "theirs", "u-other", "debian-12", "", 50 * GIB },
        { "admins", "u-st", "", "", 50 * GIB }, /* an import, not a save */
    };
    for (size_t i = 0; i < ARRAY_SIZE(images); i++)
        must(store_exec(st,
                        "INSERT INTO images (name, kind, recipe, region_id, description,"
                        " created_by, created_at, parent, save_state, layer_bytes)"
                        " VALUES (?1, 'private', 'layer:x', 'store-1', '', ?2, ?3, ?4, ?5, ?6)",
                        DB_ARGS(DB_TEXT(images[i].name), DB_TEXT(images[i].owner), DB_INT(fake_now),
                                DB_TEXT(images[i].parent), DB_TEXT(images[i].save_state),
                                DB_INT(images[i].bytes)),
                        &err),
             &err, "image");
    if (!test_ok())
        return;
    int64_t t0 = fake_now;
    must(billing_image_storage_update(st, "u-st", &err), &err, "update");
    CHECK_EQ_INT(one_int(st, "SELECT quantity FROM meters WHERE item = 'image_storage'", NULL),
                 710);
    /* again, nothing changed: the same meter */
    fake_now += 50;
    must(billing_image_storage_update(st, "u-st", &err), &err, "update again");
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM meters", NULL), 1);
    /* no host limits it: billed to now */
    fake_now += 3000;
    settle(&srv);
    CHECK_EQ_INT(one_int(st, "SELECT billed_until FROM meters", NULL), fake_now);
    /* an image deleted: the meter ends this second, one for the 10 MiB
     * left over the free size opens at it */
    must(store_exec(st, "DELETE FROM images WHERE name = 'mine-2'", NULL, &err), &err, "delete");
    must(billing_image_storage_update(st, "u-st", &err), &err, "update after delete");
    int64_t t1 = fake_now;
    CHECK_EQ_INT(one_int(st, "SELECT ended_at FROM meters WHERE seq = 1", NULL), t1);
    CHECK_EQ_INT(one_int(st, "SELECT quantity FROM meters WHERE ended_at IS NULL", NULL), 10);
    CHECK_EQ_INT(one_int(st, "SELECT started_at FROM meters WHERE ended_at IS NULL", NULL), t1);
    books_check(st, cost(710, price, t1 - t0));
    /* within the free size: no meter at all */
    must(store_exec(st, "UPDATE images SET layer_bytes = ?1 WHERE name = 'mine-1'",
                    DB_ARGS(DB_INT(GIB)), &err),
         &err, "shrink");
    fake_now += 100;
    must(billing_image_storage_update(st, "u-st", &err), &err, "update after shrink");
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM meters WHERE ended_at IS NULL", NULL), 0);
    books_check(st, cost(710, price, t1 - t0) + cost(10, price, 100));
    /* the renter's spend per hour counts open renter-wide meters */
    must(store_exec(st, "UPDATE images SET layer_bytes = ?1 WHERE name = 'mine-1'",
                    DB_ARGS(DB_INT(3 * GIB)), &err),
         &err, "grow");
    must(billing_image_storage_update(st, "u-st", &err), &err, "update after grow");
    int64_t spend = 0;
    must(billing_spend_per_hour(st, "u-st", &spend, &err), &err, "spend");
    CHECK_EQ_INT(spend, (int64_t)((__int128)1024 * price * 3600 / (1024 * DAY)));
    /* one open renter-wide meter per renter, item and region */
    CHECK(store_exec(st,
                     "INSERT INTO meters (user_id, item, quantity, unit_price_micros,"
                     " amount_micros, period_s, started_at, settled_until)"
                     " VALUES ('u-st', 'image_storage', 1, 1, 1, 1, ?1, ?1)",
                     DB_ARGS(DB_INT(fake_now)), &err) < 0);
    sl_error_clear(&err);
    /* an instance's item needs an instance; a renter-wide one none */
    CHECK(store_exec(st,
                     "INSERT INTO meters (user_id, item, quantity, unit_price_micros,"
                     " amount_micros, period_s, started_at, settled_until)"
                     " VALUES ('u-st', 'gpu', 1, 1, 1, 1, ?1, ?1)",
                     DB_ARGS(DB_INT(fake_now)), &err) < 0);
    sl_error_clear(&err);
    sl_time_set_clock(NULL);
}

static void raw_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;

    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        test_fail(__FILE__, __LINE__, "%.60s: %s", sql, msg ? msg : "?");
    sqlite3_free(msg);
}

extern const char *const sqlite_migrations[];

/* A database of schema 13 with meters, charges and a sequence past the
 * last meter (one was rolled back) upgrades: every row and number kept,
 * the next meter numbered after the old sequence, the indexes and the
 * triggers there, and the books still check. */
TEST(migration_14_keeps_every_meter)
{
    if (test_store_is_pg())
        return; /* the rebuild is SQLite's own dialect */
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *path = xasprintf("%s/upgrade.db", test_tmpdir());
    sqlite3 *db = NULL;

    if (!CHECK(sqlite3_open(path, &db) == SQLITE_OK))
        return;
    raw_exec(db, "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                 " applied_at INTEGER NOT NULL)");
    for (int v = 1; v <= 13; v++) {
        raw_exec(db, sqlite_migrations[v - 1]);
        char *sql = sqlite3_mprintf("INSERT INTO schema_migrations VALUES (%d, 1)", v);
        raw_exec(db, sql);
        sqlite3_free(sql);
    }
    raw_exec(db, "INSERT INTO users (id, email, name, password_hash, created_at)"
                 " VALUES ('u-up', 'up@example.com', 'u', 'x', 1);"
                 "INSERT INTO accounts (id, user_id, balance_micros, created_at)"
                 " VALUES ('user:u-up', 'u-up', 0, 1);"
                 "INSERT INTO meters (seq, instance_id, user_id, node_id, item, quantity,"
                 " unit_price_micros, amount_micros, period_s, started_at, settled_until)"
                 " VALUES (1, 'i-up', 'u-up', 'n-up', 'gpu', 2, 1000, 2000, 3600, 100, 100),"
                 " (2, 'i-up', 'u-up', 'n-up', 'data_disk', 10, 7000, 70000, 86400, 100, 100);"
                 "INSERT INTO meters (seq, instance_id, user_id, node_id, item, quantity,"
                 " unit_price_micros, amount_micros, period_s, started_at, ended_at,"
                 " settled_until, charged_micros, settlements)"
                 " VALUES (5, 'i-up', 'u-up', 'n-up', 'nogpu', 1, 3600, 3600, 3600, 0, 50, 50,"
                 " 50, 1);"
                 "INSERT INTO charges (txn_id, user_id, instance_id, item, meter_seq,"
                 " settlement, period_from, period_to, amount_micros, created_at)"
                 " VALUES ('txn-up', 'u-up', 'i-up', 'nogpu', 5, 1, 0, 50, 50, 50);"
                 "INSERT INTO ledger_txns (id, kind, memo, idempotency_key, created_at)"
                 " VALUES ('txn-up', 'charge', 'usage', 'settle:i-up:5:1', 50);"
                 "INSERT INTO ledger_entries (txn_id, account_id, amount_micros,"
                 " balance_after_micros, created_at)"
                 " VALUES ('txn-up', 'user:u-up', -50, -50, 50),"
                 " ('txn-up', 'system:revenue', 50, 50, 50);"
                 "UPDATE accounts SET balance_micros = -50 WHERE id = 'user:u-up';"
                 "UPDATE accounts SET balance_micros = 50 WHERE id = 'system:revenue';"
                 "UPDATE sqlite_sequence SET seq = 9 WHERE name = 'meters';");
    sqlite3_close(db);
    if (!test_ok())
        return;

    cleanup_free char *uri = xasprintf("sqlite:%s", path);
    struct store *st = store_open(uri, &err);
    if (!CHECK(st != NULL))
        return;
    must(store_migrate(st, &err), &err, "migrate");
    if (!test_ok())
        return;
    /* 14 and any later ones */
    CHECK(one_int(st, "SELECT MAX(version) FROM schema_migrations", NULL) >= 14);
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM meters", NULL), 3);
    CHECK_EQ_INT(one_int(st, "SELECT SUM(seq) FROM meters", NULL), 8);
    CHECK_EQ_INT(one_int(st,
                         "SELECT COUNT(*) FROM meters WHERE seq = 5 AND item = 'nogpu'"
                         " AND ended_at = 50 AND charged_micros = 50 AND settlements = 1"
                         " AND region_id = '' AND instance_id = 'i-up' AND node_id = 'n-up'",
                         NULL),
                 1);
    /* 18: billed where the rows reach, its own moves numbered past the
     * settlements (the key settle:i-up:5:1 is never made again) */
    CHECK_EQ_INT(one_int(st,
                         "SELECT COUNT(*) FROM meters WHERE billed_until = settled_until"
                         " AND moves = settlements",
                         NULL),
                 3);
    static const char *const names[] = {
        "meters_instance",    "meters_node",   "meters_user",           "meters_unsettled",
        "meters_renter_open", "meters_renter", "instance_rev_meters_i", "instance_rev_meters_u",
    };
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        if (!CHECK_EQ_INT(one_int(st,
                                  "SELECT COUNT(*) FROM sqlite_master WHERE name = ?1"
                                  " AND tbl_name = 'meters'",
                                  DB_ARGS(DB_TEXT(names[i]))),
                          1))
            test_fail(__FILE__, __LINE__, "no %s after the rebuild", names[i]);
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'meters_new'", NULL),
                 0);
    /* the sequence goes on past the rolled-back 9, not from the last row */
    must(store_exec(st,
                    "INSERT INTO meters (user_id, item, quantity, unit_price_micros,"
                    " amount_micros, period_s, started_at, settled_until, billed_until)"
                    " VALUES ('u-up', 'image_storage', 1, 1, 1, 1, 1, 1, 1)",
                    NULL, &err),
         &err, "new meter");
    CHECK_EQ_INT(one_int(st, "SELECT MAX(seq) FROM meters", NULL), 10);
    struct billing_check c;
    must(billing_check(st, &c, &err), &err, "billing_check");
    CHECK_EQ_INT(c.meters, 4);
    CHECK_EQ_INT(
        c.bad_charged + c.bad_sums + c.bad_positions + c.bad_keys + c.bad_txns + c.bad_renters, 0);
    CHECK_EQ_INT(c.charges_total, 50);
    CHECK_EQ_INT(c.ledger_charges, 50);
    store_close(st);
}
