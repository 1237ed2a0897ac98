/* CDI specs: loading (JSON, and YAML through libyaml) and applying
 * containerEdits to an OCI config. See cdi.h for what is applied and the
 * hook policy. */
#include "cdi.h"
#include "fsutil.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <yaml.h>

#define CDI_SPEC_MAX_BYTES (4u << 20)
#define YAML_MAX_DEPTH     64
#define YAML_MAX_NODES     200000

const char *const cdi_default_dirs[] = { "/etc/cdi", "/var/run/cdi" };
const size_t cdi_n_default_dirs = ARRAY_SIZE(cdi_default_dirs);

/* Where a distribution or NVIDIA's packages put nvidia-ctk and
 * nvidia-cdi-hook. */
static const char *const cdi_trusted_hook_dirs[] = {
    "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/libexec", "/bin", "/sbin",
};
static const size_t cdi_n_trusted_hook_dirs = ARRAY_SIZE(cdi_trusted_hook_dirs);

/* Names only suanli sets in an instance's environment. */
static const char *const reserved_env[] = {
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "SUANLI_",
};

static const char *const allowed_hook_names[] = {
    "prestart", "createRuntime", "createContainer", "poststart", "poststop",
};

/* ---- YAML to JSON ---------------------------------------------------- */

struct yaml_walk {
    yaml_document_t *doc;
    size_t nodes;
};

/* Plain scalars follow YAML 1.2's core schema (what nvidia-ctk's Go encoder
 * writes): null, booleans and decimal integers; quoted ones are strings. */
static json_t *yaml_scalar(const yaml_node_t *node)
{
    const char *v = (const char *)node->data.scalar.value;
    size_t len = node->data.scalar.length;

    if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (len == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0)
            return json_null();
        if (strcmp(v, "true") == 0)
            return json_true();
        if (strcmp(v, "false") == 0)
            return json_false();
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (*v && *end == '\0' && errno == 0 && (v[0] != '0' || len == 1))
            return json_integer(n);
        if (strncmp(v, "0o", 2) == 0 && len > 2) {
            n = strtoll(v + 2, &end, 8);
            if (*end == '\0' && errno == 0)
                return json_integer(n);
        }
    }
    return json_stringn(v, len);
}

static json_t *yaml_to_json(struct yaml_walk *w, yaml_node_t *node, int depth)
{
    if (!node || depth > YAML_MAX_DEPTH || ++w->nodes > YAML_MAX_NODES)
        return NULL;
    switch (node->type) {
    case YAML_SCALAR_NODE:
        return yaml_scalar(node);
    case YAML_SEQUENCE_NODE: {
        json_t *a = json_array();
        for (yaml_node_item_t *i = node->data.sequence.items.start;
             i < node->data.sequence.items.top; i++) {
            json_t *v = yaml_to_json(w, yaml_document_get_node(w->doc, *i), depth + 1);
            if (!v) {
                json_decref(a);
                return NULL;
            }
            json_array_append_new(a, v);
        }
        return a;
    }
    case YAML_MAPPING_NODE: {
        json_t *o = json_object();
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
            json_t *v = k && k->type == YAML_SCALAR_NODE
                            ? yaml_to_json(w, yaml_document_get_node(w->doc, p->value), depth + 1)
                            : NULL;
            if (!v) {
                json_decref(o);
                return NULL;
            }
            json_object_setn_new(o, (const char *)k->data.scalar.value, k->data.scalar.length, v);
        }
        return o;
    }
    default:
        return NULL;
    }
}

static json_t *yaml_parse(const char *text, size_t len, struct sl_error *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    json_t *out = NULL;

    if (!yaml_parser_initialize(&parser))
        return sl_fail(err, SL_E_INTERNAL, "internal", "unable to start the YAML parser"), NULL;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        sl_fail(err, SL_E_INVALID, "invalid_cdi_spec", "YAML error at line %zu: %s",
                parser.problem_mark.line + 1, parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return NULL;
    }
    struct yaml_walk w = { .doc = &doc };
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root)
        out = yaml_to_json(&w, root, 0);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (!out)
        sl_fail(err, SL_E_INVALID, "invalid_cdi_spec",
                root ? "YAML too deep, too large or with a non-scalar key" : "empty document");
    return out;
}

json_t *cdi_spec_parse(const char *text, size_t len, bool yaml, struct sl_error *err)
{
    json_t *doc;

    if (yaml) {
        doc = yaml_parse(text, len, err);
        if (!doc)
            return NULL;
    } else {
        json_error_t jerr;
        doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!doc)
            return sl_fail(err, SL_E_INVALID, "invalid_cdi_spec", "JSON error at line %d: %s",
                           jerr.line, jerr.text),
                   NULL;
    }
    if (!json_is_object(doc) || !json_is_string(json_object_get(doc, "kind")) ||
        !json_is_array(json_object_get(doc, "devices"))) {
        json_decref(doc);
        return sl_fail(err, SL_E_INVALID, "invalid_cdi_spec",
                       "not a CDI spec (an object with \"kind\" and \"devices\")"),
               NULL;
    }
    return doc;
}

/* ---- the registry ---------------------------------------------------- */

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

static void registry_load_file(struct cdi_registry *reg, const char *path, const char *kind)
{
    struct sl_error err = SL_ERROR_INIT;
    size_t len = 0;
    bool yaml = has_suffix(path, ".yaml") || has_suffix(path, ".yml");
    cleanup_free char *text = fs_read_file(path, CDI_SPEC_MAX_BYTES, &len, &err);
    json_t *doc = text ? cdi_spec_parse(text, len, yaml, &err) : NULL;

    if (!doc) {
        log_warn("cdi: skipping '%s': %s", path, err.message);
        return;
    }
    if (strcmp(json_string_value(json_object_get(doc, "kind")), kind) != 0) {
        json_decref(doc);
        return;
    }
    reg->specs = xrealloc(reg->specs, (reg->n + 1) * sizeof(*reg->specs));
    reg->specs[reg->n].path = xstrdup(path);
    reg->specs[reg->n].doc = doc;
    reg->n++;
}

static int spec_file_filter(const struct dirent *d)
{
    return d->d_name[0] != '.' && (has_suffix(d->d_name, ".json") ||
                                   has_suffix(d->d_name, ".yaml") || has_suffix(d->d_name, ".yml"));
}

int cdi_registry_load(struct cdi_registry *reg, const char *const *dirs, size_t n_dirs,
                      const char *kind, struct sl_error *err)
{
    (void)err;
    memset(reg, 0, sizeof(*reg));
    for (size_t i = 0; i < n_dirs; i++) {
        struct dirent **names = NULL;
        int n = scandir(dirs[i], &names, spec_file_filter, alphasort);
        if (n < 0) {
            if (errno != ENOENT)
                log_warn("cdi: unable to read '%s': %s", dirs[i], strerror(errno));
            continue;
        }
        for (int j = 0; j < n; j++) {
            cleanup_free char *path = xasprintf("%s/%s", dirs[i], names[j]->d_name);
            registry_load_file(reg, path, kind);
            free(names[j]);
        }
        free(names);
    }
    return 0;
}

void cdi_registry_release(struct cdi_registry *reg)
{
    for (size_t i = 0; i < reg->n; i++) {
        free(reg->specs[i].path);
        json_decref(reg->specs[i].doc);
    }
    free(reg->specs);
    reg->specs = NULL;
    reg->n = 0;
}

json_t *cdi_registry_find(const struct cdi_registry *reg, const char *const *names, size_t n_names,
                          size_t *spec)
{
    for (size_t s = reg->n; s-- > 0;) {
        size_t i;
        json_t *dev;
        json_array_foreach(json_object_get(reg->specs[s].doc, "devices"), i, dev)
        {
            const char *name = json_string_value(json_object_get(dev, "name"));
            for (size_t k = 0; name && k < n_names; k++) {
                if (strcmp(name, names[k]) == 0) {
                    *spec = s;
                    return dev;
                }
            }
        }
    }
    return NULL;
}

/* ---- edits ----------------------------------------------------------- */

static json_t *object_member(json_t *parent, const char *key, json_t *(*make)(void))
{
    json_t *v = json_object_get(parent, key);
    if (!v) {
        v = make();
        json_object_set_new(parent, key, v);
    }
    return v;
}

int cdi_add_device_node(json_t *config, const char *path, const char *host_path, char type,
                        long long major, long long minor, long long file_mode, struct sl_error *err)
{
    json_t *linux_section = object_member(config, "linux", json_object);
    json_t *devices = object_member(linux_section, "devices", json_array);
    json_t *resources = object_member(linux_section, "resources", json_object);
    json_t *rules = object_member(resources, "devices", json_array);
    size_t i;
    json_t *d;

    if (!path || path[0] != '/')
        return sl_fail(err, SL_E_UNAVAILABLE, "cdi_error", "device node path '%s' is not absolute",
                       path ? path : "");
    if (major < 0) {
        struct stat st;
        if (stat(host_path, &st) < 0)
            return sl_fail(err, SL_E_UNAVAILABLE, "cdi_error",
                           "unable to find device node '%s' on the host: %s", host_path,
                           strerror(errno));
        if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode))
            return sl_fail(err, SL_E_UNAVAILABLE, "cdi_error", "'%s' is not a device node",
                           host_path);
        type = S_ISCHR(st.st_mode) ? 'c' : 'b';
        major = major(st.st_rdev);
        minor = minor(st.st_rdev);
        if (file_mode < 0)
            file_mode = st.st_mode & 0777;
    }
    if (type != 'c' && type != 'b')
        return sl_fail(err, SL_E_UNAVAILABLE, "cdi_error", "device node '%s' has type '%c'", path,
                       type);
    json_array_foreach(devices, i, d)
    {
        if (strcmp(json_string_value(json_object_get(d, "path")) ?: "", path) == 0)
            return 0;
    }
    char type_s[2] = { type, 0 };
    json_array_append_new(
        devices, json_pack("{s:s, s:s, s:I, s:I, s:I, s:i, s:i}", "path", path, "type", type_s,
                           "major", (json_int_t)major, "minor", (json_int_t)minor, "fileMode",
                           (json_int_t)(file_mode < 0 ? 0666 : file_mode), "uid", 0, "gid", 0));
    json_array_append_new(rules, json_pack("{s:b, s:s, s:I, s:I, s:s}", "allow", 1, "type", type_s,
                                           "major", (json_int_t)major, "minor", (json_int_t)minor,
                                           "access", "rwm"));
    return 0;
}

static bool mounted_at(json_t *config, const char *dest)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(config, "mounts"), i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "destination")) ?: "", dest) == 0)
            return true;
    }
    return false;
}

static void add_mount(json_t *config, const char *host_path, const char *dest, const char *type,
                      json_t *options)
{
    if (mounted_at(config, dest)) {
        log_warn("cdi: not mounting '%s' at '%s': already mounted there", host_path, dest);
        json_decref(options);
        return;
    }
    json_array_append_new(object_member(config, "mounts", json_array),
                          json_pack("{s:s, s:s, s:s, s:o}", "destination", dest, "type", type,
                                    "source", host_path, "options", options));
}

void cdi_add_bind_mount(json_t *config, const char *host_path, const char *container_path,
                        const char *options)
{
    json_t *opts = json_array();
    cleanup_free char *copy = xstrdup(options);
    char *save = NULL;
    for (char *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save))
        json_array_append_new(opts, json_string(o));
    add_mount(config, host_path, container_path, "bind", opts);
}

static bool env_reserved(const char *name_value)
{
    for (size_t i = 0; i < ARRAY_SIZE(reserved_env); i++) {
        size_t n = strlen(reserved_env[i]);
        if (strncmp(name_value, reserved_env[i], n) == 0 &&
            (reserved_env[i][n - 1] == '_' || name_value[n] == '=' || name_value[n] == '\0'))
            return true;
    }
    return false;
}

void cdi_set_env(json_t *config, const char *name_value)
{
    json_t *env = object_member(object_member(config, "process", json_object), "env", json_array);
    const char *eq = strchr(name_value, '=');
    size_t name_len = eq ? (size_t)(eq - name_value) : strlen(name_value);
    size_t i;
    json_t *e;

    json_array_foreach(env, i, e)
    {
        const char *s = json_string_value(e);
        if (s && strncmp(s, name_value, name_len) == 0 &&
            (s[name_len] == '=' || s[name_len] == '\0')) {
            json_array_set_new(env, i, json_string(name_value));
            return;
        }
    }
    json_array_append_new(env, json_string(name_value));
}

static bool in_dir(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

bool cdi_hook_check(const json_t *hook, const struct cdi_hook_policy *policy, char **real_path,
                    const char **why)
{
    const char *name = json_string_value(json_object_get(hook, "hookName"));
    const char *path = json_string_value(json_object_get(hook, "path"));
    const char *const *dirs = policy->trusted_dirs ? policy->trusted_dirs : cdi_trusted_hook_dirs;
    size_t n_dirs = policy->trusted_dirs ? policy->n_trusted_dirs : cdi_n_trusted_hook_dirs;
    bool known = false, trusted = false;
    struct stat st;

    *real_path = NULL;
    for (size_t i = 0; name && i < ARRAY_SIZE(allowed_hook_names); i++)
        known = known || strcmp(name, allowed_hook_names[i]) == 0;
    if (!known)
        return *why = "its hookName runs it inside the container, or is unknown", false;
    if (!path || path[0] != '/')
        return *why = "its path is not absolute", false;
    cleanup_free char *real = realpath(path, NULL);
    cleanup_free char *root = policy->rootfs ? realpath(policy->rootfs, NULL) : NULL;
    if (!real)
        return *why = "its path does not exist on the host", false;
    if ((policy->rootfs && in_dir(path, policy->rootfs)) || (root && in_dir(real, root)) ||
        (policy->rootfs && !root))
        return *why = "its path is inside the container's root file system", false;
    for (size_t i = 0; i < n_dirs; i++) {
        cleanup_free char *dir = realpath(dirs[i], NULL);
        trusted = trusted || (dir && in_dir(real, dir) && strcmp(real, dir) != 0);
    }
    if (!trusted)
        return *why = "its path is not in a trusted directory of the host", false;
    if (stat(real, &st) < 0 || !S_ISREG(st.st_mode) || !(st.st_mode & S_IXUSR))
        return *why = "its path is not an executable file", false;
    if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return *why = "its program is not owned by root or is writable by others", false;
    *real_path = TAKE_PTR(real);
    return true;
}

static void add_hook(json_t *config, const json_t *hook, const struct cdi_hook_policy *policy,
                     const char *origin)
{
    const char *why = NULL;
    cleanup_free char *real = NULL;
    const char *path = json_string_value(json_object_get(hook, "path"));
    const char *name = json_string_value(json_object_get(hook, "hookName"));

    if (!cdi_hook_check(hook, policy, &real, &why)) {
        log_warn("cdi: %s: dropping %s hook '%s': %s", origin, name ? name : "unnamed",
                 path ? path : "", why);
        return;
    }
    json_t *h = json_pack("{s:s}", "path", real);
    json_t *args = json_object_get(hook, "args");
    json_t *env = json_object_get(hook, "env");
    json_t *timeout = json_object_get(hook, "timeout");
    if (json_is_array(args))
        json_object_set(h, "args", args);
    if (json_is_array(env)) {
        /* the hook's own environment: never one that preloads code */
        json_t *clean = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(env, i, e)
        {
            const char *s = json_string_value(e);
            if (s && strncmp(s, "LD_", 3) != 0)
                json_array_append_new(clean, json_string(s));
        }
        json_object_set_new(h, "env", clean);
    }
    if (json_is_integer(timeout) && json_integer_value(timeout) > 0)
        json_object_set(h, "timeout", timeout);
    json_array_append_new(
        object_member(object_member(config, "hooks", json_object), name, json_array), h);
}

static long long int_field(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? json_integer_value(v) : -1;
}

static int apply_device_node(json_t *config, const json_t *node, const char *origin,
                             struct sl_error *err)
{
    const char *path = json_string_value(json_object_get(node, "path"));
    const char *host = json_string_value(json_object_get(node, "hostPath"));
    const char *type = json_string_value(json_object_get(node, "type"));
    long long major = int_field(node, "major"), minor = int_field(node, "minor");
    long long mode = int_field(node, "fileMode");

    if (major < 0 || minor < 0)
        major = minor = -1;
    else if (type && strcmp(type, "c") != 0 && strcmp(type, "b") != 0 && strcmp(type, "u") != 0)
        return sl_fail(err, SL_E_UNAVAILABLE, "cdi_error", "%s: device node '%s' has type '%s'",
                       origin, path ? path : "", type);
    if (cdi_add_device_node(config, path, host ? host : path,
                            type && strcmp(type, "b") == 0 ? 'b' : 'c', major, minor, mode,
                            err) < 0) {
        sl_error_prefix(err, "%s", origin);
        return -1;
    }
    return 0;
}

static int apply_mount(json_t *config, const json_t *m, const char *origin, struct sl_error *err)
{
    const char *host = json_string_value(json_object_get(m, "hostPath"));
    const char *dest = json_string_value(json_object_get(m, "containerPath"));
    const char *type = json_string_value(json_object_get(m, "type"));
    json_t *options = json_object_get(m, "options");
    json_t *opts = json_array();
    bool bind = false;
    size_t i;
    json_t *o;

    if (!host || host[0] != '/' || !dest || dest[0] != '/') {
        json_decref(opts);
        return sl_fail(err, SL_E_UNAVAILABLE, "cdi_error",
                       "%s: a mount needs absolute hostPath and containerPath", origin);
    }
    json_array_foreach(options, i, o)
    {
        const char *s = json_string_value(o);
        if (!s)
            continue;
        bind = bind || strcmp(s, "bind") == 0 || strcmp(s, "rbind") == 0;
        json_array_append_new(opts, json_string(s));
    }
    if ((!type || strcmp(type, "bind") == 0) && !bind)
        json_array_append_new(opts, json_string("rbind"));
    add_mount(config, host, dest, type ? type : "bind", opts);
    return 0;
}

int cdi_apply_edits(json_t *config, const json_t *edits, const struct cdi_hook_policy *policy,
                    const char *origin, struct sl_error *err)
{
    size_t i;
    json_t *v;

    if (!edits)
        return 0;
    json_array_foreach(json_object_get(edits, "deviceNodes"), i, v)
    {
        if (apply_device_node(config, v, origin, err) < 0)
            return -1;
    }
    json_array_foreach(json_object_get(edits, "mounts"), i, v)
    {
        if (apply_mount(config, v, origin, err) < 0)
            return -1;
    }
    json_array_foreach(json_object_get(edits, "env"), i, v)
    {
        const char *s = json_string_value(v);
        if (s && strchr(s, '=') && !env_reserved(s))
            cdi_set_env(config, s);
    }
    json_array_foreach(json_object_get(edits, "hooks"), i, v) add_hook(config, v, policy, origin);
    return 0;
}
