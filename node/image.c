#include "image.h"
#include "image-layer.h"
#include "image-meta.h"
#include "fsutil.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/json.h"
#include "../lib/subprocess.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The packages of the default image, NULL-terminated. */
static const char *const image_default_packages[] = {
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
    free(img->cuda);
    free(img->framework);
    for (size_t i = 0; i < img->n_env; i++)
        free(img->env[i]);
    free(img->env);
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

static int write_json(const char *path, json_t *obj, struct sl_error *err)
{
    cleanup_free char *text = json_dumps(obj, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text)
        return sl_fail(err, SL_E_INTERNAL, "internal", "BUG: unable to encode '%s'", path);
    size_t len = strlen(text);
    text[len] = '\n';
    return sl_file_write(path, text, len + 1, 0600, 0, err);
}

int image_layer_import(const char *data_dir, const char *tar_path, char digest[IMAGE_DIGEST_HEX],
                       struct sl_error *err)
{
    cleanup_close int fd = open(tar_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_fail_errno(err, "unable to open '%s'", tar_path);
    /* mmdebstrap's own output, held to the default limits all the same */
    struct image_budget budget;
    image_budget_init(&budget, NULL);
    if (image_layer_digest(fd, tar_path, &budget, digest, err) < 0)
        return -1;
    if (image_layer_present(data_dir, digest))
        return 0;
    if (lseek(fd, 0, SEEK_SET) < 0)
        return sl_fail_errno(err, "unable to read '%s' again", tar_path);
    struct image_layer layer;
    if (image_layer_extract(data_dir, fd, 0, tar_path, "rootfs tarball", &budget, &layer, err) < 0)
        return -1;
    if (image_layer_commit(data_dir, &layer, tar_path, err) < 0) {
        image_layer_discard(data_dir, &layer);
        return -1;
    }
    memcpy(digest, layer.digest, IMAGE_DIGEST_HEX);
    return 0;
}

/* A file of the layer, symlinks resolved inside it (Debian's
 * /etc/os-release -> ../usr/lib/os-release is relative, but images vary). */
static char *read_in_layer(const char *rootfs, const char *path, size_t max_len)
{
    bool hidden;
    return image_meta_read(rootfs, path, max_len, &hidden);
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
    cleanup_close int root = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return NULL;
    cleanup_close int bin = image_open_in_root(root, "/usr/bin/python3", O_PATH | O_NOFOLLOW);
    char target[PATH_MAX];
    ssize_t n = bin < 0 ? -1 : readlinkat(bin, "", target, sizeof(target) - 1);
    if (n > 0) {
        target[n] = '\0';
        const char *base = strrchr(target, '/') ? strrchr(target, '/') + 1 : target;
        if (strncmp(base, "python3.", 8) == 0)
            return xstrdup(base + 6);
    }
    int lib = image_open_in_root(root, "/usr/lib", O_RDONLY | O_DIRECTORY);
    cleanup_dir DIR *d = lib < 0 ? NULL : fdopendir(lib);
    if (!d) {
        if (lib >= 0)
            close(lib);
        return NULL;
    }
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
    return best >= 0 ? xasprintf("3.%ld", best) : NULL;
}

int image_save(const char *data_dir, const char *name, const char *const *layers, size_t n_layers,
               struct sl_error *err)
{
    return image_save_config(data_dir, name, layers, n_layers, NULL, 0, err);
}

/* Checks the layers and reads what the image holds from their files. */
static int read_layers(const char *data_dir, const char *const *layers, size_t n_layers,
                       char **rootfs, char **os, char **python, json_int_t *size,
                       struct sl_error *err)
{
    for (size_t i = 0; i < n_layers; i++) {
        if (!digest_valid(layers[i]))
            return sl_fail(err, SL_E_INVALID, "invalid_layer", "'%s' is not a layer digest",
                           layers[i]);
        rootfs[i] = image_layer_rootfs(data_dir, layers[i]);
        cleanup_free char *meta_path =
            xasprintf("%s/layers/sha256/%s/layer.json", data_dir, layers[i]);
        json_error_t jerr;
        cleanup_json json_t *meta = json_load_file(meta_path, 0, &jerr);
        if (!meta)
            return sl_fail(err, SL_E_NOT_FOUND, "unknown_layer", "no layer '%s' on this node",
                           layers[i]);
        *size += json_integer_value(json_object_get(meta, "size_bytes"));
        if (!*os)
            *os = os_release_name(rootfs[i]);
        if (!*python)
            *python = python_version(rootfs[i]);
    }
    return 0;
}

static int write_image(const char *data_dir, const char *name, const char *const *layers,
                       size_t n_layers, const char *const *rootfs, const char *os,
                       const char *python, json_int_t size, const char *const *env, size_t n_env,
                       struct sl_error *err)
{
    cleanup_free char *cuda = image_meta_cuda(rootfs, n_layers, env, n_env);
    cleanup_free char *framework = image_meta_frameworks(rootfs, n_layers);
    json_t *arr = json_array(), *vars = json_array();
    for (size_t i = 0; i < n_layers; i++)
        json_array_append_new(arr, json_string(layers[i]));
    for (size_t i = 0; i < n_env; i++)
        json_array_append_new(vars, json_string(env[i]));

    char now[64];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm);
    cleanup_json json_t *obj = json_pack(
        "{s:s, s:o, s:s, s:s, s:s, s:s, s:o, s:I, s:s}", "name", name, "layers", arr, "os",
        os ? os : "", "python", python ? python : "", "cuda", cuda ? cuda : "", "framework",
        framework ? framework : "", "env", vars, "size_bytes", size, "created_at", now);
    cleanup_free char *dir = xasprintf("%s/images", data_dir);
    cleanup_free char *path = xasprintf("%s/%s.json", dir, name);
    if (!obj)
        return sl_fail(err, SL_E_INTERNAL, "internal", "BUG: unable to describe image '%s'", name);
    if (fs_mkdir_p(dir, 0700, err) < 0)
        return -1;
    return write_json(path, obj, err);
}

int image_save_config(const char *data_dir, const char *name, const char *const *layers,
                      size_t n_layers, const char *const *env, size_t n_env, struct sl_error *err)
{
    if (!image_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_image_name",
                       "image name '%s' is not valid: use a-z, 0-9, '.', '_' and '-'", name);
    if (n_layers == 0)
        return sl_fail(err, SL_E_INVALID, "no_layers", "image '%s' has no layers", name);

    char *os = NULL, *python = NULL;
    char **rootfs = xcalloc(n_layers, sizeof(char *));
    json_int_t size = 0;
    int rc = read_layers(data_dir, layers, n_layers, rootfs, &os, &python, &size, err);
    if (rc == 0)
        rc = write_image(data_dir, name, layers, n_layers, (const char *const *)rootfs, os, python,
                         size, env, n_env, err);
    for (size_t i = 0; i < n_layers; i++)
        free(rootfs[i]);
    free(rootfs);
    free(os);
    free(python);
    return rc;
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
    /* images saved before cuda, framework and env existed lack them */
    static const size_t fields[] = { offsetof(struct image, os), offsetof(struct image, python),
                                     offsetof(struct image, cuda),
                                     offsetof(struct image, framework) };
    static const char *const keys[] = { "os", "python", "cuda", "framework" };
    for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
        const char *v = json_string_value(json_object_get(obj, keys[i]));
        *(char **)((char *)img + fields[i]) = xstrdup(v ? v : "");
    }
    json_t *env = json_object_get(obj, "env");
    img->env = xcalloc(json_array_size(env) + 1, sizeof(char *));
    for (size_t i = 0; i < json_array_size(env); i++) {
        const char *v = json_string_value(json_array_get(env, i));
        if (v)
            img->env[img->n_env++] = xstrdup(v);
    }
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

/* The venv recipe's project environment, as the seeds make one with conda
 * (`conda create -n project`, never the base one): /root/venv, made with
 * the image's Python and its pip, first on every shell's PATH. A renter's
 * pip install goes there, the system's Python stays as Debian made it. */
#define VENV_HOOK                                                                                  \
    "--customize-hook=chroot \"$1\" python3 -m venv /root/venv && "                                \
    "printf '%s\\n' '' '# the project environment (suanli venv image): python and pip are its' "   \
    "'[ -f /root/venv/bin/activate ] && . /root/venv/bin/activate' >> \"$1\"/root/.bashrc"

/* What each recipe adds to the default packages (suanlid's recipes), and a
 * customize hook of its own, if any. */
static const struct {
    const char *name;
    const char *extra; /* comma-separated, "" for none */
    const char *hook;  /* an mmdebstrap --customize-hook=..., or NULL */
} recipes[] = {
    { "base", "", NULL },
    { "jupyter", "jupyter-notebook", NULL },
    /* Debian's PyTorch (CPU; a GPU host's operator imports NVIDIA's images:
     * docs/operations.md) */
    { "pytorch", "python3-torch,python3-torchvision", NULL },
    /* what compiling extensions (pycocotools, mmcv) needs, and a project
     * environment */
    { "venv", "python3-dev,build-essential", VENV_HOOK },
    /* a desktop in the browser: Xfce (its smallest whole session) on
     * TigerVNC's Xvnc, which listens on loopback only, and noVNC served by
     * websockify on the desktop's service port (boot.c starts them) */
    { "desktop",
      "xfce4-session,xfwm4,xfce4-panel,xfdesktop4,xfce4-terminal,dbus-x11,"
      "tigervnc-standalone-server,tigervnc-tools,novnc,python3-websockify",
      NULL },
};

int image_build_default(const char *data_dir, const char *name, const char *suite,
                        struct sl_error *err)
{
    return image_build_recipe(data_dir, name, "base", suite, err);
}

int image_build_recipe(const char *data_dir, const char *name, const char *recipe,
                       const char *suite, struct sl_error *err)
{
    const char *extra = NULL, *hook = NULL;
    for (size_t i = 0; i < ARRAY_SIZE(recipes); i++)
        if (strcmp(recipes[i].name, recipe) == 0) {
            extra = recipes[i].extra;
            hook = recipes[i].hook;
        }
    if (!extra)
        return sl_fail(err, SL_E_INVALID, "unknown_recipe",
                       "image recipe '%s' is unknown to this node (base, jupyter, pytorch, venv, "
                       "desktop)",
                       recipe);
    if (!image_name_valid(name))
        return sl_fail(err, SL_E_INVALID, "invalid_image_name", "image name '%s' is not valid",
                       name);
    cleanup_free char *sources = host_apt_sources(err);
    if (!sources)
        return -1;

    cleanup_buf struct sl_buf include = SL_BUF_INIT;
    sl_buf_adds(&include, "--include=");
    for (size_t i = 0; image_default_packages[i]; i++)
        sl_buf_addf(&include, "%s%s", i ? "," : "", image_default_packages[i]);
    if (*extra)
        sl_buf_addf(&include, ",%s", extra);

    cleanup_free char *dir = xasprintf("%s/build", data_dir);
    cleanup_free char *tar = xasprintf("%s/%s.%d.tar", dir, name, (int)getpid());
    if (fs_mkdir_p(dir, 0700, err) < 0)
        return -1;
    /* Host keys made at build time would be shared by every instance: the
     * instance's init makes its own on first boot. */
    const char *argv[] = { "mmdebstrap",
                           "--variant=apt",
                           include.data,
                           "--customize-hook=rm -f \"$1\"/etc/ssh/ssh_host_*_key \"$1\"/etc/ssh/"
                           "ssh_host_*_key.pub",
                           "--customize-hook=rm -f \"$1\"/etc/machine-id",
                           hook ? hook : "--customize-hook=true",
                           suite,
                           tar,
                           "-",
                           NULL };
    /* the image's files get the modes Debian gives them, not our umask */
    struct sl_subprocess sp = {
        .argv = argv, .input = sources, .input_len = strlen(sources), .shared_files = true
    };
    int rc = sl_subprocess_check(&sp, err);
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
