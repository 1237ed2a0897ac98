/* /v1/notify/...: a renter's notification channels, the kinds they turned
 * off, and the delivery log (notify.h). Everything is the caller's own: a
 * channel or log entry of another renter is 404, as one that does not
 * exist. */
#include "notify.h"
#include "routes.h"
#include "secrets.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/timeconst.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* Wrong confirmation codes before a channel must be added again. */
#define CONFIRM_TRIES 5

static json_t *channel_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:s, s:s, s:s, s:b, s:o}", "id", db_text(rows, 1), "kind", db_text(rows, 2),
                     "target", db_text(rows, 3), "confirmed",
                     strcmp(db_text(rows, 2), "webhook") == 0 || db_int(rows, 4) == 1, "created_at",
                     api_time(db_int(rows, 5)));
}

int api_notify_channels_list(struct api_request *req, struct api_response *res,
                             struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT seq, id, kind, target, confirmed, created_at FROM notify_channels"
                    " WHERE user_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                    DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, channel_json, NULL, limit, err) : -1;
}

/* A webhook's address is resolved and checked before the transaction, so
 * no writer waits for DNS (the check is repeated at each delivery). */
int api_notify_channels_create_prepare(struct api_request *req, struct sl_error *err)
{
    struct sl_error ignored = SL_ERROR_INIT;

    if (!req->json && req->body_len > 0)
        req->json = sl_json_parse_object(req->body, req->body_len, &ignored);
    const char *kind = json_string_value(json_object_get(req->json, "kind"));
    const char *target = json_string_value(json_object_get(req->json, "target"));
    if (!kind || !target || strcmp(kind, "webhook") != 0)
        return 0;
    if (notify_webhook_check(req->srv, target, err) < 0)
        return -1;
    req->prepared = xstrdup(target);
    req->prepared_free = free;
    return 0;
}

/* Confirmation and test messages a renter had sent in the last hour. */
static int manual_allowed(struct api_request *req, struct sl_error *err)
{
    int64_t count;

    if (store_get_int(
            req->srv->store,
            "SELECT COUNT(*) FROM notify_deliveries WHERE user_id = ?1"
            " AND kind IN ('confirm', 'test') AND created_at > ?2",
            DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(sl_time_now() - SL_SEC_PER_HOUR)), &count,
            err) < 0)
        return -1;
    if (count >= req->srv->cfg.notify_manual_per_hour)
        return sl_fail(err, SL_E_RATE_LIMITED, "too_many_messages",
                       "%" PRId64 " confirmation and test messages were sent for you in the last "
                       "hour, the most allowed: try again later",
                       count);
    return 0;
}

static void code_hash(const struct server *srv, const char *channel_id, const char *code,
                      char hex[SL_HASH_HEX_MAX])
{
    char data[96];
    int len = snprintf(data, sizeof(data), "notify_confirm:%s:%s", channel_id, code);
    sl_keyed_hash_hex(srv->id_hash_key, data, (size_t)len, hex);
}

static int queue_confirmation(struct api_request *req, const char *channel_id, const char *code,
                              struct sl_error *err)
{
    /* fixed words: a renter cannot make this address receive their text */
    cleanup_free char *message = xasprintf(
        "Someone asked for suanli notifications to be sent to this address. The code is %s: "
        "enter it with `suanli notify confirm %s %s`. If it was not you, ignore this message: "
        "nothing else is sent here until the code is entered.",
        code, channel_id, code);
    cleanup_json json_t *body = json_pack("{s:s, s:s, s:s, s:s}", "kind", "confirm", "title",
                                          "confirm this address for suanli notifications",
                                          "message", message, "instance_id", "");
    cleanup_free char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    return notify_queue(req->srv, req->caller.user_id, channel_id, "confirm", "",
                        "[suanli] confirm this address for notifications", text, err);
}

int api_notify_channels_create(struct api_request *req, struct api_response *res,
                               struct sl_error *err)
{
    const char *kind = NULL, *target = NULL;
    const struct sl_json_field fields[] = {
        { "kind", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 16, .out = &kind },
        { "target", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 2048,
          .out = &target },
    };
    struct store *st = req->srv->store;
    char id[SL_ID_MAX], code[16] = "", hash[SL_HASH_HEX_MAX] = "";
    cleanup_free char *secret = NULL, *sealed = NULL;
    int64_t count;
    int rc;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    bool webhook = strcmp(kind, "webhook") == 0;
    if (!webhook && strcmp(kind, "email") != 0)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "kind '%s' is not a channel: webhook or email", kind);
    if (webhook && (!req->prepared || strcmp(req->prepared, target) != 0))
        return sl_fail(err, SL_E_INTERNAL, "internal", "the webhook URL was not checked");
    if (!webhook) {
        if (notify_email_check(target, err) < 0)
            return -1;
        if (!req->srv->cfg.notify_smtp_url || !*req->srv->cfg.notify_smtp_url)
            return sl_fail(err, SL_E_CONFLICT, "email_disabled",
                           "this server sends no email (its operator has not set "
                           "notify.smtp_url): use a webhook");
    }
    if (store_get_int(st, "SELECT COUNT(*) FROM notify_channels WHERE user_id = ?1",
                      DB_ARGS(DB_TEXT(req->caller.user_id)), &count, err) < 0)
        return -1;
    if (count >= req->srv->cfg.notify_max_channels)
        return sl_fail(err, SL_E_CONFLICT, "too_many_channels",
                       "you have %" PRId64 " notification channels, the most allowed: remove "
                       "one first (suanli notify rm ID)",
                       count);
    if ((rc = store_get_int(st,
                            "SELECT seq FROM notify_channels WHERE user_id = ?1 AND kind = ?2"
                            " AND target = ?3",
                            DB_ARGS(DB_TEXT(req->caller.user_id), DB_TEXT(kind), DB_TEXT(target)),
                            &count, err)) < 0)
        return -1;
    if (rc == 1)
        return sl_fail(err, SL_E_CONFLICT, "duplicate_channel",
                       "you already have this %s channel: see suanli notify ls", kind);
    if (!webhook && manual_allowed(req, err) < 0)
        return -1;
    sl_id_new(id, "nch-");
    if (webhook) {
        /* 256 bits, shown once; stored sealed (secrets.h) */
        secret = xmalloc(80);
        char hex[65];
        sl_random_hex(hex, 32);
        snprintf(secret, 80, "whsec_%s", hex);
        sodium_memzero(hex, sizeof(hex));
        char context[64];
        snprintf(context, sizeof(context), "notify_webhook:%s", id);
        sealed = secrets_seal(req->srv, context, secret);
    } else {
        snprintf(code, sizeof(code), "%08" PRIu32, randombytes_uniform(100000000));
        code_hash(req->srv, id, code, hash);
    }
    if (store_exec(st,
                   "INSERT INTO notify_channels (id, user_id, kind, target, secret, confirm_hash,"
                   " confirmed, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(req->caller.user_id), DB_TEXT(kind),
                           DB_TEXT(target), DB_TEXT(sealed ? sealed : ""), DB_TEXT(hash),
                           DB_INT(webhook ? 1 : 0), DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    if (!webhook && queue_confirmation(req, id, code, err) < 0)
        return -1;
    sodium_memzero(code, sizeof(code));
    json_t *out = json_pack("{s:s, s:s, s:s, s:b, s:o}", "id", id, "kind", kind, "target", target,
                            "confirmed", webhook, "created_at", api_time(sl_time_now()));
    if (secret) {
        json_object_set_new(out, "secret", json_string(secret));
        sodium_memzero(secret, strlen(secret));
    }
    api_reply(res, 201, out);
    return 0;
}

static int no_channel(struct api_request *req, struct sl_error *err)
{
    return sl_fail(err, SL_E_NOT_FOUND, "no_such_channel",
                   "no notification channel '%s' of yours: list them with suanli notify ls",
                   req->params[0]);
}

int api_notify_channels_delete(struct api_request *req, struct api_response *res,
                               struct sl_error *err)
{
    int n =
        store_exec(req->srv->store, "DELETE FROM notify_channels WHERE id = ?1 AND user_id = ?2",
                   DB_ARGS(DB_TEXT(req->params[0]), DB_TEXT(req->caller.user_id)), err);
    if (n < 0)
        return -1;
    if (n == 0)
        return no_channel(req, err);
    api_reply(res, 204, NULL);
    return 0;
}

/* Runs in its own transactions (API_OWN_TX): a wrong code's count must stay
 * when the request fails. */
int api_notify_channels_confirm(struct api_request *req, struct api_response *res,
                                struct sl_error *err)
{
    const char *code = NULL;
    const struct sl_json_field fields[] = {
        { "code", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 32, .out = &code },
    };
    struct store *st = req->srv->store;
    char stored[SL_HASH_HEX_MAX], given[SL_HASH_HEX_MAX], kind[16];
    int64_t tries, confirmed;
    int rc;

    {
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT kind, confirm_hash, confirm_tries, confirmed FROM notify_channels"
                        " WHERE id = ?1 AND user_id = ?2",
                        DB_ARGS(DB_TEXT(req->params[0]), DB_TEXT(req->caller.user_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            return no_channel(req, err);
        snprintf(kind, sizeof(kind), "%s", db_text(rows, 0));
        snprintf(stored, sizeof(stored), "%s", db_text(rows, 1));
        tries = db_int(rows, 2);
        confirmed = db_int(rows, 3);
    }
    /* another's channel is 404, whatever the body */
    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (strcmp(kind, "email") != 0 || confirmed == 1) {
        api_reply(res, 200, json_pack("{s:s, s:b}", "id", req->params[0], "confirmed", 1));
        return 0;
    }
    if (tries >= CONFIRM_TRIES)
        return sl_fail(err, SL_E_CONFLICT, "too_many_tries",
                       "%d wrong codes were entered for this address: remove it (suanli notify rm "
                       "%s) and add it again for a new code",
                       CONFIRM_TRIES, req->params[0]);
    code_hash(req->srv, req->params[0], code, given);
    if (!sl_secret_equal(stored, given)) {
        if (store_exec(st,
                       "UPDATE notify_channels SET confirm_tries = confirm_tries + 1"
                       " WHERE id = ?1 AND user_id = ?2",
                       DB_ARGS(DB_TEXT(req->params[0]), DB_TEXT(req->caller.user_id)), err) < 0)
            return -1;
        return sl_fail(err, SL_E_INVALID, "wrong_code",
                       "that is not the code sent to this address: check the email (%" PRId64
                       " tries left)",
                       CONFIRM_TRIES - tries - 1);
    }
    if (store_exec(st,
                   "UPDATE notify_channels SET confirmed = 1, confirm_hash = ''"
                   " WHERE id = ?1 AND user_id = ?2",
                   DB_ARGS(DB_TEXT(req->params[0]), DB_TEXT(req->caller.user_id)), err) < 0)
        return -1;
    api_reply(res, 200, json_pack("{s:s, s:b}", "id", req->params[0], "confirmed", 1));
    return 0;
}

int api_notify_channels_test(struct api_request *req, struct api_response *res,
                             struct sl_error *err)
{
    char kind[16];
    int64_t confirmed = 0;
    int rc;
    {
        cleanup_rows struct db_rows *rows = store_query(
            req->srv->store,
            "SELECT kind, confirmed FROM notify_channels WHERE id = ?1 AND user_id = ?2",
            DB_ARGS(DB_TEXT(req->params[0]), DB_TEXT(req->caller.user_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            return no_channel(req, err);
        snprintf(kind, sizeof(kind), "%s", db_text(rows, 0));
        confirmed = db_int(rows, 1);
    }
    if (strcmp(kind, "email") == 0 && confirmed != 1)
        return sl_fail(err, SL_E_CONFLICT, "not_confirmed",
                       "the address is not confirmed yet: enter the code mailed to it with "
                       "suanli notify confirm %s CODE",
                       req->params[0]);
    if (manual_allowed(req, err) < 0)
        return -1;
    cleanup_json json_t *body =
        json_pack("{s:s, s:s, s:s, s:s}", "kind", "test", "title", "a test notification", "message",
                  "This is a test: notifications reach you here.", "instance_id", "");
    cleanup_free char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    if (notify_queue(req->srv, req->caller.user_id, req->params[0], "test", "",
                     "[suanli] a test notification", text, err) < 0)
        return -1;
    api_reply(res, 202, json_pack("{s:s, s:s}", "id", req->params[0], "state", "pending"));
    return 0;
}

int api_notify_kinds_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    json_t *items = json_array();
    cleanup_json json_t *out = json_pack("{s:o, s:n}", "items", items, "next_cursor");

    for (size_t i = 0; i < notify_kinds_count; i++) {
        const struct notify_kind *k = &notify_kinds[i];
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen = seen || strcmp(notify_kinds[j].kind, k->kind) == 0;
        if (seen)
            continue;
        int64_t off;
        int rc = store_get_int(req->srv->store,
                               "SELECT 1 FROM notify_optouts WHERE user_id = ?1 AND kind = ?2",
                               DB_ARGS(DB_TEXT(req->caller.user_id), DB_TEXT(k->kind)), &off, err);
        if (rc < 0)
            return -1;
        json_array_append_new(items, json_pack("{s:s, s:s, s:b}", "kind", k->kind, "title",
                                               k->title, "enabled", rc == 0));
    }
    api_reply(res, 200, json_incref(out));
    return 0;
}

int api_notify_kinds_set(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    bool enabled = true;
    const struct sl_json_field fields[] = {
        { "enabled", SL_JSON_BOOL, .required = true, .out = &enabled },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (!notify_kind_known(req->params[0]))
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_kind",
                       "'%s' is not a notification kind: list them with suanli notify ls",
                       req->params[0]);
    if (store_exec(req->srv->store,
                   enabled ? "DELETE FROM notify_optouts WHERE user_id = ?1 AND kind = ?2"
                           : "INSERT INTO notify_optouts (user_id, kind) VALUES (?1, ?2)"
                             " ON CONFLICT (user_id, kind) DO NOTHING",
                   DB_ARGS(DB_TEXT(req->caller.user_id), DB_TEXT(req->params[0])), err) < 0)
        return -1;
    api_reply(res, 200, json_pack("{s:s, s:b}", "kind", req->params[0], "enabled", enabled));
    return 0;
}

static json_t *delivery_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:o, s:o}", "id", db_text(rows, 1),
                     "channel_id", db_text(rows, 2), "channel_kind", db_text(rows, 3), "kind",
                     db_text(rows, 4), "instance_id", db_text(rows, 5), "state", db_text(rows, 6),
                     "attempts", (json_int_t)db_int(rows, 7), "last_error", db_text(rows, 8),
                     "created_at", api_time(db_int(rows, 9)), "updated_at",
                     api_time(db_int(rows, 10)));
}

int api_notify_log(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT d.seq, d.id, d.channel_id, COALESCE(c.kind, ''), d.kind, d.instance_id, d.state,"
        " d.attempts, d.last_error, d.created_at, d.updated_at FROM notify_deliveries d"
        " LEFT JOIN notify_channels c ON c.id = d.channel_id"
        " WHERE d.user_id = ?1 AND d.seq > ?2 ORDER BY d.seq LIMIT ?3",
        DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, delivery_json, NULL, limit, err) : -1;
}
