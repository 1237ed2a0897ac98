/* admin ...: users, credits, verifications, the catalog and the ledger
 * check. The server answers 404 to non-admins, as for any route they may not
 * see. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* An RFC 3339 UTC time as the API writes them: "2026-11-30T03:40:38Z". */
static bool looks_like_time(const char *s)
{
    return strlen(s) == 20 && s[4] == '-' && s[10] == 'T' && s[19] == 'Z';
}

/* Prints a list answer as JSON or as a table of the given fields. */
static void print_list(struct cli *cli, json_t *list, const char *const *headers,
                       const char *const *fields, size_t ncols)
{
    struct table t;
    size_t i;
    json_t *item;

    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return;
    }
    table_init(&t, ncols, headers);
    json_array_foreach(json_object_get(list, "items"), i, item)
    {
        char cells[8][64];
        const char *row[8];
        for (size_t c = 0; c < ncols && c < 8; c++) {
            json_t *v = json_object_get(item, fields[c]);
            if (json_is_string(v) && looks_like_time(json_string_value(v)))
                row[c] = output_time(json_string_value(v), cells[c]);
            else if (json_is_string(v))
                row[c] = json_string_value(v)[0] ? json_string_value(v) : "-";
            else if (json_is_integer(v) && strstr(fields[c], "_micros"))
                row[c] = output_money(json_integer_value(v), NULL, cells[c]);
            else if (json_is_integer(v)) {
                snprintf(cells[c], sizeof(cells[c]), "%" JSON_INTEGER_FORMAT,
                         json_integer_value(v));
                row[c] = cells[c];
            } else if (json_is_boolean(v))
                row[c] = json_is_true(v) ? "yes" : "no";
            else
                row[c] = NULL;
        }
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
}

static const struct cli_option user_ls_options[] = {
    { .name = "email", .arg = "EMAIL", .help = "only the user with this email" },
    { 0 },
};

static int run_user_ls(struct cli *cli, const struct cli_args *a)
{
    static const char *const headers[] = { "ID",           "EMAIL",   "NAME",   "ROLE",
                                           "VERIFICATION", "BALANCE", "CREATED" };
    static const char *const fields[] = { "id",           "email",          "name",      "role",
                                          "verification", "balance_micros", "created_at" };
    struct sl_error err = SL_ERROR_INIT;
    const char *email = cli_text(a, "email", NULL);
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *escaped = email ? sl_client_escape(email) : NULL;
    cleanup_free char *path =
        email ? xasprintf("/v1/admin/users?email=%s", escaped) : xstrdup("/v1/admin/users");
    cleanup_json json_t *list = sl_client_list(&cli->client, path, 500, &err);
    if (!list)
        return cli_fail(&err);
    print_list(cli, list, headers, fields, ARRAY_SIZE(headers));
    return CLI_EXIT_OK;
}

static const struct cli_option credit_options[] = {
    { .name = "memo", .arg = "MEMO", .help = "why, for the user's ledger" },
    { 0 },
};

static int run_credit(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *memo = cli_text(a, "memo", NULL), *who = a->argv[0];
    int64_t amount;
    char key[33], shown[OUTPUT_MONEY_MAX], balance[OUTPUT_MONEY_MAX];
    int status;

    if (cli_parse_amount(cli, "AMOUNT", a->argv[1], &amount) < 0)
        return CLI_EXIT_USAGE;
    if (amount <= 0)
        return cli_usage_error(cli, "AMOUNT must be positive, not '%s'", a->argv[1]);
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *user = cli_resolve_user(cli, who, &err);
    if (!user)
        return cli_fail(&err);
    cleanup_free char *id = sl_client_escape(user);
    cleanup_free char *path = xasprintf("/v1/admin/users/%s/credit", id);
    cleanup_json json_t *body = json_pack("{s:I}", "amount_micros", (json_int_t)amount);
    if (memo)
        json_object_set_new(body, "memo", json_string(memo));
    /* a retry of this very command is safe; a new command is a new credit */
    sl_random_hex(key, 16);
    cleanup_json json_t *out = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, key, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, out);
    else
        printf("credited %s to %s (%s): balance %s\n",
               output_money(jint(out, "amount_micros"), NULL, shown), who, user,
               output_money(jint(out, "balance_micros"), NULL, balance));
    return CLI_EXIT_OK;
}

static const struct cli_option verification_ls_options[] = {
    { .name = "state",
      .arg = "pending|approved|rejected|all",
      .help = "the requests in this state (default pending)" },
    { 0 },
};

static int run_verification_ls(struct cli *cli, const struct cli_args *a)
{
    static const char *const headers[] = { "USER",  "EMAIL",     "REAL NAME", "ID NUMBER",
                                           "STATE", "SUBMITTED", "REASON" };
    static const char *const fields[] = { "user_id", "email",      "real_name", "id_number_masked",
                                          "state",   "created_at", "reason" };
    struct sl_error err = SL_ERROR_INIT;
    const char *state = cli_text(a, "state", "pending");
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *escaped = sl_client_escape(state);
    cleanup_free char *path = xasprintf("/v1/admin/verifications?state=%s", escaped);
    cleanup_json json_t *list = sl_client_list(&cli->client, path, 500, &err);
    if (!list)
        return cli_fail(&err);
    print_list(cli, list, headers, fields, ARRAY_SIZE(headers));
    return CLI_EXIT_OK;
}

static const struct cli_option reject_options[] = {
    { .name = "reason",
      .arg = "REASON",
      .required = true,
      .help = "why, in words the renter can act on" },
    { 0 },
};

static int decide(struct cli *cli, const struct cli_args *a, bool approve)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *reason = approve ? NULL : cli_text(a, "reason", NULL);
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *user = cli_resolve_user(cli, a->argv[0], &err);
    if (!user)
        return cli_fail(&err);
    cleanup_free char *id = sl_client_escape(user);
    cleanup_free char *path = xasprintf("/v1/admin/users/%s/verification", id);
    cleanup_json json_t *body = json_pack("{s:b}", "approve", approve);
    if (reason)
        json_object_set_new(body, "reason", json_string(reason));
    cleanup_json json_t *out = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, out);
    else
        printf("%s the verification of %s (%s)\n", approve ? "approved" : "rejected",
               jstr(out, "email"), jstr(out, "user_id"));
    return CLI_EXIT_OK;
}

static int run_verification_approve(struct cli *cli, const struct cli_args *a)
{
    return decide(cli, a, true);
}

static int run_verification_reject(struct cli *cli, const struct cli_args *a)
{
    return decide(cli, a, false);
}

/* POSTs body to path and prints the answer or a one-line summary. */
static int post_and_report(struct cli *cli, const char *method, const char *path, json_t *body,
                           const char *done)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *out = NULL;

    if (sl_client_request(&cli->client, method, path, body, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, out);
    else
        puts(done);
    return CLI_EXIT_OK;
}

static int run_region_add(struct cli *cli, const struct cli_args *a)
{
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_pack("{s:s, s:s}", "id", a->argv[0], "name", a->argv[1]);
    cleanup_free char *done = xasprintf("added region %s", a->argv[0]);
    return post_and_report(cli, "POST", "/v1/admin/regions", body, done);
}

static const struct cli_option gpu_model_add_options[] = {
    { .name = "name", .arg = "NAME", .required = true, .help = "the model, such as RTX 4090" },
    { .name = "vram-mib",
      .arg = "V",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 1 << 24,
      .required = true,
      .help = "the memory of one GPU in MiB" },
    { .name = "cpu",
      .arg = "C",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 1024,
      .required = true,
      .help = "CPU cores an instance gets per GPU" },
    { .name = "memory-mib",
      .arg = "M",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 1 << 26,
      .required = true,
      .help = "memory in MiB an instance gets per GPU" },
    { .name = "price",
      .arg = "AMOUNT",
      .type = CLI_OPT_AMOUNT,
      .required = true,
      .help = "the price of one GPU per hour, such as 1.98" },
    { 0 },
};

static int run_gpu_model_add(struct cli *cli, const struct cli_args *a)
{
    const char *name = cli_text(a, "name", NULL);
    int64_t vram = cli_number(a, "vram-mib", 0), cpu = cli_number(a, "cpu", 0),
            mem = cli_number(a, "memory-mib", 0), price = cli_number(a, "price", 0);
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body =
        json_pack("{s:s, s:I, s:I, s:I, s:I}", "name", name, "vram_mib", (json_int_t)vram,
                  "cpu_cores_per_gpu", (json_int_t)cpu, "memory_mib_per_gpu", (json_int_t)mem,
                  "price_per_hour_micros", (json_int_t)price);
    cleanup_free char *done = xasprintf("added GPU model %s", name);
    return post_and_report(cli, "POST", "/v1/admin/gpu-models", body, done);
}

static const struct cli_option region_option[] = {
    { .name = "region", .arg = "REGION", .help = "only in one region (default: everywhere)" },
    { 0 },
};

static int run_gpu_model_price(struct cli *cli, const struct cli_args *a)
{
    const char *region = cli_text(a, "region", NULL), *model = a->argv[0];
    int64_t price;
    int status;

    if (cli_parse_amount(cli, "AMOUNT", a->argv[1], &price) < 0)
        return CLI_EXIT_USAGE;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_pack("{s:I}", "price_per_hour_micros", (json_int_t)price);
    if (region)
        json_object_set_new(body, "region", json_string(region));
    cleanup_free char *id = sl_client_escape(model);
    cleanup_free char *path = xasprintf("/v1/admin/gpu-models/%s", id);
    char shown[OUTPUT_MONEY_MAX];
    cleanup_free char *done =
        xasprintf("GPU model %s costs %s/hour from now on%s%s", model,
                  output_money(price, NULL, shown), region ? " in " : "", region ? region : "");
    return post_and_report(cli, "PATCH", path, body, done);
}

static int run_price_ls(struct cli *cli, const struct cli_args *a)
{
    static const char *const headers[] = { "ITEM", "REGION", "AMOUNT", "FREE GIB", "FROM", "BY" };
    static const char *const fields[] = { "item",     "region",         "amount_micros",
                                          "free_gib", "effective_from", "created_by" };
    struct sl_error err = SL_ERROR_INIT;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = sl_client_list(&cli->client, "/v1/admin/prices", 500, &err);
    if (!list)
        return cli_fail(&err);
    print_list(cli, list, headers, fields, ARRAY_SIZE(headers));
    return CLI_EXIT_OK;
}

static const struct cli_option price_set_options[] = {
    { .name = "free-gib",
      .arg = "G",
      .type = CLI_OPT_INT,
      .min = 0,
      .max = 1 << 20,
      .help = "for disks: the GiB each instance has free of charge" },
    { .name = "region", .arg = "REGION", .help = "only in one region (default: everywhere)" },
    { 0 },
};

static int run_price_set(struct cli *cli, const struct cli_args *a)
{
    const char *region = cli_text(a, "region", NULL), *item = a->argv[0];
    int64_t amount, free_gib = cli_number(a, "free-gib", -1);
    int status;

    if (cli_parse_amount(cli, "AMOUNT", a->argv[1], &amount) < 0)
        return CLI_EXIT_USAGE;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body =
        json_pack("{s:s, s:I}", "item", item, "amount_micros", (json_int_t)amount);
    if (region)
        json_object_set_new(body, "region", json_string(region));
    if (free_gib >= 0)
        json_object_set_new(body, "free_gib", json_integer(free_gib));
    char shown[OUTPUT_MONEY_MAX];
    cleanup_free char *done =
        xasprintf("%s costs %s from now on%s%s", item, output_money(amount, NULL, shown),
                  region ? " in " : "", region ? region : "");
    return post_and_report(cli, "POST", "/v1/admin/prices", body, done);
}

static void print_ledger_check(json_t *c, bool ok)
{
    printf("ledger %s: %" PRId64 " accounts, %" PRId64 " transactions; %" PRId64
           " bad balances, %" PRId64 " unbalanced transactions, %" PRId64 " bad running balances\n",
           ok ? "ok" : "NOT CONSISTENT", jint(c, "accounts"), jint(c, "transactions"),
           jint(c, "bad_balances"), jint(c, "unbalanced_transactions"),
           jint(c, "bad_running_balances"));
}

static void print_billing_check(json_t *c, bool ok)
{
    char charges[OUTPUT_MONEY_MAX], ledger[OUTPUT_MONEY_MAX];

    printf("billing %s: %" PRId64 " meters; %" PRId64 " with a wrong charged amount, %" PRId64
           " whose charges do not add up, %" PRId64 " settled out of place, %" PRId64
           " charged after release, %" PRId64 " bad settlement keys, %" PRId64
           " renters whose usage the ledger does not match; charges %s, in the ledger %s\n",
           ok ? "ok" : "NOT CONSISTENT", jint(c, "meters"), jint(c, "bad_charged"),
           jint(c, "bad_sums"), jint(c, "bad_positions"), jint(c, "charged_after_release"),
           jint(c, "bad_keys"), jint(c, "bad_renters"),
           output_money(jint(c, "charges_total_micros"), NULL, charges),
           output_money(jint(c, "ledger_charges_micros"), NULL, ledger));
}

/* GET a check route, print it, and exit 1 unless it says ok. */
static int run_check(struct cli *cli, const char *path, const char *what,
                     void (*print)(json_t *c, bool ok))
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *c = NULL;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &c, &err) < 0)
        return cli_fail(&err);
    bool ok = json_is_true(json_object_get(c, "ok"));
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, c);
    else
        print(c, ok);
    if (!ok)
        fprintf(stderr, "suanli: the %s check found problems\n", what);
    return ok ? CLI_EXIT_OK : CLI_EXIT_REFUSED;
}

static int run_ledger_check(struct cli *cli, const struct cli_args *a)
{
    (void)a;
    return run_check(cli, "/v1/admin/ledger/check", "ledger", print_ledger_check);
}

static int run_billing_check(struct cli *cli, const struct cli_args *a)
{
    (void)a;
    return run_check(cli, "/v1/admin/billing/check", "billing", print_billing_check);
}

static int run_billing_run(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *r = NULL;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    if (sl_client_request(&cli->client, "POST", "/v1/admin/billing/run", NULL, NULL, &r, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, r);
        return CLI_EXIT_OK;
    }
    printf("billing pass: %" PRId64 " meters, %" PRId64 " usage transactions; %" PRId64
           " instances stopped, %" PRId64 " warnings, %" PRId64 " released, %" PRId64
           " plans renewed, %" PRId64 " plans ended; %" PRId64 ".%03" PRId64 " ms\n",
           jint(r, "meters"), jint(r, "settlements"), jint(r, "stopped"), jint(r, "warnings"),
           jint(r, "released"), jint(r, "renewed"), jint(r, "expired"),
           jint(r, "elapsed_us") / SL_USEC_PER_MSEC, jint(r, "elapsed_us") % SL_USEC_PER_MSEC);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_admin_user_ls = {
    .name = "admin user ls",
    .aliases = { "admin user list", "admin users" },
    .options = user_ls_options,
    .summary = "list users with their balance",
    .run = run_user_ls,
};

const struct cli_command cmd_admin_credit = {
    .name = "admin credit",
    .args = "USER AMOUNT",
    .options = credit_options,
    .summary = "add money to a user (id u-... or email; AMOUNT like 100 or 12.5)",
    .run = run_credit,
};

const struct cli_command cmd_admin_verification_ls = {
    .name = "admin verification ls",
    .aliases = { "admin verification list" },
    .options = verification_ls_options,
    .summary = "list verification requests (pending by default)",
    .run = run_verification_ls,
};

const struct cli_command cmd_admin_verification_approve = {
    .name = "admin verification approve",
    .args = "USER",
    .summary = "approve a user's pending verification",
    .run = run_verification_approve,
};

const struct cli_command cmd_admin_verification_reject = {
    .name = "admin verification reject",
    .args = "USER",
    .options = reject_options,
    .summary = "reject a user's pending verification, saying why",
    .run = run_verification_reject,
};

const struct cli_command cmd_admin_region_add = {
    .name = "admin region add",
    .args = "ID NAME",
    .summary = "add a region",
    .run = run_region_add,
};

const struct cli_command cmd_admin_gpu_model_add = {
    .name = "admin gpu-model add",
    .options = gpu_model_add_options,
    .summary = "add a GPU model (CPU cores and memory per GPU, price per hour)",
    .run = run_gpu_model_add,
};

const struct cli_command cmd_admin_gpu_model_price = {
    .name = "admin gpu-model price",
    .args = "ID AMOUNT",
    .options = region_option,
    .summary = "set a GPU model's hourly price from now on",
    .run = run_gpu_model_price,
};

const struct cli_command cmd_admin_price_ls = {
    .name = "admin price ls",
    .aliases = { "admin price list", "admin prices" },
    .summary = "list the price history",
    .run = run_price_ls,
};

const struct cli_command cmd_admin_price_set = {
    .name = "admin price set",
    .args = "nogpu|data_disk|file_storage|image_storage AMOUNT",
    .options = price_set_options,
    .summary = "set a price from now on (per hour, or per GiB-day for storage)",
    .run = run_price_set,
};

const struct cli_command cmd_admin_ledger_check = {
    .name = "admin ledger-check",
    .summary = "check that every balance equals the sum of its entries",
    .run = run_ledger_check,
};

const struct cli_command cmd_admin_billing_check = {
    .name = "admin billing check",
    .summary = "check the billing invariants: every meter's charges, their sum, the ledger",
    .run = run_billing_check,
};

const struct cli_command cmd_admin_billing_run = {
    .name = "admin billing run",
    .summary = "run a billing pass now: settle meters, renew or end plans, apply the balance "
               "and auto-release rules",
    .run = run_billing_run,
};
