/* ssh, ssh-config, cp: reaching an instance over SSH (DESIGN.md section 5).
 *
 * All three use the same options: host keys are remembered per instance in
 * ~/.config/suanli/known_hosts under HostKeyAlias=ID, so a port reused by a
 * later instance is no "host key changed" alarm while a real change of an
 * instance's key still is. ssh-config writes the same into ~/.ssh/config so
 * that VS Code Remote-SSH, PyCharm, scp, sftp and rsync connect by name. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK_BEGIN "# >>> suanli instances (suanli ssh-config --write) >>>"
#define BLOCK_END   "# <<< suanli instances <<<"

/* ~/.config/suanli/known_hosts, its directory made if missing. */
static char *known_hosts_path(void)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *config = cli_config_path(&err);
    char *slash = config ? strrchr(config, '/') : NULL;

    if (!slash)
        return NULL;
    *slash = '\0';
    for (char *p = config + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(config, 0700);
        *p = '/';
    }
    if (mkdir(config, 0700) < 0 && errno != EEXIST)
        return NULL;
    return xasprintf("%s/known_hosts", config);
}

/* True when the caller has at least one SSH key registered. */
static bool has_ssh_key(struct cli *cli)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *page = NULL;

    if (sl_client_request(&cli->client, "GET", "/v1/ssh-keys?limit=1", NULL, NULL, &page, &err) < 0)
        return true; /* unknown: say nothing rather than something wrong */
    return json_array_size(json_object_get(page, "items")) > 0;
}

static bool state_is(json_t *inst, const char *state)
{
    const char *s = jstr(inst, "state");

    return s && strcmp(s, state) == 0;
}

/* The instance id_or_name names, running and reachable; NULL after saying
 * why not. */
static json_t *reachable(struct cli *cli, const char *id_or_name, int *status)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *inst = cli_instance_find(cli, id_or_name, &err);

    if (!inst) {
        *status = cli_fail(&err);
        return NULL;
    }
    const char *id = jstr(inst, "id");
    json_t *ssh = json_object_get(inst, "ssh");
    *status = CLI_EXIT_REFUSED;
    if (state_is(inst, "released") || state_is(inst, "failed")) {
        fprintf(stderr, "suanli: instance %s is %s: there is nothing to log in to\n", id,
                jstr(inst, "state"));
        return NULL;
    }
    if (!state_is(inst, "running")) {
        fprintf(stderr, "suanli: instance %s is %s, not running: start it with suanli start %s\n",
                id, jstr(inst, "state") ? jstr(inst, "state") : "in no known state", id);
        return NULL;
    }
    if (!jstr(ssh, "host") || jint(ssh, "port") <= 0) {
        fprintf(stderr, "suanli: instance %s has no SSH address yet\n", id);
        return NULL;
    }
    *status = CLI_EXIT_OK;
    return TAKE_PTR(inst);
}

/* The ssh options every command passes, as "-o K=V" pairs in args (at most
 * 10 entries) plus -p and -i; returns how many were added. */
struct ssh_opts {
    char port[24];
    char *alias, *known;
};

static void ssh_opts_init(struct ssh_opts *o, const char *id, json_t *inst)
{
    snprintf(o->port, sizeof(o->port), "%" PRId64, jint(json_object_get(inst, "ssh"), "port"));
    o->alias = xasprintf("HostKeyAlias=%s", id);
    cleanup_free char *known = known_hosts_path();
    o->known = known ? xasprintf("UserKnownHostsFile=%s", known) : NULL;
}

static void ssh_opts_release(struct ssh_opts *o)
{
    free(o->alias);
    free(o->known);
}

static int ssh_opts_args(const struct ssh_opts *o, const char *identity, const char **args)
{
    int n = 0;

    args[n++] = "-p";
    args[n++] = o->port;
    args[n++] = "-o";
    args[n++] = "StrictHostKeyChecking=accept-new";
    args[n++] = "-o";
    args[n++] = o->alias;
    args[n++] = "-o";
    args[n++] = "HashKnownHosts=no";
    if (o->known) {
        args[n++] = "-o";
        args[n++] = o->known;
    }
    if (identity) {
        args[n++] = "-i";
        args[n++] = identity;
    }
    return n;
}

#define IDENTITY_OPTION                                                                            \
    {                                                                                              \
        .name = "identity", .arg = "KEYFILE", .help = "the private key to log in with (ssh -i)"    \
    }

static const struct cli_option ssh_options[] = {
    IDENTITY_OPTION,
    { 0 },
};

static int run_ssh(struct cli *cli, const struct cli_args *a)
{
    const char *identity = cli_text(a, "identity", NULL);
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *inst = reachable(cli, a->argv[0], &status);
    if (!inst)
        return status;
    /* host keys are remembered under the id, whatever the instance was called by */
    const char *id = jstr(inst, "id");
    json_t *ssh = json_object_get(inst, "ssh");
    if (!has_ssh_key(cli) && jstr(ssh, "password"))
        fprintf(stderr,
                "suanli: you have no SSH key registered; the root password is %s\n"
                "        (add a key with suanli key add ~/.ssh/id_ed25519.pub)\n",
                jstr(ssh, "password"));
    struct ssh_opts o;
    ssh_opts_init(&o, id, inst);
    cleanup_free char *target =
        xasprintf("%s@%s", jstr(ssh, "user") ? jstr(ssh, "user") : "root", jstr(ssh, "host"));
    int extra = a->argc - 1;
    cleanup_free const char **args = xcalloc((size_t)extra + 20, sizeof(char *));
    int n = 0;
    args[n++] = "ssh";
    n += ssh_opts_args(&o, identity, args + n);
    args[n++] = target;
    for (int i = 0; i < extra; i++)
        args[n++] = a->argv[1 + i];
    args[n] = NULL;
    fflush(stdout);
    execvp("ssh", (char *const *)args);
    fprintf(stderr, "suanli: unable to run 'ssh': %s\n", strerror(errno));
    ssh_opts_release(&o);
    return CLI_EXIT_REFUSED;
}

/* The identity for the config: the one asked for, else the first of the
 * usual key files that exists (ssh would try it anyway). NULL: none. */
static char *default_identity(const char *asked)
{
    static const char *const names[] = { "id_ed25519", "id_ecdsa", "id_rsa" };
    const char *home = getenv("HOME");

    if (asked)
        return realpath(asked, NULL) ?: xstrdup(asked);
    for (size_t i = 0; home && i < ARRAY_SIZE(names); i++) {
        char *p = xasprintf("%s/.ssh/%s", home, names[i]);
        if (access(p, R_OK) == 0)
            return p;
        free(p);
    }
    return NULL;
}

/* A Host alias must be one word ssh accepts: an instance's name qualifies
 * when it is made of letters, digits, '-', '_' and '.'. */
static bool alias_ok(const char *name)
{
    if (!name || !*name)
        return false;
    for (const char *p = name; *p; p++)
        if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') || ('0' <= *p && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return false;
    return true;
}

/* The Host blocks of the caller's instances that can be reached now. */
static int config_blocks(struct cli *cli, const char *identity, struct sl_buf *out, size_t *count,
                         struct sl_error *err)
{
    cleanup_json json_t *list = sl_client_list(&cli->client, "/v1/instances", 200, err);
    cleanup_free char *known = known_hosts_path();
    size_t i;
    json_t *inst;

    if (!list)
        return -1;
    json_t *items = json_object_get(list, "items");
    *count = 0;
    json_array_foreach(items, i, inst)
    {
        json_t *ssh = json_object_get(inst, "ssh");
        const char *id = jstr(inst, "id"), *name = jstr(inst, "name");
        if (state_is(inst, "released") || state_is(inst, "failed") || !jstr(ssh, "host"))
            continue;
        bool named = alias_ok(name) && strcmp(name, id) != 0;
        sl_buf_addf(out, "Host %s%s%s\n", id, named ? " " : "", named ? name : "");
        sl_buf_addf(out, "    HostName %s\n", jstr(ssh, "host"));
        sl_buf_addf(out, "    Port %" PRId64 "\n", jint(ssh, "port"));
        sl_buf_addf(out, "    User %s\n", jstr(ssh, "user") ? jstr(ssh, "user") : "root");
        if (identity)
            sl_buf_addf(out, "    IdentityFile %s\n", identity);
        sl_buf_addf(out, "    HostKeyAlias %s\n", id);
        if (known)
            sl_buf_addf(out, "    UserKnownHostsFile %s\n", known);
        sl_buf_addf(out, "    StrictHostKeyChecking accept-new\n");
        sl_buf_addf(out, "    ServerAliveInterval 30\n");
        (*count)++;
    }
    return 0;
}

/* Replaces the managed block of ~/.ssh/config (or appends one), keeping
 * every other line; written whole (sl_file_write). */
static int write_ssh_config(const char *blocks, const char **path_out, struct sl_error *err)
{
    const char *home = getenv("HOME");
    static char path[4096];

    if (!home || !*home)
        return sl_fail(err, SL_E_INVALID, NULL, "HOME is not set: where is ~/.ssh?");
    cleanup_free char *dir = xasprintf("%s/.ssh", home);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return sl_fail_errno(err, "unable to make %s", dir);
    snprintf(path, sizeof(path), "%s/config", dir);
    *path_out = path;

    cleanup_buf struct sl_buf out = SL_BUF_INIT;
    cleanup_fclose FILE *in = fopen(path, "r");
    if (!in && errno != ENOENT)
        return sl_fail_errno(err, "unable to read %s", path);
    bool inside = false, placed = false;
    char *line = NULL;
    size_t cap = 0;
    while (in && getline(&line, &cap, in) > 0) {
        if (strncmp(line, BLOCK_BEGIN, strlen(BLOCK_BEGIN)) == 0) {
            inside = true;
            continue;
        }
        if (inside) {
            if (strncmp(line, BLOCK_END, strlen(BLOCK_END)) == 0) {
                inside = false;
                if (!placed)
                    sl_buf_addf(&out, "%s\n%s%s\n", BLOCK_BEGIN, blocks, BLOCK_END);
                placed = true;
            }
            continue;
        }
        sl_buf_adds(&out, line);
    }
    free(line);
    if (!placed) {
        if (out.len && out.data[out.len - 1] != '\n')
            sl_buf_adds(&out, "\n");
        sl_buf_addf(&out, "%s%s\n%s%s\n", out.len ? "\n" : "", BLOCK_BEGIN, blocks, BLOCK_END);
    }
    return sl_file_write(path, out.data, out.len, 0600, 0, err);
}

static const struct cli_option ssh_config_options[] = {
    { .name = "write", .help = "merge the blocks into ~/.ssh/config instead of printing them" },
    { .name = "identity",
      .arg = "KEYFILE",
      .help = "the IdentityFile (default: the first of ~/.ssh/id_ed25519, id_ecdsa, id_rsa)" },
    { 0 },
};

static int run_ssh_config(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *asked = cli_text(a, "identity", NULL), *path = NULL;
    bool write = cli_has(a, "write");
    size_t count = 0;
    int status;

    if (asked && access(asked, R_OK) != 0)
        return cli_usage_error(cli, "--identity %s: %s", asked, strerror(errno));
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *identity = default_identity(asked);
    cleanup_buf struct sl_buf blocks = SL_BUF_INIT;
    if (config_blocks(cli, identity, &blocks, &count, &err) < 0 ||
        (write && write_ssh_config(blocks.data ? blocks.data : "", &path, &err) < 0)) {
        return cli_fail(&err);
    }
    if (write)
        printf("wrote %zu host%s to %s: connect with ssh ID (or VS Code Remote-SSH: ID)\n", count,
               count == 1 ? "" : "s", path);
    else
        fputs(blocks.data ? blocks.data : "", stdout);
    if (!count)
        fprintf(stderr, "suanli: no instance is running: nothing to connect to yet\n");
    return CLI_EXIT_OK;
}

/* "ID:/path" or "NAME:/path" -> the instance and the path; false for a
 * local path. */
static bool remote_side(const char *arg, char **id, const char **path)
{
    const char *colon = strchr(arg, ':');
    const char *slash = strchr(arg, '/');

    if (!colon || colon == arg || (slash && slash < colon))
        return false;
    *id = xstrndup(arg, (size_t)(colon - arg));
    *path = colon + 1;
    return true;
}

static const struct cli_option cp_options[] = {
    IDENTITY_OPTION,
    { .name = "bwlimit",
      .arg = "KIB_PER_S",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 100000000,
      .help = "copy at most this many KiB per second" },
    { 0 },
};

static int run_cp(struct cli *cli, const struct cli_args *a)
{
    const char *identity = cli_text(a, "identity", NULL), *src_path = NULL, *dst_path = NULL;
    cleanup_free char *src_id = NULL, *dst_id = NULL, *bwlimit = NULL;
    int status;

    if (cli_has(a, "bwlimit"))
        bwlimit = xasprintf("--bwlimit=%" PRId64, cli_number(a, "bwlimit", 0));
    const char *src = a->argv[0], *dst = a->argv[1];
    bool src_remote = remote_side(src, &src_id, &src_path);
    bool dst_remote = remote_side(dst, &dst_id, &dst_path);
    if (src_remote == dst_remote)
        return cli_usage_error(cli,
                               "one side must be ID:/path or NAME:/path on an instance and the "
                               "other a local path (e.g. suanli cp data.tar i-ab12cd:/root/data/)");
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *inst = reachable(cli, src_remote ? src_id : dst_id, &status);
    if (!inst)
        return status;
    const char *id = jstr(inst, "id");
    json_t *ssh = json_object_get(inst, "ssh");
    struct ssh_opts o;
    ssh_opts_init(&o, id, inst);
    /* rsync's -e is one shell word list: the options have no spaces or quotes */
    const char *sargs[16];
    int n = ssh_opts_args(&o, identity, sargs);
    cleanup_buf struct sl_buf e = SL_BUF_INIT;
    sl_buf_adds(&e, "ssh");
    for (int i = 0; i < n; i++)
        sl_buf_addf(&e, " %s", sargs[i]);
    cleanup_free char *remote =
        xasprintf("%s@%s:%s", jstr(ssh, "user") ? jstr(ssh, "user") : "root", jstr(ssh, "host"),
                  src_remote ? (*src_path ? src_path : ".") : (*dst_path ? dst_path : "."));
    /* --partial keeps what arrived so a second run resumes; progress2 shows
     * the whole transfer */
    const char *args[] = { "rsync",
                           "-a",
                           "--partial",
                           "--info=progress2",
                           "-e",
                           e.data,
                           bwlimit ? bwlimit : "--bwlimit=0",
                           src_remote ? remote : src,
                           src_remote ? dst : remote,
                           NULL };
    fflush(stdout);
    execvp("rsync", (char *const *)args);
    fprintf(stderr, "suanli: unable to run 'rsync' (install it: apt install rsync): %s\n",
            strerror(errno));
    ssh_opts_release(&o);
    return CLI_EXIT_REFUSED;
}

const struct cli_command cmd_ssh = {
    .name = "ssh",
    .aliases = { "instance ssh" },
    .args = "ID|NAME [-- COMMAND...]",
    .options = ssh_options,
    .summary = "open a shell on an instance, or run a command there, with ssh",
    .run = run_ssh,
};

const struct cli_command cmd_ssh_config = {
    .name = "ssh-config",
    .options = ssh_config_options,
    .summary = "a Host block per running instance for ~/.ssh/config (--write merges them in), "
               "so VS Code Remote-SSH and PyCharm connect by instance id or name",
    .run = run_ssh_config,
};

const struct cli_command cmd_cp = {
    .name = "cp",
    .args = "SRC DST",
    .options = cp_options,
    .summary = "copy files to or from an instance with rsync over SSH, resumable, with progress: "
               "one of SRC and DST is ID:/path or NAME:/path",
    .run = run_cp,
};
