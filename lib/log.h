/* Leveled logging to stderr. The macro checks the level before any argument
 * is evaluated or formatted (redis). */
#ifndef SL_LOG_H
#define SL_LOG_H

enum sl_log_level {
    SL_LOG_DEBUG,
    SL_LOG_INFO,
    SL_LOG_WARN,
    SL_LOG_ERROR
};

extern enum sl_log_level sl_log_threshold;

void sl_log_write(enum sl_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parses "debug", "info", "warn" or "error"; returns -1 on anything else. */
int sl_log_level_parse(const char *s);

#define sl_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) >= sl_log_threshold)                                                           \
            sl_log_write((level), __VA_ARGS__);                                                    \
    } while (0)

#define log_debug(...) sl_log(SL_LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  sl_log(SL_LOG_INFO, __VA_ARGS__)
#define log_warn(...)  sl_log(SL_LOG_WARN, __VA_ARGS__)
#define log_error(...) sl_log(SL_LOG_ERROR, __VA_ARGS__)

#endif
