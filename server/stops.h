/* Stops nobody clicks (DESIGN.md sections 3 and 5): a stop scheduled for a
 * time ("suanli stop ID --at 02:00"), and the idle stop of an instance with
 * no SSH session, no HTTP through its service ports and no GPU use for a
 * period the renter chose. The node reports each running instance's
 * activity with its heartbeat; a loop (instances.stop_check_interval)
 * carries out the stops that are due, each with its event and reason
 * (`schedule`, `idle`), after an `idle_warning` event a few minutes before.
 * Design: docs/design/access.md. */
#ifndef SL_STOPS_H
#define SL_STOPS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* GPU utilisation below this (percent) is idle. */
#define IDLE_GPU_PERCENT 5
/* The idle warning comes this long before the stop, or half the idle
 * period when that is shorter. */
#define IDLE_WARNING_LEAD 300

enum idle_action {
    IDLE_NONE,
    IDLE_WARN,
    IDLE_STOP,
};

/* How long before an idle stop its warning comes, for an idle period. */
int64_t idle_warning_lead(int64_t period);
/* What an instance idle for idle_for seconds of its period needs now;
 * warned: its warning was given for this idle period. */
enum idle_action idle_decide(int64_t period, int64_t idle_for, bool warned);

/* Schedules the instance's stop at `at` (Unix seconds), or cancels it when
 * at is 0. Refuses a time in the past or beyond instances.stop_schedule_max
 * (400) and an instance that is not running or starting (409). Writes a
 * `stop_scheduled` or `stop_schedule_cancelled` event. */
int stops_schedule(struct server *srv, const char *id, int64_t at, struct sl_error *err);

/* Sets the instance's idle period: seconds, 0 for off, -1 to follow the
 * owner's default. Periods outside the configured bounds are 400. */
int stops_set_idle(struct server *srv, const char *id, int64_t after, struct sl_error *err);
/* Checks an idle period against instances.idle_stop_min/max (0 is off). */
int stops_check_idle_period(struct server *srv, int64_t after, struct sl_error *err);

/* Records a node's activity report: [{id, ssh_sessions, gpu_percent}] for
 * its running instances. Activity starts a new idle period (and says so
 * with an `idle_reset` event when a warning was out). */
int stops_apply_activity(struct server *srv, const char *node_id, json_t *activity,
                         struct sl_error *err);

struct stops_stats {
    int64_t scheduled; /* scheduled stops carried out */
    int64_t idle;      /* idle stops carried out */
    int64_t warnings;  /* idle warnings given */
};

/* One pass: the scheduled and idle stops that are due now, each in its
 * own transaction. */
int stops_run(struct server *srv, struct stops_stats *stats, struct sl_error *err);

/* Adds stop_at, idle_stop_after_seconds, idle_stop_source and idle_since
 * to an instance's JSON (instance_json); consumes j, NULL on failure. */
json_t *stops_json(struct server *srv, json_t *j, struct sl_error *err);

#endif
