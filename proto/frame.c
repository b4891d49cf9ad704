/* frame.c — encode/decode the binary socket protocol (docs/protocol.md).
 *
 * DESIGN
 * A decoder is a cursor (rd_t) over [p, p + len): every read first asks
 * need(n), which compares n with the bytes that remain (no pointer
 * arithmetic that could overflow), so a hostile length or count can never
 * move the cursor outside the payload. Counts are compared with limits
 * before they are used as loop bounds; products of dims are computed with
 * overflow checks against the remaining bytes. Errors name the field and
 * its payload offset, e.g. "INFER inputs[1] \"weights\" dims: need 8 bytes
 * at offset 52, 4 remain".
 *
 * An encoder (wr_t) appends metadata to the caller's meta buffer and cuts a
 * new segment whenever bulk data (tensor arrays, clip times, blobs) is
 * referenced, so big buffers are never copied (see frame.h).
 */
#include "frame.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- names */

const char *df_wire_enc_name(int enc)
{
    switch (enc) {
    case DF_WIRE_F32: return "float32";
    case DF_WIRE_F16: return "float16";
    case DF_WIRE_I16: return "int16";
    default: return "?";
    }
}

int df_wire_enc_parse(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "float32") || !strcmp(s, "FP32") || !strcmp(s, "f32")) return DF_WIRE_F32;
    if (!strcmp(s, "float16") || !strcmp(s, "FP16") || !strcmp(s, "f16")) return DF_WIRE_F16;
    if (!strcmp(s, "int16") || !strcmp(s, "INT16") || !strcmp(s, "i16")) return DF_WIRE_I16;
    return -1;
}

size_t df_wire_enc_size(int enc)
{
    switch (enc) {
    case DF_WIRE_F32: return 4;
    case DF_WIRE_F16: case DF_WIRE_I16: return 2;
    default: return 0;
    }
}

const char *df_frame_type_name(int type)
{
    switch (type) {
    case DF_FT_PING: return "PING";
    case DF_FT_PONG: return "PONG";
    case DF_FT_INFER: return "INFER";
    case DF_FT_RESULT: return "RESULT";
    case DF_FT_ERROR: return "ERROR";
    case DF_FT_INFO: return "INFO";
    case DF_FT_INFO_RESULT: return "INFO_RESULT";
    case DF_FT_AUTH: return "AUTH";
    case DF_FT_AUTH_OK: return "AUTH_OK";
    default: return "?";
    }
}

static int known_type(int t)
{
    return strcmp(df_frame_type_name(t), "?") != 0;
}

/* ------------------------------------------------------------- reader */

typedef struct rd {
    const uint8_t *p;
    size_t len, off;
    const char *what; /* frame type, for messages */
    df_error_t *err;
    /* the tensor being read, for messages: field f of it is named
     * `sect[idx] "tname" f` (`sect[idx] f` without tname); sect NULL: f
     * alone. Formatted only when a message is written: a snprintf per field
     * was ~10 % of the socket front's CPU on a small model (session 5). */
    const char *sect, *tname;
    int idx;
    char fbuf[DF_NAME_MAX + 48];
} rd_t;

/* the name of field f for a message (only called on an error path) */
static const char *fld(rd_t *r, const char *f)
{
    if (!r->sect) return f;
    if (r->tname)
        snprintf(r->fbuf, sizeof r->fbuf, "%s[%d] \"%s\" %s", r->sect, r->idx, r->tname, f);
    else
        snprintf(r->fbuf, sizeof r->fbuf, "%s[%d]%s%s", r->sect, r->idx, f[0] ? " " : "", f);
    return r->fbuf;
}

/* the tensor (or list entry) the next reads belong to */
static void at(rd_t *r, const char *sect, int idx, const char *tname)
{
    r->sect = sect;
    r->idx = idx;
    r->tname = tname;
}

static int need(rd_t *r, size_t n, const char *field)
{
    if (n > r->len - r->off)
        return df_error_set(r->err, DF_EFORMAT,
                            "%s %s: need %zu bytes at offset %zu, %zu remain",
                            r->what, fld(r, field), n, r->off, r->len - r->off);
    return DF_OK;
}

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint64_t ld64(const uint8_t *p)
{
    return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static int r8(rd_t *r, uint8_t *v, const char *f)
{
    int rc = need(r, 1, f);
    if (rc) return rc;
    *v = r->p[r->off++];
    return DF_OK;
}
static int r16(rd_t *r, uint16_t *v, const char *f)
{
    int rc = need(r, 2, f);
    if (rc) return rc;
    *v = ld16(r->p + r->off);
    r->off += 2;
    return DF_OK;
}
static int r32(rd_t *r, uint32_t *v, const char *f)
{
    int rc = need(r, 4, f);
    if (rc) return rc;
    *v = ld32(r->p + r->off);
    r->off += 4;
    return DF_OK;
}
static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A string into dst[DF_NAME_MAX]; min 0 or 1. */
static int rstr(rd_t *r, char *dst, size_t min, const char *f)
{
    uint16_t n;
    int rc = r16(r, &n, f);
    if (rc) return rc;
    if (n >= DF_NAME_MAX)
        return df_error_set(r->err, DF_ELIMIT, "%s %s: name of %u bytes (max %d)",
                            r->what, fld(r, f), n, DF_NAME_MAX - 1);
    if (n < min)
        return df_error_set(r->err, DF_EFORMAT, "%s %s: empty name", r->what, fld(r, f));
    if ((rc = need(r, n, f))) return rc;
    if (memchr(r->p + r->off, 0, n))
        return df_error_set(r->err, DF_EFORMAT, "%s %s: NUL byte in name",
                            r->what, fld(r, f));
    memcpy(dst, r->p + r->off, n);
    dst[n] = 0;
    r->off += n;
    return DF_OK;
}

static int rpad8(rd_t *r, const char *f)
{
    size_t pad = (8 - (r->off & 7)) & 7;
    int rc = need(r, pad, f);
    if (rc) return rc;
    for (size_t i = 0; i < pad; i++)
        if (r->p[r->off + i])
            return df_error_set(r->err, DF_EFORMAT,
                                "%s %s: non-zero padding byte at offset %zu",
                                r->what, fld(r, f), r->off + i);
    r->off += pad;
    return DF_OK;
}

static int rend(rd_t *r)
{
    if (r->off != r->len)
        return df_error_set(r->err, DF_EFORMAT,
                            "%s: %zu trailing bytes after offset %zu",
                            r->what, r->len - r->off, r->off);
    return DF_OK;
}

static int check_aligned(const void *p, const char *what, df_error_t *err)
{
    if ((uintptr_t)p & 7)
        return df_error_set(err, DF_EINVAL, "%s: payload buffer is not 8-byte aligned", what);
    return DF_OK;
}

/* ndim of a tensor, then (rdims_values) its dims: the element count is
 * checked against the payload size before nbytes is computed. */
static int rndim(rd_t *r, df_frame_tensor_t *t, const char *f)
{
    uint8_t nd;
    int rc;
    if ((rc = r8(r, &nd, f))) return rc;
    if (nd < 1 || nd > DF_MAX_DIMS)
        return df_error_set(r->err, DF_ELIMIT, "%s %s: ndim %u (must be 1..%d)",
                            r->what, fld(r, f), nd, DF_MAX_DIMS);
    t->ndim = nd;
    return DF_OK;
}

static int rdims_values(rd_t *r, df_frame_tensor_t *t, uint32_t n_poses,
                        size_t elem, const char *f)
{
    int rc;
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        if ((rc = r32(r, &t->dims[d], f))) return rc;
    }
    if (t->dims[0] != n_poses)
        return df_error_set(r->err, DF_EINVAL,
                            "%s %s: leading dimension %u != n_poses %u",
                            r->what, fld(r, f), t->dims[0], n_poses);
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] == 0)
            return df_error_set(r->err, DF_EINVAL, "%s %s: dims[%d] is 0",
                                r->what, fld(r, f), d);
        /* count * dims <= remaining / elem, without overflow */
        if (count > (r->len / elem) / t->dims[d])
            return df_error_set(r->err, DF_EFORMAT,
                                "%s %s: %d dims describe more data than the "
                                "%zu-byte payload holds",
                                r->what, fld(r, f), t->ndim, r->len);
        count *= t->dims[d];
    }
    t->nbytes = (size_t)count * elem;
    return DF_OK;
}

/* ------------------------------------------------------------- header */

int df_frame_header_decode(const void *buf, size_t len, uint32_t max_payload,
                           df_frame_header_t *h, int *fatal, df_error_t *err)
{
    const uint8_t *p = buf;
    int dummy;
    if (!fatal) fatal = &dummy;
    *fatal = 1;
    if (len < DF_FRAME_HEADER_SIZE)
        return df_error_set(err, DF_EFORMAT, "frame header: %zu of %d bytes",
                            len, DF_FRAME_HEADER_SIZE);
    h->magic = ld32(p);
    h->version = ld16(p + 4);
    h->type = ld16(p + 6);
    h->flags = ld32(p + 8);
    h->id = ld64(p + 12);
    h->length = ld32(p + 20);
    if (h->magic != DF_FRAME_MAGIC)
        return df_error_set(err, DF_EFORMAT,
                            "frame header: bad magic 0x%08x (expected 0x%08x \"DFRM\")",
                            h->magic, DF_FRAME_MAGIC);
    if (h->version != DF_FRAME_VERSION)
        return df_error_set(err, DF_EUNSUPPORTED,
                            "frame header: protocol version %u (this server speaks %d)",
                            h->version, DF_FRAME_VERSION);
    if (h->length > max_payload)
        return df_error_set(err, DF_ELIMIT,
                            "frame header: payload of %u bytes exceeds the limit of %u",
                            h->length, max_payload);
    *fatal = 0;
    if (h->flags)
        return df_error_set(err, DF_EUNSUPPORTED,
                            "frame header: unknown flags 0x%x", h->flags);
    if (!known_type(h->type))
        return df_error_set(err, DF_EUNSUPPORTED,
                            "frame header: unknown frame type 0x%04x", h->type);
    return DF_OK;
}

/* ------------------------------------------------------------- INFER */

int df_frame_decode_infer(const void *payload, size_t len,
                          df_frame_infer_t *out, df_error_t *err)
{
    rd_t r = {payload, len, 0, "INFER", err};
    uint8_t iflags;
    uint16_t ni, no;
    int rc;

    if ((rc = check_aligned(payload, "INFER", err))) return rc;
    memset(out, 0, sizeof *out);
    if ((rc = r32(&r, &out->n_poses, "n_poses"))) return rc;
    if (out->n_poses < 1 || out->n_poses > DF_FRAME_MAX_POSES)
        return df_error_set(err, DF_ELIMIT, "INFER n_poses: %u (must be 1..%d)",
                            out->n_poses, DF_FRAME_MAX_POSES);
    if ((rc = r32(&r, &out->pose_flags, "pose_flags"))) return rc;
    if (out->pose_flags != 0 && out->pose_flags != DF_POSE_LBS &&
        out->pose_flags != DF_POSE_DQS)
        return df_error_set(err, DF_EUNSUPPORTED,
                            "INFER pose_flags: 0x%x (0, 1 = lbs or 2 = dqs)",
                            out->pose_flags);
    if ((rc = r8(&r, &out->encoding, "encoding"))) return rc;
    if (out->encoding >= DF_WIRE_ENC_COUNT)
        return df_error_set(err, DF_EUNSUPPORTED,
                            "INFER encoding: %u (0 float32, 1 float16, 2 int16)",
                            out->encoding);
    if ((rc = r8(&r, &iflags, "flags"))) return rc;
    if (iflags & ~DF_INFER_SEQUENCE)
        return df_error_set(err, DF_EFORMAT,
                            "INFER flags byte is 0x%02x: only bit 0 (a sequence block) is defined",
                            iflags);
    if ((rc = r16(&r, &ni, "n_inputs"))) return rc;
    if ((rc = r16(&r, &no, "n_outputs"))) return rc;
    if (ni > DF_MAX_IO)
        return df_error_set(err, DF_ELIMIT, "INFER n_inputs: %u (max %d)", ni, DF_MAX_IO);
    if (no > DF_MAX_IO)
        return df_error_set(err, DF_ELIMIT, "INFER n_outputs: %u (max %d)", no, DF_MAX_IO);
    if ((rc = rstr(&r, out->character, 1, "character"))) return rc;
    if ((rc = rstr(&r, out->clip, 0, "clip"))) return rc;
    if (out->clip[0]) {
        if ((rc = rpad8(&r, "clip times padding"))) return rc;
        if ((rc = need(&r, (size_t)out->n_poses * 8, "clip times"))) return rc;
        out->times = (const double *)(r.p + r.off);
        for (uint32_t b = 0; b < out->n_poses; b++)
            if (!isfinite(out->times[b]))
                return df_error_set(err, DF_EINVAL,
                                    "INFER clip times[%u] is not finite", b);
        r.off += (size_t)out->n_poses * 8;
    }
    if (iflags & DF_INFER_SEQUENCE) {
        uint8_t kind;
        out->seq = 1;
        if ((rc = r8(&r, &out->seq_flags, "sequence flags"))) return rc;
        if (out->seq_flags & ~(DF_SEQ_START | DF_SEQ_END))
            return df_error_set(err, DF_EFORMAT,
                                "INFER sequence flags 0x%02x (1 = start, 2 = end)", out->seq_flags);
        if ((rc = r8(&r, &kind, "sequence id kind"))) return rc;
        if (kind == 0) {
            if ((rc = need(&r, 8, "sequence id"))) return rc;
            out->seq_id = ld64(r.p + r.off);
            r.off += 8;
            if (!out->seq_id)
                return df_error_set(err, DF_EINVAL, "INFER sequence id 0 (0 means no sequence: "
                                                    "clear the flag instead)");
        } else if (kind == 1) {
            if ((rc = rstr(&r, out->seq_id_str, 1, "sequence id"))) return rc;
        } else {
            return df_error_set(err, DF_EFORMAT,
                                "INFER sequence id kind %u (0 = u64, 1 = string)", kind);
        }
    }
    out->n_outputs = no;
    for (int o = 0; o < no; o++) {
        at(&r, "outputs", o, NULL);
        if ((rc = rstr(&r, out->outputs[o], 1, ""))) return rc;
        for (int k = 0; k < o; k++)
            if (!strcmp(out->outputs[k], out->outputs[o]))
                return df_error_set(err, DF_EINVAL,
                                    "INFER outputs: \"%s\" requested twice",
                                    out->outputs[o]);
    }
    out->n_inputs = ni;
    for (int i = 0; i < ni; i++) {
        df_frame_tensor_t *t = &out->inputs[i];
        at(&r, "inputs", i, NULL);
        if ((rc = rstr(&r, t->name, 1, "name"))) return rc;
        for (int k = 0; k < i; k++)
            if (!strcmp(out->inputs[k].name, t->name))
                return df_error_set(err, DF_EINVAL,
                                    "INFER inputs: \"%s\" given twice", t->name);
        at(&r, "inputs", i, t->name);
        if ((rc = r8(&r, &t->type, "dtype"))) return rc;
        if (t->type != DF_DT_F32)
            return df_error_set(err, DF_EUNSUPPORTED,
                                "INFER input \"%s\": dtype code %u (only 0 = F32)",
                                t->name, t->type);
        if ((rc = rndim(&r, t, "ndim"))) return rc;
        if ((rc = rdims_values(&r, t, out->n_poses, 4, "dims"))) return rc;
        if ((rc = rpad8(&r, "padding"))) return rc;
        if ((rc = need(&r, t->nbytes, "data"))) return rc;
        t->data = r.p + r.off;
        const float *v = t->data;
        size_t n = t->nbytes / 4;
        for (size_t k = 0; k < n; k++)
            if (!isfinite(v[k]))
                return df_error_set(err, DF_EINVAL,
                                    "INFER input \"%s\": element %zu is not finite",
                                    t->name, k);
        r.off += t->nbytes;
    }
    at(&r, NULL, 0, NULL);
    return rend(&r);
}

/* ------------------------------------------------------------- RESULT */

int df_frame_decode_result(const void *payload, size_t len,
                           df_frame_result_t *out, df_error_t *err)
{
    rd_t r = {payload, len, 0, "RESULT", err};
    uint16_t no, reserved;
    int rc;

    if ((rc = check_aligned(payload, "RESULT", err))) return rc;
    memset(out, 0, sizeof *out);
    if ((rc = r32(&r, &out->n_poses, "n_poses"))) return rc;
    if (out->n_poses < 1 || out->n_poses > DF_FRAME_MAX_POSES)
        return df_error_set(err, DF_ELIMIT, "RESULT n_poses: %u (must be 1..%d)",
                            out->n_poses, DF_FRAME_MAX_POSES);
    if ((rc = r16(&r, &no, "n_outputs"))) return rc;
    if (no > DF_MAX_IO)
        return df_error_set(err, DF_ELIMIT, "RESULT n_outputs: %u (max %d)", no, DF_MAX_IO);
    if ((rc = r16(&r, &reserved, "reserved"))) return rc;
    if (reserved)
        return df_error_set(err, DF_EFORMAT, "RESULT reserved field is %u, not 0", reserved);
    out->n_outputs = no;
    for (int o = 0; o < no; o++) {
        df_frame_tensor_t *t = &out->outputs[o];
        at(&r, "outputs", o, NULL);
        if ((rc = rstr(&r, t->name, 1, "name"))) return rc;
        at(&r, "outputs", o, t->name);
        if ((rc = r8(&r, &t->type, "encoding"))) return rc;
        if (t->type >= DF_WIRE_ENC_COUNT)
            return df_error_set(err, DF_EUNSUPPORTED,
                                "RESULT output \"%s\": encoding %u", t->name, t->type);
        if ((rc = rndim(&r, t, "ndim"))) return rc;
        if ((rc = rdims_values(&r, t, out->n_poses, df_wire_enc_size(t->type), "dims")))
            return rc;
        if (t->type == DF_WIRE_I16) {
            uint32_t u;
            for (int k = 0; k < 6; k++) {
                if ((rc = r32(&r, &u, k < 3 ? "scale" : "offset"))) return rc;
                float v = f32_of(u);
                if (!isfinite(v) || (k < 3 && !(v > 0)))
                    return df_error_set(err, DF_EINVAL,
                                        "RESULT output \"%s\": %s[%d] = %g "
                                        "(must be finite%s)",
                                        t->name, k < 3 ? "scale" : "offset",
                                        k % 3, v, k < 3 ? " and > 0" : "");
                if (k < 3) t->scale[k] = v;
                else t->offset[k - 3] = v;
            }
        }
        if ((rc = rpad8(&r, "padding"))) return rc;
        if ((rc = need(&r, t->nbytes, "data"))) return rc;
        t->data = r.p + r.off;
        r.off += t->nbytes;
    }
    at(&r, NULL, 0, NULL);
    return rend(&r);
}

/* ------------------------------------------------------ small payloads */

int df_frame_decode_error(const void *payload, size_t len,
                          df_frame_errmsg_t *out, df_error_t *err)
{
    rd_t r = {payload, len, 0, "ERROR", err};
    uint32_t code;
    uint16_t n;
    int rc;
    if ((rc = r32(&r, &code, "code"))) return rc;
    out->code = (int32_t)code;
    if (out->code >= 0 || out->code < -1000)
        return df_error_set(err, DF_EFORMAT, "ERROR code %d is not a DF_E* code",
                            out->code);
    if ((rc = r16(&r, &n, "message length"))) return rc;
    if (n > DF_FRAME_MAX_MSG)
        return df_error_set(err, DF_ELIMIT, "ERROR message of %u bytes (max %d)",
                            n, DF_FRAME_MAX_MSG);
    if ((rc = need(&r, n, "message"))) return rc;
    memcpy(out->msg, r.p + r.off, n);
    out->msg[n] = 0;
    r.off += n;
    return rend(&r);
}

int df_frame_decode_info(const void *payload, size_t len,
                         char name[DF_NAME_MAX], df_error_t *err)
{
    rd_t r = {payload, len, 0, "INFO", err};
    int rc = rstr(&r, name, 0, "name");
    if (rc) return rc;
    return rend(&r);
}

int df_frame_decode_auth(const void *payload, size_t len,
                         char token[DF_FRAME_MAX_TOKEN + 1], df_error_t *err)
{
    rd_t r = {payload, len, 0, "AUTH", err};
    uint16_t n;
    int rc;
    token[0] = 0;
    if ((rc = r16(&r, &n, "token length"))) return rc;
    if (n < 1 || n > DF_FRAME_MAX_TOKEN)
        return df_error_set(err, n ? DF_ELIMIT : DF_EFORMAT, "AUTH token of %u bytes (1..%d)",
                            n, DF_FRAME_MAX_TOKEN);
    if ((rc = need(&r, n, "token"))) return rc;
    if (memchr(r.p + r.off, 0, n))
        return df_error_set(err, DF_EFORMAT, "AUTH token: NUL byte");
    memcpy(token, r.p + r.off, n);
    token[n] = 0;
    r.off += n;
    return rend(&r);
}

int df_frame_decode_info_result(const void *payload, size_t len,
                                const uint8_t **json, size_t *json_len,
                                df_error_t *err)
{
    rd_t r = {payload, len, 0, "INFO_RESULT", err};
    uint32_t n;
    int rc;
    if ((rc = r32(&r, &n, "json length"))) return rc;
    if (n > DF_FRAME_MAX_INFO_JSON)
        return df_error_set(err, DF_ELIMIT, "INFO_RESULT json of %u bytes", n);
    if ((rc = need(&r, n, "json"))) return rc;
    *json = r.p + r.off;
    *json_len = n;
    r.off += n;
    return rend(&r);
}

int df_frame_decode(const void *buf, size_t len, uint32_t max_payload,
                    df_frame_t *out, size_t *consumed, df_error_t *err)
{
    const uint8_t *p = buf;
    int rc = df_frame_header_decode(buf, len, max_payload, &out->h, NULL, err);
    if (rc) return rc;
    if (out->h.length > len - DF_FRAME_HEADER_SIZE)
        return df_error_set(err, DF_EFORMAT,
                            "%s frame: payload of %u bytes, %zu present",
                            df_frame_type_name(out->h.type), out->h.length,
                            len - DF_FRAME_HEADER_SIZE);
    if (consumed) *consumed = DF_FRAME_HEADER_SIZE + (size_t)out->h.length;
    const uint8_t *pl = p + DF_FRAME_HEADER_SIZE;
    size_t n = out->h.length;
    switch (out->h.type) {
    case DF_FT_INFER: return df_frame_decode_infer(pl, n, &out->u.infer, err);
    case DF_FT_RESULT: return df_frame_decode_result(pl, n, &out->u.result, err);
    case DF_FT_ERROR: return df_frame_decode_error(pl, n, &out->u.error, err);
    case DF_FT_INFO: return df_frame_decode_info(pl, n, out->u.name, err);
    case DF_FT_AUTH: return df_frame_decode_auth(pl, n, out->u.token, err);
    case DF_FT_AUTH_OK:
        if (n)
            return df_error_set(err, DF_EFORMAT, "AUTH_OK payload of %zu bytes (must be empty)", n);
        out->u.blob.data = pl;
        out->u.blob.len = 0;
        return DF_OK;
    case DF_FT_INFO_RESULT:
        return df_frame_decode_info_result(pl, n, &out->u.blob.data,
                                           &out->u.blob.len, err);
    case DF_FT_PING:
    case DF_FT_PONG:
        if (n > DF_FRAME_MAX_PING)
            return df_error_set(err, DF_ELIMIT, "%s payload of %zu bytes (max %d)",
                                df_frame_type_name(out->h.type), n, DF_FRAME_MAX_PING);
        out->u.blob.data = pl;
        out->u.blob.len = n;
        return DF_OK;
    }
    return df_error_set(err, DF_EUNSUPPORTED, "frame type 0x%04x", out->h.type);
}

/* ------------------------------------------------------------- writer */

typedef struct wr {
    df_frame_out_t *o;
    size_t seg_start; /* start in meta of the open metadata segment */
    size_t payload;   /* payload bytes so far (for pad8 and length) */
    df_error_t *err;
    int rc;
} wr_t;

static void wbytes(wr_t *w, const void *src, size_t n)
{
    if (w->rc) return;
    if (n > w->o->meta_cap - w->o->meta_len) {
        w->rc = df_error_set(w->err, DF_ELIMIT, "frame metadata exceeds %zu bytes",
                             w->o->meta_cap);
        return;
    }
    memcpy(w->o->meta + w->o->meta_len, src, n);
    w->o->meta_len += n;
    w->payload += n;
}
static void w8(wr_t *w, uint8_t v) { wbytes(w, &v, 1); }
static void w16(wr_t *w, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    wbytes(w, b, 2);
}
static void w32(wr_t *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    wbytes(w, b, 4);
}
static void w64(wr_t *w, uint64_t v)
{
    w32(w, (uint32_t)v);
    w32(w, (uint32_t)(v >> 32));
}
static void wf32(wr_t *w, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    w32(w, u);
}
static void wpad8(wr_t *w)
{
    static const uint8_t z[8];
    wbytes(w, z, (8 - (w->payload & 7)) & 7);
}
static void wstr(wr_t *w, const char *s, size_t min, const char *field)
{
    if (w->rc) return;
    size_t n = s ? strnlen(s, DF_NAME_MAX) : 0;
    if (n >= DF_NAME_MAX || n < min) {
        w->rc = df_error_set(w->err, n < min ? DF_EINVAL : DF_ELIMIT,
                             "%s: name must be %zu..%d bytes", field, min,
                             DF_NAME_MAX - 1);
        return;
    }
    w16(w, (uint16_t)n);
    wbytes(w, s, n);
}

static void wseg(wr_t *w, const void *base, size_t len)
{
    df_frame_out_t *o = w->o;
    if (w->rc) return;
    if (o->n_segs + 2 > o->max_segs) {
        w->rc = df_error_set(w->err, DF_ELIMIT, "frame needs more than %d segments",
                             o->max_segs);
        return;
    }
    if (o->meta_len > w->seg_start)
        o->segs[o->n_segs++] = (df_frame_seg_t){o->meta + w->seg_start,
                                                o->meta_len - w->seg_start};
    w->seg_start = o->meta_len;
    if (len) o->segs[o->n_segs++] = (df_frame_seg_t){base, len};
    w->payload += len;
}

static void wbegin(wr_t *w, df_frame_out_t *o, int type, uint64_t id, df_error_t *err)
{
    w->o = o;
    w->err = err;
    w->rc = 0;
    o->meta_len = 0;
    o->n_segs = 0;
    o->total = 0;
    w->seg_start = 0;
    if (o->meta_cap < DF_FRAME_HEADER_SIZE || o->max_segs < 2) {
        w->rc = df_error_set(err, DF_EINVAL, "frame out buffers too small");
        return;
    }
    w->payload = 0;
    w32(w, DF_FRAME_MAGIC);
    w16(w, DF_FRAME_VERSION);
    w16(w, (uint16_t)type);
    w32(w, 0);
    w64(w, id);
    w32(w, 0); /* length, patched in wend */
    w->payload = 0;
}

static int wend(wr_t *w)
{
    df_frame_out_t *o = w->o;
    if (w->rc) return w->rc;
    wseg(w, NULL, 0);
    if (w->rc) return w->rc;
    if (w->payload > UINT32_MAX)
        return df_error_set(w->err, DF_ELIMIT, "frame payload of %zu bytes", w->payload);
    uint32_t L = (uint32_t)w->payload;
    uint8_t *lp = o->meta + 20;
    lp[0] = (uint8_t)L; lp[1] = (uint8_t)(L >> 8);
    lp[2] = (uint8_t)(L >> 16); lp[3] = (uint8_t)(L >> 24);
    o->total = DF_FRAME_HEADER_SIZE + w->payload;
    return DF_OK;
}

void df_frame_buf_init(df_frame_buf_t *b)
{
    b->o.meta = b->meta;
    b->o.meta_cap = sizeof b->meta;
    b->o.segs = b->segs;
    b->o.max_segs = DF_FRAME_MAX_SEGS;
    b->o.meta_len = 0;
    b->o.n_segs = 0;
    b->o.total = 0;
}

void df_frame_flatten(const df_frame_out_t *o, void *dst)
{
    uint8_t *d = dst;
    for (int i = 0; i < o->n_segs; i++) {
        memcpy(d, o->segs[i].base, o->segs[i].len);
        d += o->segs[i].len;
    }
}

static int check_tensor(wr_t *w, const char *what, const df_frame_tensor_t *t,
                        uint32_t n_poses, size_t elem)
{
    if (w->rc) return w->rc;
    if (t->ndim < 1 || t->ndim > DF_MAX_DIMS)
        return w->rc = df_error_set(w->err, DF_ELIMIT, "%s \"%s\": ndim %d",
                                    what, t->name, t->ndim);
    if (t->dims[0] != n_poses)
        return w->rc = df_error_set(w->err, DF_EINVAL,
                                    "%s \"%s\": dims[0] = %u != n_poses %u", what,
                                    t->name, t->dims[0], n_poses);
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] == 0 || count > (UINT32_MAX / elem) / t->dims[d])
            return w->rc = df_error_set(w->err, DF_ELIMIT, "%s \"%s\": bad dims",
                                        what, t->name);
        count *= t->dims[d];
    }
    if (count * elem != t->nbytes || !t->data)
        return w->rc = df_error_set(w->err, DF_EINVAL,
                                    "%s \"%s\": nbytes %zu != %llu from dims", what,
                                    t->name, t->nbytes,
                                    (unsigned long long)(count * elem));
    return DF_OK;
}

int df_frame_encode_infer(uint64_t id, const df_frame_infer_t *q,
                          df_frame_out_t *o, df_error_t *err)
{
    wr_t w;
    wbegin(&w, o, DF_FT_INFER, id, err);
    if (q->n_poses < 1 || q->n_poses > DF_FRAME_MAX_POSES)
        return df_error_set(err, DF_ELIMIT, "INFER n_poses %u (1..%d)", q->n_poses,
                            DF_FRAME_MAX_POSES);
    if (q->n_inputs < 0 || q->n_inputs > DF_MAX_IO || q->n_outputs < 0 ||
        q->n_outputs > DF_MAX_IO)
        return df_error_set(err, DF_ELIMIT, "INFER: too many inputs or outputs");
    if (q->encoding >= DF_WIRE_ENC_COUNT)
        return df_error_set(err, DF_EINVAL, "INFER: encoding %u", q->encoding);
    w32(&w, q->n_poses);
    w32(&w, q->pose_flags);
    w8(&w, q->encoding);
    w8(&w, q->seq ? DF_INFER_SEQUENCE : 0);
    w16(&w, (uint16_t)q->n_inputs);
    w16(&w, (uint16_t)q->n_outputs);
    wstr(&w, q->character, 1, "INFER character");
    wstr(&w, q->clip, 0, "INFER clip");
    if (q->clip[0]) {
        if (!q->times) return df_error_set(err, DF_EINVAL, "INFER: clip without times");
        wpad8(&w);
        wseg(&w, q->times, (size_t)q->n_poses * 8);
    }
    if (q->seq) {
        if (q->seq_flags & ~(DF_SEQ_START | DF_SEQ_END))
            return df_error_set(err, DF_EINVAL, "INFER: sequence flags 0x%x", q->seq_flags);
        if (!q->seq_id_str[0] && !q->seq_id)
            return df_error_set(err, DF_EINVAL, "INFER: sequence id 0 (or \"\")");
        w8(&w, q->seq_flags);
        w8(&w, q->seq_id_str[0] ? 1 : 0);
        if (q->seq_id_str[0]) wstr(&w, q->seq_id_str, 1, "INFER sequence id");
        else w64(&w, q->seq_id);
    }
    for (int i = 0; i < q->n_outputs; i++) wstr(&w, q->outputs[i], 1, "INFER output");
    for (int i = 0; i < q->n_inputs; i++) {
        const df_frame_tensor_t *t = &q->inputs[i];
        wstr(&w, t->name, 1, "INFER input");
        if (check_tensor(&w, "INFER input", t, q->n_poses, 4)) break;
        w8(&w, DF_DT_F32);
        w8(&w, (uint8_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) w32(&w, t->dims[d]);
        wpad8(&w);
        wseg(&w, t->data, t->nbytes);
    }
    return wend(&w);
}

int df_frame_encode_result(uint64_t id, const df_frame_result_t *r,
                           df_frame_out_t *o, df_error_t *err)
{
    wr_t w;
    wbegin(&w, o, DF_FT_RESULT, id, err);
    if (r->n_poses < 1 || r->n_poses > DF_FRAME_MAX_POSES || r->n_outputs < 0 ||
        r->n_outputs > DF_MAX_IO)
        return df_error_set(err, DF_ELIMIT, "RESULT: n_poses %u, n_outputs %d",
                            r->n_poses, r->n_outputs);
    w32(&w, r->n_poses);
    w16(&w, (uint16_t)r->n_outputs);
    w16(&w, 0);
    for (int i = 0; i < r->n_outputs; i++) {
        const df_frame_tensor_t *t = &r->outputs[i];
        if (t->type >= DF_WIRE_ENC_COUNT)
            return df_error_set(err, DF_EINVAL, "RESULT output \"%s\": encoding %u",
                                t->name, t->type);
        wstr(&w, t->name, 1, "RESULT output");
        if (check_tensor(&w, "RESULT output", t, r->n_poses, df_wire_enc_size(t->type)))
            break;
        w8(&w, t->type);
        w8(&w, (uint8_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) w32(&w, t->dims[d]);
        if (t->type == DF_WIRE_I16) {
            for (int k = 0; k < 3; k++) wf32(&w, t->scale[k]);
            for (int k = 0; k < 3; k++) wf32(&w, t->offset[k]);
        }
        wpad8(&w);
        wseg(&w, t->data, t->nbytes);
    }
    return wend(&w);
}

int df_frame_encode_error(uint64_t id, int32_t code, const char *msg,
                          df_frame_out_t *o, df_error_t *err)
{
    wr_t w;
    size_t n = msg ? strnlen(msg, DF_FRAME_MAX_MSG) : 0;
    wbegin(&w, o, DF_FT_ERROR, id, err);
    if (code >= 0) code = DF_EINTERNAL;
    w32(&w, (uint32_t)code);
    w16(&w, (uint16_t)n);
    wbytes(&w, msg, n);
    return wend(&w);
}

int df_frame_encode_blob(uint64_t id, int type, const void *data, size_t len,
                         df_frame_out_t *o, df_error_t *err)
{
    wr_t w;
    wbegin(&w, o, type, id, err);
    if (type == DF_FT_PING || type == DF_FT_PONG) {
        if (len > DF_FRAME_MAX_PING)
            return df_error_set(err, DF_ELIMIT, "PING payload of %zu bytes", len);
    } else if (type == DF_FT_INFO_RESULT) {
        if (len > DF_FRAME_MAX_INFO_JSON)
            return df_error_set(err, DF_ELIMIT, "INFO_RESULT of %zu bytes", len);
        w32(&w, (uint32_t)len);
    } else if (type == DF_FT_AUTH_OK) {
        if (len) return df_error_set(err, DF_EINVAL, "AUTH_OK carries no payload");
    } else {
        return df_error_set(err, DF_EINVAL, "blob frame type 0x%x", type);
    }
    wseg(&w, data, len);
    return wend(&w);
}

int df_frame_encode_info(uint64_t id, const char *name, df_frame_out_t *o,
                         df_error_t *err)
{
    wr_t w;
    wbegin(&w, o, DF_FT_INFO, id, err);
    wstr(&w, name ? name : "", 0, "INFO name");
    return wend(&w);
}

int df_frame_encode_auth(uint64_t id, const char *token, df_frame_out_t *o,
                         df_error_t *err)
{
    wr_t w;
    size_t n = token ? strlen(token) : 0;
    if (n < 1 || n > DF_FRAME_MAX_TOKEN)
        return df_error_set(err, DF_EINVAL, "AUTH token of %zu bytes (1..%d)", n,
                            DF_FRAME_MAX_TOKEN);
    wbegin(&w, o, DF_FT_AUTH, id, err);
    w16(&w, (uint16_t)n);
    wbytes(&w, token, n);
    return wend(&w);
}
