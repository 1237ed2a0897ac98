/* Container Device Interface (CDI) specs: the vendor's own description of
 * what a container needs to use a device, written on a GPU host by
 * `nvidia-ctk cdi generate` into /etc/cdi or /var/run/cdi (YAML or JSON).
 * suanli reads the specs of one kind (nvidia.com/gpu), finds the devices it
 * assigned, and applies their containerEdits to the OCI config it writes.
 *
 * What it applies (gpu-devices.h chooses which devices):
 *   deviceNodes  into linux.devices and allowed in linux.resources.devices;
 *                major/minor/type from the spec, else from stat(2) of the
 *                host path (hostPath, else path)
 *   mounts       appended to mounts, unless suanli mounts that destination
 *   env          appended or replacing the same name, except
 *                NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES and SUANLI_*,
 *                which only suanli sets
 *   hooks        only those cdi_hook_check() accepts (the hook policy,
 *                docs/operations.md "GPU hosts"); the others are dropped and
 *                logged */
#ifndef SL_NODE_CDI_H
#define SL_NODE_CDI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../lib/error.h"

#define CDI_KIND_NVIDIA_GPU "nvidia.com/gpu"

/* /etc/cdi then /var/run/cdi: a device in a later directory wins. */
extern const char *const cdi_default_dirs[];
extern const size_t cdi_n_default_dirs;

struct cdi_spec {
    char *path;
    json_t *doc; /* the whole spec, as JSON */
};

/* The specs of one kind found in a list of directories, in priority order
 * (lowest first). */
struct cdi_registry {
    struct cdi_spec *specs;
    size_t n;
};

/* Parses a spec, YAML when yaml is set (JSON is YAML too, but jansson reads
 * JSON), into a new JSON reference whose top level is an object; NULL and
 * SL_E_INVALID (code "invalid_cdi_spec") when it is not. */
json_t *cdi_spec_parse(const char *text, size_t len, bool yaml, struct sl_error *err);

/* Loads every *.json, *.yaml and *.yml of each directory (in name order) whose
 * kind is `kind`. Missing directories are skipped; a file that does not parse
 * is logged and skipped, so another vendor's broken spec does not stop GPU
 * instances. Fails only on allocation of the registry itself, never on
 * content. */
int cdi_registry_load(struct cdi_registry *reg, const char *const *dirs, size_t n_dirs,
                      const char *kind, struct sl_error *err);

void cdi_registry_release(struct cdi_registry *reg);

/* The device (a borrowed "devices" item) called by the first of names found,
 * looking through the specs from the highest priority down; *spec receives
 * the index of its spec. NULL when no spec has it. */
json_t *cdi_registry_find(const struct cdi_registry *reg, const char *const *names, size_t n_names,
                          size_t *spec);

/* Where hooks may live: a hook runs as root on the host, so only programs
 * the host's administrator installed may run. */
struct cdi_hook_policy {
    const char *rootfs;              /* the container's root on the host */
    const char *const *trusted_dirs; /* NULL: /usr/bin, /usr/sbin, /usr/local/bin,
                                      * /usr/local/sbin, /usr/libexec, /bin, /sbin */
    size_t n_trusted_dirs;
};

/* Whether a CDI hook ({hookName, path, args, env, timeout}) may be passed to
 * runc. It may when
 *   - hookName is prestart, createRuntime, createContainer, poststart or
 *     poststop (startContainer resolves its path inside the container, so
 *     the image would choose the program: always dropped);
 *   - path is absolute, and its real path (symlinks resolved) is a regular,
 *     executable file in a trusted directory, outside the rootfs, owned by
 *     root (or the agent's own user) and not writable by group or others.
 * Returns true with *real_path (the caller frees it) set to what runc will
 * run; false with *why saying which rule refused it. */
bool cdi_hook_check(const json_t *hook, const struct cdi_hook_policy *policy, char **real_path,
                    const char **why);

/* Applies one containerEdits object to an OCI config (the object oci_config
 * builds). origin names the spec in messages. Fails (SL_E_UNAVAILABLE, code
 * "cdi_error") on a device node that is malformed or absent from the host, or
 * a malformed mount; nothing is half-applied to a device node or mount entry,
 * but edits before the failing one stay (the caller discards the config). */
int cdi_apply_edits(json_t *config, const json_t *edits, const struct cdi_hook_policy *policy,
                    const char *origin, struct sl_error *err);

/* Adds a character or block device to linux.devices and its allow rule to
 * linux.resources.devices (once per path); major < 0 means stat(host_path).
 * The building block of cdi_apply_edits and of the fallback without a
 * spec. */
int cdi_add_device_node(json_t *config, const char *path, const char *host_path, char type,
                        long long major, long long minor, long long file_mode,
                        struct sl_error *err);

/* Adds a bind mount (skipped when the destination is already mounted). */
void cdi_add_bind_mount(json_t *config, const char *host_path, const char *container_path,
                        const char *options);

/* Sets NAME=VALUE in process.env, replacing NAME's earlier value. */
void cdi_set_env(json_t *config, const char *name_value);

#endif
