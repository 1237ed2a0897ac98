/* The suanli CLI: one table of commands (tmux, git), one file per noun.
 *
 * A command is a row {name, aliases, args, options, summary, run}. Names
 * are one or more words ("token create", "admin verification approve");
 * main.c matches the longest row name against the words on the command
 * line, parses the rest with the row's option table (options.c) and calls
 * run with what it found. run returns the process exit status, one of enum
 * cli_exit. */
#ifndef SUANLI_CLI_H
#define SUANLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../lib/error.h"
#include "../lib/client.h"
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
#define CLI_MAX_OPTIONS 16

struct cli;
struct cli_args;

/* What an option's value must be; checked while parsing, so a command
 * only reads values that are right. */
enum cli_option_type {
    CLI_OPT_TEXT,   /* anything */
    CLI_OPT_INT,    /* a whole number from min to max */
    CLI_OPT_AMOUNT, /* money in units ("100", "12.5"), kept as micros */
    CLI_OPT_MONTH,  /* YYYY-MM */
    CLI_OPT_DAY,    /* YYYY-MM-DD, a day of the calendar */
};

/* One option of a command: --NAME, or --NAME VALUE when arg is set. */
struct cli_option {
    const char *name;          /* "timeout" for --timeout */
    const char *arg;           /* the value as the usage shows it, "SECONDS"; NULL: a flag */
    enum cli_option_type type; /* of the value */
    int64_t min, max;          /* CLI_OPT_INT's bounds */
    bool required;             /* shown without brackets; its absence is a usage error */
    int group;                 /* the options of one group (> 0) exclude each other */
    const char *help;          /* one line for suanli help COMMAND */
};

struct cli_command {
    const char *name;
    const char *aliases[CLI_MAX_ALIASES]; /* full alternative names, NULL-terminated */
    /* The positional arguments as the usage shows them, which also sets how
     * many there may be: each word is one ("ID PORT"), a [...] group one
     * that may be left out ("[ID]"), "..." any number ("[-- COMMAND...]"). */
    const char *args;
    const struct cli_option *options; /* ends with a row without name; NULL: none */
    const char *summary;
    int (*run)(struct cli *cli, const struct cli_args *a);
    bool csv; /* prints CSV with -o csv (other commands refuse it) */
};

/* The value of one option, as parsed. */
struct cli_value {
    bool given;
    const char *text; /* as given (NULL for a flag) */
    int64_t number;   /* CLI_OPT_INT and CLI_OPT_AMOUNT (micros) */
};

/* A command line parsed with its command's table. */
struct cli_args {
    const struct cli_command *cmd;
    int argc; /* the positional arguments, options taken out */
    char **argv;
    const char *output;                       /* -o / --output after the command name, or NULL */
    struct cli_value values[CLI_MAX_OPTIONS]; /* in the order of cmd->options */
};

/* Parses argv (argv[0] is the command's name) with cmd's options and
 * positional arguments; -o FORMAT is every command's. Returns 0, or -1
 * with err (SL_E_INVALID) saying what is wrong: an unknown option, a
 * value that is missing or not of its type, too few or too many
 * arguments, two options of one group, a required option left out.
 * argv is reordered (getopt_long) and values point into it. */
int cli_args_parse(const struct cli_command *cmd, int argc, char **argv, struct cli_args *a,
                   struct sl_error *err);

/* Whether --name was given; its text (fallback when not given); its number
 * (fallback when not given). name must be one of the command's options. */
bool cli_has(const struct cli_args *a, const char *name);
const char *cli_text(const struct cli_args *a, const char *name, const char *fallback);
int64_t cli_number(const struct cli_args *a, const char *name, int64_t fallback);

/* The usage line after "suanli ": the name, the arguments, the options
 * (required ones bare, the others in brackets, a group as [--a | --b]).
 * A new string. */
char *cli_usage(const struct cli_command *cmd);

/* Prints "options:" and a line per option with its help, -o included. */
void cli_print_options(FILE *out, const struct cli_command *cmd);

size_t cli_option_count(const struct cli_command *cmd);

/* Checks of a value, for options and arguments alike; -1 with err
 * (SL_E_INVALID) naming what (an option, "PORT") otherwise. A whole
 * number from min to max; money in units into micros; a month "YYYY-MM"
 * (len 7) or a day "YYYY-MM-DD" (len 10) of the calendar. */
int cli_check_int(const char *what, const char *text, int64_t min, int64_t max, int64_t *out,
                  struct sl_error *err);
int cli_check_amount(const char *what, const char *text, int64_t *out, struct sl_error *err);

/* Every command, in the order --help lists them (commands.c). */
extern const struct cli_command *const cli_commands[];
extern const size_t cli_commands_count;

/* What every command sees: the resolved server and token, the output mode,
 * the config file, and an HTTP client. */
struct cli {
    const struct cli_command *cmd; /* the command running, for its usage */
    char *server;                  /* never NULL once main has resolved it */
    char *token;                   /* NULL when not logged in */
    enum output_mode output;
    char *config_path;
    struct cli_config config; /* as read from config_path */
    struct sl_client client;
};

/* Prints "suanli: MESSAGE" and the command's usage to stderr; returns
 * CLI_EXIT_USAGE. */
int cli_usage_error(struct cli *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "suanli: MESSAGE" to stderr and returns the exit status err maps to. */
int cli_fail(const struct sl_error *err);

/* Fails with CLI_EXIT_AUTH (and says how to log in) when there is no token. */
int cli_need_token(struct cli *cli);

/* Sets cli->output from "table", "json" or "csv" (csv only for commands
 * that print it). Returns 0, or -1 after saying what is wrong. */
int cli_set_output(struct cli *cli, const char *text);

/* `NOUN rm ID`: DELETE collection/ID and say so ("removed key ID"). */
int cli_remove_one(struct cli *cli, const struct cli_args *a, const char *collection,
                   const char *noun);

/* Parses a whole decimal integer option within [min, max]; a usage error
 * otherwise (prints, returns -1). */
int cli_parse_int(struct cli *cli, const char *what, const char *text, int64_t min, int64_t max,
                  int64_t *out);

/* Parses a decimal money amount ("100", "12.5") into micros; a usage error
 * otherwise. */
int cli_parse_amount(struct cli *cli, const char *what, const char *text, int64_t *out);

/* GET /v1/instances/ID: the instance, or NULL with err filled. */
json_t *cli_instance_get(struct cli *cli, const char *id, struct sl_error *err);

/* The caller's instance that id_or_name names: the one with that id, else
 * the one with that name (GET /v1/instances?name=); an id always wins.
 * A new reference, or NULL with err filled: SL_E_NOT_FOUND "no instance
 * 'X': list yours with suanli ls", SL_E_CONFLICT when several share the
 * name, or the server's error. */
json_t *cli_instance_find(struct cli *cli, const char *id_or_name, struct sl_error *err);

/* "/v1/instances/ID" or "/v1/instances/ID/SUFFIX", ID escaped. A new
 * string. */
char *cli_instance_path(const char *id, const char *suffix);

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

/* Scheduled stops (cmd-stops.c): `stop` given --at, --in or --cancel; the
 * lines `show` prints (NULL when there is no scheduled stop). */
int cli_stop_schedule(struct cli *cli, const struct cli_args *a);
const char *cli_stop_at_text(json_t *inst, char *buf, size_t size);
const char *cli_idle_stop_text(json_t *inst, char *buf, size_t size);

/* Service ports (cmd-port.c): the links `show` prints under its fields. */
void cli_print_services(FILE *out, json_t *inst);

/* Which card fits (cmd-estimate.c): POST /v1/estimate with body, a new
 * reference or NULL with err; `market --fits`'s "MODEL [PRECISION [JOB]]"
 * as such a body (NULL with err saying what to write). */
json_t *cli_estimate(struct cli *cli, json_t *body, struct sl_error *err);
json_t *cli_estimate_fits_body(const char *fits, struct sl_error *err);

/* The command descriptors, one file per noun. */
extern const struct cli_command cmd_register, cmd_login, cmd_logout, cmd_whoami;
extern const struct cli_command cmd_token_create, cmd_token_ls, cmd_token_rm;
extern const struct cli_command cmd_key_add, cmd_key_ls, cmd_key_rm;
extern const struct cli_command cmd_notify_ls, cmd_notify_add, cmd_notify_rm, cmd_notify_test,
    cmd_notify_confirm, cmd_notify_on, cmd_notify_off, cmd_notify_log;
extern const struct cli_command cmd_verify;
extern const struct cli_command cmd_balance, cmd_ledger;
extern const struct cli_command cmd_bill, cmd_bill_charges, cmd_plan;
extern const struct cli_command cmd_market, cmd_regions, cmd_gpu_models, cmd_estimate;
extern const struct cli_command cmd_create, cmd_ls, cmd_show, cmd_events, cmd_stop, cmd_start,
    cmd_restart, cmd_release, cmd_idle_stop, cmd_clone, cmd_migrate;
extern const struct cli_command cmd_top, cmd_stats;
extern const struct cli_command cmd_disk_resize;
extern const struct cli_command cmd_ssh, cmd_ssh_config, cmd_cp;
extern const struct cli_command cmd_port_ls, cmd_port_add, cmd_port_rm, cmd_port_public,
    cmd_port_private;
extern const struct cli_command cmd_image_save, cmd_image_rm, cmd_image_share, cmd_image_unshare;
extern const struct cli_command cmd_image_ls, cmd_admin_image_build, cmd_admin_image_import,
    cmd_admin_image_hosts, cmd_admin_image_rm;
extern const struct cli_command cmd_dataset_ls, cmd_admin_dataset_add, cmd_admin_dataset_ls,
    cmd_admin_dataset_rm;
extern const struct cli_command cmd_storage, cmd_admin_storage_ls, cmd_admin_storage_set;
extern const struct cli_command cmd_admin_node_ls, cmd_admin_node_show, cmd_admin_node_cordon,
    cmd_admin_node_drain, cmd_admin_node_uncordon, cmd_admin_node_remove,
    cmd_admin_join_token_create, cmd_admin_join_token_ls, cmd_admin_join_token_rm;
extern const struct cli_command cmd_admin_user_ls, cmd_admin_credit, cmd_admin_verification_ls,
    cmd_admin_verification_approve, cmd_admin_verification_reject, cmd_admin_region_ls,
    cmd_admin_region_add, cmd_admin_gpu_model_ls, cmd_admin_gpu_model_add,
    cmd_admin_gpu_model_price, cmd_admin_price_ls, cmd_admin_price_set, cmd_admin_ledger_check,
    cmd_admin_billing_check, cmd_admin_billing_run;

#endif
