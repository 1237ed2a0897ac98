/* server/id-number.c: GB 11643 check digits, normalisation, masking. */
#include "harness.h"

#include "../../server/id-number.h"

static void check_ok(const char *format, const char *in, const char *want, const char *file,
                     int line)
{
    struct sl_error err = SL_ERROR_INIT;
    char out[ID_NUMBER_MAX];

    if (id_number_check(format, in, out, &err) < 0)
        test_fail(file, line, "%s \"%s\" refused: %s", format, in, err.message);
    else if (strcmp(out, want) != 0)
        test_fail(file, line, "%s \"%s\" normalised to \"%s\", want \"%s\"", format, in, out, want);
}

static void check_bad(const char *format, const char *in, const char *needle, const char *file,
                      int line)
{
    struct sl_error err = SL_ERROR_INIT;
    char out[ID_NUMBER_MAX];

    if (id_number_check(format, in, out, &err) == 0)
        test_fail(file, line, "%s \"%s\" accepted", format, in);
    else if (err.kind != SL_E_INVALID || strcmp(err.code, "invalid_id_number") != 0)
        test_fail(file, line, "kind %d code %s", err.kind, err.code);
    else if (needle && !strstr(err.message, needle))
        test_fail(file, line, "message \"%s\" lacks \"%s\"", err.message, needle);
}

#define ID_OK(f, in, want)    check_ok(f, in, want, __FILE__, __LINE__)
#define ID_BAD(f, in, needle) check_bad(f, in, needle, __FILE__, __LINE__)

TEST(cn_check_digit)
{
    /* the standard's own example, and one of each check digit */
    ID_OK("cn", "11010519491231002X", "11010519491231002X");
    static const char *const valid[] = {
        "110105199003070180", "110105199003070041", "110105199003070092", "110105199003070033",
        "110105199003070084", "110105199003070025", "110105199003070076", "110105199003070017",
        "110105199003070068", "110105199003070009", "11010519900307005X", "440307199001011232",
    };
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++)
        ID_OK("cn", valid[i], valid[i]);

    /* every wrong check digit of a valid number is caught */
    static const char digits[] = "0123456789X";
    char s[19] = "11010519491231002X";
    for (int i = 0; i < 11; i++) {
        s[17] = digits[i];
        if (digits[i] != 'X')
            ID_BAD("cn", s, "check digit");
    }
    /* a single changed digit in the body is caught too */
    for (int pos = 0; pos < 17; pos++) {
        char t[19] = "11010519491231002X";
        t[pos] = t[pos] == '9' ? '0' : (char)(t[pos] + 1);
        ID_BAD("cn", t, "check digit");
    }
    ID_BAD("cn", "1101051949123100X2", "digits");
    ID_BAD("cn", "A1010519491231002X", "digits");
    ID_BAD("cn", "11010519491231002", "18 characters");
    ID_BAD("cn", "11010519491231002X1", "18 characters");
    ID_BAD("cn", "", "18 characters");
}

TEST(normalisation)
{
    ID_OK("cn", "11010519491231002x", "11010519491231002X");
    ID_OK("cn", "  110105 19491231 002x \n", "11010519491231002X");
    ID_OK("cn", "\t110105\t19491231\t002X", "11010519491231002X");
    ID_BAD("cn", "110105-19491231-002X", "letters and digits");
    ID_BAD("cn", "11010519491231002X.", "letters and digits");
    ID_BAD("cn", "11010519491231002\xc3\x97", "letters and digits");
}

TEST(any_format)
{
    ID_OK("any", "e1234567", "E1234567");
    ID_OK("any", " ab 12 cd ", "AB12CD");
    ID_OK("any", "123456", "123456");
    ID_OK("any", "11010519491231002X", "11010519491231002X");
    ID_OK("any", "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345", "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345");
    ID_BAD("any", "12345", "too short");
    ID_BAD("any", "", "too short");
    ID_BAD("any", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456", "too long");
    ID_BAD("any", "AB-1234", "letters and digits");
    /* a long input does not overrun the output buffer */
    char longer[200];
    memset(longer, '7', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    ID_BAD("any", longer, "too long");
    ID_BAD("cn", longer, "too long");
}

static void check_mask(const char *in, const char *want, const char *file, int line)
{
    char out[ID_NUMBER_MAX];

    id_number_mask(in, out, sizeof(out));
    if (strcmp(out, want) != 0)
        test_fail(file, line, "mask \"%s\" = \"%s\", want \"%s\"", in, out, want);
}

#define MASK(in, want) check_mask(in, want, __FILE__, __LINE__)

TEST(masking)
{
    MASK("11010519491231002X", "110***********002X");
    MASK("E12345678", "E12**5678");
    MASK("12345678", "123*5678");
    MASK("1234567", "1****");
    MASK("123", "1****");
    MASK("12", "****");
    MASK("", "****");
    MASK("ABCDEFGHIJKLMNOPQRSTUVWXYZ012345", "ABC*************************2345");
    /* the mask never shows more than 7 characters of the number */
    char out[ID_NUMBER_MAX];
    id_number_mask("11010519491231002X", out, sizeof(out));
    int shown = 0;
    for (const char *p = out; *p; p++)
        shown += *p != '*';
    CHECK_EQ_INT(shown, 7);
    /* a small output buffer truncates */
    char small[6];
    id_number_mask("11010519491231002X", small, sizeof(small));
    CHECK_STR(small, "110**");
}
