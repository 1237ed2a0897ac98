/* Notifications (docs/design/notifications.md): suanlid tells a renter what
 * happened to their money and instances before they have to look.
 *
 * The notifier tails the events table by seq from a cursor kept in the
 * store (notify_cursor), so a restart neither repeats nor loses an event:
 * an event's deliveries and the cursor's move are one transaction. Each
 * event kind that notifies maps to a notification kind (notify_kind_of);
 * for each of the renter's channels (a webhook, or a confirmed email) not
 * turned off for that kind, a delivery is queued. A digest holds a storm
 * back: at most one message per kind and instance in notify.digest_window;
 * the ones held back are logged as 'digested' and counted into the next
 * message, or into a summary sent when the window ends.
 *
 * Deliveries are sent by the same loop (notify-deliver.c), outside any
 * transaction, retried with exponential backoff up to notify.attempts. A
 * webhook's address is checked when the channel is added and again at each
 * delivery, after DNS resolution, and the connection is pinned to the
 * checked address (notify_addr_blocked). */
#ifndef SL_NOTIFY_H
#define SL_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "../lib/error.h"
#include "server.h"

/* A notification kind: what a renter turns on and off. */
struct notify_kind {
    const char *event_kind; /* events.kind */
    const char *kind;       /* what the renter sees and opts out of */
    const char *title;      /* the subject's words */
};

/* The kind an event of event_kind notifies as, or NULL when it does not.
 * Issue 15 item 3's hints record events of kind "hint": they notify as
 * "hint" (the hook is this table's row). */
const struct notify_kind *notify_kind_of(const char *event_kind);
/* Whether kind is a notification kind a renter may turn off or on. */
bool notify_kind_known(const char *kind);
/* The table, for listing. */
extern const struct notify_kind notify_kinds[];
extern const size_t notify_kinds_count;

/* The digest's decision for one event: send it now (counting `held`
 * others into it) or hold it back. have: whether the (instance, kind) has
 * been sent before, at sent_at. */
bool notify_digest_sends(bool have, int64_t sent_at, int64_t now, int64_t window);
/* Whether a held-back count is due as a summary of its own. */
bool notify_digest_flush_due(int64_t held, int64_t sent_at, int64_t now, int64_t window);

/* The wait before the next try after `attempts` failed ones: base doubled
 * per try, at most an hour. */
int64_t notify_retry_delay(int64_t base, int64_t attempts);

/* Whether a webhook may not reach this address unless the operator allows
 * private ones: loopback, RFC 1918, CGNAT (100.64/10), link-local (the
 * cloud metadata address 169.254.169.254 among them), ULA, multicast,
 * unspecified, broadcast, reserved and documentation ranges, and the
 * IPv4-mapped, NAT64 and 6to4 forms of those. */
bool notify_addr_blocked(const struct sockaddr *sa);

/* X-Suanli-Signature's value for a body sent at timestamp ts:
 * "v1=" + hex HMAC-SHA256(secret, ts + "." + body). out holds
 * NOTIFY_SIGNATURE_MAX bytes. */
#define NOTIFY_SIGNATURE_MAX 72
void notify_sign(const char *secret, int64_t ts, const char *body, size_t len, char *out);

/* Checks a webhook URL: http or https, a host, no user name or password,
 * and (unless private addresses are allowed) every address its host
 * resolves to is public. -1 with SL_E_INVALID "invalid_webhook" or
 * "webhook_refused" otherwise. */
int notify_webhook_check(const struct server *srv, const char *url, struct sl_error *err);

/* Checks an email address for a channel: one plain addr-spec, no spaces,
 * quotes, angle brackets or control characters. */
int notify_email_check(const char *addr, struct sl_error *err);

/* One pass: new events become deliveries, digests that are due become
 * summaries, due deliveries are sent, the old log is dropped. */
struct notify_stats {
    int64_t events, queued, sent, failed, retried;
};
int notify_run(struct server *srv, struct notify_stats *stats, struct sl_error *err);

/* Ends the sending of the current pass after the delivery in flight
 * (suanlid stopping): a receiver that answers slowly holds the stop up by
 * one request's timeout at most, not by a whole batch's. Those not sent
 * stay due and go at the next start. */
void notify_stop(void);

/* Queues a delivery of a message not from an event (a confirmation code, a
 * test) to channel_id of user_id, to go out at the next pass. The caller
 * holds a transaction or not. */
int notify_queue(struct server *srv, const char *user_id, const char *channel_id, const char *kind,
                 const char *instance_id, const char *subject, const char *body_json,
                 struct sl_error *err);

/* notify-deliver.c: sends one delivery of kind to the channel (kind
 * "webhook" or "email", target, secret opened). Returns 0 on success, or
 * -1 with err's message saying why (a short excerpt of an answer at most). */
int notify_send_webhook(const struct server *srv, const char *url, const char *secret,
                        const char *delivery_id, const char *kind, const char *body,
                        struct sl_error *err);
int notify_send_email(const struct server *srv, const char *to, const char *delivery_id,
                      const char *subject, const char *text, struct sl_error *err);

/* The plain text of a delivery's JSON body, for email. A new string. */
char *notify_text(const char *body_json);

#endif
