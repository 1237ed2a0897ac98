/* Parsing and checking OpenSSH public keys ("TYPE BASE64 [COMMENT]"). */
#ifndef SL_SSH_KEY_H
#define SL_SSH_KEY_H

#include "../lib/error.h"

#define SSH_KEY_TYPE_MAX        48
#define SSH_KEY_FINGERPRINT_MAX 64

struct ssh_key {
    char type[SSH_KEY_TYPE_MAX];
    char fingerprint[SSH_KEY_FINGERPRINT_MAX]; /* "SHA256:..." as ssh-keygen -l prints */
    char *normalized;                          /* "TYPE BASE64", owned */
    char *comment;                             /* owned, may be "" */
    int bits;                                  /* RSA modulus size, else the curve's */
};

/* Checks type, base64, the blob's embedded type and its length (RSA at least
 * 2048 bits). Errors are SL_E_INVALID "invalid_ssh_key" saying what to fix. */
int ssh_key_parse(const char *text, struct ssh_key *key, struct sl_error *err);
void ssh_key_release(struct ssh_key *key);

#endif
