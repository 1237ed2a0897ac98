/* Configuration from one table of options (redis, tmux): each row has a name,
 * a type, a default, bounds and help. Files are INI-style:
 *
 *   # comment
 *   listen = 127.0.0.1:7070
 *   [login]
 *   max_failures = 5          -> option "login.max_failures"
 *
 * A bad line stops start-up with "FILE:LINE: ..." naming the option. */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

enum sl_opt_type {
    SL_OPT_STRING,   /* char *, owned by the target */
    SL_OPT_INT,      /* int64_t, within [min, max] */
    SL_OPT_BOOL,     /* bool: true/false, yes/no, on/off, 1/0 */
    SL_OPT_DURATION, /* int64_t seconds: "30s", "15m", "7d"; within [min, max] */
    SL_OPT_MONEY,    /* int64_t micros from a decimal amount; within [min, max] */
};

struct sl_option {
    const char *name;
    enum sl_opt_type type;
    const char *def;
    int64_t min, max;
    size_t offset;
    const char *help;
};

/* Sets every option of target to its default. */
int sl_config_defaults(const struct sl_option *opts, size_t n, void *target, struct sl_error *err);
/* Sets one option from its text form. */
int sl_config_set(const struct sl_option *opts, size_t n, void *target, const char *name,
                  const char *value, struct sl_error *err);
/* Reads a file; on error the message starts with "path:line: ". */
int sl_config_load(const struct sl_option *opts, size_t n, void *target, const char *path,
                   struct sl_error *err);
/* Frees the strings the table owns in target. */
void sl_config_release(const struct sl_option *opts, size_t n, void *target);
/* A line "  name  type  default X  help" for each row; the caller prints it
 * and frees it. */
char *sl_config_help(const struct sl_option *opts, size_t n);

#endif
