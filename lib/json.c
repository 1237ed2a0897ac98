#include "json.h"

#include <inttypes.h>
#include <string.h>

static const struct sl_json_field *find_field(const struct sl_json_field *f, size_t n,
                                              const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].name, name) == 0)
            return &f[i];
    return NULL;
}

static bool has_control(const char *s, bool multiline)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (multiline && (*p == '\t' || *p == '\n' || *p == '\r'))
            continue;
        if (*p < 0x20 || *p == 0x7f)
            return true;
    }
    return false;
}

static int check_string(const struct sl_json_field *f, json_t *v, struct sl_error *err)
{
    size_t max = f->max_len ? f->max_len : 256;
    const char *s;
    size_t len;

    if (!json_is_string(v))
        return sl_fail(err, SL_E_INVALID, "invalid_field", "field '%s' must be a string", f->name);
    s = json_string_value(v);
    len = json_string_length(v);
    if (len != strlen(s))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "field '%s' must not contain NUL characters", f->name);
    if (len < f->min_len)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "field '%s' is too short: at least %zu characters", f->name, f->min_len);
    if (len > max)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "field '%s' is too long: at most %zu bytes", f->name, max);
    if (has_control(s, f->multiline))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "field '%s' must not contain control characters", f->name);
    if (f->out)
        *(const char **)f->out = s;
    return 0;
}

static int check_int(const struct sl_json_field *f, json_t *v, struct sl_error *err)
{
    json_int_t x;

    if (!json_is_integer(v))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "field '%s' must be an integer (no quotes, no decimal point)", f->name);
    x = json_integer_value(v);
    if ((f->min || f->max) && (x < f->min || x > f->max))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "field '%s' must be between %" PRId64 " and %" PRId64 ", got %" PRId64,
                       f->name, f->min, f->max, (int64_t)x);
    if (f->out)
        *(int64_t *)f->out = x;
    return 0;
}

int sl_json_fields(json_t *obj, const struct sl_json_field *fields, size_t n, struct sl_error *err)
{
    const char *key;
    json_t *v;

    if (!json_is_object(obj))
        return sl_fail(err, SL_E_INVALID, "invalid_json", "the request body must be a JSON object");
    json_object_foreach(obj, key, v)
    {
        if (!find_field(fields, n, key)) {
            if (strlen(key) > 64 || has_control(key, false))
                return sl_fail(err, SL_E_INVALID, "unknown_field",
                               "unknown field in the request body");
            return sl_fail(err, SL_E_INVALID, "unknown_field",
                           "unknown field '%s' in the request body", key);
        }
    }
    for (size_t i = 0; i < n; i++) {
        const struct sl_json_field *f = &fields[i];
        v = json_object_get(obj, f->name);
        if (!v || json_is_null(v)) {
            if (f->required)
                return sl_fail(err, SL_E_INVALID, "missing_field", "field '%s' is required",
                               f->name);
            continue;
        }
        switch (f->type) {
        case SL_JSON_STRING:
            if (check_string(f, v, err) < 0)
                return -1;
            break;
        case SL_JSON_INT:
            if (check_int(f, v, err) < 0)
                return -1;
            break;
        case SL_JSON_ARRAY:
            if (!json_is_array(v))
                return sl_fail(err, SL_E_INVALID, "invalid_field", "field '%s' must be a list",
                               f->name);
            if (json_array_size(v) > (f->max_len ? f->max_len : 256))
                return sl_fail(err, SL_E_INVALID, "invalid_field",
                               "field '%s' has more than %zu items", f->name,
                               f->max_len ? f->max_len : 256);
            if (f->out)
                *(json_t **)f->out = v;
            break;
        case SL_JSON_OBJECT:
            if (!json_is_object(v))
                return sl_fail(err, SL_E_INVALID, "invalid_field", "field '%s' must be an object",
                               f->name);
            if (f->out)
                *(json_t **)f->out = v;
            break;
        case SL_JSON_BOOL:
            if (!json_is_boolean(v))
                return sl_fail(err, SL_E_INVALID, "invalid_field",
                               "field '%s' must be true or false", f->name);
            if (f->out)
                *(bool *)f->out = json_is_true(v);
            break;
        }
    }
    return 0;
}

json_t *sl_json_parse_object(const char *body, size_t len, struct sl_error *err)
{
    json_error_t jerr;
    json_t *j;

    if (len == 0) {
        sl_fail(err, SL_E_INVALID, "invalid_json", "the request body is empty: send a JSON object");
        return NULL;
    }
    /* jansson rejects invalid UTF-8 and, without JSON_ALLOW_NUL, NUL in strings */
    j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        sl_fail(err, SL_E_INVALID, "invalid_json",
                "the request body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                jerr.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        sl_fail(err, SL_E_INVALID, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    return j;
}
