/* node/websocket.c: the handshake's key (RFC 6455's own example), SHA-1
 * against known digests, and client frames: masked, lengths of each size,
 * partial input, and what breaks the protocol. */
#include "harness.h"

#include "../../node/websocket.h"

#include <stdio.h>

static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

TEST(websocket_sha1)
{
    unsigned char d[20];
    char h[41];
    ws_sha1("abc", 3, d);
    hex(d, 20, h);
    CHECK_STR(h, "a9993e364706816aba3e25717850c26c9cd0d89d");
    ws_sha1("", 0, d);
    hex(d, 20, h);
    CHECK_STR(h, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ws_sha1(two, strlen(two), d);
    hex(d, 20, h);
    CHECK_STR(h, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

TEST(websocket_accept_key)
{
    char accept[WS_ACCEPT_SIZE];
    ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", accept);
    CHECK_STR(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

/* A masked client frame of payload into buf; returns its size. */
static size_t client_frame(unsigned char *buf, int opcode, bool fin, const void *payload,
                           size_t len)
{
    static const unsigned char mask[4] = { 0x37, 0xfa, 0x21, 0x3d };
    size_t at = 2;
    buf[0] = (unsigned char)((fin ? 0x80 : 0) | opcode);
    if (len < 126) {
        buf[1] = (unsigned char)(0x80 | len);
    } else if (len <= 0xffff) {
        buf[1] = 0x80 | 126;
        buf[2] = (unsigned char)(len >> 8);
        buf[3] = (unsigned char)len;
        at = 4;
    } else {
        buf[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++)
            buf[9 - i] = (unsigned char)((uint64_t)len >> (8 * i));
        at = 10;
    }
    memcpy(buf + at, mask, 4);
    for (size_t i = 0; i < len; i++)
        buf[at + 4 + i] = ((const unsigned char *)payload)[i] ^ mask[i % 4];
    return at + 4 + len;
}

TEST(websocket_frames)
{
    static unsigned char buf[70000 + 14], payload[70000];
    struct ws_frame f;
    size_t sizes[] = { 0, 5, 125, 126, 65535, 65536, 70000 };

    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (unsigned char)(i * 7);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = client_frame(buf, WS_OP_BINARY, true, payload, sizes[s]);
        /* every prefix is "more please" */
        CHECK_EQ_INT(ws_parse(buf, 1, sizeof(payload), &f), 0);
        CHECK_EQ_INT(ws_parse(buf, n - 1, sizeof(payload), &f), 0);
        CHECK_EQ_INT(ws_parse(buf, n, sizeof(payload), &f), (long long)n);
        CHECK(f.fin && f.opcode == WS_OP_BINARY && f.len == sizes[s]);
        CHECK(memcmp(f.payload, payload, sizes[s]) == 0);
        if (sizes[s] > 100) /* over the limit: refused, not buffered */
            CHECK_EQ_INT(ws_parse(buf, n, 100, &f), -1);
    }
    size_t n = client_frame(buf, WS_OP_TEXT, true, "{}", 2);
    buf[1] &= 0x7f; /* unmasked */
    CHECK_EQ_INT(ws_parse(buf, n, 100, &f), -1);
    client_frame(buf, WS_OP_TEXT, true, "{}", 2);
    buf[0] |= 0x40; /* RSV1: no extension was agreed */
    CHECK_EQ_INT(ws_parse(buf, n, 100, &f), -1);
    client_frame(buf, 0x3, true, "x", 1); /* reserved opcode */
    CHECK_EQ_INT(ws_parse(buf, 7, 100, &f), -1);
    n = client_frame(buf, WS_OP_PING, false, "x", 1); /* a fragmented control frame */
    CHECK_EQ_INT(ws_parse(buf, n, 100, &f), -1);
    n = client_frame(buf, WS_OP_CLOSE, true, payload, 126); /* a control frame over 125 */
    CHECK_EQ_INT(ws_parse(buf, n, 1000, &f), -1);

    unsigned char hdr[WS_HEADER_MAX];
    CHECK_EQ_INT(ws_header(hdr, WS_OP_BINARY, 5), 2);
    CHECK(hdr[0] == 0x82 && hdr[1] == 5);
    CHECK_EQ_INT(ws_header(hdr, WS_OP_BINARY, 300), 4);
    CHECK(hdr[1] == 126 && hdr[2] == 1 && hdr[3] == 44);
    CHECK_EQ_INT(ws_header(hdr, WS_OP_CLOSE, 70000), 10);
    CHECK(hdr[0] == 0x88 && hdr[1] == 127 && hdr[7] == 1 && hdr[8] == 0x11 && hdr[9] == 0x70);
}

/* Whatever bytes come, the parser stays inside them: a frame it takes is no
 * longer than the input, and its payload lies within it. Run under ASan
 * (SAN=1) it also proves no read past the end. */
TEST(websocket_random_input)
{
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    unsigned char buf[300];
    struct ws_frame f;

    for (int round = 0; round < 20000; round++) {
        size_t len = 0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        len = (size_t)(x % sizeof(buf));
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = (unsigned char)x;
        }
        if (len > 1 && round % 2)
            buf[1] = (unsigned char)((buf[1] & 0x7f) % 126 | 0x80); /* often a plausible length */
        ssize_t n = ws_parse(buf, len, 200, &f);
        if (n > 0 && !CHECK((size_t)n <= len && f.payload >= buf && f.payload + f.len <= buf + len))
            return;
    }
}
