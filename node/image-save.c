/* Saved images stacked on their parent, and dropped when no longer wanted
 * (image-save.h). */
#include "image-save.h"

#include "fsutil.h"
#include "image.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int image_save_stack(const char *data_dir, const char *name, const char *tar, const char *sha256,
                     const char *parent, const struct image_limits *limits, struct sl_error *err)
{
    struct image base;

    if (image_load(data_dir, parent, &base, err) < 0) {
        sl_error_prefix(err, "image '%s' is saved over image '%s'", name, parent);
        return -1;
    }
    int rc = 0;
    cleanup_free char *source = xasprintf(IMAGE_SAVED_SOURCE "%s", name);
    if (!image_layer_present(data_dir, sha256)) {
        struct image_budget budget;
        struct image_layer layer;
        cleanup_close int fd = open(tar, O_RDONLY | O_CLOEXEC);
        image_budget_init(&budget, limits);
        if (fd < 0)
            rc = sl_fail_errno(err, "unable to open '%s'", tar);
        else
            rc = image_layer_extract(data_dir, fd, IMAGE_LAYER_WHITEOUTS, tar, "the saved layer",
                                     &budget, &layer, err);
        if (rc == 0 && strcmp(layer.digest, sha256) != 0) {
            image_layer_discard(data_dir, &layer);
            rc = sl_fail(err, SL_E_INVALID, "bad_digest",
                         "the saved layer of image '%s' unpacked to sha256:%s, not sha256:%s", name,
                         layer.digest, sha256);
        } else if (rc == 0 && image_layer_commit(data_dir, &layer, source, err) < 0) {
            image_layer_discard(data_dir, &layer);
            rc = -1;
        }
    }
    if (rc == 0) {
        const char **layers = xcalloc(base.n_layers + 1, sizeof(char *));
        layers[0] = sha256;
        for (size_t i = 0; i < base.n_layers; i++)
            layers[i + 1] = base.layers[i];
        rc = image_save_config(data_dir, name, layers, base.n_layers + 1,
                               (const char *const *)base.env, base.n_env, err);
        free(layers);
    }
    image_release(&base);
    return rc;
}

/* The source recorded in a layer's layer.json; NULL when none. */
static char *layer_source(const char *data_dir, const char *digest)
{
    cleanup_free char *path = xasprintf("%s/layers/sha256/%s/layer.json", data_dir, digest);
    json_error_t jerr;
    cleanup_json json_t *meta = json_load_file(path, 0, &jerr);
    const char *s = meta ? json_string_value(json_object_get(meta, "source")) : NULL;

    return s ? xstrdup(s) : NULL;
}

bool image_saved_other(const char *data_dir, const char *name, const char *sha256)
{
    struct image img;
    bool other;

    if (image_load(data_dir, name, &img, NULL) < 0)
        return false;
    cleanup_free char *source = layer_source(data_dir, img.layers[0]);
    other = source && strncmp(source, IMAGE_SAVED_SOURCE, strlen(IMAGE_SAVED_SOURCE)) == 0 &&
            (!sha256 || strcmp(img.layers[0], sha256) != 0);
    image_release(&img);
    return other;
}

/* Whether an image other than `except` lists layer digest. */
static bool layer_used(const char *data_dir, const char *digest, const char *except)
{
    cleanup_free char *dir = xasprintf("%s/images", data_dir);
    cleanup_dir DIR *d = opendir(dir);
    struct dirent *e;

    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        struct image img;
        bool used = false;
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        cleanup_free char *name = xstrndup(e->d_name, n - 5);
        if (strcmp(name, except) == 0 || image_load(data_dir, name, &img, NULL) < 0)
            continue;
        for (size_t i = 0; i < img.n_layers; i++)
            used |= strcmp(img.layers[i], digest) == 0;
        image_release(&img);
        if (used)
            return true;
    }
    return false;
}

void image_saved_gc(const char *data_dir, bool (*keep)(void *ctx, const char *name), void *ctx)
{
    cleanup_free char *dir = xasprintf("%s/images", data_dir);
    cleanup_dir DIR *d = opendir(dir);
    struct dirent *e;

    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        struct image img;
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        cleanup_free char *name = xstrndup(e->d_name, n - 5);
        if (keep(ctx, name) || !image_saved_other(data_dir, name, NULL) ||
            image_load(data_dir, name, &img, NULL) < 0)
            continue;
        cleanup_free char *path = xasprintf("%s/%s", dir, e->d_name);
        cleanup_free char *top = xstrdup(img.layers[0]);
        image_release(&img);
        if (unlink(path) < 0) {
            log_warn("agent: unable to drop saved image %s: %s", name, strerror(errno));
            continue;
        }
        log_info("agent: dropped saved image %s (deleted)", name);
        if (layer_used(data_dir, top, name))
            continue;
        /* no instance uses it: the image was deleted only once none did */
        struct sl_error err = SL_ERROR_INIT;
        cleanup_free char *layer = xasprintf("%s/layers/sha256/%s", data_dir, top);
        if (fs_remove_tree(layer, &err) < 0)
            log_warn("agent: unable to drop layer %.12s: %s", top, err.message);
    }
}
