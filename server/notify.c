/* The notifier's pass (notify.h): events to deliveries, digests, sending
 * and retries. Network work happens outside any transaction. */
#include "notify.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timeconst.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "instances.h"
#include "secrets.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Events read per pass: a backlog drains over a few passes. */
#define TAIL_BATCH 200
/* Deliveries sent per pass: each may take notify.timeout. */
#define SEND_BATCH 20

static void wipe(char *s)
{
    sodium_memzero(s, strlen(s));
}

const struct notify_kind notify_kinds[] = {
    { "balance_low", "balance_low", "your balance is low" },
    { "balance_stop", "balance_stop", "an instance was stopped: the balance ran out" },
    { "release_warning", "release_warning", "a stopped instance will be released soon" },
    { "auto_release", "auto_release", "a stopped instance was released" },
    { "idle_warning", "idle_warning", "an idle instance will be stopped soon" },
    { "idle_stop", "idle_stop", "an idle instance was stopped" },
    { "plan_expiring", "plan_expiring", "a plan ends soon" },
    { "plan_renewed", "plan_renewed", "a plan was renewed" },
    { "plan_not_renewed", "plan_not_renewed", "a plan could not be renewed" },
    { "plan_ended", "plan_ended", "a plan ended" },
    { "failed", "instance_failed", "an instance failed" },
    { "migrate_failed", "instance_failed", "an instance's move failed" },
    { "oom", "oom", "an instance ran out of memory" },
    { "host_lost", "host_lost", "an instance's host stopped reporting" },
    /* issue 15 item 3: a hint records an event of kind "hint" */
    { "hint", "hint", "a hint about an instance" },
};
const size_t notify_kinds_count = sizeof(notify_kinds) / sizeof(notify_kinds[0]);

const struct notify_kind *notify_kind_of(const char *event_kind)
{
    for (size_t i = 0; i < notify_kinds_count; i++)
        if (strcmp(notify_kinds[i].event_kind, event_kind) == 0)
            return &notify_kinds[i];
    return NULL;
}

bool notify_kind_known(const char *kind)
{
    for (size_t i = 0; i < notify_kinds_count; i++)
        if (strcmp(notify_kinds[i].kind, kind) == 0)
            return true;
    return false;
}

bool notify_digest_sends(bool have, int64_t sent_at, int64_t now, int64_t window)
{
    return !have || now - sent_at >= window;
}

bool notify_digest_flush_due(int64_t held, int64_t sent_at, int64_t now, int64_t window)
{
    return held > 0 && now - sent_at >= window;
}

int64_t notify_retry_delay(int64_t base, int64_t attempts)
{
    int64_t delay = base > 0 ? base : 1;

    for (int64_t i = 1; i < attempts && delay < SL_SEC_PER_HOUR; i++)
        delay *= 2;
    return delay < SL_SEC_PER_HOUR ? delay : SL_SEC_PER_HOUR;
}

void notify_sign(const char *secret, int64_t ts, const char *body, size_t len, char *out)
{
    cleanup_buf struct sl_buf signed_part = SL_BUF_INIT;
    char hex[SL_HASH_HEX_MAX];

    sl_buf_addf(&signed_part, "%" PRId64 ".", ts);
    sl_buf_add(&signed_part, body, len);
    sl_hmac_sha256_hex(secret, strlen(secret), signed_part.data, signed_part.len, hex);
    snprintf(out, NOTIFY_SIGNATURE_MAX, "v1=%s", hex);
}

int notify_queue(struct server *srv, const char *user_id, const char *channel_id, const char *kind,
                 const char *instance_id, const char *subject, const char *body_json,
                 struct sl_error *err)
{
    char id[SL_ID_MAX];
    int64_t now = sl_time_now();

    sl_id_new(id, "ntf-");
    /* the body carries its delivery's id, so a receiver can drop a repeat */
    cleanup_json json_t *body = json_loads(body_json, 0, NULL);
    if (!body)
        return sl_fail(err, SL_E_INTERNAL, "internal", "notify: a delivery body is not JSON");
    json_object_set_new(body, "id", json_string(id));
    cleanup_free char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    return store_exec(srv->store,
                      "INSERT INTO notify_deliveries (id, user_id, channel_id, event_seq, kind,"
                      " instance_id, state, next_at, subject, body, created_at, updated_at)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?8, ?9, ?7, ?7)",
                      DB_ARGS(DB_TEXT(id), DB_TEXT(user_id), DB_TEXT(channel_id),
                              DB_INT(json_integer_value(json_object_get(body, "event_seq"))),
                              DB_TEXT(kind), DB_TEXT(instance_id ? instance_id : ""), DB_INT(now),
                              DB_TEXT(subject), DB_TEXT(text)),
                      err) < 0
               ? -1
               : 0;
}

/* One event as read from the table. */
struct tail_event {
    int64_t seq, created_at;
    char *instance_id, *user_id, *kind, *state, *reason, *message;
};

static void tail_events_free(struct tail_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ev[i].instance_id);
        free(ev[i].user_id);
        free(ev[i].kind);
        free(ev[i].state);
        free(ev[i].reason);
        free(ev[i].message);
    }
    free(ev);
}

/* The channels of user_id an event of kind goes to: none when the renter
 * turned kind off; webhooks, and emails once confirmed. */
static int channels_for(struct store *st, const char *user_id, const char *kind,
                        char (**ids)[SL_ID_MAX], size_t *n, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT c.id FROM notify_channels c WHERE c.user_id = ?1"
                    " AND (c.kind = 'webhook' OR c.confirmed = 1)"
                    " AND NOT EXISTS (SELECT 1 FROM notify_optouts o WHERE o.user_id = ?1"
                    " AND o.kind = ?2) ORDER BY c.seq",
                    DB_ARGS(DB_TEXT(user_id), DB_TEXT(kind)), err);
    size_t cap = 0;
    int rc;

    *ids = NULL;
    *n = 0;
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 4;
            *ids = xrealloc(*ids, cap * sizeof(**ids));
        }
        snprintf((*ids)[(*n)++], SL_ID_MAX, "%s", db_text(rows, 0));
    }
    if (rc < 0) {
        free(*ids);
        *ids = NULL;
        return -1;
    }
    return 0;
}

static char *subject_for(const struct notify_kind *k, const char *instance_id, int64_t held)
{
    cleanup_buf struct sl_buf s = SL_BUF_INIT;

    sl_buf_addf(&s, "[suanli] %s", k->title);
    if (instance_id && *instance_id)
        sl_buf_addf(&s, ": %s", instance_id);
    if (held > 0)
        sl_buf_addf(&s, " (and %" PRId64 " more)", held);
    return sl_buf_detach(&s, NULL);
}

/* The JSON body of an event's message (its delivery id is added when it is
 * queued). held: events of this kind and instance held back since
 * held_since. */
static char *event_body(const struct notify_kind *k, const struct tail_event *ev, int64_t held,
                        int64_t held_since)
{
    cleanup_json json_t *body = json_pack(
        "{s:s, s:s, s:s, s:I, s:{s:I, s:s, s:s, s:s, s:s, s:o}, s:I, s:o}", "kind", k->kind,
        "title", k->title, "instance_id", ev->instance_id, "event_seq", (json_int_t)ev->seq,
        "event", "seq", (json_int_t)ev->seq, "kind", ev->kind, "state", ev->state, "reason",
        ev->reason, "message", ev->message, "created_at", api_time(ev->created_at), "held_back",
        (json_int_t)held, "created_at", api_time(sl_time_now()));
    if (held > 0)
        json_object_set_new(body, "held_since", api_time(held_since));
    return json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
}

/* Queues ev's message to each channel, or logs it as digested. */
static int fan_out(struct server *srv, const struct tail_event *ev, struct notify_stats *stats,
                   struct sl_error *err)
{
    struct store *st = srv->store;
    const struct notify_kind *k = notify_kind_of(ev->kind);
    cleanup_free char(*ids)[SL_ID_MAX] = NULL;
    size_t n;
    int64_t now = sl_time_now(), sent_at = 0, held = 0;
    bool have = false;
    int rc;

    if (!k || !*ev->user_id)
        return 0;
    if (channels_for(st, ev->user_id, k->kind, &ids, &n, err) < 0)
        return -1;
    if (n == 0)
        return 0;
    {
        cleanup_rows struct db_rows *rows = store_query(
            st,
            "SELECT sent_at, held FROM notify_digests WHERE user_id = ?1"
            " AND instance_id = ?2 AND kind = ?3",
            DB_ARGS(DB_TEXT(ev->user_id), DB_TEXT(ev->instance_id), DB_TEXT(k->kind)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 1) {
            have = true;
            sent_at = db_int(rows, 0);
            held = db_int(rows, 1);
        }
    }
    bool send = notify_digest_sends(have, sent_at, now, srv->cfg.notify_digest_window);
    cleanup_free char *body = event_body(k, ev, send ? held : 0, sent_at);
    cleanup_free char *subject = subject_for(k, ev->instance_id, send ? held : 0);
    for (size_t i = 0; i < n; i++) {
        if (send) {
            if (notify_queue(srv, ev->user_id, ids[i], k->kind, ev->instance_id, subject, body,
                             err) < 0)
                return -1;
            stats->queued++;
            continue;
        }
        char id[SL_ID_MAX];
        sl_id_new(id, "ntf-");
        if (store_exec(st,
                       "INSERT INTO notify_deliveries (id, user_id, channel_id, event_seq, kind,"
                       " instance_id, state, subject, body, created_at, updated_at)"
                       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'digested', ?7, ?8, ?9, ?9)",
                       DB_ARGS(DB_TEXT(id), DB_TEXT(ev->user_id), DB_TEXT(ids[i]), DB_INT(ev->seq),
                               DB_TEXT(k->kind), DB_TEXT(ev->instance_id), DB_TEXT(subject),
                               DB_TEXT(body), DB_INT(now)),
                       err) < 0)
            return -1;
    }
    return store_exec(st,
                      "INSERT INTO notify_digests (user_id, instance_id, kind, sent_at, held)"
                      " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (user_id, instance_id, kind)"
                      " DO UPDATE SET sent_at = excluded.sent_at, held = excluded.held",
                      DB_ARGS(DB_TEXT(ev->user_id), DB_TEXT(ev->instance_id), DB_TEXT(k->kind),
                              DB_INT(send ? now : sent_at), DB_INT(send ? 0 : held + 1)),
                      err) < 0
               ? -1
               : 0;
}

/* New events since the cursor, fanned out in one transaction with the
 * cursor's move: a restart neither repeats nor loses one. */
static int tail(struct server *srv, struct notify_stats *stats, struct sl_error *err)
{
    struct store *st = srv->store;
    int64_t cursor = 0;
    struct tail_event *ev = NULL;
    size_t n = 0;
    int rc;

    if ((rc = store_get_int(st, "SELECT event_seq FROM notify_cursor WHERE id = 1", DB_NO_ARGS,
                            &cursor, err)) < 0)
        return -1;
    if (rc == 0)
        return store_exec(st,
                          "INSERT INTO notify_cursor (id, event_seq)"
                          " SELECT 1, COALESCE(MAX(seq), 0) FROM events",
                          DB_NO_ARGS, err) < 0
                   ? -1
                   : 0;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT seq, instance_id, user_id, kind, state, reason, message,"
                        " created_at FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                        DB_ARGS(DB_INT(cursor), DB_INT(TAIL_BATCH)), err);
        if (!rows)
            return -1;
        ev = xcalloc(TAIL_BATCH, sizeof(*ev));
        while ((rc = db_next(rows, err)) == 1) {
            struct tail_event *e = &ev[n++];
            e->seq = db_int(rows, 0);
            e->instance_id = xstrdup(db_text(rows, 1));
            e->user_id = xstrdup(db_text(rows, 2));
            e->kind = xstrdup(db_text(rows, 3));
            e->state = xstrdup(db_text(rows, 4));
            e->reason = xstrdup(db_text(rows, 5));
            e->message = xstrdup(db_text(rows, 6));
            e->created_at = db_int(rows, 7);
        }
        if (rc < 0) {
            tail_events_free(ev, n);
            return -1;
        }
    }
    if (n == 0) {
        tail_events_free(ev, n);
        return 0;
    }
    if (store_begin(st, err) < 0) {
        tail_events_free(ev, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (fan_out(srv, &ev[i], stats, err) < 0) {
            store_rollback(st);
            tail_events_free(ev, n);
            return -1;
        }
        stats->events++;
    }
    rc = store_exec(st, "UPDATE notify_cursor SET event_seq = ?1 WHERE id = 1",
                    DB_ARGS(DB_INT(ev[n - 1].seq)), err) < 0
             ? -1
             : store_commit(st, err);
    if (rc < 0)
        store_rollback(st);
    tail_events_free(ev, n);
    return rc < 0 ? -1 : 0;
}

/* Digests whose window ended with events held back: a summary each. */
static int flush_digests(struct server *srv, struct notify_stats *stats, struct sl_error *err)
{
    struct store *st = srv->store;
    int64_t now = sl_time_now(), window = srv->cfg.notify_digest_window;
    struct due {
        char user_id[SL_ID_MAX], instance_id[SL_ID_MAX], kind[48];
        int64_t sent_at, held;
    } due[64];
    size_t n = 0;
    int rc;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT user_id, instance_id, kind, sent_at, held FROM notify_digests"
                        " WHERE held > 0 AND sent_at <= ?1 LIMIT 64",
                        DB_ARGS(DB_INT(now - window)), err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1) {
            struct due *d = &due[n++];
            snprintf(d->user_id, sizeof(d->user_id), "%s", db_text(rows, 0));
            snprintf(d->instance_id, sizeof(d->instance_id), "%s", db_text(rows, 1));
            snprintf(d->kind, sizeof(d->kind), "%s", db_text(rows, 2));
            d->sent_at = db_int(rows, 3);
            d->held = db_int(rows, 4);
        }
        if (rc < 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        struct due *d = &due[i];
        const struct notify_kind *k = NULL;
        for (size_t j = 0; j < notify_kinds_count && !k; j++)
            if (strcmp(notify_kinds[j].kind, d->kind) == 0)
                k = &notify_kinds[j];
        if (!k || !notify_digest_flush_due(d->held, d->sent_at, now, window))
            continue;
        cleanup_free char(*ids)[SL_ID_MAX] = NULL;
        size_t nc;
        char since[SL_TIME_FORMAT_MAX];
        if (store_begin(st, err) < 0)
            return -1;
        cleanup_tx struct store *tx = st;
        if (channels_for(st, d->user_id, k->kind, &ids, &nc, err) < 0)
            return -1;
        cleanup_free char *message =
            xasprintf("%" PRId64 " more of these since %s, held back so as not to flood you",
                      d->held, sl_time_format(d->sent_at, since));
        cleanup_json json_t *body =
            json_pack("{s:s, s:s, s:s, s:I, s:o, s:s, s:o}", "kind", k->kind, "title", k->title,
                      "instance_id", d->instance_id, "held_back", (json_int_t)d->held, "held_since",
                      api_time(d->sent_at), "message", message, "created_at", api_time(now));
        cleanup_free char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
        cleanup_free char *subject = subject_for(k, d->instance_id, d->held);
        for (size_t j = 0; j < nc; j++) {
            if (notify_queue(srv, d->user_id, ids[j], k->kind, d->instance_id, subject, text, err) <
                0)
                return -1;
            stats->queued++;
        }
        if (store_exec(st,
                       "UPDATE notify_digests SET sent_at = ?4, held = 0 WHERE user_id = ?1"
                       " AND instance_id = ?2 AND kind = ?3",
                       DB_ARGS(DB_TEXT(d->user_id), DB_TEXT(d->instance_id), DB_TEXT(d->kind),
                               DB_INT(now)),
                       err) < 0 ||
            store_commit(st, err) < 0)
            return -1;
        tx = NULL;
    }
    return 0;
}

/* A plan that will not renew by itself is about to end: one event per
 * plan (its plan_seq), a quarter of its length ahead, a day at most. */
static int plans_expiring(struct server *srv, struct sl_error *err)
{
    struct store *st = srv->store;
    int64_t now = sl_time_now();
    struct soon {
        char id[SL_ID_MAX], plan[16], state[16];
        int64_t seq, expires;
    } soon[32];
    size_t n = 0;
    int rc;
    {
        cleanup_rows struct db_rows *rows = store_query(
            st,
            "SELECT i.id, i.plan, i.state, i.plan_seq, i.plan_expires_at FROM instances i"
            " WHERE i.plan != 'payg' AND i.plan_auto_renew = 0 AND i.plan_expires_at > ?1"
            " AND i.plan_expires_at - ?1 <= CASE WHEN (i.plan_expires_at - i.plan_started_at) / 4"
            " < ?2 THEN (i.plan_expires_at - i.plan_started_at) / 4 ELSE ?2 END"
            " AND NOT EXISTS (SELECT 1 FROM events e WHERE e.instance_id = i.id"
            " AND e.kind = 'plan_expiring' AND e.reason = 'plan:' || i.plan_seq) LIMIT 32",
            DB_ARGS(DB_INT(now), DB_INT(SL_SEC_PER_DAY)), err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1) {
            struct soon *s = &soon[n++];
            snprintf(s->id, sizeof(s->id), "%s", db_text(rows, 0));
            snprintf(s->plan, sizeof(s->plan), "%s", db_text(rows, 1));
            snprintf(s->state, sizeof(s->state), "%s", db_text(rows, 2));
            s->seq = db_int(rows, 3);
            s->expires = db_int(rows, 4);
        }
        if (rc < 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char when[SL_TIME_FORMAT_MAX], reason[32];
        snprintf(reason, sizeof(reason), "plan:%" PRId64, soon[i].seq);
        cleanup_free char *message = xasprintf(
            "the %s plan ends at %s and does not renew by itself: the instance is pay-as-you-go "
            "from then (buy another plan with suanli plan to keep the price)",
            soon[i].plan, sl_time_format(soon[i].expires, when));
        if (instance_event(st, soon[i].id, "plan_expiring", soon[i].state, reason, message, err) <
            0)
            return -1;
    }
    return 0;
}

/* A due delivery, copied out of its row. */
struct pending {
    char id[SL_ID_MAX], channel_id[SL_ID_MAX], kind[48], channel_kind[16];
    int64_t attempts;
    bool channel, confirmed;
    char *subject, *body, *target, *secret;
};

static int load_due(struct store *st, struct pending *p, size_t *n, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT d.id, d.channel_id, d.kind, d.attempts, d.subject, d.body, c.id, c.kind,"
        " c.target, c.secret, c.confirmed FROM notify_deliveries d"
        " LEFT JOIN notify_channels c ON c.id = d.channel_id AND c.user_id = d.user_id"
        " WHERE d.state IN ('pending', 'retrying') AND d.next_at <= ?1 ORDER BY d.next_at, d.seq"
        " LIMIT ?2",
        DB_ARGS(DB_INT(sl_time_now()), DB_INT(SEND_BATCH)), err);
    int rc;

    *n = 0;
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        struct pending *d = &p[(*n)++];
        memset(d, 0, sizeof(*d));
        snprintf(d->id, sizeof(d->id), "%s", db_text(rows, 0));
        snprintf(d->channel_id, sizeof(d->channel_id), "%s", db_text(rows, 1));
        snprintf(d->kind, sizeof(d->kind), "%s", db_text(rows, 2));
        d->attempts = db_int(rows, 3);
        d->subject = xstrdup(db_text(rows, 4));
        d->body = xstrdup(db_text(rows, 5));
        d->channel = !db_null(rows, 6);
        snprintf(d->channel_kind, sizeof(d->channel_kind), "%s", db_text(rows, 7));
        d->target = xstrdup(db_text(rows, 8));
        d->secret = xstrdup(db_text(rows, 9));
        d->confirmed = db_int(rows, 10) == 1;
    }
    return rc < 0 ? -1 : 0;
}

static void pending_release(struct pending *d)
{
    free(d->subject);
    free(d->body);
    free(d->target);
    if (d->secret)
        wipe(d->secret);
    free(d->secret);
}

static int send_one(struct server *srv, struct pending *d, struct sl_error *why)
{
    if (!d->channel)
        return sl_fail(why, SL_E_NOT_FOUND, "no_channel", "the channel was removed");
    if (strcmp(d->channel_kind, "email") == 0) {
        if (!d->confirmed && strcmp(d->kind, "confirm") != 0)
            return sl_fail(why, SL_E_CONFLICT, "not_confirmed",
                           "the address is not confirmed: nothing but its code is sent to it");
        cleanup_free char *text = notify_text(d->body);
        return notify_send_email(srv, d->target, d->id, d->subject, text, why);
    }
    char context[64];
    snprintf(context, sizeof(context), "notify_webhook:%s", d->channel_id);
    cleanup_free char *secret = secrets_open(srv, context, d->secret, why);
    if (!secret)
        return -1;
    int rc = notify_send_webhook(srv, d->target, secret, d->id, d->kind, d->body, why);
    wipe(secret);
    return rc;
}

static atomic_bool stopping;

void notify_stop(void)
{
    atomic_store(&stopping, true);
}

static int deliver(struct server *srv, struct notify_stats *stats, struct sl_error *err)
{
    struct pending due[SEND_BATCH];
    size_t n;

    if (load_due(srv->store, due, &n, err) < 0) {
        for (size_t i = 0; i < n; i++)
            pending_release(&due[i]);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        struct pending *d = &due[i];
        struct sl_error why = SL_ERROR_INIT;
        if (atomic_load(&stopping)) {
            pending_release(d);
            continue;
        }
        int64_t attempts = d->attempts + 1, now = sl_time_now();
        bool ok = send_one(srv, d, &why) == 0;
        /* a removed channel, an unconfirmed address or a refused one is
         * not retried (a name that does not resolve now is) */
        bool final = ok || !d->channel || strcmp(why.code, "not_confirmed") == 0 ||
                     strcmp(why.code, "webhook_refused") == 0 ||
                     attempts >= srv->cfg.notify_attempts;
        const char *state = ok ? "sent" : final ? "failed" : "retrying";
        if (ok)
            stats->sent++;
        else if (final)
            stats->failed++;
        else
            stats->retried++;
        if (!ok)
            log_info("notify: delivery %s to %s: %s%s", d->id, d->channel_id, why.message,
                     final ? " (given up)" : "");
        if (rc == 0 &&
            store_exec(srv->store,
                       "UPDATE notify_deliveries SET state = ?2, attempts = ?3, next_at = ?4,"
                       " last_error = ?5, updated_at = ?6 WHERE id = ?1",
                       DB_ARGS(DB_TEXT(d->id), DB_TEXT(state), DB_INT(attempts),
                               DB_INT(final ? 0
                                            : now + notify_retry_delay(srv->cfg.notify_retry_base,
                                                                       attempts)),
                               DB_TEXT(ok ? "" : why.message), DB_INT(now)),
                       err) < 0)
            rc = -1;
        pending_release(d);
    }
    return rc;
}

int notify_run(struct server *srv, struct notify_stats *stats, struct sl_error *err)
{
    int64_t now = sl_time_now();

    memset(stats, 0, sizeof(*stats));
    if (plans_expiring(srv, err) < 0 || tail(srv, stats, err) < 0 ||
        flush_digests(srv, stats, err) < 0 || deliver(srv, stats, err) < 0)
        return -1;
    if (store_exec(srv->store,
                   "DELETE FROM notify_deliveries WHERE created_at < ?1"
                   " AND state IN ('sent', 'failed', 'digested')",
                   DB_ARGS(DB_INT(now - srv->cfg.notify_keep)), err) < 0 ||
        store_exec(srv->store, "DELETE FROM notify_digests WHERE held = 0 AND sent_at < ?1",
                   DB_ARGS(DB_INT(now - srv->cfg.notify_digest_window)), err) < 0)
        return -1;
    return 0;
}

char *notify_text(const char *body_json)
{
    cleanup_json json_t *body = json_loads(body_json, 0, NULL);
    cleanup_buf struct sl_buf t = SL_BUF_INIT;
    json_t *ev = json_object_get(body, "event");
    const char *instance = json_string_value(json_object_get(body, "instance_id"));
    const char *message = json_string_value(json_object_get(ev ? ev : body, "message"));
    json_int_t held = json_integer_value(json_object_get(body, "held_back"));

    sl_buf_addf(&t, "%s\n\n",
                json_string_value(json_object_get(body, "title"))
                    ? json_string_value(json_object_get(body, "title"))
                    : "suanli");
    if (instance && *instance)
        sl_buf_addf(&t, "Instance: %s\n", instance);
    if (ev)
        sl_buf_addf(&t, "State: %s\nAt: %s\n",
                    json_string_value(json_object_get(ev, "state"))
                        ? json_string_value(json_object_get(ev, "state"))
                        : "",
                    json_string_value(json_object_get(ev, "created_at"))
                        ? json_string_value(json_object_get(ev, "created_at"))
                        : "");
    if (message && *message)
        sl_buf_addf(&t, "\n%s\n", message);
    if (ev && held > 0)
        sl_buf_addf(&t, "\nand %" JSON_INTEGER_FORMAT " more since %s\n", held,
                    json_string_value(json_object_get(body, "held_since"))
                        ? json_string_value(json_object_get(body, "held_since"))
                        : "the last message");
    sl_buf_addf(&t, "\nTurn this kind off with: suanli notify off %s\n",
                json_string_value(json_object_get(body, "kind"))
                    ? json_string_value(json_object_get(body, "kind"))
                    : "KIND");
    return sl_buf_detach(&t, NULL);
}
