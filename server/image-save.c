/* Saved images: a renter saves an instance as an image, deletes and shares
 * it (image-save.h). The host of the instance captures the system disk's
 * changes as one layer and uploads it here; the image then reaches every
 * host of the region as an uploaded archive does (instance-sync.c). */
#include "billing.h"
#include "image-save.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static bool name_ok(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n > 64 || name[0] == '.')
        return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

int image_save_verb_check(struct server *srv, const char *id, enum instance_verb verb,
                          struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        srv->store, "SELECT name FROM images WHERE source_instance = ?1 AND save_state = 'saving'",
        DB_ARGS(DB_TEXT(id)), err);
    int rc;

    (void)verb;
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    return sl_fail(err, SL_E_CONFLICT, "being_saved",
                   "instance '%s' is being saved as image '%s': its host is reading its system "
                   "disk. Wait until suanli image ls shows the image ready or failed, then try "
                   "again",
                   id, db_text(rows, 0));
}

json_t *image_saves_desired(struct server *srv, const char *node_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT i.name, i.source_instance, i.parent FROM images i"
                    " JOIN instances n ON n.id = i.source_instance"
                    " WHERE i.save_state = 'saving' AND n.node_id = ?1 ORDER BY i.seq",
                    DB_ARGS(DB_TEXT(node_id)), err);
    int rc;

    if (!rows)
        return NULL;
    json_t *out = json_array();
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(out,
                              json_pack("{s:s, s:s, s:s}", "image", db_text(rows, 0), "instance",
                                        db_text(rows, 1), "parent", db_text(rows, 2)));
    if (rc < 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static int bump_nodes(struct server *srv, const char *region, struct sl_error *err)
{
    if (store_exec(srv->store,
                   "UPDATE nodes SET desired_revision = desired_revision + 1"
                   " WHERE removed_at IS NULL AND (?1 = '' OR region_id = ?1)",
                   DB_ARGS(DB_TEXT(region)), err) < 0)
        return -1;
    store_note_change(srv->store); /* waiting agents hear of it (desired-wait.h) */
    return 0;
}

/* POST /v1/instances/{id}/image {name, description}: 202, the image in
 * state saving; the host's verdict turns it ready or failed. */
int api_instances_image_save(struct api_request *req, struct api_response *res,
                             struct sl_error *err)
{
    struct server *srv = req->srv;
    const char *id = req->instance.id, *name = NULL, *description = NULL;
    const struct sl_json_field fields[] = {
        { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &name },
        { "description", SL_JSON_STRING, .max_len = 200, .out = &description },
    };
    int64_t n;
    int rc;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (!name_ok(name))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "an image name holds lowercase letters, digits, '-', '.' and '_', "
                       "such as my-env-v2");
    if (strcmp(req->instance.state, "stopped") != 0 && strcmp(req->instance.state, "running") != 0)
        return sl_fail(err, SL_E_CONFLICT, "instance_not_ready",
                       "instance '%s' is %s: an image is saved from a stopped or running "
                       "instance; try again once it is one",
                       id, req->instance.state);
    if (image_save_verb_check(srv, id, VERB_START, err) < 0)
        return -1;
    cleanup_rows struct db_rows *taken =
        store_query(srv->store, "SELECT kind, COALESCE(created_by, '') FROM images WHERE name = ?1",
                    DB_ARGS(DB_TEXT(name)), err);
    if (!taken || (rc = db_next(taken, err)) < 0)
        return -1;
    if (rc == 1) {
        if (strcmp(db_text(taken, 0), "private") != 0 && strcmp(db_text(taken, 0), "community"))
            return sl_fail(err, SL_E_CONFLICT, "image_exists",
                           "'%s' is the name of a public image: give yours another name", name);
        if (strcmp(db_text(taken, 1), req->caller.user_id) == 0)
            return sl_fail(err, SL_E_CONFLICT, "image_exists",
                           "you have an image named '%s' already: pick another name, or delete "
                           "it first (suanli image rm %s)",
                           name, name);
        return sl_fail(err, SL_E_CONFLICT, "image_exists",
                       "the image name '%s' is taken: pick another", name);
    }
    /* hosts still holding files of a deleted image of that name would
     * report them as this one's until they drop them */
    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM node_images WHERE name = ?1"
                      " AND state IN ('ready', 'building')",
                      DB_ARGS(DB_TEXT(name)), &n, err) < 0)
        return -1;
    if (n)
        return sl_fail(err, SL_E_CONFLICT, "image_name_held",
                       "%" PRId64 " host(s) still hold an earlier image named '%s', which was "
                       "deleted: pick another name, or wait a minute while they drop it",
                       n, name);
    if (store_exec(srv->store, "DELETE FROM node_images WHERE name = ?1", DB_ARGS(DB_TEXT(name)),
                   err) < 0)
        return -1;
    cleanup_rows struct db_rows *inst =
        store_query(srv->store, "SELECT image, region_id FROM instances WHERE id = ?1",
                    DB_ARGS(DB_TEXT(id)), err);
    if (!inst || (rc = db_next(inst, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance", "no instance '%s'", id);
    if (store_exec(srv->store,
                   "INSERT INTO images (name, kind, recipe, region_id, description, created_by,"
                   " created_at, parent, source_instance, save_state)"
                   " VALUES (?1, 'private', '', ?2, ?3, ?4, ?5, ?6, ?7, 'saving')",
                   DB_ARGS(DB_TEXT(name), DB_TEXT(db_text(inst, 1)),
                           DB_TEXT(description ? description : ""), DB_TEXT(req->caller.user_id),
                           DB_INT(sl_time_now()), DB_TEXT(db_text(inst, 0)), DB_TEXT(id)),
                   err) < 0)
        return -1;
    if (store_exec(srv->store,
                   "UPDATE nodes SET desired_revision = desired_revision + 1 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(req->instance.node_id)), err) < 0)
        return -1;
    store_note_change(srv->store);
    log_info("image %s: saving from instance %s", name, id);
    return api_image_reply(req, res, 202, name, err);
}

/* The save of image `name` that node_id is capturing: 1, 0 when none. */
static int node_save(struct server *srv, const char *node_id, const char *name, char *region,
                     size_t region_size, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT i.region_id FROM images i JOIN instances n ON n.id = i.source_instance"
                    " WHERE i.name = ?1 AND i.save_state = 'saving' AND n.node_id = ?2",
                    DB_ARGS(DB_TEXT(name), DB_TEXT(node_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 1 && region)
        snprintf(region, region_size, "%s", db_text(rows, 0));
    return rc;
}

/* The image's owner's image_storage meter follows their saved images. */
static int image_storage_follows(struct server *srv, const char *name, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store, "SELECT COALESCE(created_by, '') FROM images WHERE name = ?1",
                    DB_ARGS(DB_TEXT(name)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    return rc == 0 || !*db_text(rows, 0)
               ? 0
               : billing_image_storage_update(srv->store, db_text(rows, 0), err);
}

/* PUT /v1/nodes/{id}/saves/{image}/layer: the captured layer, a tar with
 * OCI whiteouts; kept as DATA/uploads/<sha256>.archive, where every host of
 * the region fetches it (GET /v1/nodes/{id}/uploads/{sha256}). */
int api_nodes_save_layer(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct server *srv = req->srv;
    const char *name = req->params[1];
    char region[64];
    int rc = node_save(srv, req->caller.node_id, name, region, sizeof(region), err);

    if (rc < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_save",
                       "no save of image '%s' on this node: it was deleted meanwhile", name);
    if (!req->upload_path || req->upload_size == 0)
        return sl_fail(err, SL_E_INVALID, "missing_body", "send the layer's tar as the body");
    cleanup_free char *dir = xasprintf("%s/uploads", srv->cfg.data_dir);
    cleanup_free char *kept = xasprintf("%s/%s.archive", dir, req->upload_sha256);
    struct sl_error e = SL_ERROR_INIT;
    if ((rename(req->upload_path, kept) < 0
             ? sl_fail_errno(&e, "unable to rename '%s' to '%s'", req->upload_path, kept)
             : sl_file_sync_dir(dir, &e)) < 0) {
        log_error("image %s: unable to keep the saved layer: %s", name, e.message);
        return sl_fail(err, SL_E_STORAGE, "upload_failed",
                       "the server could not store the layer: its disk may be full");
    }
    cleanup_free char *recipe = xasprintf("layer:%s", req->upload_sha256);
    if (store_exec(srv->store,
                   "UPDATE images SET recipe = ?2, save_state = '', layer_bytes = ?3"
                   " WHERE name = ?1",
                   DB_ARGS(DB_TEXT(name), DB_TEXT(recipe), DB_INT((int64_t)req->upload_size)),
                   err) < 0 ||
        bump_nodes(srv, region, err) < 0 || image_storage_follows(srv, name, err) < 0)
        return -1;
    log_info("image %s: layer %.12s (%" PRIu64 " bytes) saved", name, req->upload_sha256,
             req->upload_size);
    api_reply(res, 200, json_pack("{s:s, s:s}", "image", name, "sha256", req->upload_sha256));
    return 0;
}

/* POST /v1/nodes/{id}/saves/{image}/failure {message}: the capture failed. */
int api_nodes_save_failure(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *message = NULL, *name = req->params[1];
    const struct sl_json_field fields[] = {
        { "message", SL_JSON_STRING, .required = true, .max_len = 1000, .out = &message },
    };
    int rc;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if ((rc = node_save(req->srv, req->caller.node_id, name, NULL, 0, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_save", "no save of image '%s' on this node",
                       name);
    if (store_exec(req->srv->store,
                   "UPDATE images SET save_state = 'failed', save_message = ?2 WHERE name = ?1",
                   DB_ARGS(DB_TEXT(name), DB_TEXT(message)), err) < 0)
        return -1;
    log_info("image %s: the save failed: %s", name, message);
    api_reply(res, 204, NULL);
    return 0;
}

/* The image `name` as the caller may act on it as its owner: 404 when they
 * cannot see it, 403 when they see it and it is not theirs. */
static int owned_image(struct api_request *req, const char *name, char *recipe, size_t recipe_size,
                       struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT COALESCE(i.created_by, '') = ?2 AND i.parent != '', i.recipe"
                    " FROM images i WHERE i.name = ?1 AND " IMAGE_VISIBLE("?2"),
                    DB_ARGS(DB_TEXT(name), DB_TEXT(req->caller.user_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_image",
                       "no image '%s': list yours with suanli image ls", name);
    if (!db_int(rows, 0))
        return sl_fail(err, SL_E_FORBIDDEN, "not_owner",
                       "image '%s' is not yours: only the renter who saved it may delete or "
                       "share it",
                       name);
    if (recipe)
        snprintf(recipe, recipe_size, "%s", db_text(rows, 1));
    return 0;
}

/* GET /v1/images/{id}: one image the caller may see, as the list shows
 * them: a renter's own in every state, others' once ready (a pending or
 * failed one, and its hosts' messages, are the admins'). */
int api_images_get(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t n;

    if (!req->caller.admin) {
        if (store_get_int(
                req->srv->store,
                "SELECT COUNT(*) FROM images i WHERE i.name = ?1 AND ((i.parent != ''"
                " AND i.created_by = ?2) OR (" IMAGE_VISIBLE(
                    "?2") " AND EXISTS (SELECT 1"
                          " FROM node_images x WHERE x.name = i.name AND x.state = 'ready')))",
                DB_ARGS(DB_TEXT(req->params[0]), DB_TEXT(req->caller.user_id)), &n, err) < 0)
            return -1;
        if (n == 0)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_image",
                           "no image '%s': list them with suanli image ls", req->params[0]);
    }
    return api_image_reply(req, res, 200, req->params[0], err);
}

/* DELETE /v1/images/{id}: the owner deletes a saved image. Refused while an
 * instance that is not released uses it (theirs or a renter's it was shared
 * with), and while another image is saved over it (hosts that lack that one
 * stack its layer on this one's). The layer's archive goes when no other
 * image is made of it; hosts drop what no image they hold uses. */
int api_images_delete(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct server *srv = req->srv;
    const char *name = req->params[0];
    char recipe[128];
    int64_t n;

    if (owned_image(req, name, recipe, sizeof(recipe), err) < 0)
        return -1;
    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM instances WHERE image = ?1 AND state != 'released'",
                      DB_ARGS(DB_TEXT(name)), &n, err) < 0)
        return -1;
    if (n)
        return sl_fail(err, SL_E_CONFLICT, "image_in_use",
                       "image '%s' is in use by %" PRId64 " instance(s) that are not released: "
                       "their disks are built on it; delete it once they are released",
                       name, n);
    cleanup_rows struct db_rows *child =
        store_query(srv->store, "SELECT name FROM images WHERE parent = ?1 ORDER BY name LIMIT 1",
                    DB_ARGS(DB_TEXT(name)), err);
    int rc;
    if (!child || (rc = db_next(child, err)) < 0)
        return -1;
    if (rc == 1)
        return sl_fail(err, SL_E_CONFLICT, "image_in_use",
                       "image '%s' was saved over image '%s': delete '%s' first", db_text(child, 0),
                       name, db_text(child, 0));
    if (store_exec(srv->store, "DELETE FROM images WHERE name = ?1", DB_ARGS(DB_TEXT(name)), err) <
            0 ||
        store_exec(srv->store, "DELETE FROM image_shares WHERE image = ?1", DB_ARGS(DB_TEXT(name)),
                   err) < 0 ||
        bump_nodes(srv, "", err) < 0 ||
        billing_image_storage_update(srv->store, req->caller.user_id, err) < 0)
        return -1;
    if (strncmp(recipe, "layer:", 6) == 0 && strlen(recipe + 6) == 64 &&
        strspn(recipe + 6, "0123456789abcdef") == 64) {
        cleanup_free char *upload = xasprintf("upload:%s", recipe + 6);
        if (store_get_int(srv->store, "SELECT COUNT(*) FROM images WHERE recipe IN (?1, ?2)",
                          DB_ARGS(DB_TEXT(recipe), DB_TEXT(upload)), &n, err) < 0)
            return -1;
        cleanup_free char *kept = xasprintf("%s/uploads/%s.archive", srv->cfg.data_dir, recipe + 6);
        if (n == 0 && unlink(kept) < 0 && errno != ENOENT)
            log_warn("delete image '%s': unable to remove '%s': %s", name, kept, strerror(errno));
    }
    log_info("image %s: deleted by its owner", name);
    api_reply(res, 204, NULL);
    return 0;
}

/* POST /v1/images/{id}/share and /unshare, {community: true} or {email}:
 * the owner lets every renter, or one, see and start from the image (never
 * delete or share it), and takes that back. */
static int share(struct api_request *req, struct api_response *res, bool on, struct sl_error *err)
{
    struct server *srv = req->srv;
    const char *name = req->params[0], *email = NULL;
    bool community = false;
    const struct sl_json_field fields[] = {
        { "community", SL_JSON_BOOL, .out = &community },
        { "email", SL_JSON_STRING, .max_len = 254, .out = &email },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    /* neither is a field missing (t160's rule); both, a field too many */
    if (community == (email != NULL))
        return sl_fail(err, SL_E_INVALID, community ? "invalid_field" : "missing_field",
                       "say whom: {\"community\": true} for every renter, or {\"email\": "
                       "\"...\"} for one (suanli image share NAME --community | --user EMAIL)");
    if (owned_image(req, name, NULL, 0, err) < 0)
        return -1;
    if (community) {
        if (store_exec(srv->store, "UPDATE images SET kind = ?2 WHERE name = ?1",
                       DB_ARGS(DB_TEXT(name), DB_TEXT(on ? "community" : "private")), err) < 0)
            return -1;
    } else {
        cleanup_rows struct db_rows *u = store_query(
            srv->store, "SELECT id FROM users WHERE email = ?1", DB_ARGS(DB_TEXT(email)), err);
        int rc;
        if (!u || (rc = db_next(u, err)) < 0)
            return -1;
        if (rc == 0)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_user",
                           "no renter with email '%s': check the address", email);
        if (strcmp(db_text(u, 0), req->caller.user_id) == 0)
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "the image is yours already: name another renter");
        if (store_exec(srv->store,
                       on ? "INSERT OR IGNORE INTO image_shares (image, user_id) VALUES (?1, ?2)"
                          : "DELETE FROM image_shares WHERE image = ?1 AND user_id = ?2",
                       DB_ARGS(DB_TEXT(name), DB_TEXT(db_text(u, 0))), err) < 0)
            return -1;
    }
    return api_image_reply(req, res, 200, name, err);
}

int api_images_share(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return share(req, res, true, err);
}

int api_images_unshare(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return share(req, res, false, err);
}
