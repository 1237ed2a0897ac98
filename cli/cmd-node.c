/* admin node ls|show, admin join-token create|ls|rm: the GPU hosts and the
 * tokens with which hosts join a region (DESIGN.md sections 1, 9). */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define NODE_DATA_DIR   "/var/lib/suanli-node"
#define JOIN_TOKEN_FILE "/root/suanli-join-token"

/* "24 GiB" from MiB, with one decimal when it is not whole. */
static char *gib(int64_t mib, char *buf)
{
    if (mib % 1024 == 0)
        snprintf(buf, 32, "%" PRId64 " GiB", mib / 1024);
    else
        snprintf(buf, 32, "%" PRId64 ".%" PRId64 " GiB", mib / 1024, mib % 1024 * 10 / 1024);
    return buf;
}

/* "6/8 RTX 4090 (simulated)": free/total, the models, simulated marked.
 * A host with several models lists each once. */
static char *gpus_text(json_t *node, char *buf, size_t size)
{
    char models[128] = "";
    size_t i, off = 0;
    json_t *g;

    json_array_foreach(json_object_get(node, "gpus"), i, g)
    {
        const char *m = jstr(g, "model") ? jstr(g, "model") : jstr(g, "name");
        if (!m || strstr(models, m))
            continue;
        int n = snprintf(models + off, sizeof(models) - off, "%s%s", off ? "+" : "", m);
        if (n < 0 || (size_t)n >= sizeof(models) - off)
            break;
        off += (size_t)n;
    }
    if (jint(node, "gpus_total") == 0)
        snprintf(buf, size, "none");
    else
        snprintf(buf, size, "%" PRId64 "/%" PRId64 "%s%s%s", jint(node, "gpus_free"),
                 jint(node, "gpus_total"), off ? " " : "", models,
                 json_is_true(json_object_get(node, "simulated")) ? " (simulated)" : "");
    return buf;
}

/* "online", "online, draining", "lost, cordoned": how the host stands and
 * the operator's mark. */
static const char *node_state_text(json_t *node, char *buf, size_t size)
{
    bool draining = json_is_true(json_object_get(node, "draining"));
    bool cordoned = json_is_true(json_object_get(node, "cordoned"));

    snprintf(buf, size, "%s%s", jstr(node, "state") ? jstr(node, "state") : "?",
             draining   ? ", draining"
             : cordoned ? ", cordoned"
                        : "");
    return buf;
}

static int run_node_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = sl_client_list(&cli->client, "/v1/admin/nodes", 500, &err);
    if (!list)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "ID",  "HOSTNAME", "REGION", "STATE",  "GPUS",
                                           "CPU", "MEM",      "DISK",   "DRIVER", "CUDA" };
    struct table t;
    size_t i;
    json_t *node;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, node)
    {
        char gpus[192], cpu[32], mem[32], disk[64], state[64];
        snprintf(cpu, sizeof(cpu), "%" PRId64, jint(node, "cpu_cores"));
        snprintf(disk, sizeof(disk), "%" PRId64 "/%" PRId64 " GiB free",
                 jint(node, "disk_free_gib"), jint(node, "disk_total_gib"));
        const char *row[] = {
            jstr(node, "id"),
            jstr(node, "hostname"),
            jstr(node, "region"),
            node_state_text(node, state, sizeof(state)),
            gpus_text(node, gpus, sizeof(gpus)),
            cpu,
            gib(jint(node, "memory_mib"), mem),
            disk,
            jstr(node, "driver_version"),
            jstr(node, "cuda_version"),
        };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

/* "2: i-1 (running, month), i-2 (stopped, payg)": what still lives there. */
static const char *instances_text(json_t *node, char *buf, size_t size)
{
    json_t *list = json_object_get(node, "instances"), *in;
    size_t i, off;

    off = (size_t)snprintf(buf, size, "%zu", json_array_size(list));
    json_array_foreach(list, i, in)
    {
        int n = snprintf(buf + off, size - off, "%s%s (%s, %s)", i ? ", " : ": ", jstr(in, "id"),
                         jstr(in, "state"), jstr(in, "plan"));
        if (n < 0 || (size_t)n >= size - off) {
            snprintf(buf + off, size - off, ", ...");
            break;
        }
        off += (size_t)n;
    }
    return buf;
}

static int run_node_show(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *id = sl_client_escape(a->argv[0]);
    cleanup_free char *path = xasprintf("/v1/admin/nodes/%s", id);
    cleanup_json json_t *node = NULL;
    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &node, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, node);
        return CLI_EXIT_OK;
    }
    char gpus[192], cpu[32], mem[32], disk[64], disks[160], heartbeat[32], created[32], state[64],
        instances[512];
    snprintf(cpu, sizeof(cpu), "%" PRId64 " cores", jint(node, "cpu_cores"));
    snprintf(disk, sizeof(disk), "%" PRId64 " GiB free of %" PRId64 " GiB",
             jint(node, "disk_free_gib"), jint(node, "disk_total_gib"));
    json_t *d = json_object_get(node, "disk");
    snprintf(disks, sizeof(disks),
             "%" PRId64 " GiB promised of %" PRId64 " GiB (reserve %" PRId64
             " GiB, overcommit %" PRId64 "%%)",
             jint(d, "promised_gib"), jint(d, "capacity_gib"), jint(d, "reserve_gib"),
             jint(d, "overcommit_percent"));
    const struct output_pair pairs[] = {
        { "id", jstr(node, "id") },
        { "hostname", jstr(node, "hostname") },
        { "address", jstr(node, "address") },
        { "region", jstr(node, "region") },
        { "state", node_state_text(node, state, sizeof(state)) },
        { "reason", jstr(node, "cordon_reason") && *jstr(node, "cordon_reason")
                        ? jstr(node, "cordon_reason")
                        : NULL },
        { "instances", instances_text(node, instances, sizeof(instances)) },
        { "gpus", gpus_text(node, gpus, sizeof(gpus)) },
        { "cpu", cpu },
        { "memory", gib(jint(node, "memory_mib"), mem) },
        { "disk", disk },
        { "instance disks", disks },
        { "driver", jstr(node, "driver_version") },
        { "cuda", jstr(node, "cuda_version") },
        { "agent", jstr(node, "agent_version") },
        { "last heartbeat", jstr(node, "last_heartbeat")
                                ? output_time(jstr(node, "last_heartbeat"), heartbeat)
                                : "never" },
        { "created", output_time(jstr(node, "created_at"), created) },
    };
    output_pairs(stdout, pairs, ARRAY_SIZE(pairs));
    json_t *list = json_object_get(node, "gpus");
    if (json_array_size(list) == 0)
        return CLI_EXIT_OK;
    static const char *const headers[] = { "INDEX", "MODEL",    "NAME", "VRAM",
                                           "SIM",   "INSTANCE", "UUID" };
    struct table t;
    size_t i;
    json_t *g;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(list, i, g)
    {
        char index[32], vram[32];
        snprintf(index, sizeof(index), "%" PRId64, jint(g, "index"));
        const char *row[] = {
            index,
            jstr(g, "model"),
            jstr(g, "name"),
            gib(jint(g, "vram_mib"), vram),
            json_is_true(json_object_get(g, "simulated")) ? "simulated" : "no",
            jstr(g, "instance_id") ? jstr(g, "instance_id") : "free",
            jstr(g, "uuid"),
        };
        table_add(&t, row);
    }
    putchar('\n');
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static const struct cli_option cordon_options[] = {
    { .name = "reason",
      .arg = "TEXT",
      .help = "why, shown to the host's renters (\"disk swap until 18:00\")" },
    { 0 },
};

static const struct cli_option drain_options[] = {
    { .name = "reason",
      .arg = "TEXT",
      .help = "why, shown to the host's renters (\"disk swap until 18:00\")" },
    { .name = "migrate",
      .help = "also move its stopped instances (and those it stops) to other hosts: same id, "
              "stopped there (suanli migrate)" },
    { 0 },
};

/* POST /v1/admin/nodes/ID/VERB with the --reason given: the answer. */
static json_t *node_verb(struct cli *cli, const struct cli_args *a, const char *verb,
                         struct sl_error *err)
{
    cleanup_free char *id = sl_client_escape(a->argv[0]);
    cleanup_free char *path = xasprintf("/v1/admin/nodes/%s/%s", id, verb);
    cleanup_json json_t *body = json_object();
    json_t *out = NULL;

    if (strcmp(verb, "uncordon") != 0 && cli_has(a, "reason"))
        json_object_set_new(body, "reason", json_string(cli_text(a, "reason", "")));
    if (strcmp(verb, "drain") == 0 && cli_has(a, "migrate"))
        json_object_set_new(body, "migrate", json_true());
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &out, err) < 0)
        return NULL;
    return out;
}

/* "i-1, i-2" or "none". */
static void print_ids(const char *what, json_t *ids)
{
    json_t *v;
    size_t i;

    printf("%s: %s", what, json_array_size(ids) ? "" : "none");
    json_array_foreach(ids, i, v) printf("%s%s", i ? ", " : "", json_string_value(v));
    putchar('\n');
}

static int run_node_cordon(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *node = node_verb(cli, a, "cordon", &err);
    if (!node)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, node);
        return CLI_EXIT_OK;
    }
    printf("cordoned %s: nothing new is placed there; its instances run on (suanli admin node "
           "drain %s stops the pay-as-you-go ones; suanli admin node uncordon %s reopens it)\n",
           a->argv[0], a->argv[0], a->argv[0]);
    return CLI_EXIT_OK;
}

static int run_node_drain(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *out = node_verb(cli, a, "drain", &err);
    if (!out)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, out);
        return CLI_EXIT_OK;
    }
    printf("draining %s: nothing new is placed or started there\n", a->argv[0]);
    print_ids("stopped (pay-as-you-go)", json_object_get(out, "stopped"));
    print_ids("running to the end of their plan", json_object_get(out, "running_on_plan"));
    if (cli_has(a, "migrate")) {
        json_t *stuck = json_object_get(out, "not_migrated"), *s;
        size_t i;
        print_ids("moving to other hosts (the stopping ones follow once stopped)",
                  json_object_get(out, "migrating"));
        json_array_foreach(stuck, i, s)
            printf("not moved: %s: %s\n", json_string_value(json_object_get(s, "id")),
                   json_string_value(json_object_get(s, "reason")));
    }
    printf("remove it once nothing lives there: suanli admin node remove %s\n", a->argv[0]);
    return CLI_EXIT_OK;
}

static int run_node_uncordon(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *node = node_verb(cli, a, "uncordon", &err);
    if (!node)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, node);
    else
        printf("uncordoned %s: it takes instances again\n", a->argv[0]);
    return CLI_EXIT_OK;
}

static int run_node_remove(struct cli *cli, const struct cli_args *a)
{
    return cli_remove_one(cli, a, "/v1/admin/nodes", "node");
}

static const struct cli_option join_token_create_options[] = {
    { .name = "region",
      .arg = "REGION",
      .required = true,
      .help = "the region the hosts join, as suanli admin region ls lists them" },
    { .name = "hours",
      .arg = "N",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 24 * 365,
      .help = "the token expires after N hours (default: the server's)" },
    { .name = "uses",
      .arg = "N",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 10000,
      .help = "how many hosts may join with it (default 1)" },
    { 0 },
};

static int run_join_token_create(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *region = cli_text(a, "region", NULL);
    int64_t hours = cli_number(a, "hours", 0), uses = cli_number(a, "uses", 1);
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body =
        json_pack("{s:s, s:I}", "region", region, "max_uses", (json_int_t)uses);
    if (hours)
        json_object_set_new(body, "expires_in_hours", json_integer(hours));
    cleanup_json json_t *tok = NULL;
    if (sl_client_request(&cli->client, "POST", "/v1/admin/join-tokens", body, NULL, &tok, &err) <
        0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, tok);
        return CLI_EXIT_OK;
    }
    char expires[32];
    int64_t max = jint(tok, "max_uses");
    printf("created join token %s for region %s (%" PRId64 " host%s), expires %s\n%s\n\n"
           "on the new host, put it in a file only root reads, then start the agent with it:\n"
           "  (umask 077; cat > " JOIN_TOKEN_FILE ")    # paste the token, Enter, Ctrl-D\n"
           "  suanli-node --server %s --join " JOIN_TOKEN_FILE " --data-dir " NODE_DATA_DIR "\n",
           jstr(tok, "id"), jstr(tok, "region"), max, max == 1 ? "" : "s",
           output_time(jstr(tok, "expires_at"), expires), jstr(tok, "token"), cli->server);
    fputs("copy it now: it is not shown again\n", stderr);
    return CLI_EXIT_OK;
}

static int run_join_token_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = sl_client_list(&cli->client, "/v1/admin/join-tokens", 500, &err);
    if (!list)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "ID", "REGION", "USES", "CREATED", "EXPIRES" };
    struct table t;
    size_t i;
    json_t *tok;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, tok)
    {
        char created[32], expires[32], uses[48];
        json_t *max = json_object_get(tok, "max_uses");
        if (json_is_integer(max))
            snprintf(uses, sizeof(uses), "%" PRId64 "/%" PRId64, jint(tok, "uses"),
                     (int64_t)json_integer_value(max));
        else /* made before uses were counted */
            snprintf(uses, sizeof(uses), "%" PRId64 "/any", jint(tok, "uses"));
        const char *row[] = { jstr(tok, "id"), jstr(tok, "region"), uses,
                              output_time(jstr(tok, "created_at"), created),
                              output_time(jstr(tok, "expires_at"), expires) };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static int run_join_token_rm(struct cli *cli, const struct cli_args *a)
{
    return cli_remove_one(cli, a, "/v1/admin/join-tokens", "join token");
}

const struct cli_command cmd_admin_node_ls = {
    .name = "admin node ls",
    .aliases = { "admin node list", "admin nodes" },
    .summary = "list the GPU hosts with their free GPUs",
    .run = run_node_ls,
};

const struct cli_command cmd_admin_node_show = {
    .name = "admin node show",
    .args = "ID",
    .summary = "a GPU host's inventory and each of its GPUs",
    .run = run_node_show,
};

const struct cli_command cmd_admin_node_cordon = {
    .name = "admin node cordon",
    .args = "ID",
    .options = cordon_options,
    .summary = "stop placing instances on a host (its instances run on; a stopped one starts "
               "there only in no-GPU mode or on a plan)",
    .run = run_node_cordon,
};

const struct cli_command cmd_admin_node_drain = {
    .name = "admin node drain",
    .args = "ID",
    .options = drain_options,
    .summary = "cordon a host and stop its pay-as-you-go instances, telling their renters; "
               "instances on a plan run to its end; --migrate moves the stopped ones away",
    .run = run_node_drain,
};

const struct cli_command cmd_admin_node_uncordon = {
    .name = "admin node uncordon",
    .args = "ID",
    .summary = "end a cordon or a drain: the host takes instances again",
    .run = run_node_uncordon,
};

const struct cli_command cmd_admin_node_remove = {
    .name = "admin node remove",
    .aliases = { "admin node rm" },
    .args = "ID",
    .summary = "remove a host that holds no instance (its token stops working)",
    .run = run_node_remove,
};

const struct cli_command cmd_admin_join_token_create = {
    .name = "admin join-token create",
    .options = join_token_create_options,
    .summary = "make a token for hosts to join a region (shown once; one host joins with it, N "
               "with --uses N, until it expires or is revoked)",
    .run = run_join_token_create,
};

const struct cli_command cmd_admin_join_token_ls = {
    .name = "admin join-token ls",
    .aliases = { "admin join-token list", "admin join-tokens" },
    .summary = "list the unexpired join tokens with their uses (used/most)",
    .run = run_join_token_ls,
};

const struct cli_command cmd_admin_join_token_rm = {
    .name = "admin join-token rm",
    .aliases = { "admin join-token remove", "admin join-token revoke" },
    .args = "ID",
    .summary = "revoke a join token",
    .run = run_join_token_rm,
};
