/* Tables, key/value lists, JSON and the display of money and time. */
#include "output.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

void table_init(struct table *t, size_t ncols, const char *const *headers)
{
    t->ncols = ncols;
    t->nrows = 0;
    t->cap = 0;
    t->cells = NULL;
    table_add(t, headers);
}

void table_add(struct table *t, const char *const *row)
{
    if (t->nrows == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 8;
        t->cells = xrealloc(t->cells, t->cap * t->ncols * sizeof(char *));
    }
    for (size_t c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = row[c] ? xstrdup(row[c]) : NULL;
    t->nrows++;
}

void table_release(struct table *t)
{
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = t->cap = 0;
}

static bool wide(uint32_t cp)
{
    return (cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0xa4cf) ||
           (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) ||
           (cp >= 0xfe30 && cp <= 0xfe4f) || (cp >= 0xff00 && cp <= 0xff60) ||
           (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x20000 && cp <= 0x3fffd);
}

/* Display width of a UTF-8 string. */
static size_t output_width(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t w = 0;

    while (*p) {
        uint32_t cp;
        int more;
        if (*p < 0x80) {
            cp = *p;
            more = 0;
        } else if ((*p & 0xe0) == 0xc0) {
            cp = *p & 0x1f;
            more = 1;
        } else if ((*p & 0xf0) == 0xe0) {
            cp = *p & 0x0f;
            more = 2;
        } else {
            cp = *p & 0x07;
            more = 3;
        }
        p++;
        while (more-- > 0 && (*p & 0xc0) == 0x80)
            cp = (cp << 6) | (*p++ & 0x3f);
        w += wide(cp) ? 2 : 1;
    }
    return w;
}

/* A cell as the aligned table shows it: NULL is "-". */
static const char *cell_text(const struct table *t, size_t r, size_t c)
{
    const char *cell = t->cells[r * t->ncols + c];

    return cell ? cell : "-";
}

void table_print(const struct table *t, FILE *out)
{
    cleanup_free size_t *widths = xcalloc(t->ncols, sizeof(size_t));
    cleanup_buf struct sl_buf line = SL_BUF_INIT;

    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < t->ncols; c++) {
            size_t w = output_width(cell_text(t, r, c));
            if (w > widths[c])
                widths[c] = w;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        sl_buf_reset(&line);
        for (size_t c = 0; c < t->ncols; c++) {
            const char *cell = cell_text(t, r, c);
            sl_buf_adds(&line, cell);
            if (c + 1 < t->ncols)
                sl_buf_addf(&line, "%*s", (int)(widths[c] - output_width(cell) + 2), "");
        }
        while (line.len > 0 && line.data[line.len - 1] == ' ')
            line.data[--line.len] = '\0';
        fprintf(out, "%s\n", line.data);
    }
}

void table_print_csv(const struct table *t, FILE *out)
{
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            if (c > 0)
                fputc(',', out);
            if (!cell)
                continue;
            if (!strpbrk(cell, ",\"\r\n")) {
                fputs(cell, out);
                continue;
            }
            fputc('"', out);
            for (const char *p = cell; *p; p++) {
                if (*p == '"')
                    fputc('"', out);
                fputc(*p, out);
            }
            fputc('"', out);
        }
        /* '\n', not RFC 4180's CRLF: what Unix tools expect; spreadsheets
         * read both */
        fputc('\n', out);
    }
}

void output_pairs(FILE *out, const struct output_pair *pairs, size_t n)
{
    size_t width = 0;

    for (size_t i = 0; i < n; i++)
        if (output_width(pairs[i].key) > width)
            width = output_width(pairs[i].key);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s:%*s%s\n", pairs[i].key, (int)(width - output_width(pairs[i].key) + 2), "",
                pairs[i].value ? pairs[i].value : "-");
}

void output_json(FILE *out, json_t *j)
{
    if (j)
        json_dumpf(j, out, JSON_INDENT(2) | JSON_ENCODE_ANY);
    else
        fputs("{}", out);
    fputc('\n', out);
}

static const struct {
    const char *code, *symbol;
} currency_symbols[] = {
    { "CNY", "¥" }, { "USD", "$" }, { "EUR", "€" }, { "GBP", "£" }, { "JPY", "¥" },
};

static char *money(int64_t micros, const char *currency, bool plus, char *buf)
{
    char amount[SL_MONEY_FORMAT_MAX];
    const char *sign = micros < 0 ? "-" : plus && micros > 0 ? "+" : "";
    /* format the magnitude so the sign goes before the symbol: -¥3.00 */
    uint64_t mag = micros < 0 ? (uint64_t)0 - (uint64_t)micros : (uint64_t)micros;

    if (mag > INT64_MAX) /* INT64_MIN: let the money module place the sign */
        return strcpy(buf, sl_money_format(micros, amount));
    sl_money_format((int64_t)mag, amount);
    if (!currency) {
        snprintf(buf, OUTPUT_MONEY_MAX, "%s%s", sign, amount);
        return buf;
    }
    for (size_t i = 0; i < ARRAY_SIZE(currency_symbols); i++)
        if (strcmp(currency, currency_symbols[i].code) == 0) {
            snprintf(buf, OUTPUT_MONEY_MAX, "%s%s%s", sign, currency_symbols[i].symbol, amount);
            return buf;
        }
    snprintf(buf, OUTPUT_MONEY_MAX, "%s%s %s", sign, amount, currency);
    return buf;
}

const char *output_size(int64_t bytes, char *buf)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int64_t whole = bytes > 0 ? bytes : 0, tenths = 0;
    size_t u = 0;

    while (whole >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        tenths = whole % 1024 * 10 / 1024;
        whole /= 1024;
        u++;
    }
    if (tenths && whole < 10)
        snprintf(buf, 32, "%" PRId64 ".%" PRId64 " %s", whole, tenths, units[u]);
    else
        snprintf(buf, 32, "%" PRId64 " %s", whole, units[u]);
    return buf;
}

char *output_money(int64_t micros, const char *currency, char *buf)
{
    return money(micros, currency, false, buf);
}

char *output_money_signed(int64_t micros, const char *currency, char *buf)
{
    return money(micros, currency, true, buf);
}

const char *output_time(const char *t, char *buf)
{
    if (!t || strlen(t) < 16)
        return t ? t : "-";
    snprintf(buf, 32, "%.10s %.5s", t, t + 11);
    return buf;
}

const char *jstr(json_t *j, const char *key)
{
    return json_string_value(json_object_get(j, key));
}

int64_t jint(json_t *j, const char *key)
{
    return (int64_t)json_integer_value(json_object_get(j, key));
}
