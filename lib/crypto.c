#include "crypto.h"

#include <sodium.h>
#include <string.h>

int sl_crypto_init(struct sl_error *err)
{
    if (sodium_init() < 0)
        return sl_fail(err, SL_E_INTERNAL, "crypto_unavailable", "libsodium failed to start");
    return 0;
}

int sl_password_hash(const char *password, char *out, size_t out_size, struct sl_error *err)
{
    if (out_size < crypto_pwhash_STRBYTES)
        return sl_fail(err, SL_E_INTERNAL, NULL, "password hash buffer too small");
    if (crypto_pwhash_str_alg(out, password, strlen(password), crypto_pwhash_OPSLIMIT_INTERACTIVE,
                              crypto_pwhash_MEMLIMIT_INTERACTIVE,
                              crypto_pwhash_ALG_ARGON2ID13) != 0)
        return sl_fail(err, SL_E_UNAVAILABLE, "out_of_memory",
                       "not enough memory to hash the password; try again");
    return 0;
}

bool sl_password_verify(const char *hash, const char *password)
{
    return crypto_pwhash_str_verify(hash, password, strlen(password)) == 0;
}

char *sl_token_new(char *buf)
{
    unsigned char raw[32];

    randombytes_buf(raw, sizeof(raw));
    memcpy(buf, "sl_", 3);
    sodium_bin2base64(buf + 3, SL_TOKEN_MAX - 3, raw, sizeof(raw),
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, sizeof(raw));
    return buf;
}

void sl_sha256_hex(const void *data, size_t len, char *hex)
{
    unsigned char h[crypto_hash_sha256_BYTES];

    crypto_hash_sha256(h, data, len);
    sodium_bin2hex(hex, SL_HASH_HEX_MAX, h, sizeof(h));
}

void sl_hmac_sha256_hex(const void *key, size_t key_len, const void *data, size_t len, char *hex)
{
    crypto_auth_hmacsha256_state st;
    unsigned char mac[crypto_auth_hmacsha256_BYTES];

    crypto_auth_hmacsha256_init(&st, key, key_len);
    crypto_auth_hmacsha256_update(&st, data, len);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(hex, SL_HASH_HEX_MAX, mac, sizeof(mac));
}

void sl_keyed_hash_hex(const unsigned char key[32], const void *data, size_t len, char *hex)
{
    unsigned char h[32];

    crypto_generichash(h, sizeof(h), data, len, key, 32);
    sodium_bin2hex(hex, SL_HASH_HEX_MAX, h, sizeof(h));
}

bool sl_secret_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);

    if (la != lb)
        return false;
    return sodium_memcmp(a, b, la) == 0;
}

void sl_random_hex(char *out, size_t n)
{
    unsigned char buf[64];

    while (n > 0) {
        size_t k = n < sizeof(buf) ? n : sizeof(buf);
        randombytes_buf(buf, k);
        sodium_bin2hex(out, 2 * k + 1, buf, k);
        out += 2 * k;
        n -= k;
    }
}
