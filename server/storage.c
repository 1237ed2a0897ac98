/* File storage: backends, renters' directories, the nodes' part
 * (storage.h). */
#include "storage.h"

#include "billing.h"

#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/timefmt.h"

#include <stdio.h>
#include <string.h>

int storage_backend_get(struct store *st, const char *region, struct storage_backend *out,
                        struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st, "SELECT kind, spec, quota_gib FROM storage_backends WHERE region_id = ?1",
                    DB_ARGS(DB_TEXT(region)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    snprintf(out->kind, sizeof(out->kind), "%s", rc ? db_text(rows, 0) : "local");
    snprintf(out->spec, sizeof(out->spec), "%s", rc ? db_text(rows, 1) : "");
    out->quota_gib = rc ? db_int(rows, 2) : STORAGE_DEFAULT_QUOTA_GIB;
    return 0;
}

/* SERVER:/VOLUME: a host name or IPv4 address that every host of the
 * region reaches glusterd at, and a Gluster volume's name (letters, digits,
 * '-', '_'). Nothing else: the agent passes both to the FUSE client. */
static int gluster_spec_check(const char *spec, struct sl_error *err)
{
    const char *colon = spec ? strstr(spec, ":/") : NULL;
    size_t host = colon ? (size_t)(colon - spec) : 0;
    const char *volume = colon ? colon + 2 : "";
    size_t vlen = strlen(volume);

    if (!colon || host == 0 || host > 253 || vlen == 0 || vlen > 64)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "the glusterfs backend's spec is SERVER:/VOLUME, such as "
                       "gluster1.example.com:/suanli (a server of the volume that every host "
                       "reaches, and the volume's name)");
    if (strspn(spec, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != host ||
        spec[0] == '-' || spec[0] == '.')
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "the glusterfs backend's server must be a host name or IPv4 address "
                       "(letters, digits, '.', '-')");
    if (strspn(volume, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != vlen)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "the glusterfs backend's volume name holds letters, digits, '-' and '_' "
                       "only (a volume, not a directory in one)");
    return 0;
}

int storage_backend_check(const char *kind, const char *spec, struct sl_error *err)
{
    if (strcmp(kind, "local") == 0) {
        if (spec && *spec)
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "the local backend takes no spec: each host keeps the storage in its "
                           "data directory");
        return 0;
    }
    if (strcmp(kind, "glusterfs") == 0)
        return gluster_spec_check(spec, err);
    if (strcmp(kind, "mount") != 0)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "kind must be local, mount or glusterfs");
    if (!spec || spec[0] != '/' || strcmp(spec, "/") == 0)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "the mount backend's spec is the absolute path of the shared mount on "
                       "every host, such as /mnt/cephfs/suanli");
    for (const char *p = spec; *p; p++)
        if ((unsigned char)*p < 0x21 || *p == 0x7f || *p == ',' || *p == '\\')
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "the mount backend's path must not hold spaces, commas, backslashes "
                           "or control characters");
    /* no "." or ".." part and no empty one: the path says where it is */
    cleanup_free char *copy = strdup(spec);
    char *save = NULL;
    size_t n = strlen(spec);
    if (!copy || spec[n - 1] == '/' || strstr(spec, "//"))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "write the mount backend's path without a trailing or doubled '/'");
    for (char *part = strtok_r(copy, "/", &save); part; part = strtok_r(NULL, "/", &save))
        if (strcmp(part, ".") == 0 || strcmp(part, "..") == 0)
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "the mount backend's path must not hold '.' or '..' parts");
    return 0;
}

int storage_dir_ensure(struct store *st, const char *user_id, const char *region,
                       struct sl_error *err)
{
    return store_exec(st,
                      "INSERT INTO storage_dirs (user_id, region_id, created_at) VALUES (?1, ?2,"
                      " ?3) ON CONFLICT (user_id, region_id) DO NOTHING",
                      DB_ARGS(DB_TEXT(user_id), DB_TEXT(region), DB_INT(sl_time_now())), err) < 0
               ? -1
               : 0;
}

int storage_node_dirs_ensure(struct store *st, const char *node_id, struct sl_error *err)
{
    int n = store_exec(st,
                       "INSERT INTO storage_dirs (user_id, region_id, created_at)"
                       " SELECT DISTINCT i.user_id, i.region_id, ?2 FROM instances i"
                       " WHERE i.node_id = ?1 AND i.state != 'released' AND NOT EXISTS"
                       " (SELECT 1 FROM storage_dirs s WHERE s.user_id = i.user_id"
                       " AND s.region_id = i.region_id)",
                       DB_ARGS(DB_TEXT(node_id), DB_INT(sl_time_now())), err);
    if (n <= 0)
        return n;
    if (store_exec(st, "UPDATE nodes SET desired_revision = desired_revision + 1 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(node_id)), err) < 0)
        return -1;
    store_note_change(st);
    return 0;
}

json_t *storage_desired(struct store *st, const char *node_id, json_t *items, struct sl_error *err)
{
    char region[128];
    struct storage_backend b;
    int rc;

    {
        cleanup_rows struct db_rows *rows = store_query(
            st, "SELECT region_id FROM nodes WHERE id = ?1", DB_ARGS(DB_TEXT(node_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return NULL;
        snprintf(region, sizeof(region), "%s", rc ? db_text(rows, 0) : "");
    }
    if (storage_backend_get(st, region, &b, err) < 0)
        return NULL;
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT i.id, s.number FROM instances i JOIN storage_dirs s"
                    " ON s.user_id = i.user_id AND s.region_id = ?2"
                    " WHERE i.node_id = ?1 AND i.state != 'released' ORDER BY s.number",
                    DB_ARGS(DB_TEXT(node_id), DB_TEXT(region)), err);
    if (!rows)
        return NULL;
    cleanup_json json_t *dirs = json_array();
    int64_t last = 0;
    while ((rc = db_next(rows, err)) == 1) {
        const char *id = db_text(rows, 0);
        int64_t number = db_int(rows, 1);
        size_t i;
        json_t *item;
        json_array_foreach(items, i, item)
        {
            const char *iid = json_string_value(json_object_get(item, "id"));
            if (iid && strcmp(iid, id) == 0)
                json_object_set_new(item, "storage", json_integer((json_int_t)number));
        }
        if (number != last)
            json_array_append_new(dirs, json_integer((json_int_t)number));
        last = number;
    }
    if (rc < 0)
        return NULL;
    return json_pack("{s:s, s:s, s:I, s:O}", "kind", b.kind, "spec", b.spec, "quota_gib",
                     (json_int_t)b.quota_gib, "dirs", dirs);
}

int storage_apply_report(struct store *st, const char *node_id, json_t *report,
                         struct sl_error *err)
{
    size_t i;
    json_t *d;

    json_array_foreach(report, i, d)
    {
        int64_t number = 0, used = 0, size = 0;
        const struct sl_json_field f[] = {
            { "number", SL_JSON_INT, .required = true, .min = 1, .max = INT64_MAX, .out = &number },
            { "used_bytes", SL_JSON_INT, .required = true, .min = 0, .max = INT64_MAX,
              .out = &used },
            { "size_bytes", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &size },
        };
        if (sl_json_fields(d, f, ARRAY_SIZE(f), err) < 0) {
            sl_error_prefix(err, "storage[%zu]", i);
            return -1;
        }
        /* only a directory of the node's own region */
        char user[SL_ID_MAX], region[128];
        int64_t previous_at;
        int rc;
        {
            cleanup_rows struct db_rows *rows = store_query(
                st,
                "SELECT user_id, region_id, COALESCE(used_at, 0) FROM storage_dirs"
                " WHERE number = ?1 AND region_id = (SELECT region_id FROM nodes WHERE id = ?2)",
                DB_ARGS(DB_INT(number), DB_TEXT(node_id)), err);
            if (!rows || (rc = db_next(rows, err)) < 0)
                return -1;
            if (rc == 0)
                continue;
            snprintf(user, sizeof(user), "%s", db_text(rows, 0));
            snprintf(region, sizeof(region), "%s", db_text(rows, 1));
            previous_at = db_int(rows, 2);
        }
        if (store_exec(st,
                       "UPDATE storage_dirs SET used_bytes = ?2, size_bytes = ?3, used_at = ?4"
                       " WHERE number = ?1",
                       DB_ARGS(DB_INT(number), DB_INT(used), DB_INT(size), DB_INT(sl_time_now())),
                       err) < 0)
            return -1;
        /* the file storage meter follows the use (docs/design/billing.md) */
        if (billing_file_storage_sample(st, user, region, used, previous_at, err) < 0)
            return -1;
    }
    return 0;
}
