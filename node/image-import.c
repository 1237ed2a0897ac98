#include "image-import.h"
#include "image-layer.h"
#include "image.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IMPORT_JSON_MAX    (8u << 20)
#define IMPORT_MAX_LAYERS  256
#define IMPORT_INDEX_DEPTH 4
/* A docker save or OCI tar holds a handful of files per layer; past this
 * many entries without their markers, a tarball is a root filesystem. */
#define IMPORT_SCAN_ENTRIES 4096

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH ""
#endif

enum import_kind {
    IMPORT_ROOTFS,
    IMPORT_DOCKER,
    IMPORT_OCI
};

/* One import: where the image's files are, and the layers extracted so far
 * (bottom first), all discarded unless the import completes. */
struct import {
    const char *data_dir, *file, *name;
    struct image_budget budget; /* all layers together */
    int root;                   /* the directory of a docker save or OCI layout */
    char *staging;
    struct image_layer *layers;
    size_t n_layers, n_alloc;
    json_t *config; /* the image config: Env, rootfs.diff_ids */
    struct sl_error *err;
};

static int bad_image(struct import *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad_image(struct import *im, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return sl_fail(im->err, SL_E_UNPROCESSABLE, "bad_image", "import '%s': %s", im->file, why);
}

static const char *strip_dot_slash(const char *name)
{
    while (name[0] == '.' && name[1] == '/')
        name += 2;
    return name;
}

struct scan {
    bool docker, oci;
    size_t n;
};

static int scan_visit(void *ctx, const char *name)
{
    struct scan *sc = ctx;
    name = strip_dot_slash(name);
    sc->docker |= strcmp(name, "manifest.json") == 0;
    sc->oci |= strcmp(name, "oci-layout") == 0;
    return ++sc->n > IMPORT_SCAN_ENTRIES && !sc->docker && !sc->oci;
}

/* Reads the entry names of a tar file to tell a docker save or OCI tar from
 * a root filesystem; a damaged file, or one over the limits, fails here,
 * before anything is written. */
static int scan_tar(struct import *im, int fd, enum import_kind *kind)
{
    struct scan sc = { 0 };
    if (image_layer_scan(fd, im->file, &im->budget, scan_visit, &sc, im->err) < 0)
        return -1;
    *kind = sc.docker ? IMPORT_DOCKER : sc.oci ? IMPORT_OCI : IMPORT_ROOTFS;
    return 0;
}

static json_t *load_json(struct import *im, const char *rel, json_type type)
{
    cleanup_close int fd = image_open_in_root(im->root, rel, O_RDONLY | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        bad_image(im, "'%s' is missing: %s", rel, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > IMPORT_JSON_MAX) {
        bad_image(im, "'%s' is not a JSON file of at most %u bytes", rel, IMPORT_JSON_MAX);
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadfd(fd, 0, &jerr);
    if (!j) {
        bad_image(im, "'%s' is not valid JSON: %s (line %d)", rel, jerr.text, jerr.line);
        return NULL;
    }
    if (json_typeof(j) != type) {
        bad_image(im, "'%s' does not hold the JSON %s it should", rel,
                  type == JSON_ARRAY ? "array" : "object");
        json_decref(j);
        return NULL;
    }
    return j;
}

/* "sha256:<hex>" as "blobs/sha256/<hex>", the only way a layout names its
 * files; anything else is refused (it could name a path outside). */
static char *blob_path(struct import *im, const char *digest)
{
    const char *colon = digest ? strchr(digest, ':') : NULL;
    if (!colon || colon == digest ||
        strspn(digest, "abcdefghijklmnopqrstuvwxyz0123456789") != (size_t)(colon - digest) ||
        !colon[1] || strspn(colon + 1, "0123456789abcdef") != strlen(colon + 1)) {
        bad_image(im, "'%s' is not a digest", digest ? digest : "(none)");
        return NULL;
    }
    return xasprintf("blobs/%.*s/%s", (int)(colon - digest), digest, colon + 1);
}

static bool is_index(json_t *desc)
{
    const char *mt = json_string_value(json_object_get(desc, "mediaType"));
    return mt && (strstr(mt, "image.index") || strstr(mt, "manifest.list"));
}

/* From an index's manifests, the one for this host's architecture (or the
 * only one); nested indexes are followed a few levels. */
static json_t *oci_manifest(struct import *im, json_t *index, int depth)
{
    json_t *list = json_object_get(index, "manifests");
    if (!json_is_array(list) || json_array_size(list) == 0) {
        bad_image(im, "the index lists no manifests");
        return NULL;
    }
    json_t *pick = NULL, *d;
    size_t i;
    json_array_foreach(list, i, d)
    {
        json_t *platform = json_object_get(d, "platform");
        const char *arch = json_string_value(json_object_get(platform, "architecture"));
        if (!pick || (arch && strcmp(arch, HOST_ARCH) == 0))
            pick = d;
    }
    cleanup_free char *path = blob_path(im, json_string_value(json_object_get(pick, "digest")));
    if (!path)
        return NULL;
    json_t *next = load_json(im, path, JSON_OBJECT);
    if (next && (is_index(pick) || json_object_get(next, "manifests"))) {
        cleanup_json json_t *inner = next;
        if (depth >= IMPORT_INDEX_DEPTH) {
            bad_image(im, "indexes nest too deep");
            return NULL;
        }
        return oci_manifest(im, inner, depth + 1);
    }
    return next;
}

/* Appends path to paths, or fails. */
static int add_path(struct import *im, json_t *paths, const char *path)
{
    if (!path)
        return bad_image(im, "the manifest has a layer that is not a path");
    json_array_append_new(paths, json_string(path));
    return 0;
}

/* The layer files, bottom first, and the image config, of a docker save. */
static int docker_paths(struct import *im, json_t *paths)
{
    cleanup_json json_t *manifest = load_json(im, "manifest.json", JSON_ARRAY);
    if (!manifest)
        return -1;
    json_t *m = json_array_get(manifest, 0);
    const char *config = json_string_value(json_object_get(m, "Config"));
    json_t *layers = json_object_get(m, "Layers");
    if (!config || !json_is_array(layers))
        return bad_image(im, "manifest.json names no Config and Layers");
    if (!(im->config = load_json(im, config, JSON_OBJECT)))
        return -1;
    for (size_t i = 0; i < json_array_size(layers); i++)
        if (add_path(im, paths, json_string_value(json_array_get(layers, i))) < 0)
            return -1;
    return 0;
}

/* The same from an OCI layout's index and manifest. */
static int oci_paths(struct import *im, json_t *paths)
{
    cleanup_json json_t *layout = load_json(im, "oci-layout", JSON_OBJECT);
    if (!layout)
        return -1;
    cleanup_json json_t *index = load_json(im, "index.json", JSON_OBJECT);
    if (!index)
        return -1;
    cleanup_json json_t *manifest = oci_manifest(im, index, 0);
    if (!manifest)
        return -1;
    json_t *config = json_object_get(manifest, "config");
    json_t *layers = json_object_get(manifest, "layers");
    cleanup_free char *config_path =
        blob_path(im, json_string_value(json_object_get(config, "digest")));
    if (!config_path)
        return -1;
    if (!json_is_array(layers))
        return bad_image(im, "the manifest lists no layers");
    if (!(im->config = load_json(im, config_path, JSON_OBJECT)))
        return -1;
    for (size_t i = 0; i < json_array_size(layers); i++) {
        const char *digest =
            json_string_value(json_object_get(json_array_get(layers, i), "digest"));
        cleanup_free char *path = blob_path(im, digest);
        if (!path || add_path(im, paths, path) < 0)
            return -1;
    }
    return 0;
}

/* The diff_id the config promises for layer i, as hex, or NULL. */
static const char *diff_id(struct import *im, size_t i)
{
    json_t *ids = json_object_get(json_object_get(im->config, "rootfs"), "diff_ids");
    const char *d = json_string_value(json_array_get(ids, i));
    if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d + 7) != 64 ||
        strspn(d + 7, "0123456789abcdef") != 64)
        return NULL;
    return d + 7;
}

static int import_layers(struct import *im, enum import_kind kind)
{
    cleanup_json json_t *paths = json_array();
    if ((kind == IMPORT_DOCKER ? docker_paths(im, paths) : oci_paths(im, paths)) < 0)
        return -1;
    size_t n = json_array_size(paths);
    if (n == 0 || n > IMPORT_MAX_LAYERS)
        return bad_image(im, "the image has %zu layers (1 to %d are supported)", n,
                         IMPORT_MAX_LAYERS);
    im->layers = xcalloc(n, sizeof(*im->layers));
    im->n_alloc = n;
    for (size_t i = 0; i < n; i++, im->n_layers++) {
        struct image_layer *l = &im->layers[i];
        const char *path = json_string_value(json_array_get(paths, i));
        const char *want = diff_id(im, i);
        if (want && image_layer_present(im->data_dir, want)) {
            memcpy(l->digest, want, IMAGE_DIGEST_HEX);
            continue;
        }
        char what[128];
        snprintf(what, sizeof(what), "layer %zu of %zu ('%.60s')", i + 1, n, path);
        cleanup_close int fd = image_open_in_root(im->root, path, O_RDONLY | O_NOCTTY);
        if (fd < 0)
            return bad_image(im, "%s is missing from the image: %s", what, strerror(errno));
        if (image_layer_extract(im->data_dir, fd, IMAGE_LAYER_WHITEOUTS, im->file, what,
                                &im->budget, l, im->err) < 0)
            return -1;
        if (want && strcmp(want, l->digest) != 0)
            return bad_image(im,
                             "%s has digest sha256:%s, not the sha256:%s its config promises: "
                             "the file is damaged; copy it again and retry",
                             what, l->digest, want);
    }
    return 0;
}

static int save_image(struct import *im)
{
    size_t n = im->n_layers;
    cleanup_free const char **top_first = xcalloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        struct image_layer *l = &im->layers[i];
        if (l->tmp && image_layer_commit(im->data_dir, l, im->file, im->err) < 0)
            return -1;
        top_first[n - 1 - i] = l->digest;
    }
    json_t *env = json_object_get(json_object_get(im->config, "config"), "Env");
    size_t n_env = json_array_size(env);
    cleanup_free const char **vars = xcalloc(n_env + 1, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (json_string_value(json_array_get(env, i)))
            vars[k++] = json_string_value(json_array_get(env, i));
    return image_save_config(im->data_dir, im->name, top_first, n, vars, k, im->err);
}

static int import_run(struct import *im)
{
    struct stat st;
    if (stat(im->file, &st) < 0)
        return sl_fail_errno(im->err, "unable to open '%s'", im->file);
    enum import_kind kind = IMPORT_OCI;
    if (S_ISDIR(st.st_mode)) {
        im->root = open(im->file, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (im->root < 0)
            return sl_fail_errno(im->err, "unable to open '%s'", im->file);
        if (faccessat(im->root, "oci-layout", F_OK, 0) < 0)
            kind = IMPORT_DOCKER;
        if (kind == IMPORT_DOCKER && faccessat(im->root, "manifest.json", F_OK, 0) < 0)
            return sl_fail(im->err, SL_E_INVALID, "unknown_format",
                           "import '%s': a directory must be an OCI image layout (oci-layout, "
                           "index.json, blobs/) or an unpacked docker save (manifest.json)",
                           im->file);
        return import_layers(im, kind) < 0 ? -1 : save_image(im);
    }
    if (!S_ISREG(st.st_mode))
        return sl_fail(im->err, SL_E_INVALID, "unknown_format",
                       "import '%s': not a file or a directory: give an image archive (a rootfs "
                       "tarball, a docker save tarball or an OCI layout)",
                       im->file);
    cleanup_close int fd = open(im->file, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return sl_fail_errno(im->err, "unable to open '%s'", im->file);
    if (scan_tar(im, fd, &kind) < 0)
        return -1;
    if (lseek(fd, 0, SEEK_SET) < 0)
        return sl_fail_errno(im->err, "unable to read '%s' again", im->file);
    if (kind == IMPORT_ROOTFS) {
        im->layers = xcalloc(1, sizeof(*im->layers));
        im->n_alloc = 1;
        /* hashing is quicker than extracting a layer the store holds */
        if (image_layer_digest(fd, im->file, &im->budget, im->layers->digest, im->err) < 0)
            return -1;
        im->n_layers = 1;
        if (image_layer_present(im->data_dir, im->layers->digest))
            return save_image(im);
        im->n_layers = 0;
        if (lseek(fd, 0, SEEK_SET) < 0)
            return sl_fail_errno(im->err, "unable to read '%s' again", im->file);
        if (image_layer_extract(im->data_dir, fd, 0, im->file, "rootfs tarball", &im->budget,
                                im->layers, im->err) < 0)
            return -1;
        im->n_layers = 1;
        return save_image(im);
    }

    /* A tarred layout is unpacked (by the same careful code) next to the
     * store, then read like a directory. */
    cleanup_free char *tmp_root = xasprintf("%s/layers/tmp", im->data_dir);
    if (fs_mkdir_p(tmp_root, 0700, im->err) < 0)
        return -1;
    im->staging = xasprintf("%s/import-XXXXXX", tmp_root);
    if (!mkdtemp(im->staging)) {
        free(im->staging);
        im->staging = NULL;
        return sl_fail_errno(im->err, "unable to make a directory in '%s'", tmp_root);
    }
    /* the archive itself is held to the same limits as its layers, on a
     * budget of its own: its bytes are the (compressed) layers' */
    char digest[IMAGE_DIGEST_HEX];
    uint64_t size;
    struct image_budget outer;
    image_budget_init(&outer, &im->budget.limits);
    if (image_layer_unpack(fd, im->staging, 0, im->file, "the image archive", &outer, digest, &size,
                           im->err) < 0)
        return -1;
    im->root = open(im->staging, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (im->root < 0)
        return sl_fail_errno(im->err, "unable to open '%s'", im->staging);
    return import_layers(im, kind) < 0 ? -1 : save_image(im);
}

int image_import(const char *data_dir, const char *path, const char *name,
                 const struct image_limits *limits, struct sl_error *err)
{
    if (!image_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_image_name",
                       "image name '%s' is not valid: use a-z, 0-9, '.', '_' and '-'", name);
    struct import im = { .data_dir = data_dir, .file = path, .name = name, .root = -1, .err = err };
    image_budget_init(&im.budget, limits);
    int rc = import_run(&im);
    for (size_t i = 0; i < im.n_alloc; i++)
        image_layer_discard(data_dir, &im.layers[i]);
    if (im.root >= 0)
        close(im.root);
    if (im.staging) {
        struct sl_error e = SL_ERROR_INIT;
        sl_error_warn(fs_remove_tree(im.staging, &e), &e, "import image: clean up");
        free(im.staging);
    }
    cleanup_free char *tmp_root = xasprintf("%s/layers/tmp", data_dir);
    rmdir(tmp_root);
    free(im.layers);
    json_decref(im.config);
    return rc;
}
