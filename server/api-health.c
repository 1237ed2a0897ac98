/* Liveness and Prometheus metrics. */
#include "instance-metrics.h"
#include "leader.h"
#include "metrics.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/timefmt.h"

int api_healthz(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct leader *ld = req->srv->leader;
    char why[sizeof(((struct sl_error *)0)->message)];
    int have, want;

    /* the leader's thread asks the database every second (leader.h): a
     * replica that lost it says so at once, without waiting on it here */
    if (!leader_db_ok(ld, why, sizeof(why)))
        return sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable",
                       "this replica cannot reach its database: %s", why);
    if (store_schema_version(req->srv->store, &have, &want, err) < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:s, s:s, s:i, s:I, s:b}", "status", "ok", "store",
                        store_backend(req->srv->store), "schema_version", have, "uptime_seconds",
                        (json_int_t)(sl_time_now() - req->srv->started_at), "leader",
                        leader_held(ld)));
    return 0;
}

static int gauge(struct sl_buf *out, struct store *st, const char *name, const char *help,
                 const char *sql, struct sl_error *err)
{
    int64_t v = 0;

    if (store_get_int(st, sql, DB_NO_ARGS, &v, err) < 0)
        return -1;
    sl_buf_addf(out, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name,
                (long long)v);
    return 0;
}

int api_metrics(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    cleanup_buf struct sl_buf out = SL_BUF_INIT;

    metrics_render_http(&out);
    if (gauge(&out, st, "suanli_users", "Registered users.", "SELECT COUNT(*) FROM users", err) <
            0 ||
        gauge(&out, st, "suanli_ledger_transactions", "Ledger transactions.",
              "SELECT COUNT(*) FROM ledger_txns", err) < 0 ||
        gauge(&out, st, "suanli_verifications_pending", "Verification requests waiting.",
              "SELECT COUNT(*) FROM verifications WHERE state = 'pending'", err) < 0) {
        return -1;
    }
    uint64_t transactions, commits;
    store_stats(st, &transactions, &commits);
    sl_buf_addf(&out,
                "# HELP suanli_store_transactions_total Write transactions begun.\n"
                "# TYPE suanli_store_transactions_total counter\n"
                "suanli_store_transactions_total %llu\n"
                "# HELP suanli_store_commits_total Commits of the store (each one fsync; "
                "several transactions may share one).\n"
                "# TYPE suanli_store_commits_total counter\nsuanli_store_commits_total %llu\n",
                (unsigned long long)transactions, (unsigned long long)commits);
    sl_buf_addf(&out,
                "# HELP suanli_leader Whether this replica leads: runs the background work "
                "(1) or serves the API only (0).\n"
                "# TYPE suanli_leader gauge\nsuanli_leader %d\n"
                "# HELP suanli_background_runs_total Background job runs (settlement, stops, "
                "fleet, notifications, housekeeping) in this replica.\n"
                "# TYPE suanli_background_runs_total counter\n"
                "suanli_background_runs_total %llu\n",
                leader_held(req->srv->leader) ? 1 : 0,
                (unsigned long long)leader_runs(req->srv->leader));
    sl_buf_addf(&out,
                "# HELP suanli_uptime_seconds Seconds since suanlid started.\n"
                "# TYPE suanli_uptime_seconds gauge\nsuanli_uptime_seconds %lld\n",
                (long long)(sl_time_now() - req->srv->started_at));
    /* each running instance's latest sample, with its renter: for the
     * operator's scrape (an admin's token), never for anyone else */
    if (req->caller.admin &&
        instance_metrics_render_prom(st, &out, sl_time_now(), METRICS_PROM_STALE, err) < 0)
        return -1;
    res->raw = sl_buf_detach(&out, &res->raw_len);
    res->content_type = "text/plain; version=0.0.4; charset=utf-8";
    res->status = 200;
    return 0;
}
