/* server/secrets.c: instance secrets sealed at rest. */
#include "harness.h"

#include "../../lib/crypto.h"
#include "../../server/secrets.h"

#include <sodium.h>
#include <stdlib.h>

static void server_with_key(struct server *srv, unsigned char fill)
{
    memset(srv, 0, sizeof(*srv));
    memset(srv->id_hash_key, fill, sizeof(srv->id_hash_key));
    secrets_init(srv);
}

TEST(seal_and_open)
{
    struct server srv;
    struct sl_error err = SL_ERROR_INIT;

    CHECK(sl_crypto_init(&err) == 0);
    server_with_key(&srv, 7);
    char *a = secrets_seal(&srv, "root_password:i-one", "hunter2 and more");
    char *b = secrets_seal(&srv, "root_password:i-one", "hunter2 and more");
    CHECK(secrets_is_sealed(a));
    /* nothing of the plaintext shows, and each seal has its own nonce */
    CHECK(!strstr(a, "hunter2"));
    CHECK(strcmp(a, b) != 0);
    char *p = secrets_open(&srv, "root_password:i-one", a, &err);
    CHECK_STR(p, "hunter2 and more");
    free(p);
    /* the empty string seals and opens */
    char *e = secrets_seal(&srv, "ctx", "");
    p = secrets_open(&srv, "ctx", e, &err);
    CHECK_STR(p, "");
    free(p);
    free(e);
    free(a);
    free(b);
}

TEST(wrong_context_key_or_damage_refused)
{
    struct server srv, other;
    struct sl_error err = SL_ERROR_INIT;

    CHECK(sl_crypto_init(&err) == 0);
    server_with_key(&srv, 1);
    server_with_key(&other, 2);
    char *a = secrets_seal(&srv, "port_token:i-one:6006", "abc");
    /* moved to another row */
    CHECK(secrets_open(&srv, "port_token:i-two:6006", a, &err) == NULL);
    CHECK_STR(err.code, "bad_secret");
    /* another installation's key */
    err = (struct sl_error)SL_ERROR_INIT;
    CHECK(secrets_open(&other, "port_token:i-one:6006", a, &err) == NULL);
    /* every single changed character of the sealed text */
    for (size_t i = strlen(SECRETS_PREFIX); a[i]; i++) {
        char saved = a[i];
        a[i] = a[i] == 'A' ? 'B' : 'A';
        err = (struct sl_error)SL_ERROR_INIT;
        char *p = secrets_open(&srv, "port_token:i-one:6006", a, &err);
        if (p && strcmp(p, "abc") == 0)
            test_fail(__FILE__, __LINE__, "changed at %zu and still opened", i);
        free(p);
        a[i] = saved;
    }
    /* truncated */
    err = (struct sl_error)SL_ERROR_INIT;
    CHECK(secrets_open(&srv, "x", "s1:AAAA", &err) == NULL);
    free(a);
}

TEST(plaintext_from_before_sealing_reads_as_is)
{
    struct server srv;
    struct sl_error err = SL_ERROR_INIT;

    server_with_key(&srv, 3);
    char *p = secrets_open(&srv, "root_password:i-old", "0123abcd", &err);
    CHECK_STR(p, "0123abcd");
    CHECK(!secrets_is_sealed("0123abcd"));
    free(p);
}
