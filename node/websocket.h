/* RFC 6455 websockets, the server's half, as the terminal server needs it
 * (node/terminal.h): the handshake's accept key and the frames. No
 * extensions, no subprotocols: nginx passes neither to the agent. */
#ifndef SL_NODE_WEBSOCKET_H
#define SL_NODE_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WS_OP_CONTINUATION 0x0
#define WS_OP_TEXT         0x1
#define WS_OP_BINARY       0x2
#define WS_OP_CLOSE        0x8
#define WS_OP_PING         0x9
#define WS_OP_PONG         0xa

#define WS_ACCEPT_SIZE 29 /* base64 of a SHA-1 + NUL */
#define WS_HEADER_MAX  10 /* a server frame's header: no mask */

/* SHA-1 of data into out (20 bytes): the handshake needs it, nothing else. */
void ws_sha1(const void *data, size_t len, unsigned char out[20]);

/* Sec-WebSocket-Accept for a client's Sec-WebSocket-Key. */
void ws_accept_key(const char *key, char out[WS_ACCEPT_SIZE]);

struct ws_frame {
    bool fin;
    int opcode;
    unsigned char *payload; /* inside the parsed buffer, unmasked */
    size_t len;
};

/* Parses the client frame at the start of buf (len bytes) and unmasks its
 * payload in place. Returns the frame's size in bytes, 0 when buf holds
 * only part of it, -1 when it breaks the protocol: not masked (a client's
 * frames are), reserved bits set, an unknown opcode, a control frame
 * fragmented or over 125 bytes, a payload over max. */
ssize_t ws_parse(unsigned char *buf, size_t len, size_t max, struct ws_frame *f);

/* Writes the header of an unfragmented server frame (opcode, len bytes of
 * payload) into hdr; returns its size. */
size_t ws_header(unsigned char hdr[WS_HEADER_MAX], int opcode, size_t len);

#endif
