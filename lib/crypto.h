/* Secrets, after libsodium: argon2id password hashes, 256-bit random tokens
 * stored only as hashes, keyed hashes, HMAC-SHA256 and constant-time
 * comparison. */
#ifndef SL_CRYPTO_H
#define SL_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Hex SHA-256 / HMAC-SHA256 are 64 characters + NUL. */
#define SL_HASH_HEX_MAX 65
/* "sl_" + base64url of 32 bytes. */
#define SL_TOKEN_MAX 64

int sl_crypto_init(struct sl_error *err);

/* argon2id, libsodium's "interactive" cost. out holds crypto_pwhash_STRBYTES. */
int sl_password_hash(const char *password, char *out, size_t out_size, struct sl_error *err);
bool sl_password_verify(const char *hash, const char *password);

/* A new bearer token "sl_<43 base64url chars>" (256 bits). */
char *sl_token_new(char *buf);

void sl_sha256_hex(const void *data, size_t len, char *hex);
void sl_hmac_sha256_hex(const void *key, size_t key_len, const void *data, size_t len, char *hex);

/* Keyed BLAKE2b of low-entropy data (ID numbers): without the key a stolen
 * database cannot be searched by brute force. */
void sl_keyed_hash_hex(const unsigned char key[32], const void *data, size_t len, char *hex);

/* Constant-time equality of two NUL-terminated strings. */
bool sl_secret_equal(const char *a, const char *b);

/* Random bytes as lowercase hex; out holds 2*n+1 bytes. */
void sl_random_hex(char *out, size_t n);

#endif
