/* Leadership among suanlid replicas (docs/design/control-plane.md,
 * "Replicas and the leader"). Any number of suanlid processes may share one
 * PostgreSQL database and serve the API; background work (the periodic
 * jobs of main.c: settlement, stops, the fleet watch, notifications,
 * housekeeping) runs only in the one that holds a session-level advisory
 * lock, taken on a link of its own (store.h, store_link_open). A thread
 * re-checks the link every LEADER_TICK_MS: a link that fails loses the lock
 * at once, and the thread tries again to connect and to take it.
 *
 * The same link carries change notices between replicas: a local commit
 * that noted a change (store_note_change) is announced with NOTIFY, and
 * one heard from another replica runs the store's commit hook, so agents
 * waiting for their desired state and event streams on this replica hear
 * of commits made on another.
 *
 * On SQLite there is one process per database file: it always leads, and
 * there is no thread. */
#ifndef SL_LEADER_H
#define SL_LEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/error.h"
#include "server.h"

#define LEADER_TICK_MS 1000
/* the most a link's round trip may take before the link counts as lost */
#define LEADER_TIMEOUT_MS 2000
/* pg_try_advisory_lock's key: "suanli" in ASCII, so that it means something
 * to an operator reading pg_locks */
#define LEADER_LOCK_KEY 0x7375616e6c69LL
#define LEADER_CHANNEL  "suanli_changes"

struct leader;

/* Starts electing (PostgreSQL) or leads at once (SQLite). NULL with err
 * only when the thread cannot start. */
struct leader *leader_start(struct server *srv, struct sl_error *err);
/* Stops the thread and closes the link: the lock goes to another replica.
 * Then no thread runs the commit hook for another replica's changes; the
 * API may still serve (and commit) until leader_free, after it stopped. */
void leader_stop(struct leader *ld);
void leader_free(struct leader *ld);

/* Whether this replica runs a background job now: it holds the lock, or
 * leader.always is set, or it is SQLite's one process (ld NULL: true).
 * A true answer counts as a run (leader_runs: suanli_background_runs_total
 * in /metrics). */
bool leader_may_run(struct leader *ld);
uint64_t leader_runs(struct leader *ld);
/* Whether it holds the lock (always true on SQLite). */
bool leader_held(struct leader *ld);
/* Whether the database answered the link's last round trip (at most about
 * LEADER_TICK_MS + LEADER_TIMEOUT_MS ago); if not, why, in why. */
bool leader_db_ok(struct leader *ld, char *why, size_t why_size);

#endif
