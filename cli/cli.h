/* The suanli CLI: one table of commands (tmux, git), one file per noun.
 *
 * A command is a row {name, aliases, usage, summary, run}. Names are one or
 * more words ("token create", "admin verification approve"); main.c matches
 * the longest row name against the words on the command line and calls run
 * with argv[0] set to the command name, so getopt_long works as usual. run
 * returns the process exit status, one of enum cli_exit. */
#ifndef SUANLI_CLI_H
#define SUANLI_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "../lib/error.h"
#include "client.h"
#include "config.h"
#include "output.h"

/* Exit statuses scripts can trust (docs/cli.md). */
enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_REFUSED = 1,     /* the server refused the request (4xx but 401, 404) */
    CLI_EXIT_USAGE = 2,       /* bad flags or a missing argument */
    CLI_EXIT_AUTH = 3,        /* not logged in, or credentials rejected (401) */
    CLI_EXIT_NOT_FOUND = 4,   /* 404 */
    CLI_EXIT_UNAVAILABLE = 5, /* 5xx, or the server is unreachable */
};

#define CLI_MAX_ALIASES 3

struct cli;

struct cli_command {
    const char *name;
    const char *aliases[CLI_MAX_ALIASES]; /* full alternative names, NULL-terminated */
    const char *usage;                    /* arguments after the name */
    const char *summary;
    int (*run)(struct cli *cli, int argc, char **argv);
    bool csv; /* prints CSV with -o csv (other commands refuse it) */
};

/* What every command sees: the resolved server and token, the output mode,
 * the config file, and an HTTP client. */
struct cli {
    const struct cli_command *cmd; /* the command running, for its usage */
    char *server;                  /* never NULL once main has resolved it */
    char *token;                   /* NULL when not logged in */
    enum output_mode output;
    char *config_path;
    struct cli_config config; /* as read from config_path */
    struct client client;
};

/* Prints "suanli: MESSAGE" and the command's usage to stderr; returns
 * CLI_EXIT_USAGE. */
int cli_usage_error(struct cli *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "suanli: MESSAGE" to stderr and returns the exit status err maps to. */
int cli_fail(const struct sl_error *err);

/* The exit status for an error kind. */
int cli_exit_status(enum sl_error_kind kind);

/* Fails with CLI_EXIT_AUTH (and says how to log in) when there is no token. */
int cli_need_token(struct cli *cli);

/* Resets getopt and parses options of argv; a thin wrapper so every command
 * handles '?' and missing arguments the same way, and takes -o / --output
 * after the command name as well as before it. Returns the option
 * character, -1 at the end, or '?' on error (already reported). */
int cli_getopt(struct cli *cli, int argc, char **argv, const struct option *longopts);

/* Sets cli->output from "table", "json" or "csv" (csv only for commands
 * that print it). Returns 0, or -1 after saying what is wrong. */
int cli_set_output(struct cli *cli, const char *text);

/* For commands without options or arguments: a usage error if argv holds
 * any; CLI_EXIT_OK otherwise. */
int cli_no_args(struct cli *cli, int argc, char **argv);

/* Checks that exactly n positional arguments remain after option parsing
 * (optind on); a usage error naming what is missing or extra otherwise. */
int cli_positionals(struct cli *cli, int argc, char **argv, int n);

/* `NOUN rm ID`: DELETE collection/ID and say so ("removed key ID"). */
int cli_remove_one(struct cli *cli, int argc, char **argv, const char *collection,
                   const char *noun);

/* Parses a whole decimal integer option within [min, max]; a usage error
 * otherwise (prints, returns -1). */
int cli_parse_int(struct cli *cli, const char *what, const char *text, int64_t min, int64_t max,
                  int64_t *out);

/* Parses a decimal money amount ("100", "12.5") into micros; a usage error
 * otherwise. */
int cli_parse_amount(struct cli *cli, const char *what, const char *text, int64_t *out);

/* Checks that text is a month "YYYY-MM" (month is 7) or a day "YYYY-MM-DD"
 * of the calendar (10); a usage error naming the option otherwise (prints,
 * returns -1). */
int cli_check_date(struct cli *cli, const char *what, const char *text, size_t len);

/* GET /v1/instances/ID: the instance, or NULL with err filled. */
json_t *cli_instance_get(struct cli *cli, const char *id, struct sl_error *err);

/* Prepaid plans a renter can pick: "payg", "day", "week", "month". */
bool cli_is_plan(const char *plan);

/* Reads a password: one line of stdin when from_stdin, else $SUANLI_PASSWORD,
 * else a no-echo prompt on the terminal (asked twice when confirm). Returns a
 * new string or NULL with err filled (SL_E_INVALID when there is no way to
 * ask). */
char *cli_read_password(bool from_stdin, bool confirm, struct sl_error *err);

/* Resolves USER, an id "u-..." or an email, to a user id with the admin
 * users list. Returns a new string or NULL with err filled. */
char *cli_resolve_user(struct cli *cli, const char *user, struct sl_error *err);

/* Scheduled stops (cmd-stops.c): whether `stop` was given --at, --in or
 * --cancel, and that form of it; the lines `show` prints (NULL when there
 * is no scheduled stop). */
bool cli_stop_is_schedule(int argc, char **argv);
int cli_stop_schedule(struct cli *cli, int argc, char **argv);
const char *cli_stop_at_text(json_t *inst, char *buf, size_t size);
const char *cli_idle_stop_text(json_t *inst, char *buf, size_t size);

/* Service ports (cmd-port.c): the links `show` prints under its fields. */
void cli_print_services(FILE *out, json_t *inst);

/* The command descriptors, one file per noun. */
extern const struct cli_command cmd_register, cmd_login, cmd_logout, cmd_whoami;
extern const struct cli_command cmd_token_create, cmd_token_ls, cmd_token_rm;
extern const struct cli_command cmd_key_add, cmd_key_ls, cmd_key_rm;
extern const struct cli_command cmd_verify;
extern const struct cli_command cmd_balance, cmd_ledger;
extern const struct cli_command cmd_bill, cmd_bill_charges, cmd_plan;
extern const struct cli_command cmd_market, cmd_regions, cmd_gpu_models;
extern const struct cli_command cmd_create, cmd_ls, cmd_show, cmd_events, cmd_stop, cmd_start,
    cmd_restart, cmd_release, cmd_idle_stop;
extern const struct cli_command cmd_ssh, cmd_ssh_config, cmd_cp;
extern const struct cli_command cmd_port_ls, cmd_port_add, cmd_port_rm, cmd_port_public,
    cmd_port_private;
extern const struct cli_command cmd_image_ls, cmd_admin_image_build, cmd_admin_image_import;
extern const struct cli_command cmd_admin_node_ls, cmd_admin_node_show, cmd_admin_join_token_create,
    cmd_admin_join_token_ls, cmd_admin_join_token_rm;
extern const struct cli_command cmd_admin_user_ls, cmd_admin_credit, cmd_admin_verification_ls,
    cmd_admin_verification_approve, cmd_admin_verification_reject, cmd_admin_region_ls,
    cmd_admin_region_add, cmd_admin_gpu_model_ls, cmd_admin_gpu_model_add,
    cmd_admin_gpu_model_price, cmd_admin_price_ls, cmd_admin_price_set, cmd_admin_ledger_check,
    cmd_admin_billing_check, cmd_admin_billing_run;

#endif
