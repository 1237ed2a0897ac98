/* lib/json.c: request bodies and their declarative field checks. */
#include "harness.h"

#include "../../lib/json.h"

#include <stdio.h>

static json_t *parse(const char *body, struct sl_error *err)
{
    return sl_json_parse_object(body, strlen(body), err);
}

/* body must be refused by sl_json_parse_object with "invalid_json" */
static void check_parse_refused(const char *body, size_t len, const char *file, int line)
{
    struct sl_error err = SL_ERROR_INIT;
    json_t *j = sl_json_parse_object(body, len, &err);

    if (j) {
        test_fail(file, line, "body accepted (%zu bytes)", len);
        json_decref(j);
    } else if (strcmp(err.code, "invalid_json") != 0 || err.kind != SL_E_INVALID) {
        test_fail(file, line, "code %s kind %d, want invalid_json", err.code, err.kind);
    }
}

#define PARSE_REFUSED(body)        check_parse_refused(body, strlen(body), __FILE__, __LINE__)
#define PARSE_REFUSED_N(body, len) check_parse_refused(body, len, __FILE__, __LINE__)

TEST(parse_object)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *j = parse("{\"a\": 1, \"b\": \"\\u00e9t\\u00e9\"}", &err);

    if (CHECK(j)) {
        CHECK(json_is_object(j));
        CHECK_EQ_INT(json_integer_value(json_object_get(j, "a")), 1);
        CHECK_STR(json_string_value(json_object_get(j, "b")), "\xc3\xa9t\xc3\xa9");
    }
    json_t *empty = parse("  {}  ", &err);
    CHECK(empty && json_object_size(empty) == 0);
    json_decref(empty);
    json_t *utf8 = parse("{\"n\": \"\xe7\xae\x97\xe5\x8a\x9b\"}", &err);
    CHECK(utf8);
    json_decref(utf8);
}

TEST(parse_refusals)
{
    PARSE_REFUSED_N("", 0);
    PARSE_REFUSED("   ");
    PARSE_REFUSED("[]");
    PARSE_REFUSED("[1, 2]");
    PARSE_REFUSED("\"string\"");
    PARSE_REFUSED("42");
    PARSE_REFUSED("null");
    PARSE_REFUSED("true");
    PARSE_REFUSED("{");
    PARSE_REFUSED("{\"a\": }");
    PARSE_REFUSED("{\"a\": 1,}");
    PARSE_REFUSED("{'a': 1}");
    PARSE_REFUSED("{} {}");
    PARSE_REFUSED("{}x");
    /* duplicates */
    PARSE_REFUSED("{\"a\": 1, \"a\": 2}");
    PARSE_REFUSED("{\"a\": 1, \"b\": {\"c\": 1, \"c\": 1}}");
    /* invalid UTF-8: a lone continuation byte, an overlong '/', a surrogate, a
     * truncated sequence, 0xff */
    PARSE_REFUSED("{\"a\": \"\x80\"}");
    PARSE_REFUSED("{\"a\": \"\xc0\xaf\"}");
    PARSE_REFUSED("{\"a\": \"\xed\xa0\x80\"}");
    PARSE_REFUSED("{\"a\": \"\xe7\xae\"}");
    PARSE_REFUSED("{\"a\": \"\xff\"}");
    PARSE_REFUSED("{\"\xff\": 1}");
    /* NUL: escaped in a string or a key, raw in the body */
    PARSE_REFUSED("{\"a\": \"x\\u0000y\"}");
    PARSE_REFUSED("{\"a\\u0000b\": 1}");
    PARSE_REFUSED_N("{\"a\": 1}\0", 9);
    PARSE_REFUSED_N("{\"a\": \"x\0y\"}", 12);
    /* raw control characters inside a string are not JSON */
    PARSE_REFUSED("{\"a\": \"x\ny\"}");
    /* the length is honoured: a prefix of a valid object is not one */
    PARSE_REFUSED_N("{\"a\": 1}", 7);
}

static const char *name_out, *email_out;
static int64_t n_out;
static bool b_out;

static const struct sl_json_field fields[] = {
    { "name", SL_JSON_STRING, .required = true, .min_len = 2, .max_len = 8, .out = &name_out },
    { "email", SL_JSON_STRING, .out = &email_out },
    { "count", SL_JSON_INT, .min = -5, .max = 10, .out = &n_out },
    { "any", SL_JSON_INT, .out = NULL },
    { "flag", SL_JSON_BOOL, .out = &b_out },
};

static int check_fields(const char *body, struct sl_error *err)
{
    cleanup_json json_t *j = parse(body, err);

    if (!j)
        return -2;
    return sl_json_fields(j, fields, sizeof(fields) / sizeof(fields[0]), err);
}

static void check_refused(const char *body, const char *code, const char *needle, const char *file,
                          int line)
{
    struct sl_error err = SL_ERROR_INIT;
    int rc = check_fields(body, &err);

    if (rc == -2)
        test_fail(file, line, "%s: not parsed: %s", body, err.message);
    else if (rc == 0)
        test_fail(file, line, "%s: accepted", body);
    else if (strcmp(err.code, code) != 0 || err.kind != SL_E_INVALID)
        test_fail(file, line, "%s: code %s, want %s", body, err.code, code);
    else if (needle && !strstr(err.message, needle))
        test_fail(file, line, "%s: message \"%s\" lacks \"%s\"", body, err.message, needle);
}

#define REFUSED(body, code, needle) check_refused(body, code, needle, __FILE__, __LINE__)

TEST(fields_accepted)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *j =
        parse("{\"name\": \"ab\", \"email\": \"x@y\", \"count\": -5, \"any\": 9223372036854775807,"
              " \"flag\": true}",
              &err);

    name_out = email_out = NULL;
    n_out = 99;
    b_out = false;
    if (!CHECK(j))
        return;
    CHECK_EQ_INT(sl_json_fields(j, fields, sizeof(fields) / sizeof(fields[0]), &err), 0);
    CHECK_STR(name_out, "ab");
    CHECK_STR(email_out, "x@y");
    CHECK_EQ_INT(n_out, -5);
    CHECK(b_out);

    /* absent and null optional fields leave the outs alone */
    cleanup_json json_t *k = parse("{\"name\": \"12345678\", \"email\": null}", &err);
    email_out = "untouched";
    n_out = 77;
    CHECK_EQ_INT(sl_json_fields(k, fields, sizeof(fields) / sizeof(fields[0]), &err), 0);
    CHECK_STR(name_out, "12345678");
    CHECK_STR(email_out, "untouched");
    CHECK_EQ_INT(n_out, 77);

    /* UTF-8 is counted in bytes: 2 characters of 3 bytes fit in 8 */
    CHECK_EQ_INT(check_fields("{\"name\": \"\xe7\xae\x97\xe5\x8a\x9b\"}", &err), 0);
    CHECK_EQ_INT(check_fields("{\"name\": \"ab\", \"count\": 10}", &err), 0);
    CHECK_EQ_INT(n_out, 10);
    CHECK_EQ_INT(check_fields("{\"name\": \"ab\", \"flag\": false}", &err), 0);
    CHECK(!b_out);
}

TEST(fields_refused)
{
    REFUSED("{\"name\": \"ab\", \"nope\": 1}", "unknown_field", "'nope'");
    REFUSED("{\"nope\": 1}", "unknown_field", "'nope'");
    /* an unknown key too long or with control characters is not echoed */
    REFUSED("{\"name\": \"ab\", "
            "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "\": 1}",
            "unknown_field", NULL);
    REFUSED("{\"name\": \"ab\", \"a\\u001bb\": 1}", "unknown_field", NULL);
    REFUSED("{}", "missing_field", "'name'");
    REFUSED("{\"name\": null}", "missing_field", "'name'");
    REFUSED("{\"name\": 5}", "invalid_field", "'name'");
    REFUSED("{\"name\": [\"ab\"]}", "invalid_field", "'name'");
    REFUSED("{\"name\": \"a\"}", "invalid_field", "too short");
    REFUSED("{\"name\": \"\"}", "invalid_field", "too short");
    REFUSED("{\"name\": \"123456789\"}", "invalid_field", "too long");
    REFUSED("{\"name\": \"a\\tb\"}", "invalid_field", "control characters");
    REFUSED("{\"name\": \"a\\u007fb\"}", "invalid_field", "control characters");
    REFUSED("{\"name\": \"ab\", \"email\": \"a\\nb\"}", "invalid_field", "'email'");
    /* default maximum length is 256 bytes */
    char body[600];
    snprintf(body, sizeof(body), "{\"name\": \"ab\", \"email\": \"%0257d\"}", 0);
    REFUSED(body, "invalid_field", "at most 256");
    snprintf(body, sizeof(body), "{\"name\": \"ab\", \"email\": \"%0256d\"}", 0);
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(check_fields(body, &err), 0);

    REFUSED("{\"name\": \"ab\", \"count\": \"3\"}", "invalid_field", "'count'");
    REFUSED("{\"name\": \"ab\", \"count\": 3.0}", "invalid_field", "integer");
    REFUSED("{\"name\": \"ab\", \"count\": true}", "invalid_field", "'count'");
    REFUSED("{\"name\": \"ab\", \"count\": 11}", "invalid_field", "between -5 and 10");
    REFUSED("{\"name\": \"ab\", \"count\": -6}", "invalid_field", "'count'");
    REFUSED("{\"name\": \"ab\", \"count\": -9223372036854775808}", "invalid_field", "'count'");
    REFUSED("{\"name\": \"ab\", \"any\": 1.5}", "invalid_field", "'any'");
    REFUSED("{\"name\": \"ab\", \"flag\": 1}", "invalid_field", "'flag'");
    REFUSED("{\"name\": \"ab\", \"flag\": \"true\"}", "invalid_field", "true or false");
}

TEST(fields_non_object)
{
    struct sl_error err = SL_ERROR_INIT;
    json_t *arr = json_array(), *str = json_string("x");

    CHECK(sl_json_fields(arr, fields, 1, &err) < 0);
    CHECK_STR(err.code, "invalid_json");
    CHECK(sl_json_fields(str, fields, 1, &err) < 0);
    CHECK(sl_json_fields(NULL, fields, 1, &err) < 0);
    json_decref(arr);
    json_decref(str);
}

TEST(integer_out_of_jansson_range)
{
    struct sl_error err = SL_ERROR_INIT;
    /* beyond int64: jansson refuses the number, so the body is invalid */
    json_t *j = parse("{\"name\": \"ab\", \"any\": 9223372036854775808}", &err);
    CHECK(j == NULL);
    json_decref(j);
}

TEST(multiline_strings)
{
    static const char *text_out;
    const struct sl_json_field ml[] = {
        { "text", SL_JSON_STRING, .required = true, .multiline = true, .out = &text_out },
    };
    static const char *const ok[] = { "{\"text\": \"a\\nb\"}", "{\"text\": \"a\\tb\\r\\n\"}" };
    static const char *const bad[] = { "{\"text\": \"a\\u0001b\"}", "{\"text\": \"a\\u007fb\"}",
                                       "{\"text\": \"a\\u001bb\"}" };
    struct sl_error err = SL_ERROR_INIT;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        cleanup_json json_t *j = parse(ok[i], &err);
        if (CHECK(j) && !CHECK_EQ_INT(sl_json_fields(j, ml, 1, &err), 0))
            printf("    %s: %s\n", ok[i], err.message);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cleanup_json json_t *j = parse(bad[i], &err);
        if (CHECK(j) && CHECK(sl_json_fields(j, ml, 1, &err) < 0))
            CHECK_CONTAINS(err.message, "control characters");
    }
}
