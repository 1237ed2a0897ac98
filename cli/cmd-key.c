/* key add|ls|rm: the SSH public keys installed in every instance. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <string.h>

/* An OpenSSH public key file is one line; anything past 16 KiB is not one. */
#define KEY_FILE_MAX 16384

static char *read_key_file(const char *path, struct sl_error *err)
{
    bool from_stdin = strcmp(path, "-") == 0;
    cleanup_fclose FILE *f = from_stdin ? NULL : fopen(path, "r");
    FILE *in = from_stdin ? stdin : f;
    cleanup_buf struct sl_buf text = SL_BUF_INIT;
    char chunk[4096];
    size_t n;

    if (!in) {
        sl_fail_errno(err, "unable to open '%s'", path);
        return NULL;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0) {
        sl_buf_add(&text, chunk, n);
        if (text.len > KEY_FILE_MAX) {
            sl_fail(err, SL_E_INVALID, "key_too_large",
                    "'%s' is larger than any SSH public key: give the .pub file", path);
            return NULL;
        }
    }
    while (text.len > 0 && strchr(" \t\r\n", text.data[text.len - 1]))
        text.data[--text.len] = '\0';
    if (strstr(text.data, "PRIVATE KEY")) {
        sl_fail(err, SL_E_INVALID, "private_key",
                "'%s' is a private key: give the public one (the .pub file)", path);
        return NULL;
    }
    return sl_buf_detach(&text, NULL);
}

static const struct cli_option key_add_options[] = {
    { .name = "name", .arg = "NAME", .help = "what to call the key (default: its comment)" },
    { 0 },
};

static int run_key_add(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *name = cli_text(a, "name", NULL);
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *text = read_key_file(a->argv[0], &err);
    if (!text)
        return cli_fail(&err);
    cleanup_json json_t *body = json_pack("{s:s}", "public_key", text);
    if (name)
        json_object_set_new(body, "name", json_string(name));
    cleanup_json json_t *key = NULL;
    if (sl_client_request(&cli->client, "POST", "/v1/ssh-keys", body, NULL, &key, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, key);
    else
        printf("added key %s (%s, %s %s)\n", jstr(key, "id"), jstr(key, "name"), jstr(key, "type"),
               jstr(key, "fingerprint"));
    return CLI_EXIT_OK;
}

static int run_key_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = sl_client_list(&cli->client, "/v1/ssh-keys", 100, &err);
    if (!list)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "ID", "NAME", "TYPE", "FINGERPRINT", "ADDED" };
    struct table t;
    size_t i;
    json_t *key;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, key)
    {
        char added[32];
        const char *row[] = { jstr(key, "id"), jstr(key, "name"), jstr(key, "type"),
                              jstr(key, "fingerprint"),
                              output_time(jstr(key, "created_at"), added) };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static int run_key_rm(struct cli *cli, const struct cli_args *a)
{
    return cli_remove_one(cli, a, "/v1/ssh-keys", "key");
}

const struct cli_command cmd_key_add = {
    .name = "key add",
    .args = "FILE|-",
    .options = key_add_options,
    .summary = "register an SSH public key (an OpenSSH .pub file, or - for stdin)",
    .run = run_key_add,
};

const struct cli_command cmd_key_ls = {
    .name = "key ls",
    .aliases = { "key list", "keys" },
    .summary = "list your SSH public keys",
    .run = run_key_ls,
};

const struct cli_command cmd_key_rm = {
    .name = "key rm",
    .aliases = { "key remove" },
    .args = "ID",
    .summary = "remove an SSH public key",
    .run = run_key_rm,
};
