/* Who is asking the metadata endpoint (metadata.h): the instance an
 * address belongs to, and whether it showed that instance's token. Apart
 * from the server so that unit tests link it alone. */
#include "metadata.h"
#include "boot.h"
#include "fsutil.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

int metadata_gateway(const char *subnet, char *out, struct sl_error *err)
{
    char addr[64];
    size_t len = strcspn(subnet, "/");
    struct in_addr in;

    if (len >= sizeof(addr))
        goto bad;
    memcpy(addr, subnet, len);
    addr[len] = '\0';
    if (inet_pton(AF_INET, addr, &in) != 1)
        goto bad;
    in.s_addr = htonl(ntohl(in.s_addr) + 1);
    if (!inet_ntop(AF_INET, &in, out, 64))
        goto bad;
    return 0;
bad:
    return sl_fail(err, SL_E_INVALID, "invalid_config",
                   "network.subnet '%s' is not an IPv4 subnet such as 10.88.0.0/16", subnet);
}

/* Whether the cached CNI result at path gives the instance address ip. */
static bool result_has_ip(const char *path, const char *ip)
{
    json_error_t jerr;
    cleanup_json json_t *result = json_load_file(path, 0, &jerr);
    size_t i;
    json_t *entry;

    json_array_foreach(json_object_get(result, "ips"), i, entry)
    {
        const char *cidr = json_string_value(json_object_get(entry, "address"));
        size_t len = cidr ? strcspn(cidr, "/") : 0;
        if (cidr && len == strlen(ip) && strncmp(cidr, ip, len) == 0)
            return true;
    }
    return false;
}

int metadata_instance_for_ip(const char *net_state, const char *ip, char *id)
{
    cleanup_free char *dir = xasprintf("%s/results", net_state);
    cleanup_dir DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;

    while (d && !found && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || n - 5 >= SL_ID_MAX || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        cleanup_free char *path = xasprintf("%s/%s", dir, e->d_name);
        if (result_has_ip(path, ip)) {
            snprintf(id, SL_ID_MAX, "%.*s", (int)(n - 5), e->d_name);
            found = 1;
        }
    }
    return found;
}

bool metadata_token_ok(const char *data_dir, const char *id, const char *authorization)
{
    if (!authorization || strncmp(authorization, "Bearer ", 7) != 0)
        return false;
    const char *given = authorization + 7;
    cleanup_free char *path = xasprintf("%s/instances/%s/boot/" BOOT_TOKEN_FILE, data_dir, id);
    cleanup_free char *token = fs_read_file(path, BOOT_TOKEN_HEX + 1, NULL, NULL);
    if (!token || strlen(token) != BOOT_TOKEN_HEX || strlen(given) != BOOT_TOKEN_HEX)
        return false;
    return sodium_memcmp(token, given, BOOT_TOKEN_HEX) == 0;
}
