/* server/ssh-key.c: OpenSSH public keys. The fixtures were made once with
 * ssh-keygen; each fingerprint is the one `ssh-keygen -lf KEY.pub` printed. */
#include "harness.h"

#include "../../server/ssh-key.h"

#include <stdio.h>
#include <stdlib.h>

#define ED25519_B64 "AAAAC3NzaC1lZDI1NTE5AAAAIMUgXIe09TTQrdksTA9WNAnwzOt7V6LPBWasAzhGWOOF"
#define ED25519_FP  "SHA256:3LuoVZenWTN/syDhuuLRg3aZElI/jQceAXAJBYCnpTA"

#define ECDSA256_B64                                                                               \
    "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBODTSObjwHCDAeyw64y/R4ZIsz87DrgqQZLtZfIa" \
    "LtiVW22fNpwFHbJl8de62ImtppDgG+tUD0CuBmvMBpwvI3U="
#define ECDSA256_FP "SHA256:jFGi7auOC2aYZm7RDOVqgD/jFELFvDhSr/ekbOxxLHI"

#define ECDSA384_B64                                                                               \
    "AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBNRrJbj+7/rZsgaLUVsW2iOTkQiL9YGnN9jgYnwK" \
    "oEFTEV2qQxqVQmBLjmOtS/hE5zkTLW+ZMTTITzATrTv6QDEUVIpYk7ozKK9cdIJyBeLEzv8TPXaYwMkUE2I0UlInOQ=="
#define ECDSA384_FP "SHA256:Apoe67tVzmoYO7ZQ5welf9/WqwQQ/T8J3V5JFNhb5L8"

#define ECDSA521_B64                                                                               \
    "AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBACJCEQUeMenHJrUVlFvjY3Hlnxp7VfbeUBhR15Q" \
    "qoKWbtg+K0pH4FSDx3V5rUa61feXZw3woANhPKCsZe37GpP0GQCiUueyHqgQriPUN7StW2ymQNApJcAkrDtPtVEoZ7o/" \
    "zU0Gl5o4cmlA6mpute/G9D/6E61pzuKJJDA1Tjp++fuSnw=="
#define ECDSA521_FP "SHA256:cTGT25Mn4NCedVOZzKStn89TztNDO4+KUFPFNTXzsrU"

#define RSA2048_B64                                                                                \
    "AAAAB3NzaC1yc2EAAAADAQABAAABAQDEW7Ww/ju9kpQGERjUOCdgjpbS9wNzAXm/iKi5Oz8yBRhEDIeR2qPXu7+5aFwj" \
    "FkkEKkqjUppuAk2fFw+Y/t92wV/SFH7b9aOKW0nlKxQnnICT67Rtic9jCoBX70XG8uUY7pIqYsuwWq9Q31QUsEI3uMtk" \
    "ahzgkKAhxFV0Yi6/kxBvjHV0Wz/ARrbIjBrCUkKr60HSM0dSzzsgacslCFn/ZGKvsZThVAavWatrYPIfImZ8yNxa/zGC" \
    "Npw1CKajiGEBxYntRIELklRaAFE862v8uNAR8hsPomlAXc9UHBlZ3T3CLh/15XGnpcAstSZV/M4jJgcKRHgf8NOhW3Db" \
    "+pmn"
#define RSA2048_FP "SHA256:CjARVPCU0e4VCmxEv03zKDQ2Kj9YlF/xfKMLo+L3yyA"

#define RSA1024_B64                                                                                \
    "AAAAB3NzaC1yc2EAAAADAQABAAAAgQDRjCw4Zwl44tdNH2KPGetE13Omy6/k0ZIiudNBa7uDuMFyBdsIp7S/SPk2oDXz" \
    "0aTezUD0FGCT4z/hNyBw2TVl2+DACf4TEnJija+H1Jc0y/zNmpR2OhuyoUsR9Z4T+wvRnqsv71IrCKlH2OnILNEl5rb7" \
    "iHswSiyf1okLD66HAQ=="

/* the ed25519 blob with 4 more bytes, cut by 3 bytes, or with a 31-byte key */
#define ED25519_TRAILING_B64                                                                       \
    "AAAAC3NzaC1lZDI1NTE5AAAAIMUgXIe09TTQrdksTA9WNAnwzOt7V6LPBWasAzhGWOOFAAAAAA=="
#define ED25519_TRUNCATED_B64 "AAAAC3NzaC1lZDI1NTE5AAAAIMUgXIe09TTQrdksTA9WNAnwzOt7V6LPBWasAzhG"
#define ED25519_SHORT_B64     "AAAAC3NzaC1lZDI1NTE5AAAAH8UgXIe09TTQrdksTA9WNAnwzOt7V6LPBWasAzhGWOM="
/* a nistp256 key whose blob names nistp384 */
#define ECDSA_WRONG_CURVE_B64                                                                      \
    "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAzODQAAABBBODTSObjwHCDAeyw64y/R4ZIsz87DrgqQZLtZfIa" \
    "LtiVW22fNpwFHbJl8de62ImtppDgG+tUD0CuBmvMBpwvI3U="

static void check_key(const char *text, const char *type, const char *fp, int bits,
                      const char *comment, const char *normalized, const char *file, int line)
{
    struct sl_error err = SL_ERROR_INIT;
    struct ssh_key key;

    if (ssh_key_parse(text, &key, &err) < 0) {
        test_fail(file, line, "refused: %s", err.message);
        return;
    }
    if (strcmp(key.type, type) != 0)
        test_fail(file, line, "type %s, want %s", key.type, type);
    if (strcmp(key.fingerprint, fp) != 0)
        test_fail(file, line, "fingerprint %s, want %s", key.fingerprint, fp);
    if (key.bits != bits)
        test_fail(file, line, "bits %d, want %d", key.bits, bits);
    if (strcmp(key.comment, comment) != 0)
        test_fail(file, line, "comment \"%s\", want \"%s\"", key.comment, comment);
    if (strcmp(key.normalized, normalized) != 0)
        test_fail(file, line, "normalized \"%s\", want \"%s\"", key.normalized, normalized);
    ssh_key_release(&key);
    if (key.normalized || key.comment)
        test_fail(file, line, "ssh_key_release left pointers behind");
}

#define KEY_OK(text, type, fp, bits, comment, normalized)                                          \
    check_key(text, type, fp, bits, comment, normalized, __FILE__, __LINE__)

static void check_refused(const char *text, const char *needle, const char *file, int line)
{
    struct sl_error err = SL_ERROR_INIT;
    struct ssh_key key;

    if (ssh_key_parse(text, &key, &err) == 0) {
        test_fail(file, line, "accepted \"%.60s...\"", text);
        ssh_key_release(&key);
        return;
    }
    if (err.kind != SL_E_INVALID || strcmp(err.code, "invalid_ssh_key") != 0)
        test_fail(file, line, "kind %d code %s, want invalid_ssh_key", err.kind, err.code);
    if (needle && !strstr(err.message, needle))
        test_fail(file, line, "message \"%s\" lacks \"%s\"", err.message, needle);
    /* nothing to release on failure */
    if (key.normalized || key.comment)
        test_fail(file, line, "a refused key holds memory");
}

#define KEY_REFUSED(text, needle) check_refused(text, needle, __FILE__, __LINE__)

TEST(accepted_keys)
{
    KEY_OK("ssh-ed25519 " ED25519_B64 " alice@laptop", "ssh-ed25519", ED25519_FP, 256,
           "alice@laptop", "ssh-ed25519 " ED25519_B64);
    KEY_OK("ecdsa-sha2-nistp256 " ECDSA256_B64 " bob ecdsa key", "ecdsa-sha2-nistp256", ECDSA256_FP,
           256, "bob ecdsa key", "ecdsa-sha2-nistp256 " ECDSA256_B64);
    KEY_OK("ecdsa-sha2-nistp384 " ECDSA384_B64, "ecdsa-sha2-nistp384", ECDSA384_FP, 384, "",
           "ecdsa-sha2-nistp384 " ECDSA384_B64);
    KEY_OK("ecdsa-sha2-nistp521 " ECDSA521_B64 " c521", "ecdsa-sha2-nistp521", ECDSA521_FP, 521,
           "c521", "ecdsa-sha2-nistp521 " ECDSA521_B64);
    KEY_OK("ssh-rsa " RSA2048_B64 " carol@rsa", "ssh-rsa", RSA2048_FP, 2048, "carol@rsa",
           "ssh-rsa " RSA2048_B64);
}

TEST(whitespace_and_comments)
{
    /* as pasted from a terminal: surrounding blanks, a newline, tabs */
    KEY_OK("  ssh-ed25519 " ED25519_B64 " alice@laptop\n", "ssh-ed25519", ED25519_FP, 256,
           "alice@laptop", "ssh-ed25519 " ED25519_B64);
    KEY_OK("\tssh-ed25519\t" ED25519_B64 "\t  my  key  with spaces \r\n", "ssh-ed25519", ED25519_FP,
           256, "my  key  with spaces", "ssh-ed25519 " ED25519_B64);
    KEY_OK("ssh-ed25519 " ED25519_B64 "   ", "ssh-ed25519", ED25519_FP, 256, "",
           "ssh-ed25519 " ED25519_B64);
    KEY_OK("ssh-ed25519 " ED25519_B64 " \xe7\xae\x97\xe5\x8a\x9b", "ssh-ed25519", ED25519_FP, 256,
           "\xe7\xae\x97\xe5\x8a\x9b", "ssh-ed25519 " ED25519_B64);
}

TEST(refused_keys)
{
    KEY_REFUSED("ssh-rsa " RSA1024_B64 " weak", "1024 bits");
    /* type and data disagree */
    KEY_REFUSED("ssh-rsa " ED25519_B64, "does not match its type");
    KEY_REFUSED("ssh-ed25519 " RSA2048_B64, "does not match its type");
    KEY_REFUSED("ecdsa-sha2-nistp384 " ECDSA256_B64, "does not match its type");
    KEY_REFUSED("ecdsa-sha2-nistp256 " ECDSA_WRONG_CURVE_B64, "another curve");
    /* bad base64 */
    KEY_REFUSED("ssh-ed25519 AAAA$$$$", "base64");
    KEY_REFUSED("ssh-ed25519 " ED25519_B64 "=", "base64");
    KEY_REFUSED("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMUgXIe09TTQrdksTA9WNAnwzOt7V6LPBWasAzhGWOO",
                NULL);
    /* truncated, short, trailing data */
    KEY_REFUSED("ssh-ed25519 " ED25519_TRUNCATED_B64, NULL);
    KEY_REFUSED("ssh-ed25519 " ED25519_SHORT_B64, "wrong length");
    KEY_REFUSED("ssh-ed25519 " ED25519_TRAILING_B64, "trailing data");
    KEY_REFUSED("ssh-ed25519 AAAAC3NzaC1l", NULL);
    KEY_REFUSED("ssh-rsa AAAAB3NzaC1yc2EAAAADAQAB", "truncated");
    /* not a key line at all */
    KEY_REFUSED("", "not an OpenSSH public key");
    KEY_REFUSED("   \n", "not an OpenSSH public key");
    KEY_REFUSED("ssh-ed25519", "not an OpenSSH public key");
    KEY_REFUSED("ssh-dss AAAAB3NzaC1kc3M=", "not accepted");
    KEY_REFUSED(ED25519_B64, NULL);
    KEY_REFUSED("-----BEGIN OPENSSH PRIVATE KEY-----\n"
                "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
                "-----END OPENSSH PRIVATE KEY-----\n",
                "private key");
    KEY_REFUSED("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n", "private key");
}

TEST(oversized_input)
{
    /* longer than any buffer: refused, not overrun */
    size_t n = 40000;
    char *text = malloc(n + 32);
    if (!CHECK(text))
        return;
    memcpy(text, "ssh-rsa ", 8);
    memset(text + 8, 'A', n);
    text[8 + n] = '\0';
    KEY_REFUSED(text, NULL);
    memset(text, 'x', n);
    text[n] = '\0';
    KEY_REFUSED(text, NULL);
    free(text);
}
