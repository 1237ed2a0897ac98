/* The CLI's own settings, ~/.config/suanli/config, INI-style:
 *
 *   server = http://127.0.0.1:7070
 *   token = sl_...
 *
 * The directory is made 0700 and the file written 0600, atomically (a
 * temporary file renamed over the old one), since it holds a secret. */
#ifndef SUANLI_CONFIG_H
#define SUANLI_CONFIG_H

#include "../lib/error.h"

struct cli_config {
    char *server; /* NULL when unset */
    char *token;  /* NULL when unset */
};

/* "$HOME/.config/suanli/config" (or under $XDG_CONFIG_HOME when set); NULL
 * with err filled when there is no home directory. */
char *cli_config_path(struct sl_error *err);

/* Reads path into cfg; a missing file leaves cfg empty and is no error. A
 * bad line fails with "path:line: ...". */
int cli_config_load(struct cli_config *cfg, const char *path, struct sl_error *err);

/* Writes cfg to path: the directory 0700, the file 0600, atomically. */
int cli_config_save(const struct cli_config *cfg, const char *path, struct sl_error *err);

void cli_config_release(struct cli_config *cfg);

#endif
