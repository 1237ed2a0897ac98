/* Scheduled and idle stops (stops.h). */
#include "stops.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "instances.h"
#include "../lib/timeconst.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int64_t idle_warning_lead(int64_t period)
{
    return period / 2 < IDLE_WARNING_LEAD ? period / 2 : IDLE_WARNING_LEAD;
}

enum idle_action idle_decide(int64_t period, int64_t idle_for, bool warned)
{
    if (period <= 0 || idle_for < 0)
        return IDLE_NONE;
    if (idle_for >= period)
        return IDLE_STOP;
    if (!warned && idle_for >= period - idle_warning_lead(period))
        return IDLE_WARN;
    return IDLE_NONE;
}

/* "1h 30m", "45s", "3d": a duration for messages. */
static char *duration_text(int64_t s, char buf[static 32])
{
    if (s >= SL_SEC_PER_DAY && s % SL_SEC_PER_DAY == 0)
        snprintf(buf, 32, "%" PRId64 "d", s / SL_SEC_PER_DAY);
    else if (s >= SL_SEC_PER_HOUR && s % SL_SEC_PER_HOUR / SL_SEC_PER_MIN)
        snprintf(buf, 32, "%" PRId64 "h %" PRId64 "m", s / SL_SEC_PER_HOUR,
                 s % SL_SEC_PER_HOUR / SL_SEC_PER_MIN);
    else if (s >= SL_SEC_PER_HOUR)
        snprintf(buf, 32, "%" PRId64 "h", s / SL_SEC_PER_HOUR);
    else if (s >= SL_SEC_PER_MIN && s % SL_SEC_PER_MIN)
        snprintf(buf, 32, "%" PRId64 "m %" PRId64 "s", s / SL_SEC_PER_MIN, s % SL_SEC_PER_MIN);
    else if (s >= SL_SEC_PER_MIN)
        snprintf(buf, 32, "%" PRId64 "m", s / SL_SEC_PER_MIN);
    else
        snprintf(buf, 32, "%" PRId64 "s", s);
    return buf;
}

/* state and desired of an instance; 404 when absent. */
static int instance_state(struct store *st, const char *id, char state[static 16],
                          char desired[static 16], struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT state, desired FROM instances WHERE id = ?1", DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                       "no instance '%s': list yours with suanli ls", id);
    snprintf(state, 16, "%s", db_text(rows, 0));
    snprintf(desired, 16, "%s", db_text(rows, 1));
    return 0;
}

/* Asked to run and not stopped yet (instance-states.h). */
static bool state_up(const char *state)
{
    int s = instance_state_parse(state);
    return s >= 0 && instance_state_up(s);
}

int stops_schedule(struct server *srv, const char *id, int64_t at, struct sl_error *err)
{
    struct store *st = srv->store;
    char state[16], desired[16], when[SL_TIME_FORMAT_MAX], text[32];
    int64_t now = sl_time_now();

    if (instance_state(st, id, state, desired, err) < 0)
        return -1;
    if (at == 0) {
        int64_t had;
        if (store_get_int(st,
                          "SELECT COUNT(*) FROM instances WHERE id = ?1 AND stop_at IS NOT NULL",
                          DB_ARGS(DB_TEXT(id)), &had, err) < 0)
            return -1;
        if (!had)
            return 0;
        if (store_exec(st, "UPDATE instances SET stop_at = NULL WHERE id = ?1",
                       DB_ARGS(DB_TEXT(id)), err) < 0)
            return -1;
        return instance_event(st, id, "stop_schedule_cancelled", state, "user",
                              "the scheduled stop is cancelled", err);
    }
    if (at <= now)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "the stop time %s is in the past (now is %s): give a later time, or stop "
                       "now without one",
                       sl_time_format(at, when), sl_time_format(now, text));
    if (at - now > srv->cfg.stop_schedule_max)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "a stop can be scheduled at most %s ahead: give an earlier time",
                       duration_text(srv->cfg.stop_schedule_max, text));
    if (instance_state_parse(desired) != INSTANCE_RUNNING || !state_up(state))
        return sl_fail(err, SL_E_CONFLICT, "invalid_state",
                       "instance '%s' is %s: only a running instance can have a stop scheduled", id,
                       state);
    if (store_exec(st, "UPDATE instances SET stop_at = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(at)), err) < 0)
        return -1;
    cleanup_free char *message =
        xasprintf("stops at %s (in %s)", sl_time_format(at, when), duration_text(at - now, text));
    return instance_event(st, id, "stop_scheduled", state, "user", message, err);
}

int stops_check_idle_period(struct server *srv, int64_t after, struct sl_error *err)
{
    char lo[32], hi[32];

    if (after == 0 || (after >= srv->cfg.idle_stop_min && after <= srv->cfg.idle_stop_max))
        return 0;
    return sl_fail(err, SL_E_INVALID, "invalid_field",
                   "an idle period must be from %s to %s (or off): for example 30m or 2h",
                   duration_text(srv->cfg.idle_stop_min, lo),
                   duration_text(srv->cfg.idle_stop_max, hi));
}

int stops_set_idle(struct server *srv, const char *id, int64_t after, struct sl_error *err)
{
    struct store *st = srv->store;
    char state[16], desired[16], text[32];

    if (after >= 0 && stops_check_idle_period(srv, after, err) < 0)
        return -1;
    if (instance_state(st, id, state, desired, err) < 0)
        return -1;
    int known = instance_state_parse(state);
    if (known >= 0 && instance_state_gone(known))
        return sl_fail(err, SL_E_CONFLICT, "invalid_state", "instance '%s' is %s", id, state);
    /* a new setting starts a new idle period */
    if (store_exec(st,
                   "UPDATE instances SET idle_stop_after = ?2, idle_warned = 0,"
                   " idle_since = CASE WHEN idle_since IS NULL THEN NULL ELSE ?3 END WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), after < 0 ? DB_NULL : DB_INT(after), DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    cleanup_free char *message =
        after < 0    ? xstrdup("idle stop follows the account's default")
        : after == 0 ? xstrdup("idle stop is off")
                     : xasprintf("stops after %s without an SSH session, HTTP through a service "
                                 "port or GPU use",
                                 duration_text(after, text));
    return instance_event(st, id, "idle_stop_set", state, "user", message, err);
}

/* One report: activity starts a new idle period; none starts one if the
 * instance had none yet (just started). */
static int apply_one(struct server *srv, const char *node_id, json_t *item, struct sl_error *err)
{
    struct store *st = srv->store;
    const char *id = NULL;
    int64_t ssh = 0, gpu = -1, warned;
    const struct sl_json_field f[] = {
        { "id", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &id },
        { "ssh_sessions", SL_JSON_INT, .min = 0, .max = 1000000, .out = &ssh },
        { "gpu_percent", SL_JSON_INT, .min = 0, .max = 100, .out = &gpu },
    };
    int rc;

    if (sl_json_fields(item, f, ARRAY_SIZE(f), err) < 0)
        return -1;
    bool active = ssh > 0 || gpu >= IDLE_GPU_PERCENT;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT idle_warned FROM instances WHERE id = ?1 AND node_id = ?2"
                        " AND state = 'running'",
                        DB_ARGS(DB_TEXT(id), DB_TEXT(node_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            return 0; /* not running here (any more): nothing to measure */
        warned = db_int(rows, 0);
    }
    int64_t now = sl_time_now();
    if (store_exec(st,
                   "UPDATE instances SET idle_since = CASE WHEN ?2 = 1 THEN ?3"
                   " ELSE COALESCE(idle_since, ?3) END,"
                   " idle_warned = CASE WHEN ?2 = 1 THEN 0 ELSE idle_warned END WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(active), DB_INT(now)), err) < 0)
        return -1;
    if (!active || !warned)
        return 0;
    cleanup_free char *message =
        xasprintf("activity seen (%s): the idle stop is off until the instance is idle again",
                  ssh > 0 ? "an SSH session" : "GPU use");
    return instance_event(st, id, "idle_reset", "running", "idle", message, err);
}

int stops_apply_activity(struct server *srv, const char *node_id, json_t *activity,
                         struct sl_error *err)
{
    size_t i;
    json_t *item;

    json_array_foreach(activity, i, item)
    {
        if (apply_one(srv, node_id, item, err) < 0) {
            sl_error_prefix(err, "activity[%zu]", i);
            return -1;
        }
    }
    return 0;
}

/* A due stop, with what the loop needs to act on it. */
struct due {
    char id[SL_ID_MAX];
    int64_t a, b, c;
};

struct due_list {
    struct due *items;
    size_t n, cap;
};

static void due_list_release(struct due_list *l)
{
    free(l->items);
}
#define cleanup_due_list __attribute__((cleanup(due_list_release)))

/* Reads every row (id, a, b, c) before anything is written. */
static int due_load(struct store *st, struct due_list *l, const char *sql,
                    const struct db_arg *args, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(st, sql, args, err);
    int rc;

    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        if (l->n == l->cap) {
            l->cap = l->cap ? l->cap * 2 : 16;
            l->items = xrealloc(l->items, l->cap * sizeof(*l->items));
        }
        struct due *d = &l->items[l->n++];
        snprintf(d->id, sizeof(d->id), "%s", db_text(rows, 0));
        d->a = db_null(rows, 1) ? 0 : db_int(rows, 1);
        d->b = db_null(rows, 2) ? 0 : db_int(rows, 2);
        d->c = db_null(rows, 3) ? 0 : db_int(rows, 3);
    }
    return rc < 0 ? -1 : 0;
}

static int scheduled_stop(struct server *srv, const struct due *d, struct stops_stats *stats,
                          struct sl_error *err)
{
    char state[16], desired[16];

    if (instance_state(srv->store, d->id, state, desired, err) < 0)
        return -1;
    /* stopping or stopped already: the schedule has nothing left to do */
    if (!state_up(state))
        return store_exec(srv->store, "UPDATE instances SET stop_at = NULL WHERE id = ?1",
                          DB_ARGS(DB_TEXT(d->id)), err) < 0
                   ? -1
                   : 0;
    if (instance_stop(srv, d->id, "schedule", err) < 0)
        return -1;
    stats->scheduled++;
    return 0;
}

/* d: a = the idle period, b = the start of the idle period, c = warned. */
static int idle_step(struct server *srv, const struct due *d, struct stops_stats *stats,
                     struct sl_error *err)
{
    int64_t idle_for = sl_time_now() - d->b;
    char text[32], left[32];

    switch (idle_decide(d->a, idle_for, d->c != 0)) {
    case IDLE_NONE:
        return 0;
    case IDLE_WARN: {
        cleanup_free char *message = xasprintf(
            "idle for %s: stops in %s unless there is activity (an SSH session, HTTP through a "
            "service port or GPU use); change it with suanli idle-stop",
            duration_text(idle_for, text), duration_text(d->a - idle_for, left));
        if (store_exec(srv->store, "UPDATE instances SET idle_warned = 1 WHERE id = ?1",
                       DB_ARGS(DB_TEXT(d->id)), err) < 0 ||
            instance_event(srv->store, d->id, "idle_warning", "running", "idle", message, err) < 0)
            return -1;
        stats->warnings++;
        return 0;
    }
    case IDLE_STOP: {
        cleanup_free char *message =
            xasprintf("no SSH session, HTTP through a service port or GPU use for %s: stopped; "
                      "the disks are kept. Start it again with suanli start",
                      duration_text(idle_for, text));
        if (instance_stop(srv, d->id, "idle", err) < 0 ||
            instance_event(srv->store, d->id, "idle_stop", "stopping", "idle", message, err) < 0)
            return -1;
        stats->idle++;
        return 0;
    }
    }
    return 0;
}

static int in_tx(struct server *srv, const struct due *d,
                 int (*fn)(struct server *, const struct due *, struct stops_stats *,
                           struct sl_error *),
                 struct stops_stats *stats, struct sl_error *err)
{
    cleanup_tx struct store *tx = NULL;

    if (store_begin(srv->store, err) < 0)
        return -1;
    tx = srv->store;
    if (fn(srv, d, stats, err) < 0 || store_commit(srv->store, err) < 0) {
        sl_error_prefix(err, "instance '%s'", d->id);
        return -1;
    }
    tx = NULL;
    return 0;
}

int stops_run(struct server *srv, struct stops_stats *stats, struct sl_error *err)
{
    cleanup_due_list struct due_list sched = { 0 };
    cleanup_due_list struct due_list idle = { 0 };
    int64_t now = sl_time_now();

    memset(stats, 0, sizeof(*stats));
    if (due_load(srv->store, &sched,
                 "SELECT id, stop_at, 0, 0 FROM instances WHERE stop_at IS NOT NULL"
                 " AND stop_at <= ?1 ORDER BY stop_at",
                 DB_ARGS(DB_INT(now)), err) < 0)
        return -1;
    for (size_t i = 0; i < sched.n; i++)
        if (in_tx(srv, &sched.items[i], scheduled_stop, stats, err) < 0)
            return -1;
    /* Only while the host reports: a silent host's instances are neither
     * seen active nor stopped. A request through the node's proxy
     * (last_http_at) is activity too. */
    if (due_load(srv->store, &idle,
                 "SELECT i.id, COALESCE(i.idle_stop_after, u.idle_stop_default),"
                 " CASE WHEN i.last_http_at > i.idle_since THEN i.last_http_at"
                 " ELSE i.idle_since END, i.idle_warned"
                 " FROM instances i JOIN users u ON u.id = i.user_id"
                 " JOIN nodes n ON n.id = i.node_id"
                 " WHERE i.state = 'running' AND i.desired = 'running'"
                 " AND i.idle_since IS NOT NULL"
                 " AND COALESCE(i.idle_stop_after, u.idle_stop_default) > 0"
                 " AND n.last_heartbeat > ?1",
                 DB_ARGS(DB_INT(now - srv->cfg.node_offline_after)), err) < 0)
        return -1;
    for (size_t i = 0; i < idle.n; i++)
        if (in_tx(srv, &idle.items[i], idle_step, stats, err) < 0)
            return -1;
    return 0;
}

json_t *stops_json(struct server *srv, json_t *j, struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *state = json_string_value(json_object_get(j, "state"));
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT i.stop_at, i.idle_stop_after, u.idle_stop_default, i.idle_since"
                    " FROM instances i JOIN users u ON u.id = i.user_id WHERE i.id = ?1",
                    DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) <= 0) {
        if (rows && rc == 0)
            sl_fail(err, SL_E_NOT_FOUND, "no_such_instance", "no instance '%s'", id);
        json_decref(j);
        return NULL;
    }
    bool own = !db_null(rows, 1);
    int64_t after = own ? db_int(rows, 1) : db_int(rows, 2);
    bool running = instance_state_parse(state) == INSTANCE_RUNNING;
    json_object_set_new(j, "stop_at", db_null(rows, 0) ? json_null() : api_time(db_int(rows, 0)));
    json_object_set_new(j, "idle_stop_after_seconds",
                        after > 0 ? json_integer(after) : json_null());
    json_object_set_new(j, "idle_stop_source", json_string(own ? "instance" : "account"));
    json_object_set_new(j, "idle_since",
                        running && !db_null(rows, 3) ? api_time(db_int(rows, 3)) : json_null());
    return j;
}
