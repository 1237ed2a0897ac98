#include "id-number.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static int check_cn(const char *s, struct sl_error *err)
{
    static const int weights[17] = { 7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2 };
    static const char check[] = "10X98765432";
    int sum = 0;

    if (strlen(s) != 18)
        return sl_fail(err, SL_E_INVALID, "invalid_id_number",
                       "a resident ID number has 18 characters; this one has %zu", strlen(s));
    for (int i = 0; i < 17; i++) {
        if (!isdigit((unsigned char)s[i]))
            return sl_fail(err, SL_E_INVALID, "invalid_id_number",
                           "the first 17 characters of a resident ID number are digits");
        sum += (s[i] - '0') * weights[i];
    }
    if (s[17] != check[sum % 11])
        return sl_fail(err, SL_E_INVALID, "invalid_id_number",
                       "the ID number's check digit does not match: check it for a typo");
    return 0;
}

int id_number_check(const char *format, const char *in, char *out, struct sl_error *err)
{
    size_t n = 0;

    for (const char *p = in; *p; p++) {
        if (isspace((unsigned char)*p))
            continue;
        if (!isalnum((unsigned char)*p))
            return sl_fail(err, SL_E_INVALID, "invalid_id_number",
                           "an ID number holds only letters and digits");
        if (n + 1 >= ID_NUMBER_MAX)
            return sl_fail(err, SL_E_INVALID, "invalid_id_number", "the ID number is too long");
        out[n++] = (char)toupper((unsigned char)*p);
    }
    out[n] = '\0';
    if (strcmp(format, "cn") == 0)
        return check_cn(out, err);
    if (n < 6)
        return sl_fail(err, SL_E_INVALID, "invalid_id_number",
                       "the ID number is too short: at least 6 characters");
    return 0;
}

void id_number_mask(const char *number, char *out, size_t out_size)
{
    size_t n = strlen(number);
    char stars[ID_NUMBER_MAX];

    if (n <= 7) {
        snprintf(out, out_size, "%.*s%s", n > 2 ? 1 : 0, number, "****");
        return;
    }
    memset(stars, '*', n - 7);
    stars[n - 7] = '\0';
    snprintf(out, out_size, "%.3s%s%s", number, stars, number + n - 4);
}
