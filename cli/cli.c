/* Helpers every command shares: errors and exit statuses, option parsing,
 * passwords, and resolving a user given by email. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/money.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

int cli_usage_error(struct cli *cli, const char *fmt, ...)
{
    va_list ap;

    fputs("suanli: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (cli && cli->cmd)
        fprintf(stderr, "usage: suanli %s%s%s\n", cli->cmd->name, cli->cmd->usage[0] ? " " : "",
                cli->cmd->usage);
    return CLI_EXIT_USAGE;
}

int cli_exit_status(enum sl_error_kind kind)
{
    switch (kind) {
    case SL_E_NONE:
        return CLI_EXIT_OK;
    case SL_E_UNAUTHENTICATED:
        return CLI_EXIT_AUTH;
    case SL_E_NOT_FOUND:
        return CLI_EXIT_NOT_FOUND;
    case SL_E_INTERNAL:
    case SL_E_UNAVAILABLE:
        return CLI_EXIT_UNAVAILABLE;
    default:
        return CLI_EXIT_REFUSED;
    }
}

int cli_fail(const struct sl_error *err)
{
    fprintf(stderr, "suanli: %s\n", err->message[0] ? err->message : "unknown error");
    /* a failed system call here is local (a file), not the server's doing */
    if (err->sys_errno)
        return CLI_EXIT_REFUSED;
    return cli_exit_status(err->kind);
}

int cli_need_token(struct cli *cli)
{
    if (cli->token)
        return CLI_EXIT_OK;
    fprintf(stderr,
            "suanli: not logged in to %s: run suanli login --email EMAIL, or set "
            "SUANLI_TOKEN\n",
            cli->server);
    return CLI_EXIT_AUTH;
}

int cli_set_output(struct cli *cli, const char *text)
{
    if (strcmp(text, "table") == 0) {
        cli->output = OUTPUT_TABLE;
    } else if (strcmp(text, "json") == 0) {
        cli->output = OUTPUT_JSON;
    } else if (strcmp(text, "csv") == 0 && (!cli->cmd || cli->cmd->csv)) {
        cli->output = OUTPUT_CSV;
    } else if (strcmp(text, "csv") == 0) {
        fprintf(stderr, "suanli: '%s' prints no CSV: use -o table or -o json\n", cli->cmd->name);
        return -1;
    } else {
        fprintf(stderr, "suanli: -o takes table, json or csv, not '%s'\n", text);
        return -1;
    }
    return 0;
}

#define MAX_OPTIONS 32

int cli_getopt(struct cli *cli, int argc, char **argv, const struct option *longopts)
{
    struct option all[MAX_OPTIONS + 2];
    size_t n = 0;
    int c;

    for (; longopts[n].name; n++) {
        if (n == MAX_OPTIONS) {
            fprintf(stderr, "suanli: BUG: '%s' has more than %d options\n", argv[0], MAX_OPTIONS);
            abort();
        }
        all[n] = longopts[n];
    }
    all[n++] = (struct option){ "output", required_argument, NULL, 'o' };
    all[n] = (struct option){ 0 };
    /* a leading ':' reports a missing argument as ':' so we can word it */
    while ((c = getopt_long(argc, argv, ":o:", all, NULL)) == 'o')
        if (cli_set_output(cli, optarg) < 0)
            return '?';
    if (c == ':') {
        fprintf(stderr, "suanli: option '%s' needs a value\n", argv[optind - 1]);
        return '?';
    }
    if (c == '?') {
        fprintf(stderr, "suanli: unknown option '%s'\n", argv[optind - 1]);
        return '?';
    }
    return c;
}

int cli_no_args(struct cli *cli, int argc, char **argv)
{
    static const struct option none[] = { { 0 } };

    if (cli_getopt(cli, argc, argv, none) != -1)
        return cli_usage_error(cli, "'%s' takes no options", cli->cmd->name);
    return cli_positionals(cli, argc, argv, 0);
}

int cli_positionals(struct cli *cli, int argc, char **argv, int n)
{
    if (argc - optind < n)
        return cli_usage_error(cli, "missing argument");
    if (argc - optind > n)
        return cli_usage_error(cli, "unexpected argument '%s'", argv[optind + n]);
    return CLI_EXIT_OK;
}

int cli_parse_int(struct cli *cli, const char *what, const char *text, int64_t min, int64_t max,
                  int64_t *out)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        cli_usage_error(cli, "%s must be a whole number from %lld to %lld, not '%s'", what,
                        (long long)min, (long long)max, text);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_amount(struct cli *cli, const char *what, const char *text, int64_t *out)
{
    struct sl_error err = SL_ERROR_INIT;

    if (sl_money_parse(text, out, &err) < 0) {
        cli_usage_error(cli, "%s: %s", what, err.message);
        return -1;
    }
    return 0;
}

int cli_check_date(struct cli *cli, const char *what, const char *text, size_t len)
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
    if (!shaped) {
        cli_usage_error(cli, "%s must be %s, not '%s'", what, example, text);
        return -1;
    }
    return 0;
}

bool cli_is_plan(const char *plan)
{
    static const char *const plans[] = { "payg", "day", "week", "month" };

    for (size_t i = 0; i < ARRAY_SIZE(plans); i++)
        if (strcmp(plan, plans[i]) == 0)
            return true;
    return false;
}

static char *read_line(FILE *f)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, f);

    if (n < 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    return line;
}

static char *prompt_no_echo(FILE *tty, const char *prompt)
{
    struct termios old, quiet;
    bool restore = tcgetattr(fileno(tty), &old) == 0;

    if (restore) {
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(fileno(tty), TCSAFLUSH, &quiet);
    }
    fputs(prompt, tty);
    fflush(tty);
    char *line = read_line(tty);
    if (restore)
        tcsetattr(fileno(tty), TCSAFLUSH, &old);
    fputc('\n', tty);
    return line;
}

char *cli_read_password(bool from_stdin, bool confirm, struct sl_error *err)
{
    const char *env = getenv("SUANLI_PASSWORD");

    if (from_stdin) {
        char *line = read_line(stdin);
        if (!line || !*line) {
            free(line);
            sl_fail(err, SL_E_INVALID, "no_password", "--password-stdin: stdin held no password");
            return NULL;
        }
        return line;
    }
    if (env && *env)
        return xstrdup(env);
    cleanup_fclose FILE *tty = fopen("/dev/tty", "r+");
    if (!tty) {
        sl_fail(err, SL_E_INVALID, "no_password",
                "no terminal to ask for the password: use --password-stdin or SUANLI_PASSWORD");
        return NULL;
    }
    cleanup_free char *first = prompt_no_echo(tty, "Password: ");
    if (!first || !*first) {
        sl_fail(err, SL_E_INVALID, "no_password", "no password given");
        return NULL;
    }
    if (confirm) {
        cleanup_free char *again = prompt_no_echo(tty, "Password again: ");
        if (!again || strcmp(first, again) != 0) {
            sl_fail(err, SL_E_INVALID, "password_mismatch", "the two passwords differ");
            return NULL;
        }
    }
    return TAKE_PTR(first);
}

char *cli_resolve_user(struct cli *cli, const char *user, struct sl_error *err)
{
    if (!strchr(user, '@'))
        return xstrdup(user);
    cleanup_free char *email = client_escape(user);
    cleanup_free char *path = xasprintf("/v1/admin/users?email=%s", email);
    cleanup_json json_t *page = NULL;
    if (client_request(&cli->client, "GET", path, NULL, NULL, &page, err) < 0)
        return NULL;
    const char *id = jstr(json_array_get(json_object_get(page, "items"), 0), "id");
    if (!id) {
        sl_fail(err, SL_E_NOT_FOUND, "no_such_user",
                "no user with email '%s': list them with suanli admin user ls", user);
        return NULL;
    }
    return xstrdup(id);
}

int cli_remove_one(struct cli *cli, int argc, char **argv, const char *collection, const char *noun)
{
    static const struct option none[] = { { 0 } };
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if (cli_getopt(cli, argc, argv, none) != -1)
        return cli_usage_error(cli, "bad option");
    if ((status = cli_positionals(cli, argc, argv, 1)) || (status = cli_need_token(cli)))
        return status;
    cleanup_free char *id = client_escape(argv[optind]);
    cleanup_free char *path = xasprintf("%s/%s", collection, id);
    cleanup_json json_t *out = NULL;
    if (client_request(&cli->client, "DELETE", path, NULL, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, NULL);
    else
        printf("removed %s %s\n", noun, argv[optind]);
    return CLI_EXIT_OK;
}

json_t *cli_instance_get(struct cli *cli, const char *id, struct sl_error *err)
{
    cleanup_free char *e = client_escape(id);
    cleanup_free char *path = xasprintf("/v1/instances/%s", e);
    json_t *inst = NULL;

    return client_request(&cli->client, "GET", path, NULL, NULL, &inst, err) < 0 ? NULL : inst;
}
