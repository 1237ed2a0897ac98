/* suanli: the renter's and operator's command line. Global options, the
 * command table, and dispatch by the longest matching command name. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/xalloc.h"

#include <curl/curl.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SERVER "http://127.0.0.1:7070"
#define MAX_WORDS      4

static const char global_usage[] =
    "usage: suanli [--server URL] [--token TOKEN] [-o table|json|csv] COMMAND [ARGS]\n";

/* Number of words of name that argv starts with, all of them or 0. */
static int match_words(const char *name, int argc, char **argv)
{
    char copy[128];
    int n = 0;

    snprintf(copy, sizeof(copy), "%s", name);
    for (char *save = NULL, *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (n >= argc || strcmp(argv[n], w) != 0)
            return 0;
        n++;
    }
    return n;
}

/* The command argv names, and how many words its name took. */
static const struct cli_command *find_command(int argc, char **argv, int *words)
{
    const struct cli_command *best = NULL;

    *words = 0;
    for (size_t i = 0; i < cli_commands_count; i++) {
        int n = match_words(cli_commands[i]->name, argc, argv);
        for (int a = 0; a < CLI_MAX_ALIASES && cli_commands[i]->aliases[a]; a++) {
            int m = match_words(cli_commands[i]->aliases[a], argc, argv);
            if (m > n)
                n = m;
        }
        if (n > *words) {
            *words = n;
            best = cli_commands[i];
        }
    }
    return best;
}

/* True if name starts with the words of argv (a noun such as "token"). */
static bool has_prefix(const char *name, int argc, char **argv)
{
    size_t off = 0;

    for (int i = 0; i < argc; i++) {
        size_t len = strlen(argv[i]);
        if (strncmp(name + off, argv[i], len) != 0 || (name[off + len] != ' ' && name[off + len]))
            return false;
        off += len + (name[off + len] == ' ');
    }
    return argc > 0;
}

static void print_row(FILE *out, const struct cli_command *c)
{
    cleanup_free char *left = cli_usage(c);

    if (strlen(left) > 44)
        fprintf(out, "  %s\n  %-44s  %s\n", left, "", c->summary);
    else
        fprintf(out, "  %-44s  %s\n", left, c->summary);
}

/* Lists the commands under a prefix (all of them when argc is 0). */
static int list_commands(FILE *out, int argc, char **argv)
{
    int shown = 0;

    for (size_t i = 0; i < cli_commands_count; i++)
        if (argc == 0 || has_prefix(cli_commands[i]->name, argc, argv)) {
            print_row(out, cli_commands[i]);
            shown++;
        }
    return shown;
}

static void print_help(FILE *out)
{
    fputs(global_usage, out);
    fputs("\nsuanli rents GPUs from a suanli server.\n\n"
          "Global options (before the command):\n"
          "  --server URL      the server (env SUANLI_URL, then the config file; "
          "default " DEFAULT_SERVER ")\n"
          "  --token TOKEN     the API token (env SUANLI_TOKEN, then the config file)\n"
          "  -o table|json|csv human tables (default), the API's JSON, or CSV (bill,\n"
          "                    bill charges, events); -o may also follow the command\n"
          "\nCommands:\n",
          out);
    list_commands(out, 0, NULL);
    fputs("\nRun 'suanli help COMMAND' for one command. Exit status: 0 ok, 1 refused by the "
          "server,\n2 usage error, 3 not logged in, 4 not found, 5 server error or unreachable.\n",
          out);
}

static void print_command_help(FILE *out, const struct cli_command *c)
{
    cleanup_free char *usage = cli_usage(c);

    fprintf(out, "usage: suanli %s\n\n%s\n", usage, c->summary);
    cli_print_options(out, c);
    for (int a = 0; a < CLI_MAX_ALIASES && c->aliases[a]; a++)
        fprintf(out, "%s suanli %s", a ? "," : "\nalso:", c->aliases[a]);
    if (c->aliases[0])
        fputc('\n', out);
}

static int help(int argc, char **argv)
{
    int words;
    const struct cli_command *c;

    if (argc == 0) {
        print_help(stdout);
        return CLI_EXIT_OK;
    }
    c = find_command(argc, argv, &words);
    if (c && words == argc) {
        print_command_help(stdout, c);
        return CLI_EXIT_OK;
    }
    if (list_commands(stdout, argc, argv) > 0)
        return CLI_EXIT_OK;
    fprintf(stderr, "suanli: no command '%s': see suanli --help\n", argv[0]);
    return CLI_EXIT_USAGE;
}

/* Takes the value of a global option: "--server URL" or "--server=URL". */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
    size_t len = strlen(name);

    if (strncmp(argv[*i], name, len) == 0 && argv[*i][len] == '=')
        return argv[*i] + len + 1;
    if (strcmp(argv[*i], name) == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static char *pick(const char *flag, const char *env_name, const char *from_config)
{
    const char *env = getenv(env_name);

    if (flag)
        return xstrdup(flag);
    if (env && *env)
        return xstrdup(env);
    return from_config ? xstrdup(from_config) : NULL;
}

static void cli_release(struct cli *cli)
{
    sl_client_release(&cli->client);
    cli_config_release(&cli->config);
    free(cli->server);
    free(cli->token);
    free(cli->config_path);
}

static int run(struct cli *cli, int argc, char **argv)
{
    const char *server_flag = NULL, *token_flag = NULL, *output = NULL;
    struct sl_error err = SL_ERROR_INIT;
    int i = 1, words;

    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *v;
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            print_help(stdout);
            return CLI_EXIT_OK;
        } else if (strncmp(argv[i], "--server", 8) == 0 &&
                   (v = option_value(argc, argv, &i, "--server"))) {
            server_flag = v;
        } else if (strncmp(argv[i], "--token", 7) == 0 &&
                   (v = option_value(argc, argv, &i, "--token"))) {
            token_flag = v;
        } else if (strncmp(argv[i], "-o", 2) == 0 && argv[i][2]) {
            output = argv[i] + 2;
        } else if ((strcmp(argv[i], "-o") == 0 || strncmp(argv[i], "--output", 8) == 0) &&
                   (v = option_value(argc, argv, &i, argv[i][1] == 'o' ? "-o" : "--output"))) {
            output = v;
        } else {
            fprintf(stderr, "suanli: unknown or incomplete option '%s'\n%s", argv[i], global_usage);
            return CLI_EXIT_USAGE;
        }
    }
    if (output && cli_set_output(cli, output) < 0)
        return CLI_EXIT_USAGE;
    argc -= i;
    argv += i;
    if (argc == 0) {
        fputs(global_usage, stderr);
        fputs("run 'suanli --help' for the list of commands\n", stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[0], "help") == 0)
        return help(argc - 1, argv + 1);
    cli->cmd = find_command(argc, argv, &words);
    if (!cli->cmd) {
        if (list_commands(stderr, argc, argv) == 0)
            fprintf(stderr, "suanli: unknown command '%s': see suanli --help\n", argv[0]);
        else
            fprintf(stderr, "suanli: '%s' needs a subcommand, one of the above\n", argv[0]);
        return CLI_EXIT_USAGE;
    }
    for (int a = words; a < argc && strcmp(argv[a], "--") != 0; a++)
        if (strcmp(argv[a], "--help") == 0) {
            print_command_help(stdout, cli->cmd);
            return CLI_EXIT_OK;
        }
    /* now that the command is known: does it print CSV? */
    if (output && cli_set_output(cli, output) < 0)
        return CLI_EXIT_USAGE;
    /* the command sees its name as argv[0], its arguments after */
    struct cli_args args;
    if (cli_args_parse(cli->cmd, argc - (words - 1), argv + (words - 1), &args, &err) < 0)
        return cli_usage_error(cli, "%s", err.message);
    if (args.output && cli_set_output(cli, args.output) < 0)
        return CLI_EXIT_USAGE;

    if (!(cli->config_path = cli_config_path(&err)) ||
        cli_config_load(&cli->config, cli->config_path, &err) < 0)
        return cli_fail(&err);
    cli->server = pick(server_flag, "SUANLI_URL", cli->config.server);
    if (!cli->server)
        cli->server = xstrdup(DEFAULT_SERVER);
    for (size_t n = strlen(cli->server); n > 0 && cli->server[n - 1] == '/'; n--)
        cli->server[n - 1] = '\0';
    cli->token = pick(token_flag, "SUANLI_TOKEN", cli->config.token);
    sl_client_init(&cli->client, cli->server, cli->token);
    return cli->cmd->run(cli, &args);
}

int main(int argc, char **argv)
{
    struct cli cli = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    int status;

    setlocale(LC_CTYPE, "");
    if (sl_crypto_init(&err) < 0)
        return cli_fail(&err);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    status = run(&cli, argc, argv);
    cli_release(&cli);
    curl_global_cleanup();
    if (fflush(stdout) != 0 && status == CLI_EXIT_OK) {
        perror("suanli: unable to write the output");
        status = CLI_EXIT_REFUSED;
    }
    return status;
}
