#include "config.h"
#include "buf.h"
#include "cleanup.h"
#include "money.h"
#include "timefmt.h"
#include "xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[] = {
    [SL_OPT_STRING] = "string",     [SL_OPT_INT] = "integer",  [SL_OPT_BOOL] = "boolean",
    [SL_OPT_DURATION] = "duration", [SL_OPT_MONEY] = "amount",
};

static const struct sl_option *find(const struct sl_option *opts, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(opts[i].name, name) == 0)
            return &opts[i];
    return NULL;
}

static int check_bounds(const struct sl_option *o, int64_t v, const char *value,
                        struct sl_error *err)
{
    if (v < o->min || v > o->max)
        return sl_fail(err, SL_E_INVALID, "invalid_config",
                       "option '%s': '%s' is out of range (%" PRId64 " to %" PRId64 ")", o->name,
                       value, o->min, o->max);
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = { "true", "yes", "on", "1" };
    static const char *const no[] = { "false", "no", "off", "0" };
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = false, 0;
    }
    return -1;
}

static int set_one(const struct sl_option *o, void *target, const char *value, struct sl_error *err)
{
    char *slot = (char *)target + o->offset;
    int64_t v = 0;

    switch (o->type) {
    case SL_OPT_STRING:
        free(*(char **)slot);
        *(char **)slot = xstrdup(value);
        return 0;
    case SL_OPT_BOOL:
        if (parse_bool(value, (bool *)slot) < 0)
            return sl_fail(err, SL_E_INVALID, "invalid_config",
                           "option '%s': '%s' is not a boolean (true or false)", o->name, value);
        return 0;
    case SL_OPT_INT: {
        char *end;
        errno = 0;
        long long ll = strtoll(value, &end, 10);
        if (errno || end == value || *end != '\0')
            return sl_fail(err, SL_E_INVALID, "invalid_config",
                           "option '%s': '%s' is not an integer", o->name, value);
        v = ll;
        break;
    }
    case SL_OPT_DURATION:
        if (sl_duration_parse(value, &v, err) < 0) {
            sl_error_prefix(err, "option '%s'", o->name);
            return -1;
        }
        break;
    case SL_OPT_MONEY:
        if (sl_money_parse(value, &v, err) < 0) {
            sl_error_prefix(err, "option '%s'", o->name);
            return -1;
        }
        break;
    }
    if (check_bounds(o, v, value, err) < 0)
        return -1;
    *(int64_t *)slot = v;
    return 0;
}

int sl_config_defaults(const struct sl_option *opts, size_t n, void *target, struct sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        if (opts[i].type == SL_OPT_STRING && !opts[i].def) {
            char **slot = (char **)((char *)target + opts[i].offset);
            free(*slot);
            *slot = NULL;
            continue;
        }
        if (set_one(&opts[i], target, opts[i].def ? opts[i].def : "0", err) < 0) {
            sl_error_prefix(err, "default");
            return -1;
        }
    }
    return 0;
}

int sl_config_set(const struct sl_option *opts, size_t n, void *target, const char *name,
                  const char *value, struct sl_error *err)
{
    const struct sl_option *o = find(opts, n, name);

    if (!o)
        return sl_fail(err, SL_E_INVALID, "invalid_config",
                       "unknown option '%s' (see --help-config for the list)", name);
    return set_one(o, target, value, err);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int sl_config_load(const struct sl_option *opts, size_t n, void *target, const char *path,
                   struct sl_error *err)
{
    cleanup_fclose FILE *f = fopen(path, "r");
    cleanup_free char *line = NULL;
    char section[128] = "";
    size_t cap = 0;
    int lineno = 0;

    if (!f)
        return sl_fail_errno(err, "unable to open config file '%s'", path);
    while (getline(&line, &cap, f) >= 0) {
        char *s = trim(line), *eq, name[256];
        lineno++;
        if (*s == '\0' || *s == '#' || *s == ';')
            continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close || close[1] != '\0' || close - s - 1 >= (long)sizeof(section) ||
                close == s + 1)
                return sl_fail(err, SL_E_INVALID, "invalid_config",
                               "%s:%d: bad section header '%s'", path, lineno, s);
            *close = '\0';
            snprintf(section, sizeof(section), "%s", trim(s + 1));
            continue;
        }
        eq = strchr(s, '=');
        if (!eq)
            return sl_fail(err, SL_E_INVALID, "invalid_config",
                           "%s:%d: expected 'name = value', got '%s'", path, lineno, s);
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        size_t vl = strlen(value);
        if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"') {
            value[vl - 1] = '\0';
            value++;
        }
        if (section[0])
            snprintf(name, sizeof(name), "%s.%s", section, key);
        else
            snprintf(name, sizeof(name), "%s", key);
        if (sl_config_set(opts, n, target, name, value, err) < 0) {
            sl_error_prefix(err, "%s:%d", path, lineno);
            return -1;
        }
    }
    return 0;
}

void sl_config_release(const struct sl_option *opts, size_t n, void *target)
{
    for (size_t i = 0; i < n; i++) {
        if (opts[i].type != SL_OPT_STRING)
            continue;
        char **slot = (char **)((char *)target + opts[i].offset);
        free(*slot);
        *slot = NULL;
    }
}

char *sl_config_help(const struct sl_option *opts, size_t n)
{
    struct sl_buf b;
    sl_buf_init(&b);
    for (size_t i = 0; i < n; i++)
        sl_buf_addf(&b, "  %-32s %-8s default %-14s %s\n", opts[i].name, type_names[opts[i].type],
                    opts[i].def ? opts[i].def : "(none)", opts[i].help);
    return sl_buf_detach(&b, NULL);
}
