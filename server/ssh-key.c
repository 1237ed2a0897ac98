#include "ssh-key.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define BLOB_MAX 8192

static const struct {
    const char *name;
    const char *curve; /* ECDSA curve name inside the blob */
    size_t point_len;
    int bits;
} key_types[] = {
    { "ssh-ed25519", NULL, 32, 256 },
    { "sk-ssh-ed25519@openssh.com", NULL, 32, 256 },
    { "ssh-rsa", NULL, 0, 0 },
    { "ecdsa-sha2-nistp256", "nistp256", 65, 256 },
    { "ecdsa-sha2-nistp384", "nistp384", 97, 384 },
    { "ecdsa-sha2-nistp521", "nistp521", 133, 521 },
    { "sk-ecdsa-sha2-nistp256@openssh.com", "nistp256", 65, 256 },
};

struct reader {
    const unsigned char *p;
    size_t left;
};

static int read_string(struct reader *r, const unsigned char **s, size_t *len)
{
    if (r->left < 4)
        return -1;
    uint32_t n =
        (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 | r->p[3];
    if (n > r->left - 4)
        return -1;
    *s = r->p + 4;
    *len = n;
    r->p += 4 + n;
    r->left -= 4 + n;
    return 0;
}

static int bad(struct sl_error *err, const char *why)
{
    return sl_fail(err, SL_E_INVALID, "invalid_ssh_key",
                   "%s: paste the whole line of your .pub file, such as the output of "
                   "'cat ~/.ssh/id_ed25519.pub'",
                   why);
}

static int rsa_bits(const unsigned char *n, size_t len)
{
    while (len > 0 && *n == 0) {
        n++;
        len--;
    }
    if (len == 0)
        return 0;
    int bits = (int)len * 8;
    for (unsigned char top = *n; !(top & 0x80); top <<= 1)
        bits--;
    return bits;
}

static int check_blob(int t, const unsigned char *blob, size_t len, struct ssh_key *key,
                      struct sl_error *err)
{
    struct reader r = { blob, len };
    const unsigned char *s;
    size_t n;

    if (read_string(&r, &s, &n) < 0 || n != strlen(key_types[t].name) ||
        memcmp(s, key_types[t].name, n) != 0)
        return bad(err, "the key's data does not match its type");
    if (strcmp(key_types[t].name, "ssh-rsa") == 0) {
        const unsigned char *e, *mod;
        size_t elen, mlen;
        if (read_string(&r, &e, &elen) < 0 || read_string(&r, &mod, &mlen) < 0 || elen == 0)
            return bad(err, "the RSA key is truncated");
        key->bits = rsa_bits(mod, mlen);
        if (key->bits < 2048)
            return sl_fail(err, SL_E_INVALID, "invalid_ssh_key",
                           "the RSA key has %d bits, fewer than the 2048 required: make a new one "
                           "with 'ssh-keygen -t ed25519'",
                           key->bits);
        if (key->bits > 16384)
            return bad(err, "the RSA key is over 16384 bits");
    } else {
        if (key_types[t].curve) {
            if (read_string(&r, &s, &n) < 0 || n != strlen(key_types[t].curve) ||
                memcmp(s, key_types[t].curve, n) != 0)
                return bad(err, "the ECDSA key names another curve than its type");
        }
        if (read_string(&r, &s, &n) < 0 || n != key_types[t].point_len)
            return bad(err, "the key has the wrong length for its type");
        key->bits = key_types[t].bits;
        /* security keys carry an application string after the key */
        if (strncmp(key_types[t].name, "sk-", 3) == 0 && read_string(&r, &s, &n) < 0)
            return bad(err, "the security key is truncated");
    }
    if (r.left != 0)
        return bad(err, "the key has trailing data");
    return 0;
}

int ssh_key_parse(const char *text, struct ssh_key *key, struct sl_error *err)
{
    unsigned char blob[BLOB_MAX], digest[crypto_hash_sha256_BYTES];
    char type[SSH_KEY_TYPE_MAX], b64[BLOB_MAX * 2];
    size_t blob_len, i;
    int t = -1, consumed = 0;

    memset(key, 0, sizeof(*key));
    while (isspace((unsigned char)*text))
        text++;
    if (sscanf(text, "%47s %16383s%n", type, b64, &consumed) != 2)
        return bad(err, "this is not an OpenSSH public key line 'TYPE BASE64 [COMMENT]'");
    for (i = 0; i < ARRAY_SIZE(key_types); i++)
        if (strcmp(type, key_types[i].name) == 0)
            t = (int)i;
    if (t < 0) {
        if (strstr(text, "PRIVATE KEY"))
            return sl_fail(err, SL_E_INVALID, "invalid_ssh_key",
                           "this is a private key: never share it; add the .pub file instead");
        return sl_fail(err, SL_E_INVALID, "invalid_ssh_key",
                       "key type '%s' is not accepted: use ssh-ed25519, ecdsa-sha2-nistp256/384/"
                       "521 or ssh-rsa (2048 bits or more)",
                       type);
    }
    if (sodium_base642bin(blob, sizeof(blob), b64, strlen(b64), NULL, &blob_len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0)
        return bad(err, "the key's data is not valid base64");
    if (check_blob(t, blob, blob_len, key, err) < 0)
        return -1;
    snprintf(key->type, sizeof(key->type), "%s", type);
    crypto_hash_sha256(digest, blob, blob_len);
    memcpy(key->fingerprint, "SHA256:", 7);
    sodium_bin2base64(key->fingerprint + 7, sizeof(key->fingerprint) - 7, digest, sizeof(digest),
                      sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
    key->normalized = xasprintf("%s %s", type, b64);
    const char *comment = text + consumed;
    while (isspace((unsigned char)*comment))
        comment++;
    key->comment = xstrdup(comment);
    char *e = key->comment + strlen(key->comment);
    while (e > key->comment && isspace((unsigned char)e[-1]))
        *--e = '\0';
    for (e = key->comment; *e; e++)
        if ((unsigned char)*e < 0x20 && *e != '\t') {
            ssh_key_release(key);
            return bad(err, "there is more than one line: add one key at a time");
        }
    return 0;
}

void ssh_key_release(struct ssh_key *key)
{
    free(key->normalized);
    free(key->comment);
    memset(key, 0, sizeof(*key));
}
