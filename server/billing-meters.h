/* Meters as the billing files read and move them (billing.h); private to
 * server/billing-*.c.
 *
 * A meter has two positions (docs/design/billing.md, "Marks and days"):
 *
 *   billed   how far its charges are in the ledger. An open instance
 *            meter "follows" its host: it is billed to the further of its
 *            own billed_until (where it started, or was billed to alone)
 *            and its host's mark (billing_marks), which a pass moves for
 *            all of the host's meters at once. Any other meter (ended, or
 *            renter-wide) is billed to its own billed_until.
 *   settled  how far its charges rows reach: one row per UTC day, written
 *            once the day is whole (or the meter has ended and is billed
 *            to its end). charged_micros is the formula there.
 *
 * settled <= billed <= end. What the formula grew by from settled to
 * billed is the meter's open piece: billed, not yet a row of a bill. */
#ifndef SL_BILLING_METERS_H
#define SL_BILLING_METERS_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/error.h"
#include "../lib/id.h"
#include "store.h"

/* heartbeat: where the meter's evidence of use ends: its host's last
 * report, a file storage meter's last sample of the use (a renter-wide
 * meter has no host), INT64_MAX for saved images (their size changes only
 * through suanlid). ended: -1 while open. mark: its host's, -1 if none. */
struct meter {
    int64_t seq, amount, period, started, ended, quantity, heartbeat;
    int64_t settled, charged, settlements; /* its charges rows */
    int64_t own, moves;                    /* billed_until as stored, its own moves */
    int64_t mark, gen;                     /* its host's (mark -1: none) */
    int64_t billed;                        /* own, or the host's mark when further (follows) */
    bool follows;
    char instance_id[SL_ID_MAX], user_id[SL_ID_MAX], node_id[SL_ID_MAX], item[16];
};

#define METER_COLUMNS_USED(used_at)                                                                \
    "m.seq, m.amount_micros, m.period_s, m.started_at, COALESCE(m.ended_at, -1),"                  \
    " m.settled_until, m.charged_micros, m.settlements, COALESCE(n.last_heartbeat, 0),"            \
    " m.instance_id, m.user_id, m.node_id, m.item, " used_at ", m.quantity,"                       \
    " m.billed_until, m.moves, COALESCE(k.billed_until, -1), COALESCE(k.gen, 0)"
#define METER_COLUMNS METER_COLUMNS_USED("COALESCE(s.used_at, 0)")

/* a renter-wide meter has no host (node_id ''); file storage's evidence is
 * its directory's last sample */
#define METER_FROM                                                                                 \
    " FROM meters m LEFT JOIN nodes n ON n.id = m.node_id LEFT JOIN billing_marks k"               \
    " ON k.node_id = m.node_id LEFT JOIN storage_dirs s ON m.item = 'file_storage'"                \
    " AND s.user_id = m.user_id AND s.region_id = m.region_id"

/* A meter m's billed position in SQL, with its host's mark k
 * (LEFT JOIN billing_marks k ON k.node_id = m.node_id) */
#define METER_BILLED                                                                               \
    "(CASE WHEN m.ended_at IS NULL AND m.node_id != '' AND k.billed_until > m.billed_until"        \
    " THEN k.billed_until ELSE m.billed_until END)"
/* What the formula takes at it (sl_money_prorate's three arguments) */
#define METER_BILLED_COST "m.amount_micros, " METER_BILLED " - m.started_at, m.period_s"
#define METER_BILLED_FROM " FROM meters m LEFT JOIN billing_marks k ON k.node_id = m.node_id"

/* Open instance meters only (no file storage among them): their hosts
 * and marks, not the storage's samples */
#define HOST_METER_COLUMNS METER_COLUMNS_USED("0")
#define HOST_METER_FROM                                                                            \
    " FROM meters m LEFT JOIN nodes n ON n.id = m.node_id LEFT JOIN billing_marks k"               \
    " ON k.node_id = m.node_id"

/* The meters a query selects (its columns: METER_COLUMNS, METER_FROM);
 * *n of them, never NULL but on failure. */
struct meter *meters_load(struct store *st, const char *sql, const struct db_arg *args, size_t *n,
                          struct sl_error *err);

/* What m has cost by time t: floor(amount * (t - started) / period). */
int meter_cost(const struct meter *m, int64_t t, int64_t *out, struct sl_error *err);

/* Where m can be billed to now: not past its host's last report (file
 * storage: see billing.h), never back. */
int64_t meter_billable_until(const struct meter *m, int64_t now);

/* What a store transaction writes of any number of meters and renters:
 * rows many to a statement (store-rows.h), the ledger transactions
 * together at the end. */
struct pending;
struct pending *pending_new(struct store *st, size_t meters);
void pending_freep(struct pending **p);
#define cleanup_pending __attribute__((cleanup(pending_freep)))

/* One renter's moves of money in a store transaction: one ledger
 * transaction, keyed by its first move with an amount. */
struct batch {
    struct pending *rows;
    char user_id[SL_ID_MAX];
    char key[128];
    int64_t total, count;
};

void batch_begin(struct batch *b, struct pending *rows, const char *user_id);
/* Adds amount; the key (a printf format) if the batch has none yet. */
int batch_add(struct batch *b, int64_t amount, struct sl_error *err, const char *key_format, ...)
    __attribute__((format(printf, 4, 5)));
/* Its ledger transaction, if any amount, pending. */
void batch_end(struct batch *b);

/* Bills m alone (not following its host) up to `to`, never past its end:
 * the amount goes to b, m's new own position to the rows at meter_write. */
int meter_bill_own(struct batch *b, struct meter *m, int64_t to, struct sl_error *err);
/* Writes the charges rows of m's whole days billed (and of its last
 * piece once billed to its end), numbered on from its settlements.
 * Returns 1 when m moved, 0 when nothing was whole, -1. */
int meter_close_days(struct store *st, struct pending *p, struct meter *m, struct sl_error *err);
/* m's positions as they are now, written where it still is at
 * `moves`, `settlements`: a meter that moved meanwhile fails the store
 * transaction as busy, never billed twice. */
int meter_write(struct store *st, struct pending *p, const struct meter *m, int64_t moves,
                int64_t settlements, struct sl_error *err);
/* A host's mark moves from `was` (-1: none) to `to` where it still is
 * at `was` and `gen`, naming the pass that moved it; a mark moved
 * meanwhile, or whose host's meters opened or ended, stays. */
int mark_write(struct store *st, struct pending *p, const char *node_id, int64_t was, int64_t gen,
               int64_t to, int64_t pass, struct sl_error *err);
/* A meter of the host opened or ended: a pass that read its meters before
 * moves its mark no more (gen). */
int mark_touch(struct store *st, const char *node_id, struct sl_error *err);
/* Writes the rows p holds (not its ledger transactions). */
int pending_flush(struct store *st, struct pending *p, struct sl_error *err);
/* Writes what p holds. */
int pending_end(struct store *st, struct pending *p, struct sl_error *err);

/* Bills ms (one renter's, none following a host) as far as each can be
 * billed at now and closes their whole days, into rows: one ledger
 * transaction. Returns 1 when it has an amount, 0 when not, -1. */
int meters_bill_alone(struct store *st, struct pending *rows, struct meter *ms, size_t n,
                      int64_t now, struct sl_error *err);

/* Ends m at `at` (or where it is billed, if further) in the store: from
 * then it is billed alone from where it is billed now. */
int meter_end(struct store *st, struct meter *m, int64_t at, struct sl_error *err);
/* Bills m alone to `to` and closes its whole days, written at once. */
int meter_settle_one(struct store *st, struct meter *m, int64_t to, struct sl_error *err);

#endif
