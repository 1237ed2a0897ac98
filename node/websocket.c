#include "websocket.h"

#include <sodium.h>
#include <string.h>

static uint32_t rol(uint32_t v, int n)
{
    return (v << n) | (v >> (32 - n));
}

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];

    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)
            f = (b & c) | (~b & d), k = 0x5a827999;
        else if (i < 40)
            f = b ^ c ^ d, k = 0x6ed9eba1;
        else if (i < 60)
            f = (b & c) | (b & d) | (c & d), k = 0x8f1bbcdc;
        else
            f = b ^ c ^ d, k = 0xca62c1d6;
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d, d = c, c = rol(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

void ws_sha1(const void *data, size_t len, unsigned char out[20])
{
    uint32_t h[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0 };
    const unsigned char *p = data;
    unsigned char last[128] = { 0 };
    size_t full = len / 64 * 64, rest = len - full;
    uint64_t bits = (uint64_t)len * 8;

    for (size_t i = 0; i < full; i += 64)
        sha1_block(h, p + i);
    memcpy(last, p + full, rest);
    last[rest] = 0x80;
    size_t n = rest < 56 ? 64 : 128;
    for (int i = 0; i < 8; i++)
        last[n - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t i = 0; i < n; i += 64)
        sha1_block(h, last + i);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}

void ws_accept_key(const char *key, char out[WS_ACCEPT_SIZE])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char text[128];
    unsigned char digest[20];
    size_t n = strlen(key);

    if (n > sizeof(text) - sizeof(guid))
        n = sizeof(text) - sizeof(guid);
    memcpy(text, key, n);
    memcpy(text + n, guid, sizeof(guid));
    ws_sha1(text, n + sizeof(guid) - 1, digest);
    sodium_bin2base64(out, WS_ACCEPT_SIZE, digest, sizeof(digest), sodium_base64_VARIANT_ORIGINAL);
}

ssize_t ws_parse(unsigned char *buf, size_t len, size_t max, struct ws_frame *f)
{
    if (len < 2)
        return 0;
    int opcode = buf[0] & 0x0f;
    bool control = opcode & 0x08;
    uint64_t n = buf[1] & 0x7f;
    size_t at = 2;

    if ((buf[0] & 0x70) || !(buf[1] & 0x80))
        return -1; /* reserved bits (no extension was agreed), or not masked */
    if ((opcode > WS_OP_BINARY && opcode < WS_OP_CLOSE) || opcode > WS_OP_PONG)
        return -1;
    if (control && (!(buf[0] & 0x80) || n > 125))
        return -1;
    if (n == 126) {
        if (len < 4)
            return 0;
        n = (uint64_t)buf[2] << 8 | buf[3];
        at = 4;
    } else if (n == 127) {
        if (len < 10)
            return 0;
        n = 0;
        for (int i = 0; i < 8; i++)
            n = n << 8 | buf[2 + i];
        at = 10;
    }
    if (n > max)
        return -1;
    if (len < at + 4 + n)
        return 0;
    const unsigned char *mask = buf + at;
    unsigned char *payload = buf + at + 4;
    for (size_t i = 0; i < n; i++)
        payload[i] ^= mask[i % 4];
    *f = (struct ws_frame){
        .fin = buf[0] & 0x80, .opcode = opcode, .payload = payload, .len = (size_t)n
    };
    return (ssize_t)(at + 4 + n);
}

size_t ws_header(unsigned char hdr[WS_HEADER_MAX], int opcode, size_t len)
{
    hdr[0] = (unsigned char)(0x80 | opcode);
    if (len < 126) {
        hdr[1] = (unsigned char)len;
        return 2;
    }
    if (len <= 0xffff) {
        hdr[1] = 126;
        hdr[2] = (unsigned char)(len >> 8);
        hdr[3] = (unsigned char)len;
        return 4;
    }
    hdr[1] = 127;
    for (int i = 0; i < 8; i++)
        hdr[9 - i] = (unsigned char)((uint64_t)len >> (8 * i));
    return 10;
}
