#include "image-meta.h"
#include "image-layer.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define META_FILE_MAX (256 * 1024)
#define VERSION_MAX   48
/* what suanlid keeps of it */
#define IMAGE_FRAMEWORKS_MAX 127

char *image_meta_read(const char *rootfs, const char *rel, size_t max_len, bool *hidden)
{
    *hidden = false;
    cleanup_close int root = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return NULL;
    cleanup_close int fd = image_open_in_root(root, rel, O_RDONLY | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        /* a whiteout is a 0/0 character device: opening it finds no driver */
        *hidden = errno == ENXIO || errno == ENODEV;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return NULL;
    char *text = xmalloc(max_len + 1);
    size_t len = 0;
    ssize_t r;
    while (len < max_len && (r = read(fd, text + len, max_len - len)) > 0)
        len += (size_t)r;
    text[len] = '\0';
    return text;
}

/* The file from the topmost layer that has it, unless a whiteout above
 * deleted it. */
static char *read_top(const char *const *rootfs, size_t n, const char *rel)
{
    for (size_t i = 0; i < n; i++) {
        bool hidden;
        char *text = image_meta_read(rootfs[i], rel, META_FILE_MAX, &hidden);
        if (text || hidden)
            return text;
    }
    return NULL;
}

/* A version is digits, letters and ".+-_"; anything else ends it. */
static char *version_of(const char *s)
{
    size_t n = 0;
    while (s[n] && n < VERSION_MAX && (isalnum((unsigned char)s[n]) || strchr(".+-_", s[n])))
        n++;
    return n > 0 && isdigit((unsigned char)s[0]) ? xstrndup(s, n) : NULL;
}

static char *cuda_from_files(const char *const *rootfs, size_t n)
{
    cleanup_free char *json = read_top(rootfs, n, "/usr/local/cuda/version.json");
    if (json) {
        cleanup_json json_t *j = json_loads(json, 0, NULL);
        const char *v = json_string_value(json_object_get(json_object_get(j, "cuda"), "version"));
        if (v)
            return version_of(v);
    }
    cleanup_free char *txt = read_top(rootfs, n, "/usr/local/cuda/version.txt");
    const char *p = txt ? strstr(txt, "CUDA Version ") : NULL;
    return p ? version_of(p + strlen("CUDA Version ")) : NULL;
}

static char *cuda_from_dirs(const char *const *rootfs, size_t n)
{
    char *best = NULL;
    for (size_t i = 0; i < n && !best; i++) {
        cleanup_close int root = open(rootfs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int fd = root < 0 ? -1 : image_open_in_root(root, "/usr/local", O_RDONLY | O_DIRECTORY);
        cleanup_dir DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d)))
            if (strncmp(e->d_name, "cuda-", 5) == 0 &&
                (!best || strverscmp(e->d_name + 5, best) > 0)) {
                char *v = version_of(e->d_name + 5);
                if (v) {
                    free(best);
                    best = v;
                }
            }
    }
    return best;
}

char *image_meta_cuda(const char *const *rootfs, size_t n, const char *const *env, size_t n_env)
{
    char *v = cuda_from_files(rootfs, n);
    if (v)
        return v;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(env[i], "CUDA_VERSION=", 13) == 0 && (v = version_of(env[i] + 13)))
            return v;
    return cuda_from_dirs(rootfs, n);
}

/* Where pip puts packages, relative to a layer root; "python3.N" stands for
 * every such directory found there. */
static const char *const site_dirs[] = {
    "/usr/local/lib/python3.N/site-packages", "/usr/local/lib/python3.N/dist-packages",
    "/usr/lib/python3.N/site-packages",       "/usr/lib/python3/dist-packages",
    "/opt/conda/lib/python3.N/site-packages", "/root/.local/lib/python3.N/site-packages",
};

/* A framework's version: a file of the package and the variable in it, or
 * the name of its .dist-info directory. */
static const struct framework {
    const char *name;
    const char *file, *variable;
    const char *const dists[4];
} frameworks[] = {
    { "torch", "torch/version.py", "__version__", { "torch-" } },
    { "tensorflow",
      NULL,
      NULL,
      { "tensorflow-", "tensorflow_gpu-", "tensorflow_cpu-", "tf_nightly-" } },
    { "paddle",
      "paddle/version/__init__.py",
      "full_version",
      { "paddlepaddle-", "paddlepaddle_gpu-" } },
    { "jax", "jax/version.py", "_version", { "jax-" } },
};

/* `variable = '1.2.3'` in a Python file. */
static char *python_assignment(const char *text, const char *variable)
{
    size_t n = strlen(variable);
    for (const char *p = text; (p = strstr(p, variable)); p += n) {
        if (p != text && p[-1] != '\n')
            continue;
        const char *q = p + n;
        q += strspn(q, " \t");
        if (*q++ != '=')
            continue;
        q += strspn(q, " \t");
        if (*q == '\'' || *q == '"')
            return version_of(q + 1);
    }
    return NULL;
}

/* The site-packages directories of one layer, expanded. */
static void list_site_dirs(int root, struct sl_buf *out)
{
    static const char *const lib_dirs[] = { "/usr/local/lib", "/usr/lib", "/opt/conda/lib",
                                            "/root/.local/lib" };
    for (size_t i = 0; i < ARRAY_SIZE(site_dirs); i++) {
        const char *dir = site_dirs[i];
        const char *n = strstr(dir, "python3.N");
        if (!n) {
            sl_buf_addf(out, "%s\n", dir);
            continue;
        }
        for (size_t k = 0; k < ARRAY_SIZE(lib_dirs); k++) {
            size_t prefix = strlen(lib_dirs[k]);
            if ((size_t)(n - dir) != prefix + 1 || strncmp(dir, lib_dirs[k], prefix) != 0)
                continue;
            int fd = image_open_in_root(root, lib_dirs[k], O_RDONLY | O_DIRECTORY);
            cleanup_dir DIR *d = fd < 0 ? NULL : fdopendir(fd);
            if (!d) {
                if (fd >= 0)
                    close(fd);
                continue;
            }
            struct dirent *e;
            while ((e = readdir(d)))
                if (strncmp(e->d_name, "python3.", 8) == 0)
                    sl_buf_addf(out, "%s/%s%s\n", lib_dirs[k], e->d_name, n + strlen("python3.N"));
        }
    }
}

static char *dist_version(int root, const char *site, const struct framework *f)
{
    int fd = image_open_in_root(root, site, O_RDONLY | O_DIRECTORY);
    cleanup_dir DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *v = NULL;
    struct dirent *e;
    while (!v && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 10 || strcmp(e->d_name + len - 10, ".dist-info") != 0)
            continue;
        for (size_t i = 0; i < ARRAY_SIZE(f->dists) && f->dists[i] && !v; i++)
            if (strncmp(e->d_name, f->dists[i], strlen(f->dists[i])) == 0) {
                char *name = xstrndup(e->d_name, len - 10);
                v = version_of(name + strlen(f->dists[i]));
                free(name);
            }
    }
    return v;
}

static char *framework_version(const char *const *rootfs, size_t n, const struct framework *f)
{
    for (size_t i = 0; i < n; i++) {
        cleanup_close int root = open(rootfs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            continue;
        cleanup_buf struct sl_buf sites = SL_BUF_INIT;
        list_site_dirs(root, &sites);
        char *v = NULL, *save = NULL;
        for (char *site = strtok_r(sites.data, "\n", &save); site && !v;
             site = strtok_r(NULL, "\n", &save)) {
            if (f->file) {
                cleanup_free char *rel = xasprintf("%s/%s", site, f->file);
                bool hidden;
                cleanup_free char *text = image_meta_read(rootfs[i], rel, META_FILE_MAX, &hidden);
                if (text)
                    v = python_assignment(text, f->variable);
            }
            if (!v)
                v = dist_version(root, site, f);
        }
        if (v)
            return v;
    }
    return NULL;
}

char *image_meta_frameworks(const char *const *rootfs, size_t n)
{
    cleanup_buf struct sl_buf out = SL_BUF_INIT;
    for (size_t i = 0; i < ARRAY_SIZE(frameworks); i++) {
        cleanup_free char *v = framework_version(rootfs, n, &frameworks[i]);
        if (v)
            sl_buf_addf(&out, "%s%s %s", out.len ? ", " : "", frameworks[i].name, v);
    }
    if (out.len == 0)
        return NULL;
    char *text = sl_buf_detach(&out, NULL);
    if (strlen(text) > IMAGE_FRAMEWORKS_MAX)
        text[IMAGE_FRAMEWORKS_MAX] = '\0';
    return text;
}
