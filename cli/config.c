/* Reading and atomically writing ~/.config/suanli/config. */
#include "config.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/config.h"
#include "../lib/file.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct sl_option config_options[] = {
    { "server", SL_OPT_STRING, NULL, 0, 0, offsetof(struct cli_config, server),
      "URL of the suanli server" },
    { "token", SL_OPT_STRING, NULL, 0, 0, offsetof(struct cli_config, token),
      "API token, written by suanli login" },
};

char *cli_config_path(struct sl_error *err)
{
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");

    if (xdg && xdg[0] == '/')
        return xasprintf("%s/suanli/config", xdg);
    if (!home || !*home) {
        sl_fail(err, SL_E_INVALID, "no_home", "HOME is not set: unable to find the config file");
        return NULL;
    }
    return xasprintf("%s/.config/suanli/config", home);
}

int cli_config_load(struct cli_config *cfg, const char *path, struct sl_error *err)
{
    if (sl_config_defaults(config_options, ARRAY_SIZE(config_options), cfg, err) < 0)
        return -1;
    if (access(path, F_OK) < 0 && errno == ENOENT)
        return 0;
    return sl_config_load(config_options, ARRAY_SIZE(config_options), cfg, path, err);
}

void cli_config_release(struct cli_config *cfg)
{
    sl_config_release(config_options, ARRAY_SIZE(config_options), cfg);
}

/* mkdir -p with mode 0700 for what it creates. */
static int make_dirs(const char *dir, struct sl_error *err)
{
    cleanup_free char *copy = xstrdup(dir);

    for (char *p = copy + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(copy, 0700) < 0 && errno != EEXIST)
            return sl_fail_errno(err, "unable to create '%s'", copy);
        *p = '/';
    }
    if (mkdir(copy, 0700) < 0 && errno != EEXIST)
        return sl_fail_errno(err, "unable to create '%s'", copy);
    return 0;
}

int cli_config_save(const struct cli_config *cfg, const char *path, struct sl_error *err)
{
    cleanup_free char *path_copy = xstrdup(path);
    const char *dir = dirname(path_copy);
    cleanup_buf struct sl_buf text = SL_BUF_INIT;

    if (make_dirs(dir, err) < 0)
        return -1;
    /* the directory may predate us with looser bits */
    if (chmod(dir, 0700) < 0)
        return sl_fail_errno(err, "unable to make '%s' private", dir);
    sl_buf_adds(&text, "# written by suanli login; holds a secret, keep it 0600\n");
    if (cfg->server)
        sl_buf_addf(&text, "server = %s\n", cfg->server);
    if (cfg->token)
        sl_buf_addf(&text, "token = %s\n", cfg->token);
    return sl_file_write(path, text.data, text.len, 0600, 0, err);
}
