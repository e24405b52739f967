/* Structures shared by the BPF programs and user space (mirrored in bpf/events.py).
 *
 * Layout rules: natural alignment, explicit padding, no packed structs, fixed sizes;
 * every change here needs the same change in events.py (a test compares sizes).
 */
#ifndef KVSPREAD_EVENTS_H
#define KVSPREAD_EVENTS_H

/* Kernel types: real headers, or the BTF-generated tree (bpf/headers.py) whose
 * stand-ins for these headers all pull in the kernel's own BTF types. */
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>
#include <linux/fs.h>
#include <linux/fdtable.h>
#include <linux/net.h>
#include <linux/socket.h>
#include <linux/uio.h>
#include <net/sock.h>
#include <net/tcp_states.h>
#include <uapi/linux/in.h>

#define KV_NTOHS(x) ((u16)__builtin_bswap16((u16)(x)))

#ifndef CAPTURE_BYTES
#define CAPTURE_BYTES 512 /* bytes of a request / response start copied (power of two) */
#endif
#ifndef MAX_CONNS
#define MAX_CONNS 65536 /* LRU size of the tracked-connection table */
#endif
#ifndef MAX_MORE_CHUNKS
#define MAX_MORE_CHUNKS 2 /* extra reads of one request copied (headers split from body) */
#endif
#ifndef PENDING_REQS
#define PENDING_REQS 8192 /* LRU size of the requests kept in the kernel until their response ends */
#endif
#ifndef RTT_SLOTS
#define RTT_SLOTS 32 /* log2 buckets of smoothed RTT in microseconds */
#endif
#ifndef MAX_REQUESTS_PER_S
#define MAX_REQUESTS_PER_S 0 /* requests per second sent to user space; 0: no limit */
#endif
#ifndef TRACE_ALL_PORTS
#define TRACE_ALL_PORTS 1
#endif
#ifndef SELF_TGID
#define SELF_TGID 0
#endif

#define HTTP_EV_REQUEST 1      /* first bytes of a new request on the connection */
#define HTTP_EV_REQUEST_MORE 2 /* further bytes of the same request */
#define HTTP_EV_RESPONSE 3     /* first bytes of the response */
#define HTTP_EV_CLOSE 4        /* the server closed the connection */
#define HTTP_EV_END 5          /* the response ended at this write (or before an unsampled request) */
#define HTTP_EV_RESPONSE_DONE 6 /* first bytes of a response that this same write completes */
#define HTTP_EV_COMPLETE 7     /* one whole request: its first read's bytes, the response's
                                  times and status (the request's bytes were kept in
                                  pending_reqs until the response ended) */

#define CONN_IDLE 0
#define CONN_REQUEST 1
#define CONN_RESPONDING 2

/* How the current response ends (RFC 9112 section 6.3). */
#define FRAME_UNKNOWN 0 /* head not seen whole: ends at the next request or close */
#define FRAME_LENGTH 1  /* Content-Length (or no body: HEAD, 204, 304): ends at resp_expect bytes */
#define FRAME_CHUNKED 2 /* Transfer-Encoding: ends at the write that completes 0\r\n\r\n */
#define FRAME_CLOSE 3   /* neither: ends when the server closes the connection */

/* Server-sent events (Content-Type: text/event-stream): data events timed in the kernel. */
#define SSE_NONE 0
#define SSE_ON 1   /* counting data events */
#define SSE_LOST 2 /* bytes skipped in the middle of chunk framing: counts no longer exact */

#define RESP_F_EVENT_STREAM 1 /* Content-Type: text/event-stream */

#define CHUNK_SIZE 0 /* reading a chunk-size line */
#define CHUNK_DATA 1 /* inside a chunk's payload */
#define CHUNK_CRLF 2 /* after a payload, before the next size line */
#define CHUNK_END 3  /* last chunk seen (trailers follow) */

/* One accepted connection, keyed by (tgid << 32 | fd). */
struct conn_state {
    u64 id;            /* ktime of accept(): tells reuses of one fd apart */
    u64 sk;            /* struct sock * of the connection */
    u64 req_start_ns;
    u64 resp_start_ns;
    u64 last_write_ns; /* last response write: the end of the response so far */
    u64 resp_bytes;
    u64 req_bytes;
    u64 last_read_ns;  /* last read: the start of a pipelined request answered later */
    u64 resp_expect;   /* FRAME_LENGTH: response bytes (head + body) when complete */
    u64 tail;          /* FRAME_CHUNKED: last 8 response bytes written, oldest lowest */
    u32 requests;
    u16 port;          /* local (server) port, host order */
    u8 state;          /* CONN_* */
    u8 more;           /* HTTP_EV_REQUEST_MORE events sent for the current request */
    u8 unsampled;      /* current request over the budget: no events for it */
    u8 framing;        /* FRAME_* of the current response */
    u8 head_req;       /* the current request is HEAD: its response has no body */
    u8 sse;            /* SSE_* of the current response */
    u8 sse_chunk;      /* CHUNK_* position in the chunked framing around the events */
    u8 sse_line;       /* bytes of the current SSE line so far (saturates at 255) */
    u8 sse_data;       /* the current event has a data field */
    u8 sse_final;      /* the current event is data: [DONE] (not a token) */
    u16 head_len;      /* bytes of the response head in its first write */
    u16 status;        /* the current response's status code (a COMPLETE record's) */
    u32 chunk_left;    /* CHUNK_SIZE: the size so far; CHUNK_DATA: payload bytes left */
    u32 sse_events;    /* data events completed (data: [DONE] excluded) */
    u8 deferred;       /* the current request's REQUEST event is held in pending_reqs */
    u8 resp_flags;     /* RESP_F_* of the current response's head */
    u16 pad2;
    u64 req_end_ns;    /* last read before the response: the request's last byte */
    u64 sse_first_ns;  /* write that completed the first data event */
    u64 sse_last_ns;   /* write that completed the last data event so far */
};

struct http_event {
    u64 ts_ns;           /* bpf_ktime_get_ns() when the syscall returned */
    u64 conn_id;         /* conn_state.id */
    u64 prev_end_ns;     /* REQUEST / CLOSE / END: last write of the response ending;
                            RESPONSE(_DONE) after IDLE (pipelined): the request's last read */
    u64 prev_resp_bytes; /* bytes of that response */
    u64 req_end_ns;      /* RESPONSE*: last read before the response (the request's end);
                            events ending a response: that of the response ending */
    u64 sse_first_ns;    /* events ending an SSE response: first and last data event */
    u64 sse_last_ns;
    u32 tgid;
    u32 fd;
    u32 len;             /* bytes valid in data */
    u32 total;           /* bytes the syscall moved */
    u16 port;
    u8 kind;             /* HTTP_EV_* */
    u8 prev_state;       /* CONN_* before this event */
    u32 sse_events;      /* events ending an SSE response: its data events, else 0 */
    u64 resp_ns;         /* COMPLETE: the response's first write (ts_ns is the request's
                            first read, prev_end_ns the response's end) */
    u32 status;          /* COMPLETE: the response's status code */
    u32 flags;           /* COMPLETE: RESP_F_* */
    char data[CAPTURE_BYTES];
};

struct accept_event {
    u64 ts_ns;
    u64 conn_id;
    u64 queue_ns;        /* handshake complete -> accept() returned; 0 if not seen */
    u32 tgid;
    u32 fd;
    u32 backlog;         /* listener accept queue length when accept() was called */
    u32 max_backlog;
    u16 port;            /* listening port, host order */
    u16 peer_port;       /* host order */
    u16 family;          /* AF_INET or AF_INET6 */
    u16 pad;
    u8 peer_addr[16];    /* IPv4 in the first 4 bytes */
};

/* Aggregation key for TCP statistics: the owning process and its listening port. */
struct sock_key {
    u32 tgid;
    u16 port;
    u16 pad;
};

struct tcp_stats {
    u64 rtt_count;
    u64 rtt_sum_us;
    u64 retransmits;
    u64 rtt_slots[RTT_SLOTS]; /* slot i counts srtt in [2^i, 2^(i+1)) microseconds */
};

#endif
