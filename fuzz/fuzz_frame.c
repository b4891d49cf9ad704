/* fuzz_frame.c — libFuzzer driver for the binary socket codec (proto/frame.c).
 *
 * The input is treated as a byte stream the way server/sock.c reads it:
 * frames one after another, header first, then the payload by type, with
 * the payload copied into an 8-byte aligned buffer of exactly its size (so
 * ASan catches any read past it). Every frame that decodes is re-encoded
 * and decoded again, which must succeed and give the same bytes.
 * Seeds: tests/data/golden_frames (convert with xxd -r -p after stripping
 * the comments), e.g.
 *   clang -g -O1 -fsanitize=fuzzer,address -D_GNU_SOURCE -Icore -Iproto \
 *     fuzz/fuzz_frame.c proto/frame.c core/base/error.c core/base/dtype.c -lm -o build/fuzz_frame
 */
#include "frame.h"

#include <stdlib.h>
#include <string.h>

static void reencode(const df_frame_t *f, const uint8_t *orig, size_t n)
{
    df_frame_buf_t fb;
    df_error_t err;
    int rc;
    df_frame_buf_init(&fb);
    switch (f->h.type) {
    case DF_FT_INFER: rc = df_frame_encode_infer(f->h.id, &f->u.infer, &fb.o, &err); break;
    case DF_FT_RESULT: rc = df_frame_encode_result(f->h.id, &f->u.result, &fb.o, &err); break;
    case DF_FT_ERROR: rc = df_frame_encode_error(f->h.id, f->u.error.code, f->u.error.msg, &fb.o, &err); break;
    case DF_FT_INFO: rc = df_frame_encode_info(f->h.id, f->u.name, &fb.o, &err); break;
    case DF_FT_AUTH: rc = df_frame_encode_auth(f->h.id, f->u.token, &fb.o, &err); break;
    default: rc = df_frame_encode_blob(f->h.id, f->h.type, f->u.blob.data, f->u.blob.len, &fb.o, &err); break;
    }
    if (rc != DF_OK) abort(); /* whatever decodes must encode */
    /* an ERROR message with a NUL inside decodes but re-encodes shorter */
    if (f->h.type == DF_FT_ERROR && strlen(f->u.error.msg) != n - 30) return;
    if (fb.o.total != n) abort();
    uint8_t *b = malloc(n);
    df_frame_flatten(&fb.o, b);
    if (memcmp(b, orig, n)) abort();
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (size - off >= DF_FRAME_HEADER_SIZE) {
        df_frame_header_t h;
        df_error_t err;
        int fatal = 0;
        int rc = df_frame_header_decode(data + off, size - off, 1u << 20, &h, &fatal, &err);
        if (rc && fatal) return 0;
        if (h.length > size - off - DF_FRAME_HEADER_SIZE) return 0;
        size_t n = DF_FRAME_HEADER_SIZE + h.length;
        uint8_t *frame = malloc(n);
        memcpy(frame, data + off, n);
        df_frame_t f;
        if (rc == DF_OK && df_frame_decode(frame, n, 1u << 20, &f, NULL, &err) == DF_OK)
            reencode(&f, frame, n);
        free(frame);
        off += n;
    }
    return 0;
}
