#include "secrets.h"

#include "../lib/xalloc.h"

#include <sodium.h>
#include <string.h>

#define KDF_CONTEXT "suanlisl" /* crypto_kdf's 8-byte context */
#define KDF_SEAL_ID 1

void secrets_init(struct server *srv)
{
    crypto_kdf_derive_from_key(srv->seal_key, sizeof(srv->seal_key), KDF_SEAL_ID, KDF_CONTEXT,
                               srv->id_hash_key);
}

bool secrets_is_sealed(const char *stored)
{
    return stored && strncmp(stored, SECRETS_PREFIX, strlen(SECRETS_PREFIX)) == 0;
}

char *secrets_seal(const struct server *srv, const char *context, const char *plaintext)
{
    size_t n = strlen(plaintext);
    size_t raw_len = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + n +
                     crypto_aead_xchacha20poly1305_ietf_ABYTES;
    unsigned char *raw = xmalloc(raw_len);
    unsigned char *nonce = raw, *ct = raw + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
    unsigned long long ct_len;

    randombytes_buf(nonce, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
    crypto_aead_xchacha20poly1305_ietf_encrypt(ct, &ct_len, (const unsigned char *)plaintext, n,
                                               (const unsigned char *)context, strlen(context),
                                               NULL, nonce, srv->seal_key);
    size_t b64 = sodium_base64_ENCODED_LEN(raw_len, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    size_t prefix = strlen(SECRETS_PREFIX);
    char *out = xmalloc(prefix + b64);
    memcpy(out, SECRETS_PREFIX, prefix);
    sodium_bin2base64(out + prefix, b64, raw, raw_len, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, raw_len);
    free(raw);
    return out;
}

char *secrets_open(const struct server *srv, const char *context, const char *stored,
                   struct sl_error *err)
{
    if (!secrets_is_sealed(stored))
        return xstrdup(stored ? stored : "");
    const char *b64 = stored + strlen(SECRETS_PREFIX);
    size_t cap = strlen(b64), raw_len = 0;
    unsigned char *raw = xmalloc(cap + 1);
    const size_t overhead =
        crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + crypto_aead_xchacha20poly1305_ietf_ABYTES;

    if (sodium_base642bin(raw, cap, b64, strlen(b64), NULL, &raw_len, NULL,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
        raw_len < overhead) {
        free(raw);
        sl_fail(err, SL_E_INTERNAL, "bad_secret", "a sealed secret (%s) is damaged", context);
        return NULL;
    }
    char *out = xmalloc(raw_len - overhead + 1);
    unsigned long long n;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            (unsigned char *)out, &n, NULL, raw + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
            raw_len - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, (const unsigned char *)context,
            strlen(context), raw, srv->seal_key) != 0) {
        free(raw);
        free(out);
        sl_fail(err, SL_E_INTERNAL, "bad_secret",
                "a sealed secret (%s) does not open: is DATA/secret.key the one it was sealed "
                "with?",
                context);
        return NULL;
    }
    out[n] = '\0';
    free(raw);
    return out;
}

static bool sqlite(struct store *st)
{
    return strcmp(store_backend(st), "sqlite") == 0;
}

int secrets_rewrite_begin(struct store *st, struct sl_error *err)
{
    if (sqlite(st) && store_exec(st, "PRAGMA secure_delete = ON", DB_NO_ARGS, err) < 0)
        return -1;
    return store_begin(st, err);
}

int secrets_scrub_log(struct store *st, struct sl_error *err)
{
    int64_t busy;

    if (!sqlite(st))
        return 0;
    return store_get_int(st, "PRAGMA wal_checkpoint(TRUNCATE)", DB_NO_ARGS, &busy, err);
}
