/* bill, bill --chart, bill charges: what a month cost, per day, instance or
 * kind of charge, and the charges (ledger transactions) behind it
 * (DESIGN.md section 4). */
#include "cli.h"

#include "../lib/timefmt.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/money.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <langinfo.h>
#include <stdio.h>
#include <string.h>

/* The kinds of charge, in the order their columns appear, with the
 * table's header for each. A kind the server adds later gets a column
 * after these, headed by its name. */
static const struct {
    const char *kind, *header;
} kinds[] = {
    { "gpu", "GPU" },
    { "nogpu", "NO-GPU" },
    { "data_disk", "DATA DISK" },
    { "file_storage", "STORAGE" },
    { "image_storage", "IMAGES" },
    { "plan", "PLAN" },
    { "plan_refund", "REFUND" },
};

static bool known_kind(const char *kind)
{
    for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
        if (strcmp(kind, kinds[i].kind) == 0)
            return true;
    return false;
}

/* What each --by groups on: the key columns of a row. */
static const struct {
    const char *by;
    const char *fields[2], *headers[2], *csv_headers[2];
} groupings[] = {
    { "day", { "day" }, { "DAY" }, { "day" } },
    { "instance", { "instance_id", "name" }, { "INSTANCE", "NAME" }, { "instance_id", "name" } },
    { "kind", { "kind" }, { "KIND" }, { "kind" } },
};

static const struct cli_option bill_options[] = {
    { .name = "month",
      .arg = "YYYY-MM",
      .type = CLI_OPT_MONTH,
      .help = "the month (default: this UTC month)" },
    { .name = "by",
      .arg = "day|instance|kind",
      .help = "a row per day (default), per instance or per kind of charge" },
    { .name = "chart", .help = "draw a bar per day instead of the table" },
    { 0 },
};

/* Checks --by and --chart; the caller's token last. */
static int check_bill_args(struct cli *cli, const char *by, bool chart)
{
    bool known = false;

    for (size_t i = 0; i < ARRAY_SIZE(groupings); i++)
        known = known || strcmp(by, groupings[i].by) == 0;
    if (!known)
        return cli_usage_error(cli, "--by takes day, instance or kind, not '%s'", by);
    if (chart && strcmp(by, "day") != 0)
        return cli_usage_error(cli, "--chart draws one bar per day: leave out --by");
    if (chart && cli->output != OUTPUT_TABLE)
        return cli_usage_error(cli, "--chart draws for a terminal: leave out -o, or drop --chart "
                                    "for the numbers");
    return cli_need_token(cli);
}

/* The kinds the columns show: every known one for CSV (a stable header for
 * scripts), only those the month has for people; then any unknown ones. */
static json_t *bill_kinds(json_t *rows, bool all)
{
    json_t *out = json_array(), *row, *v;
    const char *kind;
    size_t i;

    for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
        bool seen = all;
        json_array_foreach(rows, i, row)
        {
            seen = seen || json_object_get(json_object_get(row, "by_kind"), kinds[k].kind);
        }
        if (seen)
            json_array_append_new(out, json_string(kinds[k].kind));
    }
    json_array_foreach(rows, i, row)
    {
        json_object_foreach(json_object_get(row, "by_kind"), kind, v)
        {
            bool listed = false;
            size_t j;
            json_t *have;
            json_array_foreach(out, j, have)
            {
                listed = listed || strcmp(json_string_value(have), kind) == 0;
            }
            if (!listed && !known_kind(kind))
                json_array_append_new(out, json_string(kind));
        }
    }
    return out;
}

static const char *kind_header(const char *kind, bool csv)
{
    for (size_t i = 0; !csv && i < ARRAY_SIZE(kinds); i++)
        if (strcmp(kind, kinds[i].kind) == 0)
            return kinds[i].header;
    return kind;
}

/* A table cell that owns its text, freed with the row. */
struct cells {
    char *text[16];
    size_t n;
};

static const char *cell(struct cells *c, char *text)
{
    if (c->n == ARRAY_SIZE(c->text)) {
        free(text);
        return "?";
    }
    return c->text[c->n++] = text;
}

static void cells_release(struct cells *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->text[i]);
    c->n = 0;
}

static char *money_text(int64_t micros)
{
    char buf[OUTPUT_MONEY_MAX];

    return xstrdup(output_money(micros, NULL, buf));
}

/* Seconds as people read them ("21m 3s"), or as a number for CSV. */
static char *seconds_text(int64_t s, bool csv)
{
    char buf[32];

    if (csv)
        return xasprintf("%" PRId64, s);
    return xstrdup(sl_duration_format(s, buf));
}

/* The bill's total per kind (column): sums[j] for cols[j]. */
static int kind_sums(json_t *rows, json_t *cols, int64_t *sums, struct sl_error *err)
{
    json_t *row, *kind;
    size_t i, j;

    json_array_foreach(rows, i, row)
    {
        json_t *by_kind = json_object_get(row, "by_kind");
        json_array_foreach(cols, j, kind)
        {
            json_t *v = json_object_get(by_kind, json_string_value(kind));
            if (sl_money_add(sums[j], json_integer_value(v), &sums[j], err) < 0)
                return -1;
        }
    }
    return 0;
}

static int print_bill(struct cli *cli, json_t *bill, const char *by, struct sl_error *err)
{
    bool csv = cli->output == OUTPUT_CSV;
    json_t *rows = json_object_get(bill, "rows"), *row;
    size_t g = 0, nkeys, i, k;

    while (strcmp(groupings[g].by, by) != 0)
        g++;
    nkeys = groupings[g].fields[1] ? 2 : 1;
    /* grouped by kind, the row is its kind: no kind columns */
    cleanup_json json_t *cols = strcmp(by, "kind") == 0 ? json_array() : bill_kinds(rows, csv);
    size_t ncols = nkeys + json_array_size(cols) + 3;
    cleanup_free const char **line = xcalloc(ncols, sizeof(char *));
    cleanup_free int64_t *sums = xcalloc(json_array_size(cols), sizeof(int64_t));
    int64_t charges = 0, seconds = 0;
    struct cells owned = { 0 };
    struct table t;
    json_t *kind;

    if (kind_sums(rows, cols, sums, err) < 0)
        return -1;

    for (k = 0; k < nkeys; k++)
        line[k] = csv ? groupings[g].csv_headers[k] : groupings[g].headers[k];
    json_array_foreach(cols, i, kind)
    {
        line[nkeys + i] = kind_header(json_string_value(kind), csv);
    }
    line[ncols - 3] = csv ? "amount" : "TOTAL";
    line[ncols - 2] = csv ? "charges" : "CHARGES";
    line[ncols - 1] = csv ? "seconds" : "METERED";
    table_init(&t, ncols, line);
    json_array_foreach(rows, i, row)
    {
        json_t *by_kind = json_object_get(row, "by_kind");
        size_t j;
        for (k = 0; k < nkeys; k++) {
            const char *v = jstr(row, groupings[g].fields[k]);
            line[k] = v && *v ? v : NULL;
        }
        json_array_foreach(cols, j, kind)
        {
            json_t *v = json_object_get(by_kind, json_string_value(kind));
            /* a spreadsheet sums zeros; people read "-" faster */
            line[nkeys + j] = v || csv ? cell(&owned, money_text(json_integer_value(v))) : NULL;
        }
        line[ncols - 3] = cell(&owned, money_text(jint(row, "amount_micros")));
        line[ncols - 2] = cell(&owned, xasprintf("%" PRId64, jint(row, "charges")));
        line[ncols - 1] = cell(&owned, seconds_text(jint(row, "seconds"), csv));
        charges += jint(row, "charges");
        seconds += jint(row, "seconds");
        table_add(&t, line);
        cells_release(&owned);
    }
    line[0] = "total";
    for (k = 1; k < nkeys; k++)
        line[k] = NULL;
    for (k = 0; k < json_array_size(cols); k++)
        line[nkeys + k] = cell(&owned, money_text(sums[k]));
    line[ncols - 3] = cell(&owned, money_text(jint(bill, "total_micros")));
    line[ncols - 2] = cell(&owned, xasprintf("%" PRId64, charges));
    line[ncols - 1] = cell(&owned, seconds_text(seconds, csv));
    table_add(&t, line);
    cells_release(&owned);
    if (csv) {
        table_print_csv(&t, stdout);
    } else {
        printf("bill for %s by %s, in %s\n", jstr(bill, "month"), by, jstr(bill, "currency"));
        if (json_array_size(rows) == 0)
            printf("no charges in %s\n", jstr(bill, "month"));
        else
            table_print(&t, stdout);
    }
    table_release(&t);
    return 0;
}

#define CHART_COLUMNS 80

/* One bar per day that had charges, scaled to the largest day, in eighths
 * of a column. */
static void print_chart(json_t *bill)
{
    static const char *const eighths[] = { "", "▏", "▎", "▍", "▌", "▋", "▊", "▉" };
    bool unicode = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
    json_t *rows = json_object_get(bill, "rows"), *row;
    int64_t largest = 0;
    size_t amount_width = 0, i;
    char amount[OUTPUT_MONEY_MAX];
    cleanup_buf struct sl_buf bar = SL_BUF_INIT;

    printf("%s, %s per day, total %s\n", jstr(bill, "month"), jstr(bill, "currency"),
           output_money(jint(bill, "total_micros"), NULL, amount));
    if (json_array_size(rows) == 0) {
        printf("no charges in %s\n", jstr(bill, "month"));
        return;
    }
    json_array_foreach(rows, i, row)
    {
        int64_t v = jint(row, "amount_micros");
        if (v > largest)
            largest = v;
        if (strlen(output_money(v, NULL, amount)) > amount_width)
            amount_width = strlen(amount);
    }
    /* "YYYY-MM-DD  bar  amount" in 79 columns */
    int width = CHART_COLUMNS - 1 - 10 - 2 - 2 - (int)amount_width;
    if (width < 10)
        width = 10;
    json_array_foreach(rows, i, row)
    {
        int64_t v = jint(row, "amount_micros");
        /* a refund can make a day negative: it gets no bar */
        int64_t n = v > 0 && largest > 0 ? (int64_t)((__int128)v * width * 8 / largest) : 0;
        if (v > 0 && n == 0)
            n = 1; /* a day with charges is never invisible */
        sl_buf_reset(&bar);
        for (int64_t full = 0; full < n / 8; full++)
            sl_buf_adds(&bar, unicode ? "█" : "#");
        if (n % 8)
            sl_buf_adds(&bar, unicode ? eighths[n % 8] : "#");
        int used = (int)(n / 8 + (n % 8 != 0));
        printf("%s  %s%*s  %*s\n", jstr(row, "day") ? jstr(row, "day") : "?", bar.data,
               width - used, "", (int)amount_width, output_money(v, NULL, amount));
    }
}

static int run_bill(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *month = cli_text(a, "month", NULL), *by = cli_text(a, "by", "day");
    bool chart = cli_has(a, "chart");
    int status;

    if ((status = check_bill_args(cli, by, chart)))
        return status;
    cleanup_free char *path =
        month ? xasprintf("/v1/bills?month=%s&by=%s", month, by) : xasprintf("/v1/bills?by=%s", by);
    cleanup_json json_t *bill = NULL;
    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &bill, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, bill);
    else if (chart)
        print_chart(bill);
    else if (print_bill(cli, bill, by, &err) < 0)
        return cli_fail(&err);
    return CLI_EXIT_OK;
}

/* "2026-11-30 06:17:03" from an RFC 3339 time; only the clock when the
 * date is that of same_day. buf holds 32 bytes. */
static const char *charge_time(const char *t, const char *same_day, char *buf)
{
    if (!t || strlen(t) < 19)
        return t;
    if (same_day && strncmp(t, same_day, 10) == 0)
        snprintf(buf, 32, "%.8s", t + 11);
    else
        snprintf(buf, 32, "%.10s %.8s", t, t + 11);
    return buf;
}

static int print_charges(struct cli *cli, json_t *list, struct sl_error *err)
{
    static const char *const headers[] = { "FROM",    "TO",     "INSTANCE", "KIND",
                                           "SECONDS", "AMOUNT", "TXN" };
    static const char *const csv_headers[] = { "seq",     "txn_id",      "instance_id",
                                               "kind",    "period_from", "period_to",
                                               "seconds", "amount",      "created_at" };
    bool csv = cli->output == OUTPUT_CSV;
    json_t *items = json_object_get(list, "items"), *c;
    int64_t total = 0;
    struct table t;
    size_t i;

    json_array_foreach(items, i, c)
    {
        if (sl_money_add(total, jint(c, "amount_micros"), &total, err) < 0)
            return -1;
    }
    if (csv)
        table_init(&t, ARRAY_SIZE(csv_headers), csv_headers);
    else
        table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(items, i, c)
    {
        char seq[24], seconds[24], amount[OUTPUT_MONEY_MAX], from[32], to[32];
        const char *period_from = jstr(c, "period_from"), *period_to = jstr(c, "period_to");
        /* an open piece (billed, its day not whole yet) has no row yet */
        bool open = json_is_true(json_object_get(c, "open"));
        if (open)
            seq[0] = '\0';
        else
            snprintf(seq, sizeof(seq), "%" PRId64, jint(c, "seq"));
        snprintf(seconds, sizeof(seconds), "%" PRId64, jint(c, "seconds"));
        output_money(jint(c, "amount_micros"), NULL, amount);
        if (csv) {
            const char *row[] = {
                seq,
                jstr(c, "txn_id"),
                jstr(c, "instance_id"),
                jstr(c, "kind"),
                period_from,
                period_to,
                seconds,
                amount,
                jstr(c, "created_at"),
            };
            table_add(&t, row);
        } else {
            const char *row[] = {
                charge_time(period_from, NULL, from),
                charge_time(period_to, period_from, to),
                jstr(c, "instance_id"),
                jstr(c, "kind"),
                seconds,
                amount,
                open ? "(open)" : jstr(c, "txn_id"),
            };
            table_add(&t, row);
        }
    }
    if (csv) {
        table_print_csv(&t, stdout);
    } else if (json_array_size(items) == 0) {
        puts("no charges");
    } else {
        char sum[OUTPUT_MONEY_MAX];
        table_print(&t, stdout);
        printf("%zu charge%s, total %s\n", json_array_size(items),
               json_array_size(items) == 1 ? "" : "s", output_money(total, NULL, sum));
    }
    table_release(&t);
    return 0;
}

static const struct cli_option bill_charges_options[] = {
    { .name = "month",
      .arg = "YYYY-MM",
      .type = CLI_OPT_MONTH,
      .help = "the month (default: this UTC month)" },
    { .name = "day", .arg = "YYYY-MM-DD", .type = CLI_OPT_DAY, .help = "only one day's charges" },
    { .name = "instance", .arg = "ID|NAME", .help = "only one instance's charges" },
    { .name = "kind",
      .arg = "KIND",
      .help = "only one kind: gpu, nogpu, data_disk, file_storage, image_storage, plan or "
              "plan_refund" },
    { 0 },
};

static int run_bill_charges(struct cli *cli, const struct cli_args *a)
{
    const char *month = cli_text(a, "month", NULL), *day = cli_text(a, "day", NULL),
               *instance = cli_text(a, "instance", NULL), *kind = cli_text(a, "kind", NULL);
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *inst = NULL;
    int status;

    if (kind && !known_kind(kind))
        return cli_usage_error(cli,
                               "--kind takes gpu, nogpu, data_disk, file_storage, "
                               "image_storage, plan or plan_refund, not '%s'",
                               kind);
    if (month && day && strncmp(month, day, 7) != 0)
        return cli_usage_error(cli, "--day %s is not in --month %s: give one of them", day, month);
    if ((status = cli_need_token(cli)))
        return status;
    if (instance) {
        if (!(inst = cli_instance_find(cli, instance, &err)))
            return cli_fail(&err);
        instance = jstr(inst, "id");
    }
    cleanup_buf struct sl_buf path = SL_BUF_INIT;
    sl_buf_adds(&path, "/v1/bills/charges");
    char sep = '?';
    if (month || day) {
        /* a day's month, so that the answer does not depend on which */
        sl_buf_addf(&path, "%cmonth=%.7s", sep, month ? month : day);
        sep = '&';
    }
    if (day) {
        sl_buf_addf(&path, "%cday=%s", sep, day);
        sep = '&';
    }
    if (instance) {
        cleanup_free char *e = sl_client_escape(instance);
        sl_buf_addf(&path, "%cinstance=%s", sep, e);
        sep = '&';
    }
    if (kind)
        sl_buf_addf(&path, "%ckind=%s", sep, kind);
    cleanup_json json_t *list = sl_client_list(&cli->client, path.data, 500, &err);
    if (!list)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, list);
    else if (print_charges(cli, list, &err) < 0)
        return cli_fail(&err);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_bill = {
    .name = "bill",
    .aliases = { "bills" },
    .options = bill_options,
    .summary = "what a month cost (this month by default), per day, instance or kind; "
               "--chart: a bar per day",
    .run = run_bill,
    .csv = true,
};

const struct cli_command cmd_bill_charges = {
    .name = "bill charges",
    .options = bill_charges_options,
    .summary = "the charges behind a bill, each with its ledger transaction",
    .run = run_bill_charges,
    .csv = true,
};
