/* suanli disk resize: a bigger data disk for an instance
 * (POST /v1/instances/{id}/disk; server/disk-resize.h). */
#include "cli.h"
#include "output.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const struct cli_option resize_options[] = {
    { .name = "data",
      .arg = "GIB",
      .type = CLI_OPT_INT,
      .required = true,
      .min = 1,
      .max = 1 << 20,
      .help = "the data disk's new size in GiB: larger than now (a disk only grows), at most "
              "what create allows" },
    { 0 },
};

static int run_resize(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t gib = cli_number(a, "data", 0);
    char key[33];
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *found = cli_instance_find(cli, a->argv[0], &err);
    if (!found)
        return cli_fail(&err);
    const char *id = jstr(found, "id");
    int64_t before = (int64_t)json_integer_value(json_object_get(found, "data_disk_gib"));
    cleanup_free char *path = cli_instance_path(id, "disk");
    cleanup_json json_t *body = json_pack("{s:I}", "data_disk_gib", (json_int_t)gib);
    sl_random_hex(key, 16);
    cleanup_json json_t *inst = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, key, &inst, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, inst);
        return CLI_EXIT_OK;
    }
    if (before == gib)
        printf("the data disk of %s is %" PRId64 " GiB already\n", id, gib);
    else if (jstr(inst, "state") && strcmp(jstr(inst, "state"), "running") == 0)
        printf("data disk of %s grown from %" PRId64 " to %" PRId64 " GiB: it grows within "
               "seconds while the instance runs, without a restart (df -h /root/data); if its "
               "host cannot, suanli show %s says so\n",
               id, before, gib, id);
    else
        printf("data disk of %s grown from %" PRId64 " to %" PRId64 " GiB: it has the new "
               "size from its next start (suanli start %s)\n",
               id, before, gib, id);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_disk_resize = {
    .name = "disk resize",
    .args = "ID|NAME",
    .options = resize_options,
    .summary = "grow an instance's data disk (--data GIB): online while it runs, at the next "
               "start while stopped; billed at the new size from that moment",
    .run = run_resize,
};
