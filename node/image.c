#include "image.h"
#include "fsutil.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/subprocess.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const image_default_packages[] = {
    "openssh-server",
    "python3",
    "python3-pip",
    "python3-venv",
    "git",
    "curl",
    "wget",
    "vim",
    "tmux",
    "screen",
    "htop",
    "rsync",
    "unzip",
    "ca-certificates",
    "iproute2",
    "procps",
    "less",
    NULL,
};

#define IMAGE_JSON_MAX (64 * 1024)

void image_release(struct image *img)
{
    free(img->name);
    for (size_t i = 0; i < img->n_layers; i++)
        free(img->layers[i]);
    free(img->layers);
    free(img->os);
    free(img->python);
    *img = (struct image){ 0 };
}

bool image_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > IMAGE_NAME_MAX || name[0] == '.')
        return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static bool digest_valid(const char *d)
{
    return strlen(d) == 64 && strspn(d, "0123456789abcdef") == 64;
}

char *image_layer_rootfs(const char *data_dir, const char *digest)
{
    return xasprintf("%s/layers/sha256/%s/rootfs", data_dir, digest);
}

static int file_sha256(const char *path, char hex[IMAGE_DIGEST_HEX], uint64_t *size,
                       struct sl_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_fail_errno(err, "unable to open '%s'", path);
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    static unsigned char chunk[1 << 20];
    uint64_t total = 0;
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return sl_fail_errno(err, "unable to read '%s'", path);
        }
        if (r == 0)
            break;
        crypto_hash_sha256_update(&st, chunk, (unsigned long long)r);
        total += (uint64_t)r;
    }
    unsigned char out[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&st, out);
    sodium_bin2hex(hex, IMAGE_DIGEST_HEX, out, sizeof(out));
    *size = total;
    return 0;
}

static int write_json(const char *path, json_t *obj, struct sl_error *err)
{
    cleanup_free char *text = json_dumps(obj, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text)
        return sl_fail(err, SL_E_INTERNAL, "internal", "BUG: unable to encode '%s'", path);
    size_t len = strlen(text);
    text[len] = '\n';
    return fs_write_file(path, text, len + 1, 0644, err);
}

/* Unpacks into tmp and moves it to final; the caller cleans tmp up. */
static int unpack_layer(const char *tar_path, const char *digest, uint64_t size, const char *tmp,
                        const char *final, const char *done, struct sl_error *err)
{
    cleanup_free char *tmp_rootfs = xasprintf("%s/rootfs", tmp);
    if (fs_remove_tree(tmp, err) < 0 || fs_mkdir_p(tmp_rootfs, 0755, err) < 0)
        return -1;

    const char *argv[] = { "tar",
                           "--numeric-owner",
                           "--same-permissions",
                           "--xattrs",
                           "--xattrs-include=*",
                           "-C",
                           tmp_rootfs,
                           "-xf",
                           tar_path,
                           NULL };
    if (sl_run(argv, NULL, err) < 0) {
        sl_error_prefix(err, "unpack '%s'", tar_path);
        return -1;
    }

    cleanup_json json_t *meta =
        json_pack("{s:s, s:I, s:s, s:I}", "digest", digest, "size_bytes", (json_int_t)size,
                  "source", tar_path, "imported_at", (json_int_t)time(NULL));
    cleanup_free char *meta_path = xasprintf("%s/layer.json", tmp);
    if (write_json(meta_path, meta, err) < 0)
        return -1;
    if (chmod(tmp, 0555) < 0)
        return sl_fail_errno(err, "unable to make '%s' read-only", tmp);
    if (rename(tmp, final) < 0) {
        /* Someone else imported the same tarball meanwhile. */
        if ((errno == EEXIST || errno == ENOTEMPTY) && access(done, F_OK) == 0)
            return 0;
        return sl_fail_errno(err, "unable to move layer into '%s'", final);
    }
    return 0;
}

int image_layer_import(const char *data_dir, const char *tar_path, char digest[IMAGE_DIGEST_HEX],
                       struct sl_error *err)
{
    uint64_t size = 0;
    if (file_sha256(tar_path, digest, &size, err) < 0)
        return -1;

    cleanup_free char *store = xasprintf("%s/layers/sha256", data_dir);
    cleanup_free char *final = xasprintf("%s/%s", store, digest);
    cleanup_free char *done = xasprintf("%s/layer.json", final);
    if (access(done, F_OK) == 0)
        return 0;
    cleanup_free char *tmp = xasprintf("%s/layers/tmp/%s.%d", data_dir, digest, (int)getpid());
    if (fs_mkdir_p(store, 0700, err) < 0)
        return -1;
    int rc = unpack_layer(tar_path, digest, size, tmp, final, done, err);
    struct sl_error ignored = SL_ERROR_INIT;
    fs_remove_tree(tmp, &ignored);
    return rc;
}

/* "../lib/os-release" from /etc is /usr/lib/os-release: fold "x/../". */
static void fold_dotdot(char *p)
{
    char *q;
    while ((q = strstr(p, "/../"))) {
        char *prev = q;
        while (prev > p && prev[-1] != '/')
            prev--;
        if (prev == p) {
            memmove(p, q + 3, strlen(q + 3) + 1);
            continue;
        }
        memmove(prev, q + 4, strlen(q + 4) + 1);
    }
}

/* Opens path inside a layer without leaving it: an absolute symlink (Debian's
 * /etc/os-release -> ../usr/lib/os-release is relative, but images vary) is
 * resolved against the layer's root, not the host's. */
static char *read_in_layer(const char *rootfs, const char *path, size_t max_len)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof(rel), "%s", path);
    for (int hops = 0; hops < 8; hops++) {
        cleanup_free char *full = xasprintf("%s%s", rootfs, rel);
        char target[PATH_MAX];
        ssize_t n = readlink(full, target, sizeof(target) - 1);
        if (n < 0) {
            struct sl_error ignored = SL_ERROR_INIT;
            return fs_read_file(full, max_len, NULL, &ignored);
        }
        target[n] = '\0';
        if (target[0] == '/') {
            snprintf(rel, sizeof(rel), "%s", target);
        } else {
            char *slash = strrchr(rel, '/');
            char dir[PATH_MAX];
            snprintf(dir, sizeof(dir), "%.*s", (int)(slash - rel), rel);
            snprintf(rel, sizeof(rel), "%s/%s", dir, target);
        }
        fold_dotdot(rel);
    }
    return NULL;
}

static char *os_release_name(const char *rootfs)
{
    cleanup_free char *text = read_in_layer(rootfs, "/etc/os-release", 64 * 1024);
    if (!text)
        text = read_in_layer(rootfs, "/usr/lib/os-release", 64 * 1024);
    if (!text)
        return NULL;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "PRETTY_NAME=", 12) != 0)
            continue;
        char *v = line + 12;
        size_t n = strlen(v);
        if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
            v++;
            n -= 2;
        }
        return xstrndup(v, n);
    }
    return NULL;
}

/* The version python3 runs: /usr/bin/python3 -> python3.11, else the newest
 * /usr/lib/python3.N directory. */
static char *python_version(const char *rootfs)
{
    cleanup_free char *bin = xasprintf("%s/usr/bin/python3", rootfs);
    char target[PATH_MAX];
    ssize_t n = readlink(bin, target, sizeof(target) - 1);
    if (n > 0) {
        target[n] = '\0';
        const char *base = strrchr(target, '/') ? strrchr(target, '/') + 1 : target;
        if (strncmp(base, "python3.", 8) == 0)
            return xstrdup(base + 6);
    }
    cleanup_free char *lib = xasprintf("%s/usr/lib", rootfs);
    DIR *d = opendir(lib);
    if (!d)
        return NULL;
    long best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "python3.", 8) != 0)
            continue;
        long minor = strtol(e->d_name + 8, &end, 10);
        if (*end == '\0' && end != e->d_name + 8 && minor > best)
            best = minor;
    }
    closedir(d);
    return best >= 0 ? xasprintf("3.%ld", best) : NULL;
}

int image_save(const char *data_dir, const char *name, const char *const *layers, size_t n_layers,
               struct sl_error *err)
{
    if (!image_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_image_name",
                       "image name '%s' is not valid: use a-z, 0-9, '.', '_' and '-'", name);
    if (n_layers == 0)
        return sl_fail(err, SL_E_INVALID, "no_layers", "image '%s' has no layers", name);

    cleanup_free char *os = NULL, *python = NULL;
    json_t *arr = json_array();
    json_int_t size = 0;
    for (size_t i = 0; i < n_layers; i++) {
        if (!digest_valid(layers[i])) {
            json_decref(arr);
            return sl_fail(err, SL_E_INVALID, "invalid_layer", "'%s' is not a layer digest",
                           layers[i]);
        }
        cleanup_free char *rootfs = image_layer_rootfs(data_dir, layers[i]);
        cleanup_free char *meta_path =
            xasprintf("%s/layers/sha256/%s/layer.json", data_dir, layers[i]);
        json_error_t jerr;
        cleanup_json json_t *meta = json_load_file(meta_path, 0, &jerr);
        if (!meta) {
            json_decref(arr);
            return sl_fail(err, SL_E_NOT_FOUND, "unknown_layer", "no layer '%s' on this node",
                           layers[i]);
        }
        size += json_integer_value(json_object_get(meta, "size_bytes"));
        if (!os)
            os = os_release_name(rootfs);
        if (!python)
            python = python_version(rootfs);
        json_array_append_new(arr, json_string(layers[i]));
    }

    char now[64];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm);
    cleanup_json json_t *obj =
        json_pack("{s:s, s:o, s:s, s:s, s:I, s:s}", "name", name, "layers", arr, "os", os ? os : "",
                  "python", python ? python : "", "size_bytes", size, "created_at", now);
    cleanup_free char *dir = xasprintf("%s/images", data_dir);
    cleanup_free char *path = xasprintf("%s/%s.json", dir, name);
    if (fs_mkdir_p(dir, 0755, err) < 0)
        return -1;
    return write_json(path, obj, err);
}

int image_load(const char *data_dir, const char *name, struct image *img, struct sl_error *err)
{
    *img = (struct image){ 0 };
    if (!image_name_valid(name))
        return sl_fail(err, SL_E_NOT_FOUND, "unknown_image", "no image '%s'", name);
    cleanup_free char *path = xasprintf("%s/images/%s.json", data_dir, name);
    json_error_t jerr;
    cleanup_json json_t *obj = json_load_file(path, 0, &jerr);
    if (!obj) {
        if (access(path, F_OK) < 0)
            return sl_fail(err, SL_E_NOT_FOUND, "unknown_image",
                           "no image '%s' on this node: import or build it first", name);
        return sl_fail(err, SL_E_INTERNAL, "corrupt_image", "unable to read '%s': %s", path,
                       jerr.text);
    }
    json_t *layers = json_object_get(obj, "layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0)
        return sl_fail(err, SL_E_INTERNAL, "corrupt_image", "'%s' lists no layers", path);
    img->name = xstrdup(name);
    img->n_layers = json_array_size(layers);
    img->layers = xcalloc(img->n_layers, sizeof(char *));
    for (size_t i = 0; i < img->n_layers; i++) {
        const char *d = json_string_value(json_array_get(layers, i));
        if (!d || !digest_valid(d)) {
            image_release(img);
            return sl_fail(err, SL_E_INTERNAL, "corrupt_image", "'%s' has a bad layer", path);
        }
        img->layers[i] = xstrdup(d);
    }
    const char *os = json_string_value(json_object_get(obj, "os"));
    const char *py = json_string_value(json_object_get(obj, "python"));
    img->os = xstrdup(os ? os : "");
    img->python = xstrdup(py ? py : "");
    img->size_bytes = (uint64_t)json_integer_value(json_object_get(obj, "size_bytes"));
    return 0;
}

static char *host_apt_sources(struct sl_error *err)
{
    static const char *const candidates[] = {
        "/etc/apt/sources.list.d/debian.sources",
        "/etc/apt/sources.list",
    };
    for (size_t i = 0; i < ARRAY_SIZE(candidates); i++) {
        struct sl_error e = SL_ERROR_INIT;
        size_t len;
        char *text = fs_read_file(candidates[i], 1 << 20, &len, &e);
        if (text && len > 0)
            return text;
        free(text);
    }
    sl_fail(err, SL_E_UNAVAILABLE, "no_apt_sources",
            "the host has no apt sources: write /etc/apt/sources.list.d/debian.sources");
    return NULL;
}

int image_build_default(const char *data_dir, const char *name, const char *suite,
                        struct sl_error *err)
{
    if (!image_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_image_name", "image name '%s' is not valid",
                       name);
    cleanup_free char *sources = host_apt_sources(err);
    if (!sources)
        return -1;

    struct sl_buf include;
    sl_buf_init(&include);
    sl_buf_adds(&include, "--include=");
    for (size_t i = 0; image_default_packages[i]; i++)
        sl_buf_addf(&include, "%s%s", i ? "," : "", image_default_packages[i]);

    cleanup_free char *dir = xasprintf("%s/build", data_dir);
    cleanup_free char *tar = xasprintf("%s/%s.%d.tar", dir, name, (int)getpid());
    if (fs_mkdir_p(dir, 0700, err) < 0) {
        sl_buf_release(&include);
        return -1;
    }
    /* Host keys made at build time would be shared by every instance: the
     * instance's init makes its own on first boot. */
    const char *argv[] = { "mmdebstrap",
                           "--variant=apt",
                           include.data,
                           "--customize-hook=rm -f \"$1\"/etc/ssh/ssh_host_*_key \"$1\"/etc/ssh/"
                           "ssh_host_*_key.pub",
                           "--customize-hook=rm -f \"$1\"/etc/machine-id",
                           suite,
                           tar,
                           "-",
                           NULL };
    struct sl_subprocess sp = { .argv = argv, .input = sources, .input_len = strlen(sources) };
    int rc = sl_subprocess_check(&sp, err);
    sl_buf_release(&include);
    if (rc < 0) {
        unlink(tar);
        sl_error_prefix(err, "build image '%s'", name);
        return -1;
    }
    char digest[IMAGE_DIGEST_HEX];
    rc = image_layer_import(data_dir, tar, digest, err);
    unlink(tar);
    if (rc < 0)
        return -1;
    const char *layers[] = { digest };
    return image_save(data_dir, name, layers, 1, err);
}
