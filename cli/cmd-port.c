/* port ls|add|rm|public|private: an instance's service ports, published by
 * its node's nginx as http://INSTANCE-PORT.DOMAIN/ (docs/design/access.md). */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <string.h>

/* The instance and the port of `port add|rm|public|private ID|NAME PORT`:
 * fills *id (a new string) and *port. */
static int instance_and_port(struct cli *cli, const struct cli_args *a, char **id, int64_t *port)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    /* the server names the reserved and out-of-range ports */
    if (cli_parse_int(cli, "PORT", a->argv[1], -1000000, 1000000, port) < 0)
        return CLI_EXIT_USAGE;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *inst = cli_instance_find(cli, a->argv[0], &err);
    if (!inst)
        return cli_fail(&err);
    *id = xstrdup(jstr(inst, "id"));
    return CLI_EXIT_OK;
}

/* "published port 6008 of i-ab12cd is public: open to anyone", then the
 * link to open. */
static void print_port(bool published, const char *id, json_t *p)
{
    bool pub = json_is_true(json_object_get(p, "public"));

    printf("%sport %lld of %s is %s\n  %s\n", published ? "published " : "",
           (long long)jint(p, "port"), id,
           pub ? "public: open to anyone" : "owner only: open it with the access link",
           pub ? jstr(p, "url") : jstr(p, "access_url"));
}

/* POST the port, with public set when public_flag >= 0. */
static int set_port(struct cli *cli, const struct cli_args *a, int public_flag)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *id = NULL;
    int64_t port;
    int status;

    if ((status = instance_and_port(cli, a, &id, &port)))
        return status;
    cleanup_free char *path = cli_instance_path(id, "ports");
    cleanup_json json_t *body = json_pack("{s:I}", "port", (json_int_t)port);
    if (public_flag >= 0)
        json_object_set_new(body, "public", json_boolean(public_flag));
    cleanup_json json_t *out = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, out);
        return CLI_EXIT_OK;
    }
    print_port(public_flag < 0, id, out);
    return CLI_EXIT_OK;
}

static int run_port_add(struct cli *cli, const struct cli_args *a)
{
    return set_port(cli, a, -1);
}

static int run_port_public(struct cli *cli, const struct cli_args *a)
{
    return set_port(cli, a, 1);
}

static int run_port_private(struct cli *cli, const struct cli_args *a)
{
    return set_port(cli, a, 0);
}

static int run_port_rm(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *id = NULL;
    int64_t port;
    int status;

    if ((status = instance_and_port(cli, a, &id, &port)))
        return status;
    cleanup_free char *suffix = xasprintf("ports/%lld", (long long)port);
    cleanup_free char *path = cli_instance_path(id, suffix);
    cleanup_json json_t *out = NULL;
    if (sl_client_request(&cli->client, "DELETE", path, NULL, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, NULL);
    else
        printf("removed port %lld of %s\n", (long long)port, id);
    return CLI_EXIT_OK;
}

static int run_port_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *inst = cli_instance_find(cli, a->argv[0], &err);
    if (!inst)
        return cli_fail(&err);
    cleanup_free char *path = cli_instance_path(jstr(inst, "id"), "ports");
    cleanup_json json_t *list = NULL;
    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &list, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "PORT", "ACCESS", "APP", "LINK" };
    struct table t;
    size_t i;
    json_t *p;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, p)
    {
        char port[16];
        bool pub = json_is_true(json_object_get(p, "public"));
        snprintf(port, sizeof(port), "%lld", (long long)jint(p, "port"));
        const char *row[] = { port, pub ? "public" : "owner",
                              *jstr(p, "app") ? jstr(p, "app") : "-",
                              pub ? jstr(p, "url") : jstr(p, "access_url") };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    json_t *jupyter = json_object_get(list, "jupyter");
    if (json_is_object(jupyter))
        printf("\nJupyter: %s\n", jstr(jupyter, "url"));
    json_t *desktop = json_object_get(list, "desktop");
    if (json_is_object(desktop))
        printf("\nDesktop: %s\n", jstr(desktop, "url"));
    return CLI_EXIT_OK;
}

void cli_print_services(FILE *out, json_t *inst)
{
    size_t i;
    json_t *p;
    json_t *jupyter = json_object_get(inst, "jupyter");
    json_t *desktop = json_object_get(inst, "desktop");

    if (json_array_size(json_object_get(inst, "services")) == 0)
        return;
    fprintf(out, "services (open the link in a browser; owner only unless public):\n");
    json_array_foreach(json_object_get(inst, "services"), i, p)
    {
        bool pub = json_is_true(json_object_get(p, "public"));
        fprintf(out, "  %-6lld %-7s %s\n", (long long)jint(p, "port"), pub ? "public" : "owner",
                pub ? jstr(p, "url") : jstr(p, "access_url"));
    }
    if (json_is_object(jupyter))
        fprintf(out, "jupyter: %s\n", jstr(jupyter, "url"));
    if (json_is_object(desktop))
        fprintf(out, "desktop: %s\n", jstr(desktop, "url"));
}

const struct cli_command cmd_port_ls = {
    .name = "port ls",
    .aliases = { "port list", "ports" },
    .args = "ID|NAME",
    .summary = "list an instance's service ports and their links",
    .run = run_port_ls,
};

const struct cli_command cmd_port_add = {
    .name = "port add",
    .args = "ID|NAME PORT",
    .summary = "publish another port of an instance (up to the operator's limit)",
    .run = run_port_add,
};

const struct cli_command cmd_port_rm = {
    .name = "port rm",
    .aliases = { "port remove" },
    .args = "ID|NAME PORT",
    .summary = "stop publishing a port",
    .run = run_port_rm,
};

const struct cli_command cmd_port_public = {
    .name = "port public",
    .args = "ID|NAME PORT",
    .summary = "let anyone open a port's link, no sign-in",
    .run = run_port_public,
};

const struct cli_command cmd_port_private = {
    .name = "port private",
    .args = "ID|NAME PORT",
    .summary = "let only the owner (and holders of the access link) in again",
    .run = run_port_private,
};
