/* Helpers every command shares: errors and exit statuses, values given as
 * arguments, passwords, and finding a user by email and an instance by id
 * or name. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

int cli_usage_error(struct cli *cli, const char *fmt, ...)
{
    va_list ap;

    fputs("suanli: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (cli && cli->cmd) {
        cleanup_free char *usage = cli_usage(cli->cmd);
        fprintf(stderr, "usage: suanli %s\n", usage);
    }
    return CLI_EXIT_USAGE;
}

/* The exit status for an error kind. */
static int cli_exit_status(enum sl_error_kind kind)
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
    case SL_E_STORAGE:
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

int cli_parse_int(struct cli *cli, const char *what, const char *text, int64_t min, int64_t max,
                  int64_t *out)
{
    struct sl_error err = SL_ERROR_INIT;

    if (cli_check_int(what, text, min, max, out, &err) < 0) {
        cli_usage_error(cli, "%s", err.message);
        return -1;
    }
    return 0;
}

int cli_parse_amount(struct cli *cli, const char *what, const char *text, int64_t *out)
{
    struct sl_error err = SL_ERROR_INIT;

    if (cli_check_amount(what, text, out, &err) < 0) {
        cli_usage_error(cli, "%s", err.message);
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
    cleanup_free char *email = sl_client_escape(user);
    cleanup_free char *path = xasprintf("/v1/admin/users?email=%s", email);
    cleanup_json json_t *page = NULL;
    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &page, err) < 0)
        return NULL;
    const char *id = jstr(json_array_get(json_object_get(page, "items"), 0), "id");
    if (!id) {
        sl_fail(err, SL_E_NOT_FOUND, "no_such_user",
                "no user with email '%s': list them with suanli admin user ls", user);
        return NULL;
    }
    return xstrdup(id);
}

int cli_remove_one(struct cli *cli, const struct cli_args *a, const char *collection,
                   const char *noun)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *id = sl_client_escape(a->argv[0]);
    cleanup_free char *path = xasprintf("%s/%s", collection, id);
    cleanup_json json_t *out = NULL;
    if (sl_client_request(&cli->client, "DELETE", path, NULL, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, NULL);
    else
        printf("removed %s %s\n", noun, a->argv[0]);
    return CLI_EXIT_OK;
}

char *cli_instance_path(const char *id, const char *suffix)
{
    cleanup_free char *e = sl_client_escape(id);

    return suffix ? xasprintf("/v1/instances/%s/%s", e, suffix) : xasprintf("/v1/instances/%s", e);
}

json_t *cli_instance_get(struct cli *cli, const char *id, struct sl_error *err)
{
    cleanup_free char *path = cli_instance_path(id, NULL);
    json_t *inst = NULL;

    return sl_client_request(&cli->client, "GET", path, NULL, NULL, &inst, err) < 0 ? NULL : inst;
}

/* Whether text could be an instance id: "i-" and [a-z0-9-], as ids are
 * made (lib/id.c), so that a name such as "my box" or "train/v2" is never
 * sent as a path segment. */
static bool id_shaped(const char *text)
{
    size_t len = strlen(text);

    return len > 2 && len < 64 && strncmp(text, "i-", 2) == 0 &&
           strspn(text, "abcdefghijklmnopqrstuvwxyz0123456789-") == len;
}

json_t *cli_instance_find(struct cli *cli, const char *id_or_name, struct sl_error *err)
{
    json_t *item, *found = NULL;
    size_t i, matches = 0;

    /* an id wins: a name is looked up only when no instance of the
     * caller's has the id (GET answers 404 for another renter's too) */
    if (id_shaped(id_or_name)) {
        json_t *inst = cli_instance_get(cli, id_or_name, err);
        if (inst || err->kind != SL_E_NOT_FOUND)
            return inst;
        sl_error_clear(err);
    }
    /* the server filters by name; the exact match is checked here too, so
     * an older server that ignores ?name= lists everything and still finds
     * the right one */
    cleanup_free char *name = sl_client_escape(id_or_name);
    cleanup_free char *path = xasprintf("/v1/instances?name=%s", name);
    cleanup_json json_t *list = *id_or_name ? sl_client_list(&cli->client, path, 500, err) : NULL;
    if (!list && err->kind != SL_E_NONE && err->kind != SL_E_INVALID)
        return NULL; /* not a refused name (too long to be one): the server's trouble */
    sl_error_clear(err);
    json_array_foreach(json_object_get(list, "items"), i, item)
    {
        const char *n = jstr(item, "name");
        if (n && strcmp(n, id_or_name) == 0 && matches++ == 0)
            found = item;
    }
    if (matches > 1) {
        sl_fail(err, SL_E_CONFLICT, "ambiguous_name",
                "%zu instances are named '%s': give the id (suanli ls lists them)", matches,
                id_or_name);
        return NULL;
    }
    if (!found) {
        sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                "no instance '%s': list yours with suanli ls", id_or_name);
        return NULL;
    }
    return json_incref(found);
}
