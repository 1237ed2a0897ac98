/* Billing (DESIGN.md section 4): meters, settlement, prepaid plans and the
 * rules that act on money (stop at zero, auto-release).
 *
 * A meter is one billed interval of one instance at rates snapshotted when
 * it began: GPU mode (gpus x model price per hour), no-GPU mode (flat per
 * hour) or the data disk (GiB over the free size x price per GiB-day); or
 * of one renter (instance_id and node_id ''): file storage per region and
 * saved images, MiB over a free size (see "Renter-wide meters" below). A
 * meter of `amount` per `period` seconds that started at s has cost
 * floor(amount * (t - s) / period) by time t; a settlement adds what that
 * formula grew by since the previous one, so no frequency drifts.
 *
 * A meter is charged up to min(now, its end, its host's last heartbeat;
 * for file storage, its last sample while samples come):
 * time after a host's last report is never billed before the host reports
 * again, and when it reports after a silence longer than
 * nodes.offline_after, the silence is cut out of every meter (each open
 * meter ends at the last heartbeat and a new one with the same rates starts
 * now) and prepaid plans are lengthened by it.
 *
 * A renter's amounts of one store transaction are one ledger transaction
 * moving their sum, written with the meters' (or their hosts' marks') new
 * positions: an open instance meter is billed to its host's mark, which a
 * pass moves for all of the host's meters (key "settle:@HOST:MARK:USER"); a
 * meter billed alone has keys "settle:INSTANCE:METER:N" (USER for a
 * renter-wide meter), N its own moves. A meter's `charges` rows are its
 * whole UTC days (billing-meters.h, docs/design/billing.md "Marks and
 * days"); what it is billed past them is its open piece.
 *
 * "Now" is sl_time_now(): tests install a fake clock. */
#ifndef SL_BILLING_H
#define SL_BILLING_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/id.h"
#include "server.h"

#define BILLING_REVENUE_ACCOUNT "system:revenue"

/* Opens the instance's compute meter (gpu or nogpu after its mode) unless
 * one is open or a prepaid plan covers its compute. */
int billing_open_compute(struct server *srv, const char *instance_id, struct sl_error *err);
/* Opens the data disk meter when the disk is larger than the free size. */
int billing_open_storage(struct server *srv, const char *instance_id, struct sl_error *err);
/* The data disk's size changed (its row holds the new one): its open
 * data_disk meter ends now and is settled, and one at the new size (the
 * catalog's price and free size now) opens at the same second, so nothing
 * is charged at the new size before the change and nothing at the old one
 * after it. */
int billing_resize_storage(struct server *srv, const char *instance_id, struct sl_error *err);
/* Ends the instance's compute meter (and, with storage, every meter) now
 * and settles it. */
int billing_close(struct server *srv, const char *instance_id, bool storage, struct sl_error *err);

/* Renter-wide meters (docs/design/billing.md, "Storage meters"): file
 * storage per renter and region, saved images per renter. Their quantity
 * is MiB over the free size, their price per GiB-day: a meter of q MiB at
 * p micros per GiB-day has amount q * p per BILLING_STORAGE_PERIOD_S (1024
 * days), exact to the byte-free MiB with no rounding but the formula's
 * floor. */
#define BILLING_STORAGE_UNIT     (1024LL * 1024)
#define BILLING_STORAGE_PERIOD_S (1024LL * 86400)
/* A file storage sample older than this means no host mounts it. */
#define BILLING_SAMPLE_LIVE_S 300

/* The whole MiB of used_bytes over free_gib GiB (rounded down: a part of
 * a MiB is never billed); 0 when used is at most the free size. */
int64_t billing_storage_mib_over(int64_t used_bytes, int64_t free_gib);

/* The renter-wide meter (user, item, region) gets quantity: when it
 * differs from the open meter's, that meter ends (at `at`, or at
 * at_if_lower when the quantity fell; never before what it has charged)
 * and is settled, and a meter of quantity at unit_price per period opens
 * at the same second (none for quantity 0 or price 0). Runs in the
 * caller's transaction. */
int billing_renter_meter_set(struct store *st, const char *user_id, const char *item,
                             const char *region, int64_t quantity, int64_t unit_price,
                             int64_t period, int64_t at, int64_t at_if_lower, struct sl_error *err);
/* A host sampled the renter's file storage in region: used_bytes now,
 * previous_at the time of the sample before (0: none). A rise is billed
 * from now, a fall from the previous sample: each interval between two
 * samples is billed at the lower of them. */
int billing_file_storage_sample(struct store *st, const char *user_id, const char *region,
                                int64_t used_bytes, int64_t previous_at, struct sl_error *err);
/* The renter's saved images changed (a layer stored, an image deleted):
 * the image_storage meter follows their layers' bytes from now. */
int billing_image_storage_update(struct store *st, const char *user_id, struct sl_error *err);

/* Called when a node reports (its last_heartbeat not yet updated to now):
 * when it was silent longer than nodes.offline_after, cuts the silence out
 * of its meters and plans. */
int billing_host_reported(struct server *srv, const char *node_id, struct sl_error *err);

struct billing_stats {
    int64_t meters;      /* meters looked at */
    int64_t settlements; /* ledger transactions written */
    int64_t stopped;     /* instances stopped: balance or plan expiry */
    int64_t warnings;    /* events: balance low, release soon */
    int64_t released;    /* instances released after the stop period */
    int64_t renewed;     /* plans renewed */
    int64_t expired;     /* plans ended */
    int64_t elapsed_us;
};

/* Runs fn(srv, id, value, ...) in a store transaction of its own for each
 * row (id, integer) sql selects, read whole before anything is written;
 * stops at the first failure. */
typedef int billing_each_fn(struct server *srv, const char *id, int64_t value,
                            struct billing_stats *stats, struct sl_error *err);
int billing_each(struct server *srv, const char *sql, const struct db_arg *args,
                 billing_each_fn *fn, struct billing_stats *stats, struct sl_error *err);

/* Settles every meter up to now. */
int billing_settle(struct server *srv, struct billing_stats *stats, struct sl_error *err);

/* A renter's spend per hour over their open meters. */
struct billing_spend {
    char user_id[SL_ID_MAX];
    int64_t per_hour;
};

/* billing_settle, and the spend of each renter whose meters it found open
 * (*spends: *n of them, to free), read with the meters it settled: the
 * balance warnings need no second read of every open meter. */
int billing_settle_spends(struct server *srv, struct billing_stats *stats,
                          struct billing_spend **spends, size_t *n, struct sl_error *err);
/* Tests only: fn(ctx) runs in each pass between its reading of the hosts'
 * meters and its writing (NULL: nothing), where another transaction may
 * open or end a meter. */
void billing_settle_between(void (*fn)(void *ctx), void *ctx);
/* One pass of the billing loop: settle, then plans, balance, auto-release. */
int billing_run(struct server *srv, struct billing_stats *stats, struct sl_error *err);

/* Plans: "payg", "day", "week", "month". */
int billing_plan_period(const char *plan, int64_t *seconds, struct sl_error *err);
/* Moves the instance to plan: buys it (charged now, GPUs kept reserved),
 * refunds the unused part of the current one when leaving it, or only
 * changes auto_renew (-1 keeps it) when the plan is the same. */
int billing_plan_set(struct server *srv, const char *instance_id, const char *plan, int auto_renew,
                     struct sl_error *err);
/* Refunds an active plan's unused part and ends it (release does this). */
int billing_plan_end(struct server *srv, const char *instance_id, const char *reason,
                     struct sl_error *err);
/* Renews or ends the plans whose time is up (hosts that are silent wait). */
int billing_plans_expire(struct server *srv, struct billing_stats *stats, struct sl_error *err);
/* True when the instance has a prepaid plan (until the billing loop ends
 * it, which it does at the plan's end). */
int billing_plan_active(struct store *st, const char *instance_id, bool *active,
                        struct sl_error *err);

/* What the user's open meters cost per hour now. */
int billing_spend_per_hour(struct store *st, const char *user_id, int64_t *spend,
                           struct sl_error *err);
/* All the instance has been charged (meters, plans, refunds). */
int billing_instance_charged(struct store *st, const char *instance_id, int64_t *charged,
                             int64_t *rate_per_hour, struct sl_error *err);

/* A piece of a meter billed but not yet in a charges row (those are
 * written per UTC day once the day is whole): from where its rows reach
 * to where it is billed, split at UTC midnight. */
struct billing_piece {
    char user_id[SL_ID_MAX], instance_id[SL_ID_MAX], item[16];
    int64_t meter_seq, quantity, from, to, amount;
};
typedef int billing_piece_fn(const struct billing_piece *p, void *ctx, struct sl_error *err);
/* Calls fn for each open piece with an amount that starts in [from, to)
 * of the user's meters (everyone's when user_id is NULL), by meter. */
int billing_open_pieces(struct store *st, const char *user_id, int64_t from, int64_t to,
                        billing_piece_fn *fn, void *ctx, struct sl_error *err);

struct billing_check {
    int64_t meters;
    int64_t bad_charged;    /* charged != floor formula at settled_until */
    int64_t bad_sums;       /* sum of a meter's charges != its charged */
    int64_t bad_positions;  /* settled past its end, or an end before its start */
    int64_t after_release;  /* charged past the instance's release */
    int64_t bad_keys;       /* settlements of a meter not numbered 1..n */
    int64_t bad_txns;       /* ledger transactions whose user side is not their charges */
    int64_t bad_renters;    /* usage moved != what the renter's meters are billed */
    int64_t charges_total;  /* what the meters are billed, plus plans and refunds */
    int64_t ledger_charges; /* the user side of usage, plan and refund transactions */
};

/* Verifies the billing invariants over the whole store. */
int billing_check(struct store *st, struct billing_check *out, struct sl_error *err);

#endif
