/* server/billing-meter.c's settlement against the formula billing.h
 * promises: however often and whenever a meter is settled, it has charged
 * floor(amount * (settled_until - started_at) / period) to the micro, in
 * settlements numbered 1..n that never cross a UTC midnight, the renter's
 * ledger account has paid exactly that, and nothing is charged past the
 * host's last report. The expected values are computed here, in 128 bits,
 * from the meter's row alone. A settlement that charged each interval's own
 * floor (the drift this design avoids) loses up to a micro per settlement
 * and fails the first check. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/timefmt.h"
#include "../../server/billing.h"
#include "../../server/catalog.h"
#include "../../server/ledger.h"

#include <inttypes.h>
#include <stdio.h>

#define DAY      86400
#define N_METERS 6

static int64_t fake_now;

static int64_t clock_now(void)
{
    return fake_now;
}

struct expect {
    int64_t seq, amount, period, started, ended, billed;
};

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

static void heartbeat(struct store *st, int64_t at)
{
    struct sl_error err = SL_ERROR_INIT;

    must(store_exec(st, "UPDATE nodes SET last_heartbeat = ?1 WHERE id = 'n-meter'",
                    DB_ARGS(DB_INT(at)), &err),
         &err, "heartbeat");
}

/* The renter u-meter and its account. */
static void add_renter(struct store *st, int64_t at)
{
    struct sl_error err = SL_ERROR_INIT;
    char account[LEDGER_ACCOUNT_MAX];

    must(store_exec(st,
                    "INSERT INTO users (id, email, name, password_hash, created_at)"
                    " VALUES ('u-meter', 'meter@example.com', 'm', 'x', ?1)",
                    DB_ARGS(DB_INT(at)), &err),
         &err, "user");
    must(ledger_open_account(st, ledger_user_account(account, "u-meter"), "u-meter", &err), &err,
         "account");
}

static void settle(struct server *srv)
{
    struct sl_error err = SL_ERROR_INIT;
    struct billing_stats stats = { 0 };

    must(billing_settle(srv, &stats, &err), &err, "billing_settle");
}

static int64_t formula(const struct expect *e, int64_t t)
{
    return (int64_t)((__int128)e->amount * (t - e->started) / e->period);
}

/* Every meter's row, charges and the renter's balance against the formula:
 * billed to e->billed (its host's mark while it follows it), its charges
 * rows to the last whole UTC day billed (or its end, once billed there). */
static void check_meters(struct store *st, const struct expect *e, size_t n)
{
    char account[LEDGER_ACCOUNT_MAX];
    struct sl_error err = SL_ERROR_INIT;
    int64_t all = 0, balance = 0;

    for (size_t i = 0; i < n && test_ok(); i++) {
        const struct db_arg *seq = DB_ARGS(DB_INT(e[i].seq));
        int64_t billed = one_int(st,
                                 "SELECT CASE WHEN m.ended_at IS NULL AND m.node_id != ''"
                                 " AND k.billed_until > m.billed_until THEN k.billed_until"
                                 " ELSE m.billed_until END FROM meters m LEFT JOIN billing_marks"
                                 " k ON k.node_id = m.node_id WHERE m.seq = ?1",
                                 seq);
        int64_t settled = one_int(st, "SELECT settled_until FROM meters WHERE seq = ?1", seq);
        int64_t charged = one_int(st, "SELECT charged_micros FROM meters WHERE seq = ?1", seq);
        int64_t whole = e[i].billed / DAY * DAY;
        int64_t closed = e[i].ended >= 0 && e[i].billed >= e[i].ended ? e[i].ended
                         : whole > e[i].started                       ? whole
                                                                      : e[i].started;
        if (!CHECK_EQ_INT(billed, e[i].billed) || !CHECK_EQ_INT(settled, closed) ||
            !CHECK_EQ_INT(charged, formula(&e[i], closed))) {
            test_fail(__FILE__, __LINE__, "meter %zu: %" PRId64 " per %" PRId64 " s from %" PRId64,
                      i, e[i].amount, e[i].period, e[i].started);
            return;
        }
        CHECK_EQ_INT(one_int(st,
                             "SELECT COALESCE(SUM(amount_micros), 0) FROM charges"
                             " WHERE meter_seq = ?1",
                             seq),
                     charged);
        /* numbered 1..n, one per row, none across a midnight, none empty */
        int64_t count = one_int(st, "SELECT COUNT(*) FROM charges WHERE meter_seq = ?1", seq);
        CHECK_EQ_INT(one_int(st, "SELECT settlements FROM meters WHERE seq = ?1", seq), count);
        CHECK_EQ_INT(one_int(st,
                             "SELECT COALESCE(MAX(settlement), 0) FROM charges"
                             " WHERE meter_seq = ?1",
                             seq),
                     count);
        CHECK_EQ_INT(one_int(st,
                             "SELECT COUNT(*) FROM charges WHERE meter_seq = ?1 AND"
                             " (period_from / 86400 != (period_to - 1) / 86400"
                             " OR period_to <= period_from OR amount_micros <= 0)",
                             seq),
                     0);
        all += formula(&e[i], billed);
    }
    must(ledger_balance(st, ledger_user_account(account, "u-meter"), &balance, &err), &err,
         "balance");
    CHECK_EQ_INT(balance, -all);
    /* the mark of the ended meters not settled to their end (the index the
     * pass finds them by) says exactly that */
    CHECK_EQ_INT(one_int(st,
                         "SELECT COUNT(*) FROM meters WHERE unsettled != CASE WHEN ended_at IS NOT"
                         " NULL AND settled_until < ended_at THEN 1 ELSE 0 END",
                         NULL),
                 0);
    struct billing_check c;
    must(billing_check(st, &c, &err), &err, "billing_check");
    CHECK_EQ_INT(
        c.bad_charged + c.bad_sums + c.bad_positions + c.bad_keys + c.bad_txns + c.bad_renters, 0);
    CHECK_EQ_INT(c.charges_total, all);
    CHECK_EQ_INT(c.ledger_charges, all);
}

TEST(settlement_is_the_formula_whenever_it_runs)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server srv = { .store = test_store() };
    struct store *st = srv.store;
    /* prices that do not divide their period: every floor has a remainder */
    static const struct {
        const char *item;
        int64_t amount, period;
    } meters[N_METERS] = {
        { "gpu", 1980001, 3600 },        { "gpu", 7, 3600 },
        { "gpu", 8 * 12880003LL, 3600 }, { "nogpu", 100001, 3600 },
        { "data_disk", 13 * 7001, DAY }, { "gpu", 999999999999LL, 3600 },
    };
    struct expect e[N_METERS];

    sl_time_set_clock(clock_now);
    fake_now = 1767225600 + test_rand_range(0, DAY - 1); /* 2026-01-01 */
    must(catalog_region_create(st, "meter-1", "Meters", false, &err), &err, "region");
    add_renter(st, fake_now);
    must(store_exec(st,
                    "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                    " ssh_port_min, ssh_port_max, created_at, last_heartbeat)"
                    " VALUES ('n-meter', 'h', '127.0.0.1', 'meter-1', 'hash', 30000, 30099, ?1,"
                    " ?1)",
                    DB_ARGS(DB_INT(fake_now)), &err),
         &err, "node");
    for (int i = 0; i < N_METERS; i++) {
        /* meters start at different times, some before the first pass */
        int64_t start = fake_now - test_rand_range(0, 3) * test_rand_range(1, 5000);
        must(store_exec(st,
                        "INSERT INTO meters (instance_id, user_id, node_id, item, quantity,"
                        " unit_price_micros, amount_micros, period_s, started_at, settled_until,"
                        " billed_until) VALUES (?1, 'u-meter', 'n-meter', ?2, 1, ?3, ?3, ?4, ?5,"
                        " ?5, ?5)",
                        DB_ARGS(DB_TEXT("i-meter"), DB_TEXT(meters[i].item),
                                DB_INT(meters[i].amount), DB_INT(meters[i].period), DB_INT(start)),
                        &err),
             &err, "meter");
        e[i] = (struct expect){ .seq = i + 1,
                                .amount = meters[i].amount,
                                .period = meters[i].period,
                                .started = start,
                                .ended = -1,
                                .billed = start };
    }
    if (!test_ok())
        return;

    int64_t heard = fake_now;
    for (int round = 0; round < 400 && test_ok(); round++) {
        /* short steps (many settlements, the drift's worst case), long
         * ones across midnights, and passes with no time gone by */
        int64_t step = round % 3 == 0   ? test_rand_range(1, 7)
                       : round % 3 == 1 ? test_rand_range(1, 5000)
                                        : test_rand_range(0, 2) * test_rand_range(1, 2 * DAY);
        fake_now += step;
        /* the host mostly reports at once; sometimes it is behind */
        if (test_rand_range(0, 4) > 0)
            heard = fake_now - test_rand_range(0, 1) * test_rand_range(0, step);
        heartbeat(st, heard);
        /* a meter ends now and then; it is settled to its end only as far
         * as the host has reported */
        if (round % 97 == 96) {
            size_t k = (size_t)test_rand_range(0, N_METERS - 1);
            if (e[k].ended < 0) {
                e[k].ended = fake_now - test_rand_range(0, step);
                if (e[k].ended < e[k].started)
                    e[k].ended = e[k].started;
                /* as billing-meter.c ends one: billed alone from where its
                 * host's mark has billed it */
                must(store_exec(st,
                                "UPDATE meters SET ended_at = ?2, billed_until = CASE WHEN"
                                " (SELECT billed_until FROM billing_marks WHERE node_id ="
                                " meters.node_id) > billed_until THEN (SELECT billed_until FROM"
                                " billing_marks WHERE node_id = meters.node_id) ELSE billed_until"
                                " END WHERE seq = ?1",
                                DB_ARGS(DB_INT(e[k].seq), DB_INT(e[k].ended)), &err),
                     &err, "end meter");
            }
        }
        settle(&srv);
        for (int i = 0; i < N_METERS; i++) {
            int64_t to = heard < fake_now ? heard : fake_now;
            if (e[i].ended >= 0 && to > e[i].ended)
                to = e[i].ended;
            if (to > e[i].billed)
                e[i].billed = to;
        }
        check_meters(st, e, N_METERS);
    }
    sl_time_set_clock(NULL);
}

/* The rates and the check add up meters in C (lib/money), not in SQL: the
 * sum of each meter's own floor per hour, and a charged amount one micro off
 * the formula is found. */
TEST(rates_and_check_use_the_formula)
{
    struct sl_error err = SL_ERROR_INIT;
    struct store *st = test_store();
    int64_t now = 1767225600, spend = -1, charged = -1, rate = -1;

    must(catalog_region_create(st, "meter-1", "Meters", false, &err), &err, "region");
    must(store_exec(st,
                    "INSERT INTO users (id, email, name, password_hash, created_at)"
                    " VALUES ('u-meter', 'meter@example.com', 'm', 'x', ?1)",
                    DB_ARGS(DB_INT(now)), &err),
         &err, "user");
    must(store_exec(st,
                    "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                    " ssh_port_min, ssh_port_max, created_at, last_heartbeat)"
                    " VALUES ('n-meter', 'h', '127.0.0.1', 'meter-1', 'hash', 30000, 30099, ?1,"
                    " ?1)",
                    DB_ARGS(DB_INT(now)), &err),
         &err, "node");
    /* 2.5 per hour; 0.240001 per day (10000.04 per hour: floored); one
     * ended, which costs nothing per hour any more */
    static const struct {
        int64_t amount, period, charged;
        bool ended;
    } m[] = { { 2500000, 3600, 694444, false },
              { 240001, DAY, 2777, false },
              { 7000000, 3600, 1944444, true } };
    for (size_t i = 0; i < 3; i++)
        must(store_exec(st,
                        "INSERT INTO meters (instance_id, user_id, node_id, item, quantity,"
                        " unit_price_micros, amount_micros, period_s, started_at, settled_until,"
                        " charged_micros, ended_at, billed_until)"
                        " VALUES ('i-meter', 'u-meter', 'n-meter', 'gpu', 1, ?1, ?1, ?2, ?3,"
                        " ?3 + 1000, ?4, CASE WHEN ?5 = 1 THEN ?3 + 1000 END, ?3 + 1000)",
                        DB_ARGS(DB_INT(m[i].amount), DB_INT(m[i].period), DB_INT(now),
                                DB_INT(m[i].charged), DB_INT(m[i].ended)),
                        &err),
             &err, "meter");
    if (!test_ok())
        return;
    must(billing_spend_per_hour(st, "u-meter", &spend, &err), &err, "spend");
    CHECK_EQ_INT(spend, 2500000 + 10000);
    must(billing_instance_charged(st, "i-meter", &charged, &rate, &err), &err, "charged");
    CHECK_EQ_INT(charged, 694444 + 2777 + 1944444);
    CHECK_EQ_INT(rate, 2500000 + 10000);

    struct billing_check c;
    must(billing_check(st, &c, &err), &err, "billing_check");
    CHECK_EQ_INT(c.meters, 3);
    CHECK_EQ_INT(c.bad_charged, 0);
    must(store_exec(st, "UPDATE meters SET charged_micros = charged_micros + 1 WHERE seq = 2",
                    DB_NO_ARGS, &err),
         &err, "tamper");
    must(billing_check(st, &c, &err), &err, "billing_check");
    CHECK_EQ_INT(c.bad_charged, 1);
}

struct piece_seen {
    int64_t n, meter_seq, from, to;
};

static int see_piece(const struct billing_piece *p, void *ctx, struct sl_error *err)
{
    struct piece_seen *seen = ctx;

    (void)err;
    seen->n++;
    seen->meter_seq = p->meter_seq;
    seen->from = p->from;
    seen->to = p->to;
    return 0;
}

/* A data disk resize (billing_resize_storage) ends the meter at the old
 * size at the resize second, settled to it, and starts one at the new size
 * at that same second: nothing is charged at the new size before it,
 * nothing at the old after it, and the books check. */
TEST(a_resize_splits_the_data_disk_meter_at_its_second)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server srv = { .store = test_store() };
    struct store *st = srv.store;
    char model[SL_ID_MAX];

    sl_time_set_clock(clock_now);
    fake_now = 1767225600 + 3 * 3600; /* 2026-01-01 03:00 */
    int64_t t0 = fake_now;
    must(catalog_region_create(st, "meter-1", "Meters", false, &err), &err, "region");
    must(catalog_gpu_model_create(st, "Meter GPU", 24576, 8, 65536, 1000000, false, NULL, model,
                                  &err),
         &err, "model");
    must(catalog_price_set(st, CATALOG_DATA_DISK, "meter-1", 7001, 50, false, NULL, &err), &err,
         "price");
    add_renter(st, fake_now);
    must(store_exec(st,
                    "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                    " ssh_port_min, ssh_port_max, created_at, last_heartbeat)"
                    " VALUES ('n-meter', 'h', '127.0.0.1', 'meter-1', 'hash', 30000, 30099, ?1,"
                    " ?1)",
                    DB_ARGS(DB_INT(fake_now)), &err),
         &err, "node");
    must(store_exec(st,
                    "INSERT INTO instances (id, user_id, name, region_id, node_id, gpu_model_id,"
                    " gpus, image, system_disk_gib, data_disk_gib, ssh_port, root_password,"
                    " state, desired, created_at, updated_at) VALUES ('i-meter', 'u-meter',"
                    " 'm', 'meter-1', 'n-meter', ?1, 1, 'debian-12', 30, 60, 30000, 'pw',"
                    " 'running', 'running', ?2, ?2)",
                    DB_ARGS(DB_TEXT(model), DB_INT(fake_now)), &err),
         &err, "instance");
    must(billing_open_storage(&srv, "i-meter", &err), &err, "open");
    if (!test_ok())
        return;

    /* 1000 s at 10 GiB over the free 50, then the disk grows to 260 */
    fake_now += 1000;
    heartbeat(st, fake_now);
    int64_t t1 = fake_now;
    must(
        store_exec(st, "UPDATE instances SET data_disk_gib = 260 WHERE id = 'i-meter'", NULL, &err),
        &err, "grow");
    must(billing_resize_storage(&srv, "i-meter", &err), &err, "resize");
    if (!test_ok())
        return;
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM meters WHERE item = 'data_disk'", NULL), 2);
    CHECK_EQ_INT(one_int(st, "SELECT quantity FROM meters WHERE seq = 1", NULL), 10);
    CHECK_EQ_INT(one_int(st, "SELECT ended_at FROM meters WHERE seq = 1", NULL), t1);
    CHECK_EQ_INT(one_int(st, "SELECT quantity FROM meters WHERE seq = 2", NULL), 210);
    CHECK_EQ_INT(one_int(st, "SELECT started_at FROM meters WHERE seq = 2", NULL), t1);
    CHECK_EQ_INT(
        one_int(st, "SELECT COUNT(*) FROM meters WHERE seq = 2 AND ended_at IS NULL", NULL), 1);

    /* 500 s more: only the new meter moves */
    fake_now += 500;
    heartbeat(st, fake_now);
    settle(&srv);
    const struct expect e[] = {
        { .seq = 1, .amount = 10 * 7001, .period = DAY, .started = t0, .ended = t1, .billed = t1 },
        { .seq = 2,
          .amount = 210 * 7001,
          .period = DAY,
          .started = t1,
          .ended = -1,
          .billed = fake_now },
    };
    check_meters(st, e, 2);
    CHECK_EQ_INT(one_int(st, "SELECT MAX(period_to) FROM charges WHERE meter_seq = 1", NULL), t1);
    /* the new meter's day is not whole: its piece from t1 is open */
    struct piece_seen seen = { 0 };
    must(billing_open_pieces(st, "u-meter", 0, INT64_MAX, see_piece, &seen, &err), &err, "pieces");
    CHECK_EQ_INT(seen.n, 1);
    CHECK_EQ_INT(seen.meter_seq, 2);
    CHECK_EQ_INT(seen.from, t1);
    CHECK_EQ_INT(seen.to, fake_now);
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM charges WHERE meter_seq = 2", NULL), 0);
    /* a resize within the free size ends the meter and opens none */
    must(store_exec(st, "UPDATE instances SET data_disk_gib = 50 WHERE id = 'i-meter'", NULL, &err),
         &err, "to the free size");
    must(billing_resize_storage(&srv, "i-meter", &err), &err, "resize to the free size");
    CHECK_EQ_INT(
        one_int(st, "SELECT COUNT(*) FROM meters WHERE item = 'data_disk' AND ended_at IS NULL",
                NULL),
        0);
    sl_time_set_clock(NULL);
}

/* One renter with 250 running instances, settled across a midnight: each
 * meter two settlements in one pass, written a hundred rows to a
 * statement (a statement of 1,000 parameters: PostgreSQL's backend once
 * took 64 at most), every meter to the formula. */
#define MANY 250
TEST(a_renter_with_many_meters_settles_in_one_pass)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server srv = { .store = test_store() };
    struct store *st = srv.store;
    char model[SL_ID_MAX];
    static struct expect e[MANY];

    sl_time_set_clock(clock_now);
    fake_now = 1767225600 + DAY - 600; /* 2026-01-01 23:50 */
    must(catalog_region_create(st, "meter-1", "Meters", false, &err), &err, "region");
    must(catalog_gpu_model_create(st, "Meter GPU", 24576, 8, 65536, 1000000, false, NULL, model,
                                  &err),
         &err, "model");
    add_renter(st, fake_now);
    must(store_exec(st,
                    "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                    " ssh_port_min, ssh_port_max, created_at, last_heartbeat)"
                    " VALUES ('n-meter', 'h', '127.0.0.1', 'meter-1', 'hash', 30000, 30999, ?1,"
                    " ?1)",
                    DB_ARGS(DB_INT(fake_now)), &err),
         &err, "node");
    for (int i = 0; i < MANY && test_ok(); i++) {
        char id[32];
        snprintf(id, sizeof(id), "i-many%03d", i);
        must(store_exec(st,
                        "INSERT INTO instances (id, user_id, name, region_id, node_id,"
                        " gpu_model_id, gpus, image, system_disk_gib, data_disk_gib, ssh_port,"
                        " root_password, state, desired, created_at, updated_at) VALUES (?1,"
                        " 'u-meter', ?1, 'meter-1', 'n-meter', ?2, 1, 'debian-12', 30, 60, ?3,"
                        " 'pw', 'running', 'running', ?4, ?4)",
                        DB_ARGS(DB_TEXT(id), DB_TEXT(model), DB_INT(30000 + i), DB_INT(fake_now)),
                        &err),
             &err, "instance");
        must(store_exec(st,
                        "INSERT INTO meters (instance_id, user_id, node_id, item, quantity,"
                        " unit_price_micros, amount_micros, period_s, started_at, settled_until,"
                        " billed_until) VALUES (?1, 'u-meter', 'n-meter', 'gpu', 1, ?2, ?2, 3600,"
                        " ?3, ?3, ?3)",
                        DB_ARGS(DB_TEXT(id), DB_INT(1980001 + i), DB_INT(fake_now - i)), &err),
             &err, "meter");
        e[i] = (struct expect){ .seq = i + 1,
                                .amount = 1980001 + i,
                                .period = 3600,
                                .started = fake_now - i,
                                .ended = -1,
                                .billed = fake_now };
    }
    if (!test_ok())
        return;
    fake_now += 1200; /* 00:10 the next day */
    heartbeat(st, fake_now);
    settle(&srv);
    for (int i = 0; i < MANY; i++)
        e[i].billed = fake_now;
    check_meters(st, e, MANY);
    /* the whole day that ended is a row per meter; today's ten minutes are
     * open pieces */
    CHECK_EQ_INT(one_int(st, "SELECT COUNT(*) FROM charges", NULL), MANY);
    CHECK_EQ_INT(one_int(st,
                         "SELECT COUNT(*) FROM ledger_txns WHERE idempotency_key LIKE"
                         " 'settle:%'",
                         NULL),
                 1);
    sl_time_set_clock(NULL);
}

/* A meter that ends, or one that opens, on a host between a pass's reading
 * of the hosts' meters and its writing: that host's mark stays where it is
 * (its meters wait for the next pass), the others move, and nothing is
 * billed twice or lost. A pass that moved the mark all the same would bill
 * the ended meter again for what it billed itself on ending. */
struct meddle {
    struct server *srv;
    int calls;
};

static void end_and_open_meanwhile(void *ctx)
{
    struct meddle *m = ctx;
    struct sl_error err = SL_ERROR_INIT;

    if (m->calls++ > 0)
        return;
    must(billing_close(m->srv, "i-a1", false, &err), &err, "stop i-a1 meanwhile");
}

TEST(a_meter_that_ends_during_a_pass_is_billed_once)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server srv = { .store = test_store() };
    struct store *st = srv.store;
    struct meddle meddle = { .srv = &srv };

    sl_time_set_clock(clock_now);
    fake_now = 1767225600 + 5 * 3600;
    int64_t t0 = fake_now;
    must(catalog_region_create(st, "meter-1", "Meters", false, &err), &err, "region");
    add_renter(st, fake_now);
    static const struct {
        const char *node, *instance;
        int64_t amount;
    } ms[] = { { "n-a", "i-a1", 1980001 }, { "n-a", "i-a2", 2500003 }, { "n-b", "i-b1", 7000007 } };
    for (size_t i = 0; i < 2; i++)
        must(store_exec(st,
                        "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                        " ssh_port_min, ssh_port_max, created_at, last_heartbeat)"
                        " VALUES (?1, 'h', '127.0.0.1', 'meter-1', ?1, 30000, 30099, ?2, ?2)",
                        DB_ARGS(DB_TEXT(i ? "n-b" : "n-a"), DB_INT(fake_now)), &err),
             &err, "node");
    for (size_t i = 0; i < ARRAY_SIZE(ms); i++)
        must(store_exec(st,
                        "INSERT INTO meters (instance_id, user_id, node_id, item, quantity,"
                        " unit_price_micros, amount_micros, period_s, started_at, settled_until,"
                        " billed_until) VALUES (?1, 'u-meter', ?2, 'gpu', 1, ?3, ?3, 3600, ?4,"
                        " ?4, ?4)",
                        DB_ARGS(DB_TEXT(ms[i].instance), DB_TEXT(ms[i].node), DB_INT(ms[i].amount),
                                DB_INT(t0)),
                        &err),
             &err, "meter");
    if (!test_ok())
        return;
    settle(&srv); /* the first marks */

    /* ten minutes on, both hosts heard; i-a1 stops while the pass runs */
    fake_now += 600;
    int64_t t1 = fake_now;
    must(store_exec(st, "UPDATE nodes SET last_heartbeat = ?1", DB_ARGS(DB_INT(t1)), &err), &err,
         "heartbeats");
    billing_settle_between(end_and_open_meanwhile, &meddle);
    settle(&srv);
    billing_settle_between(NULL, NULL);
    struct expect e[] = {
        { .seq = 1,
          .amount = ms[0].amount,
          .period = 3600,
          .started = t0,
          .ended = t1,
          .billed = t1 },
        /* its host's mark waits for the next pass */
        { .seq = 2,
          .amount = ms[1].amount,
          .period = 3600,
          .started = t0,
          .ended = -1,
          .billed = t0 },
        { .seq = 3,
          .amount = ms[2].amount,
          .period = 3600,
          .started = t0,
          .ended = -1,
          .billed = t1 },
    };
    CHECK_EQ_INT(meddle.calls, 1);
    CHECK_EQ_INT(one_int(st, "SELECT billed_until FROM billing_marks WHERE node_id = 'n-a'", NULL),
                 t0);
    CHECK_EQ_INT(one_int(st, "SELECT billed_until FROM billing_marks WHERE node_id = 'n-b'", NULL),
                 t1);
    check_meters(st, e, ARRAY_SIZE(e));

    /* the next pass moves it: i-a2 billed from t0, i-a1 no more */
    fake_now += 60;
    must(store_exec(st, "UPDATE nodes SET last_heartbeat = ?1", DB_ARGS(DB_INT(fake_now)), &err),
         &err, "heartbeats");
    settle(&srv);
    e[1].billed = e[2].billed = fake_now;
    check_meters(st, e, ARRAY_SIZE(e));
    sl_time_set_clock(NULL);
}
