#include "id.h"

#include <sodium.h>
#include <stdint.h>
#include <string.h>

static const char alphabet[] = "abcdefghijkmnpqrstuvwxyz23456789";

char *sl_id_new(char *buf, const char *prefix)
{
    unsigned char rnd[12];
    size_t n = strlen(prefix);

    randombytes_buf(rnd, sizeof(rnd));
    memcpy(buf, prefix, n);
    for (size_t i = 0; i < sizeof(rnd); i++)
        buf[n + i] = alphabet[rnd[i] & 31];
    buf[n + sizeof(rnd)] = '\0';
    return buf;
}

bool sl_id_valid(const char *s, const char *prefix)
{
    size_t n = strlen(prefix), len = strlen(s);

    if (len <= n || len >= SL_ID_MAX || strncmp(s, prefix, n) != 0)
        return false;
    for (const char *p = s + n; *p; p++)
        if (!strchr(alphabet, *p))
            return false;
    return true;
}
