/* The console's live updates: GET /v1/events/stream (docs/design/
 * control-plane.md, "The event stream"). Each open stream is a connection
 * parked in the HTTP library (suspended, not a thread) and a buffer here;
 * one thread finds what changed and writes it into the buffers of the
 * streams whose user it concerns:
 *
 *   event: event      a new row of the caller's events (as GET /v1/events)
 *   event: instance   one of the caller's instances, as GET /v1/instances/{id}
 *   event: balance    {"balance_micros": N} after a posting to the caller's account
 *
 * Every message has an id, "E.R.L": the last event seq, instance revision
 * (instance_revisions, written by triggers) and ledger entry seq it
 * includes. A client that reconnects with Last-Event-ID gets every event
 * after E, each instance changed after R once in its current form, and the
 * balance if it moved after L: nothing lost, no event twice. A stream
 * opened without one starts from the newest of the user's own rows (no id
 * tells a renter how busy the others are) and begins with the state now:
 * each instance not released, and the balance.
 *
 * The thread looks when a commit noted a change (store_note_change) and
 * twice a second otherwise: three MAX() lookups when nothing changed, and
 * per-user queries only for the users something happened to. */
#ifndef SL_EVENT_STREAM_H
#define SL_EVENT_STREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/error.h"
#include "api.h"
#include "server.h"

/* Seconds between keep-alive comments on a quiet stream. */
#define EVENT_STREAM_KEEPALIVE_S 15

struct event_streams;
struct event_stream;

/* Starts the streams' thread; it reads srv->store. NULL with err filled. */
struct event_streams *event_streams_start(struct server *srv, struct sl_error *err);

/* Ends every stream (their readers see the end once their buffers are
 * read), refuses new ones and stops the thread. The streams' memory stays
 * until the transport has closed them all: then event_streams_free. */
void event_streams_stop(struct event_streams *hub);
void event_streams_free(struct event_streams *hub);

/* Something committed: a store commit hook (store.h). */
void event_streams_wake(void *hub);

/* Opens user_id's stream from `from` (NULL: from now), for as long as the
 * token token_id is valid (checked before each send and keep-alive: a
 * revoked session or token ends the stream). resume(ctx) is called
 * from the streams' thread, once per event_stream_park that returned false,
 * when there is something to read. alive(ctx) says whether the client is
 * still connected: asked of the user's streams when they are at the limit,
 * so that tabs closed since free their places at once (a parked connection
 * notices its client gone only when it next writes). NULL with err: 429
 * too_many_streams
 * (events.max_streams_per_user), 503 when stopping. */
struct event_stream *event_stream_open(struct event_streams *hub, const char *user_id,
                                       const char *token_id, const struct event_cursor *from,
                                       void (*resume)(void *ctx), bool (*alive)(void *ctx),
                                       void *ctx, struct sl_error *err);

/* Copies up to max bytes of what is due: > 0 bytes copied; 0 nothing now
 * (the transport parks the connection, then calls event_stream_park); -1
 * the stream has ended. From the transport's threads. */
ssize_t event_stream_read(struct event_stream *st, char *buf, size_t max);

/* After parking: true when something came meanwhile (the transport
 * un-parks at once); false: resume(ctx) will come. */
bool event_stream_park(struct event_stream *st);

/* The transport is done with the stream (its connection closed). */
void event_stream_close(struct event_stream *st);

/* "E.R.L" as the stream sends it; -1 with err (400 invalid_last_event_id). */
int event_cursor_parse(const char *text, struct event_cursor *c, struct sl_error *err);

/* user_id's instances whose revision is after `after`, in revision order:
 * about `limit` of them, never fewer than all of a revision (one statement
 * may bump many instances to one revision, and a cursor past it must have
 * sent them all). *out is the caller's to free; -1 with err. */
struct instance_change {
    char id[SL_ID_MAX];
    int64_t rev;
};
int event_instance_changes(struct store *store, const char *user_id, int64_t after, int limit,
                           struct instance_change **out, size_t *n, struct sl_error *err);

#endif
