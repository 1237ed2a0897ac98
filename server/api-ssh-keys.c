/* A renter's SSH public keys, in every instance they have: the running
 * ones' agents are told at once (instances_owner_changed). */
#include "instance-sync.h"
#include "routes.h"
#include "ssh-key.h"

#include "../lib/cleanup.h"
#include "../lib/timefmt.h"

#include <inttypes.h>
#include <string.h>

static json_t *key_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", db_text(rows, 1), "name",
                     db_text(rows, 2), "type", db_text(rows, 3), "fingerprint", db_text(rows, 4),
                     "public_key", db_text(rows, 5), "created_at", api_time(db_int(rows, 6)));
}

int api_ssh_keys_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT seq, id, name, type, fingerprint, public_key, created_at FROM ssh_keys"
                    " WHERE user_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                    DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, key_json, NULL, limit, err) : -1;
}

static void release_key(struct ssh_key *k)
{
    ssh_key_release(k);
}

int api_ssh_keys_create(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *name = NULL, *text = NULL;
    const struct sl_json_field fields[] = {
        { "name", SL_JSON_STRING, .max_len = 100, .out = &name },
        /* pasted from a terminal: a trailing newline, or a private key's lines; an
         * empty one is refused by ssh_key_parse, with a message that says what to paste */
        { "public_key", SL_JSON_STRING, .required = true, .max_len = 16384, .multiline = true,
          .out = &text },
    };
    __attribute__((cleanup(release_key))) struct ssh_key key = { 0 };
    char id[SL_ID_MAX];
    int64_t count;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        ssh_key_parse(text, &key, err) < 0)
        return -1;
    if (store_get_int(req->srv->store, "SELECT COUNT(*) FROM ssh_keys WHERE user_id = ?1",
                      DB_ARGS(DB_TEXT(req->caller.user_id)), &count, err) < 0)
        return -1;
    if (count >= req->srv->cfg.max_ssh_keys)
        return sl_fail(err, SL_E_CONFLICT, "too_many_ssh_keys",
                       "you have %" PRId64 " SSH keys, the most allowed: remove one first", count);
    if (!name || !*name)
        name = key.comment[0] ? key.comment : key.fingerprint;
    sl_id_new(id, "key-");
    if (store_exec(req->srv->store,
                   "INSERT INTO ssh_keys (id, user_id, name, type, public_key, fingerprint,"
                   " created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(req->caller.user_id), DB_TEXT(name),
                           DB_TEXT(key.type), DB_TEXT(key.normalized), DB_TEXT(key.fingerprint),
                           DB_INT(sl_time_now())),
                   err) < 0) {
        if (err->kind == SL_E_CONFLICT)
            return sl_fail(err, SL_E_CONFLICT, "duplicate_ssh_key",
                           "this key (%s) is already registered", key.fingerprint);
        return -1;
    }
    if (instances_owner_changed(req->srv->store, req->caller.user_id, err) < 0)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", id, "name", name, "type", key.type,
                        "fingerprint", key.fingerprint, "public_key", key.normalized, "created_at",
                        api_time(sl_time_now())));
    return 0;
}

int api_ssh_keys_delete(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int n = store_exec(req->srv->store, "DELETE FROM ssh_keys WHERE id = ?1 AND user_id = ?2",
                       DB_ARGS(DB_TEXT(req->params[0]), DB_TEXT(req->caller.user_id)), err);
    if (n < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_ssh_key",
                       "no SSH key '%s' of yours: list them with suanli key ls", req->params[0]);
    if (instances_owner_changed(req->srv->store, req->caller.user_id, err) < 0)
        return -1;
    api_reply(res, 204, NULL);
    return 0;
}
