// deformd_route.js — nginx stream (njs) preread: the routing key of a
// deformd socket connection is the character named by its first frame.
//
// DESIGN
// The binary protocol (docs/protocol.md) carries the character inside the
// frame, so nginx's stream proxy cannot hash on it by itself. js_preread
// holds the connection until the first frame's header and character name
// have arrived, then sets $deformd_key and lets the proxy pick a daemon by
// consistent hash; every later frame of the connection goes to that same
// daemon. Frame layout: 24-byte header (u32 magic "DFRM", u16 version,
// u16 type, u32 flags, u64 id, u32 length), then the payload. INFER
// (type 0x0010): the character is a string (u16 length + bytes) at payload
// offset 14; INFO (0x0020): at payload offset 0 (empty: the server). An
// AUTH frame (0x0030, a client of a daemon with auth = all presents its
// token first) is skipped: the key is the next frame's. Any other first
// frame (PING, an INFO about the server, bytes that are not a frame) gives
// an empty key, which nginx spreads round-robin; the daemon answers
// malformed bytes itself.
var HDR = 24, MAGIC = 0x4D524644, T_INFER = 0x0010, T_INFO = 0x0020, T_AUTH = 0x0030;

function key_of(b) {
    // returns the key, "" when there is none, or null when more bytes are needed
    var o = 0;
    for (;;) {
        if (b.length >= o + 4 && b.readUInt32LE(o) !== MAGIC) return "";
        if (b.length < o + HDR) return null;
        if (b.readUInt16LE(o + 6) !== T_AUTH) break;
        o += HDR + b.readUInt32LE(o + 20); // a token is at most 257 bytes
        if (o > 1024) return "";
    }
    var type = b.readUInt16LE(o + 6), at;
    if (type === T_INFER) at = o + HDR + 14;
    else if (type === T_INFO) at = o + HDR;
    else return "";
    if (b.readUInt32LE(o + 20) < at - o - HDR + 2) return "";
    if (b.length < at + 2) return null;
    var n = b.readUInt16LE(at);
    if (n === 0 || n > 63) return "";
    if (b.length < at + 2 + n) return null;
    return b.toString('utf8', at + 2, at + 2 + n);
}

function preread(s) {
    // in the preread phase each call sees every byte received so far
    s.on('upstream', function (data, flags) {
        var k = key_of(data);
        if (k === null && !flags.last && data.length < 4096) return;
        s.variables.deformd_key = k === null ? "" : k;
        s.off('upstream');
        s.done();
    });
}

export default { preread };
