/* Agents waiting for their desired state to change (GET
 * /v1/nodes/{id}/desired?after=REVISION&wait=SECONDS): each is a suspended
 * connection, not a thread, so a thousand waiting agents cost a thousand
 * list entries. A change of any node's desired revision (store_note_change
 * after instances_node_changed, at commit) wakes the list's thread, which
 * reads the revisions once and resumes every waiter whose node passed its
 * REVISION; the others are resumed when their time is up. */
#ifndef SL_DESIRED_WAIT_H
#define SL_DESIRED_WAIT_H

#include <stdint.h>

#include "../lib/error.h"
#include "server.h"

struct desired_waits;

/* Starts the list's thread; it reads srv->store. NULL with err filled. */
struct desired_waits *desired_waits_start(struct server *srv, struct sl_error *err);

/* Resumes every waiter (their handlers answer with what they have) and
 * stops the thread. */
void desired_waits_stop(struct desired_waits *w);

/* resume(ctx) is called once, from the list's thread, when node_id's
 * desired revision passes after or at deadline_ms (sl_time_mono_ms), or
 * when the list stops. */
void desired_waits_add(struct desired_waits *w, const char *node_id, int64_t after,
                       int64_t deadline_ms, void (*resume)(void *ctx), void *ctx);

/* Some node's desired revision changed: a store commit hook (store.h). */
void desired_waits_wake(void *w);

#endif
