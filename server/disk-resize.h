/* Bigger data disks: POST /v1/instances/{id}/disk (`suanli disk resize ID
 * --data N`). suanlid checks and records the new size, splits the data
 * disk's meter at that second and tells the host, whose agent grows the
 * disk file and its ext4 (node/disk.c disk_grow): online while the
 * instance runs, at the next start while it is stopped.
 * docs/design/instances.md, "Data disk resize". */
#ifndef SL_DISK_RESIZE_H
#define SL_DISK_RESIZE_H

#include <stdint.h>

#include "../lib/error.h"
#include "server.h"

/* The rules of a resize that need no store, in the order they are told:
 * the size (1..max_gib: 400 invalid_field), the direction (smaller: 409
 * disk_shrink, saying what to do instead), the host's room (room_gib: what
 * the host may still promise, nodes_disk_room_gib; short: 409
 * insufficient_disk with the most that fits there). id and host name the
 * instance and its host in the messages. Returns 1 to grow, 0 when the
 * disk is that size already, -1 with the refusal. */
int disk_resize_judge(const char *id, const char *host, int64_t have_gib, int64_t want_gib,
                      int64_t max_gib, int64_t room_gib, struct sl_error *err);

/* What growing from have_gib to want_gib adds to the data disk's daily
 * charge, in micros: the GiB over the free size, at price a GiB-day. */
int disk_resize_extra_per_day(int64_t have_gib, int64_t want_gib, int64_t free_gib, int64_t price,
                              int64_t *out, struct sl_error *err);

/* Grows instance id's data disk to want_gib GiB, inside the caller's
 * transaction: the rules above, the state (running: online; stopped: at the
 * next start; any other: 409 invalid_state), no copy or move of it under
 * way (409 being_cloned, being_migrated), a balance covering one day of
 * what the growth adds (409 insufficient_balance); then the row, the meter
 * split (billing_resize_storage), a disk_resize event and the host told.
 * *grown: whether anything changed. */
int instance_resize_disk(struct server *srv, const char *id, int64_t want_gib, bool *grown,
                         struct sl_error *err);

#endif
