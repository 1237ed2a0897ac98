/* A command's options, declared once: the table in its descriptor drives
 * parsing (getopt_long underneath), the usage line and `suanli help
 * COMMAND`, as crun's argp tables and tmux's .args beside .usage do. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* getopt_long hands back an option's row as this plus its index. */
#define OPTION_BASE 256

size_t cli_option_count(const struct cli_command *cmd)
{
    size_t n = 0;

    while (cmd->options && cmd->options[n].name)
        n++;
    return n;
}

static size_t option_index(const struct cli_command *cmd, const char *name)
{
    for (size_t i = 0; cmd->options && cmd->options[i].name; i++)
        if (strcmp(cmd->options[i].name, name) == 0)
            return i;
    fprintf(stderr, "suanli: BUG: '%s' has no option '--%s'\n", cmd->name, name);
    abort();
}

bool cli_has(const struct cli_args *a, const char *name)
{
    return a->values[option_index(a->cmd, name)].given;
}

const char *cli_text(const struct cli_args *a, const char *name, const char *fallback)
{
    const struct cli_value *v = &a->values[option_index(a->cmd, name)];

    return v->given && v->text ? v->text : fallback;
}

int64_t cli_number(const struct cli_args *a, const char *name, int64_t fallback)
{
    const struct cli_value *v = &a->values[option_index(a->cmd, name)];

    return v->given ? v->number : fallback;
}

int cli_check_int(const char *what, const char *text, int64_t min, int64_t max, int64_t *out,
                  struct sl_error *err)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max)
        return sl_fail(err, SL_E_INVALID, "usage",
                       "%s must be a whole number from %lld to %lld, not '%s'", what,
                       (long long)min, (long long)max, text);
    *out = v;
    return 0;
}

int cli_check_amount(const char *what, const char *text, int64_t *out, struct sl_error *err)
{
    struct sl_error inner = SL_ERROR_INIT;

    if (sl_money_parse(text, out, &inner) < 0)
        return sl_fail(err, SL_E_INVALID, "usage", "%s: %s", what, inner.message);
    return 0;
}

static int cli_check_date(const char *what, const char *text, size_t len, struct sl_error *err)
{
    const char *example = len == 7 ? "YYYY-MM, such as 2026-11" : "YYYY-MM-DD, such as 2026-11-30";
    struct tm tm = { 0 };
    int y, m, d = 1;

    /* the digits and dashes first, then the calendar: 2026-02-30 is no day */
    bool shaped = strlen(text) == len;
    for (size_t i = 0; shaped && i < len; i++)
        shaped = i == 4 || i == 7 ? text[i] == '-' : isdigit((unsigned char)text[i]);
    if (shaped)
        shaped = len == 7 ? sscanf(text, "%4d-%2d", &y, &m) == 2
                          : sscanf(text, "%4d-%2d-%2d", &y, &m, &d) == 3;
    if (shaped) {
        tm.tm_year = y - 1900;
        tm.tm_mon = m - 1;
        tm.tm_mday = d;
        time_t t = timegm(&tm);
        struct tm back;
        shaped = y >= 1970 && gmtime_r(&t, &back) && back.tm_year == y - 1900 &&
                 back.tm_mon == m - 1 && back.tm_mday == d;
    }
    if (!shaped)
        return sl_fail(err, SL_E_INVALID, "usage", "%s must be %s, not '%s'", what, example, text);
    return 0;
}

/* Checks and keeps the value of option o given as text. */
static int take_value(const struct cli_option *o, const char *text, struct cli_value *v,
                      struct sl_error *err)
{
    cleanup_free char *what = xasprintf("--%s", o->name);

    v->given = true;
    v->text = text;
    switch (o->type) {
    case CLI_OPT_TEXT:
        return 0;
    case CLI_OPT_INT:
        return cli_check_int(what, text, o->min, o->max, &v->number, err);
    case CLI_OPT_AMOUNT:
        return cli_check_amount(what, text, &v->number, err);
    case CLI_OPT_MONTH:
        return cli_check_date(what, text, 7, err);
    case CLI_OPT_DAY:
        return cli_check_date(what, text, 10, err);
    }
    return 0;
}

/* The positional arguments args declares: the required words at the top
 * level ("ID PORT"), each [...] group one more that may be left out, and
 * "..." any number. *missing is the first required word past have, for
 * the message. */
static void count_positionals(const char *args, int have, int *min, int *max, char *missing,
                              size_t size)
{
    int depth = 0;
    bool in_word = false;

    *min = *max = 0;
    missing[0] = '\0';
    for (const char *p = args ? args : ""; *p; p++) {
        if (*p == '[') {
            if (depth++ == 0 && *max != INT_MAX)
                (*max)++;
            in_word = false;
        } else if (*p == ']') {
            depth--;
        } else if (*p == ' ') {
            in_word = false;
        } else if (strncmp(p, "...", 3) == 0) {
            *max = INT_MAX;
            p += 2;
        } else if (!in_word) {
            in_word = true;
            if (depth > 0)
                continue;
            size_t len = strcspn(p, " [");
            if (*min == have && !missing[0])
                snprintf(missing, size, "%.*s", (int)len, p);
            (*min)++;
            if (*max != INT_MAX)
                (*max)++;
        }
    }
}

/* "--at TIME, --in DURATION or --cancel": the options of a group joined by
 * sep, the last two by last_sep. A new string. */
static char *cli_option_synopsis(const struct cli_command *cmd, int group, const char *sep,
                                 const char *last_sep);

int cli_args_parse(const struct cli_command *cmd, int argc, char **argv, struct cli_args *a,
                   struct sl_error *err)
{
    size_t n = cli_option_count(cmd);
    struct option longopts[CLI_MAX_OPTIONS + 2];
    int c;

    if (n > CLI_MAX_OPTIONS) {
        fprintf(stderr, "suanli: BUG: '%s' has more than %d options\n", cmd->name, CLI_MAX_OPTIONS);
        abort();
    }
    *a = (struct cli_args){ .cmd = cmd };
    for (size_t i = 0; i < n; i++)
        longopts[i] = (struct option){ cmd->options[i].name,
                                       cmd->options[i].arg ? required_argument : no_argument, NULL,
                                       OPTION_BASE + (int)i };
    longopts[n] = (struct option){ "output", required_argument, NULL, 'o' };
    longopts[n + 1] = (struct option){ 0 };
    optind = 0;
    opterr = 0;
    /* a leading ':' reports a missing value as ':' so we can word it */
    while ((c = getopt_long(argc, argv, ":o:", longopts, NULL)) != -1) {
        if (c == 'o') {
            a->output = optarg;
        } else if (c == ':') {
            return sl_fail(err, SL_E_INVALID, "usage", "option '%s' needs a value",
                           argv[optind - 1]);
        } else if (c >= OPTION_BASE && c < OPTION_BASE + (int)n) {
            size_t i = (size_t)(c - OPTION_BASE);
            if (take_value(&cmd->options[i], optarg, &a->values[i], err) < 0)
                return -1;
        } else {
            const char *word = argv[optind - 1], *eq = strchr(word, '=');
            for (size_t i = 0; eq && i < n; i++)
                if (strncmp(word + 2, cmd->options[i].name, (size_t)(eq - word - 2)) == 0 &&
                    !cmd->options[i].name[eq - word - 2])
                    return sl_fail(err, SL_E_INVALID, "usage", "option '--%s' takes no value",
                                   cmd->options[i].name);
            return sl_fail(err, SL_E_INVALID, "usage", "unknown option '%s'", word);
        }
    }
    a->argc = argc - optind;
    a->argv = argv + optind;

    int min, max;
    char missing[64];
    count_positionals(cmd->args, a->argc, &min, &max, missing, sizeof(missing));
    if (a->argc < min)
        return sl_fail(err, SL_E_INVALID, "usage", "missing argument %s", missing);
    if (a->argc > max)
        return sl_fail(err, SL_E_INVALID, "usage", "unexpected argument '%s'", a->argv[max]);

    /* options of one group exclude each other */
    for (size_t i = 0; i < n; i++) {
        const struct cli_option *o = &cmd->options[i];
        if (!o->group || !a->values[i].given)
            continue;
        for (size_t j = i + 1; j < n; j++)
            if (cmd->options[j].group == o->group && a->values[j].given) {
                cleanup_free char *alternatives = cli_option_synopsis(cmd, o->group, ", ", " or ");
                return sl_fail(err, SL_E_INVALID, "usage", "give only one of %s", alternatives);
            }
    }
    for (size_t i = 0; i < n; i++) {
        const struct cli_option *o = &cmd->options[i];
        if (o->required && (!a->values[i].given || (o->arg && !*a->values[i].text)))
            return sl_fail(err, SL_E_INVALID, "usage", "give --%s %s: %s", o->name, o->arg,
                           o->help);
    }
    return 0;
}

/* "--timeout SECONDS" or "--no-wait". */
static void add_option(struct sl_buf *b, const struct cli_option *o)
{
    sl_buf_addf(b, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
}

static char *cli_option_synopsis(const struct cli_command *cmd, int group, const char *sep,
                                 const char *last_sep)
{
    cleanup_buf struct sl_buf b = SL_BUF_INIT;
    size_t n = cli_option_count(cmd), count = 0, seen = 0;

    for (size_t i = 0; i < n; i++)
        count += cmd->options[i].group == group;
    for (size_t i = 0; i < n; i++) {
        if (cmd->options[i].group != group)
            continue;
        if (seen++)
            sl_buf_adds(&b, seen == count ? last_sep : sep);
        add_option(&b, &cmd->options[i]);
    }
    return sl_buf_detach(&b, NULL);
}

char *cli_usage(const struct cli_command *cmd)
{
    const char *args = cmd->args ? cmd->args : "";
    /* options go before a trailing "[-- COMMAND...]", after the rest */
    const char *tail = strstr(args, "[--");
    size_t head = tail ? (size_t)(tail - args) : strlen(args);
    size_t n = cli_option_count(cmd);
    cleanup_buf struct sl_buf b = SL_BUF_INIT;

    sl_buf_adds(&b, cmd->name);
    while (head > 0 && args[head - 1] == ' ')
        head--;
    if (head)
        sl_buf_addf(&b, " %.*s", (int)head, args);
    for (size_t i = 0; i < n; i++) {
        const struct cli_option *o = &cmd->options[i];
        if (o->group) {
            /* a group shows once, where its first option is */
            bool first = true;
            for (size_t j = 0; j < i; j++)
                first = first && cmd->options[j].group != o->group;
            if (!first)
                continue;
            cleanup_free char *alternatives = cli_option_synopsis(cmd, o->group, " | ", " | ");
            sl_buf_addf(&b, " [%s]", alternatives);
            continue;
        }
        sl_buf_adds(&b, o->required ? " " : " [");
        add_option(&b, o);
        if (!o->required)
            sl_buf_adds(&b, "]");
    }
    if (tail)
        sl_buf_addf(&b, " %s", tail);
    return sl_buf_detach(&b, NULL);
}

void cli_print_options(FILE *out, const struct cli_command *cmd)
{
    size_t n = cli_option_count(cmd), width = 0;

    for (size_t i = 0; i < n; i++) {
        size_t w = strlen(cmd->options[i].name) + 2 +
                   (cmd->options[i].arg ? strlen(cmd->options[i].arg) + 1 : 0);
        if (w > width)
            width = w;
    }
    if (width < 12)
        width = 12; /* "-o table|json" lines up with the rest */
    fputs("\noptions:\n", out);
    for (size_t i = 0; i < n; i++) {
        const struct cli_option *o = &cmd->options[i];
        cleanup_free char *left =
            xasprintf("--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "  %-*s  %s\n", (int)width, left, o->help);
    }
    fprintf(out, "  %-*s  %s\n", (int)width, "-o FORMAT",
            cmd->csv ? "table (default), json or csv" : "table (default) or json");
}
