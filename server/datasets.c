/* Public data: what the nodes are told and what they say (datasets.h). */
#include "datasets.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/timefmt.h"

#include <stdint.h>
#include <string.h>

bool dataset_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 64 || name[0] == '.')
        return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

json_t *datasets_desired(struct store *st, const char *node_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT d.name, d.source FROM datasets d JOIN nodes n ON n.id = ?1"
                    " WHERE d.region_id = '' OR d.region_id = n.region_id ORDER BY d.name",
                    DB_ARGS(DB_TEXT(node_id)), err);
    if (!rows)
        return NULL;
    json_t *out = json_array();
    int rc;
    while ((rc = db_next(rows, err)) == 1) {
        const char *source = db_text(rows, 1);
        if (strncmp(source, "sha256:", 7) == 0)
            json_array_append_new(
                out, json_pack("{s:s, s:s}", "name", db_text(rows, 0), "sha256", source + 7));
        else if (strncmp(source, "path:", 5) == 0)
            json_array_append_new(
                out, json_pack("{s:s, s:s}", "name", db_text(rows, 0), "path", source + 5));
    }
    if (rc < 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

int datasets_apply_report(struct store *st, const char *node_id, json_t *report,
                          struct sl_error *err)
{
    size_t i;
    json_t *d;

    if (store_exec(st, "DELETE FROM node_datasets WHERE node_id = ?1", DB_ARGS(DB_TEXT(node_id)),
                   err) < 0)
        return -1;
    json_array_foreach(report, i, d)
    {
        const char *name = NULL, *state = NULL, *message = NULL;
        int64_t size = 0;
        const struct sl_json_field f[] = {
            { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &name },
            { "state", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 16,
              .out = &state },
            { "size_bytes", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &size },
            { "message", SL_JSON_STRING, .max_len = 1000, .multiline = true, .out = &message },
        };
        if (sl_json_fields(d, f, ARRAY_SIZE(f), err) < 0) {
            sl_error_prefix(err, "datasets[%zu]", i);
            return -1;
        }
        if (strcmp(state, "ready") && strcmp(state, "building") && strcmp(state, "failed"))
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "datasets[%zu].state must be ready, building or failed", i);
        if (store_exec(st,
                       "INSERT INTO node_datasets (node_id, name, state, size_bytes, message,"
                       " updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (node_id, name)"
                       " DO UPDATE SET state = excluded.state, size_bytes = excluded.size_bytes,"
                       " message = excluded.message, updated_at = excluded.updated_at",
                       DB_ARGS(DB_TEXT(node_id), DB_TEXT(name), DB_TEXT(state), DB_INT(size),
                               DB_TEXT(message ? message : ""), DB_INT(sl_time_now())),
                       err) < 0)
            return -1;
    }
    return 0;
}
