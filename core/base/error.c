/* error.c — the error space of libdfcore.
 *
 * DESIGN
 * One integer code space (DF_OK, negative DF_E*) shared by every module, and
 * a df_error_t that carries the code plus a message naming the thing at
 * fault. df_error_set() returns the code so call sites read
 * `return df_error_set(err, DF_EFORMAT, "tensor '%s': ...", name);`.
 * DF_ASSERT stays on in release builds and reports through df__assert_fail.
 */
#include "df.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *df_strerror(int code)
{
    switch (code) {
    case DF_OK: return "ok";
    case DF_EINVAL: return "invalid argument";
    case DF_ENOMEM: return "out of memory";
    case DF_EIO: return "i/o error";
    case DF_EFORMAT: return "malformed data";
    case DF_ELIMIT: return "limit exceeded";
    case DF_ENOTFOUND: return "not found";
    case DF_EUNSUPPORTED: return "unsupported";
    case DF_EOVERLOAD: return "overloaded";
    case DF_ETIMEDOUT: return "timed out";
    case DF_ESHUTDOWN: return "shutting down";
    case DF_EINTERNAL: return "internal error";
    case DF_ENUMERIC: return "numerical failure";
    case DF_EAUTH: return "unauthorized";
    default: return "unknown error";
    }
}

int df_error_set(df_error_t *err, int code, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void df__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "deformd: assertion failed: %s (%s:%d)\n", expr, file,
            line);
    fflush(stderr);
    abort();
}
