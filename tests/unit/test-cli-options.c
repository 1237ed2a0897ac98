/* cli/options.c: one option table per command drives parsing, the usage
 * line and the help; and every command of the real table is well formed. */
#include "harness.h"

#include "../../cli/cli.h"
#include "../../lib/cleanup.h"

#include <limits.h>
#include <stdio.h>

static int run_nothing(struct cli *cli, const struct cli_args *a)
{
    (void)cli;
    (void)a;
    return 0;
}

static const struct cli_option sample_options[] = {
    { .name = "model", .arg = "MODEL", .required = true, .help = "the model" },
    { .name = "count", .arg = "N", .type = CLI_OPT_INT, .min = 1, .max = 8, .help = "how many" },
    { .name = "price", .arg = "AMOUNT", .type = CLI_OPT_AMOUNT, .help = "the price" },
    { .name = "month", .arg = "YYYY-MM", .type = CLI_OPT_MONTH, .help = "the month" },
    { .name = "day", .arg = "YYYY-MM-DD", .type = CLI_OPT_DAY, .help = "the day" },
    { .name = "quiet", .help = "say less" },
    { .name = "at", .arg = "TIME", .group = 1, .help = "later" },
    { .name = "in", .arg = "DURATION", .group = 1, .help = "later" },
    { .name = "cancel", .group = 1, .help = "not later" },
    { 0 },
};

static const struct cli_command sample = {
    .name = "thing do",
    .args = "ID [EXTRA]",
    .options = sample_options,
    .summary = "a command for the tests",
    .run = run_nothing,
};

/* Parses the words of line (at most 16) as the command line of cmd; the
 * words live in a static buffer until the next call. */
static int parse(const struct cli_command *cmd, const char *line, struct cli_args *a,
                 struct sl_error *err)
{
    static char buf[512];
    static char *argv[18];
    int argc = 0;

    snprintf(buf, sizeof(buf), "%s", line);
    argv[argc++] = (char *)cmd->name;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && argc < 17;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    argv[argc] = NULL;
    sl_error_clear(err);
    return cli_args_parse(cmd, argc, argv, a, err);
}

TEST(values_come_typed_from_the_table)
{
    struct sl_error err = SL_ERROR_INIT;
    struct cli_args a;

    if (!CHECK_EQ_INT(parse(&sample,
                            "i-1 --model X --count 3 --price 12.5 --quiet --month "
                            "2026-11 --day=2026-02-28 --in 3h",
                            &a, &err),
                      0))
        return;
    CHECK_STR(cli_text(&a, "model", NULL), "X");
    CHECK_EQ_INT(cli_number(&a, "count", 1), 3);
    CHECK_EQ_INT(cli_number(&a, "price", 0), 12500000);
    CHECK(cli_has(&a, "quiet"));
    CHECK_STR(cli_text(&a, "quiet", "fallback"), "fallback"); /* a flag has no text */
    CHECK_STR(cli_text(&a, "month", NULL), "2026-11");
    CHECK_STR(cli_text(&a, "day", NULL), "2026-02-28");
    CHECK_STR(cli_text(&a, "in", NULL), "3h");
    CHECK(!cli_has(&a, "at"));
    CHECK_STR(cli_text(&a, "at", "none"), "none");
    CHECK_EQ_INT(cli_number(&a, "count", 1), 3);
    CHECK_EQ_INT(a.argc, 1);
    CHECK_STR(a.argv[0], "i-1");
    CHECK(a.output == NULL);

    /* defaults when absent; -o after the command is every command's */
    CHECK_EQ_INT(parse(&sample, "--model X i-1 two -o json", &a, &err), 0);
    CHECK_EQ_INT(cli_number(&a, "count", 1), 1);
    CHECK(!cli_has(&a, "quiet"));
    CHECK_STR(a.output, "json");
    CHECK_EQ_INT(a.argc, 2);
    CHECK_STR(a.argv[1], "two");

    /* after "--" everything is an argument, also what looks like an option */
    CHECK_EQ_INT(parse(&sample, "--model X -- i-1 --quiet", &a, &err), 0);
    CHECK(!cli_has(&a, "quiet"));
    CHECK_EQ_INT(a.argc, 2);
    CHECK_STR(a.argv[1], "--quiet");
}

/* Parsing line fails with a usage error whose message contains words. */
#define CHECK_REFUSED(cmd, line, words)                                                            \
    ({                                                                                             \
        struct sl_error e_ = SL_ERROR_INIT;                                                        \
        struct cli_args a_;                                                                        \
        CHECK_EQ_INT(parse(cmd, line, &a_, &e_), -1) && CHECK_EQ_INT(e_.kind, SL_E_INVALID) &&     \
            CHECK_CONTAINS(e_.message, words);                                                     \
    })

TEST(bad_command_lines_say_what_is_wrong)
{
    CHECK_REFUSED(&sample, "i-1 --model X --count 9",
                  "--count must be a whole number from 1 to "
                  "8, not '9'");
    CHECK_REFUSED(&sample, "i-1 --model X --count lots", "not 'lots'");
    CHECK_REFUSED(&sample, "i-1 --model X --price 1.2345678", "--price");
    CHECK_REFUSED(&sample, "i-1 --model X --month 2026-13", "--month must be YYYY-MM");
    CHECK_REFUSED(&sample, "i-1 --model X --day 2026-02-30", "--day must be YYYY-MM-DD");
    CHECK_REFUSED(&sample, "i-1 --model X --bogus", "unknown option '--bogus'");
    CHECK_REFUSED(&sample, "i-1 --model", "option '--model' needs a value");
    CHECK_REFUSED(&sample, "i-1 --model X --quiet=yes", "option '--quiet' takes no value");
    CHECK_REFUSED(&sample, "--model X", "missing argument ID");
    CHECK_REFUSED(&sample, "i-1 two three --model X", "unexpected argument 'three'");
    CHECK_REFUSED(&sample, "i-1", "give --model MODEL: the model");
    CHECK_REFUSED(&sample, "i-1 --model=", "give --model MODEL");
    CHECK_REFUSED(&sample, "i-1 --model X --at 02:00 --cancel",
                  "give only one of --at TIME, --in DURATION or --cancel");
    CHECK_REFUSED(&cmd_token_rm, "", "missing argument ID");
    CHECK_REFUSED(&cmd_whoami, "extra", "unexpected argument 'extra'");
    CHECK_REFUSED(&cmd_plan, "i-1", "missing argument day|week|month|payg");
    CHECK_REFUSED(&cmd_start, "i-1 --yes", "unknown option '--yes'");
    CHECK_REFUSED(&cmd_stop, "i-1 --in 3h --at 02:00", "give only one of --at");
}

TEST(positional_counts_follow_the_args_synopsis)
{
    struct sl_error err = SL_ERROR_INIT;
    struct cli_args a;

    /* ssh takes the instance, then any words of a command to run there */
    CHECK_EQ_INT(parse(&cmd_ssh, "box -- ls -la /", &a, &err), 0);
    CHECK_EQ_INT(a.argc, 4);
    CHECK_STR(a.argv[0], "box");
    CHECK_STR(a.argv[2], "-la");
    CHECK_EQ_INT(parse(&cmd_ssh, "box", &a, &err), 0);
    CHECK_REFUSED(&cmd_ssh, "", "missing argument ID|NAME");
    /* events takes one instance or none */
    CHECK_EQ_INT(parse(&cmd_events, "", &a, &err), 0);
    CHECK_EQ_INT(parse(&cmd_events, "nb --kind stop", &a, &err), 0);
    CHECK_STR(cli_text(&a, "kind", NULL), "stop");
    CHECK_REFUSED(&cmd_events, "i-a i-b", "unexpected argument 'i-b'");
    /* a|b|c is one word */
    CHECK_EQ_INT(parse(&cmd_admin_price_set, "nogpu 1.5", &a, &err), 0);
    CHECK_REFUSED(&cmd_admin_price_set, "nogpu", "missing argument AMOUNT");
    CHECK_EQ_INT(parse(&cmd_cp, "a nb:/root/", &a, &err), 0);
    CHECK_EQ_INT(parse(&cmd_create, "--gpu-model X --time 5", &a, &err), 0); /* a prefix */
    CHECK_EQ_INT(cli_number(&a, "timeout", 0), 5);
}

TEST(the_usage_line_comes_from_the_table)
{
    cleanup_free char *s = cli_usage(&sample);
    cleanup_free char *rm = cli_usage(&cmd_token_rm);
    cleanup_free char *stop = cli_usage(&cmd_stop);
    cleanup_free char *ssh = cli_usage(&cmd_ssh);
    cleanup_free char *create = cli_usage(&cmd_create);
    cleanup_free char *ls = cli_usage(&cmd_key_ls);

    CHECK_STR(s, "thing do ID [EXTRA] --model MODEL [--count N] [--price AMOUNT] [--month YYYY-MM] "
                 "[--day YYYY-MM-DD] [--quiet] [--at TIME | --in DURATION | --cancel]");
    CHECK_STR(rm, "token rm ID");
    CHECK_STR(ls, "key ls");
    CHECK_STR(stop, "stop ID|NAME [--no-wait] [--timeout SECONDS] [--at HH:MM|RFC3339 | --in "
                    "DURATION | --cancel]");
    /* the options go before what is passed on to the instance */
    CHECK_STR(ssh, "ssh ID|NAME [--identity KEYFILE] [-- COMMAND...]");
    CHECK_PREFIX(create, "create --gpu-model MODEL [--gpus N] ");
}

TEST(the_help_lists_every_option_with_its_line)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cli_print_options(f, &sample);
    fclose(f);
    /* the lines are aligned on the longest, --day YYYY-MM-DD */
    CHECK_CONTAINS(text, "\n  --count N         how many\n");
    CHECK_CONTAINS(text, "\n  --quiet           say less\n");
    CHECK_CONTAINS(text, "\n  -o FORMAT         table (default) or json\n");
    free(text);
}

/* Every command of the real table: names and options that parsing and the
 * help can rely on. */
TEST(every_command_is_well_formed)
{
    for (size_t i = 0; i < cli_commands_count; i++) {
        const struct cli_command *c = cli_commands[i];
        size_t n = cli_option_count(c);

        if (!CHECK(c->name && *c->name && c->summary && *c->summary && c->run))
            continue;
        CHECK(n <= CLI_MAX_OPTIONS);
        for (size_t j = 0; j < cli_commands_count; j++)
            for (int k = -1; k < CLI_MAX_ALIASES; k++) {
                const char *other = k < 0 ? cli_commands[j]->name : cli_commands[j]->aliases[k];
                if (!other || (i == j && k < 0))
                    continue;
                if (strcmp(c->name, other) == 0)
                    test_fail(__FILE__, __LINE__, "two commands are called '%s'", other);
            }
        for (size_t o = 0; o < n; o++) {
            const struct cli_option *opt = &c->options[o];
            if (!opt->help || !*opt->help || strcmp(opt->name, "output") == 0 ||
                (!opt->arg && (opt->type != CLI_OPT_TEXT || opt->required)) ||
                (opt->type == CLI_OPT_INT && opt->min > opt->max))
                test_fail(__FILE__, __LINE__, "'%s --%s' is not a proper option", c->name,
                          opt->name);
            int peers = 0;
            for (size_t p = 0; p < n; p++) {
                if (p != o && strcmp(c->options[p].name, opt->name) == 0)
                    test_fail(__FILE__, __LINE__, "'%s' has --%s twice", c->name, opt->name);
                peers += p != o && opt->group && c->options[p].group == opt->group;
            }
            if (opt->group && peers == 0)
                test_fail(__FILE__, __LINE__, "'%s --%s' is alone in its group", c->name,
                          opt->name);
        }
        cleanup_free char *usage = cli_usage(c);
        CHECK_PREFIX(usage, c->name);
    }
}
