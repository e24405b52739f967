/* http_latency: HTTP/1.1 server-side request timing on tracked connections.
 *
 * On a tracked connection (see conn_track.c) the first read after idle or after a
 * response starts a request (HTTP_EV_REQUEST, with the first CAPTURE_BYTES bytes); the
 * first write after a request starts the response (HTTP_EV_RESPONSE, with the status
 * line and head). The head says how the response ends (RFC 9112 6.3): Content-Length
 * bytes written, the chunked terminator written, or close; the write that completes it
 * sends HTTP_EV_END (HTTP_EV_RESPONSE_DONE when the first write is also the last), so a
 * request is reported when its response is complete, not when the next one starts.
 * The usual case costs one record instead: a request read on an idle connection is held
 * in pending_reqs, and when its response's head says how it ends, the write that ends it
 * sends HTTP_EV_COMPLETE (the request's bytes with the response's times and status); in
 * every other case the held REQUEST event is sent as it is and the sequence above
 * follows. Other writes only move last_write_ns and resp_bytes: streamed (SSE) responses
 * cost no events. A response written when no request is pending but one was read before
 * (pipelining) starts the next request at that last read.
 *
 * Tracepoints: syscalls:sys_{enter,exit}_{read,recvfrom,readv,write,sendto,writev};
 * optional: recvmsg, sendmsg, sendfile64 (HAVE_SYS_*). With ARGS_AT_EXIT (x86-64, 5.15+)
 * only the exit tracepoints get a program: the arguments are read from the saved
 * registers there. Kernel needs: syscall tracepoints (CONFIG_FTRACE_SYSCALLS), BPF ring
 * buffer (5.8+) or perf buffer, bounded loops (5.3+: the response head is scanned once
 * per response, up to CAPTURE_BYTES).
 */

#define IO_BUF 0  /* buf is the user buffer */
#define IO_IOV 1  /* buf is a struct iovec array */
#define IO_NONE 2 /* no user bytes (sendfile): counted, not read */

struct io_args {
    u64 key;   /* conns key */
    u64 buf;   /* user buffer, or struct iovec * when iov is IO_IOV */
    u32 iov;   /* IO_* */
    u32 pad;
};

/* The last 7 bytes of a chunked body, "\r\n0\r\n\r\n" (last chunk, no trailers), as the
 * top 7 bytes of conn_state.tail read little-endian. */
#define CHUNKED_END 0x0a0d0a0d300a0dULL
#define MAX_IOVS 8 /* iovecs of one writev/sendmsg followed for the chunked terminator */

#ifndef ARGS_AT_EXIT
BPF_HASH(active_reads, u64, struct io_args, 16384);
BPF_HASH(active_writes, u64, struct io_args, 16384);
#endif
BPF_PERCPU_ARRAY(http_scratch, struct http_event, 1);
/* The REQUEST event of a connection's current request, kept here instead of sent when the
 * request starts on an idle connection: the write that ends its response sends it once, as
 * one COMPLETE record (request bytes, response times and status), so user space handles
 * one record per request instead of two. Anything else (a further read of the request, a
 * response whose end is not known from its head, pipelining) sends it as the REQUEST event
 * it is, and the old sequence follows. Keyed like conns; an entry evicted before its
 * response ended loses the bytes, and the request is counted in unsampled_hist instead. */
BPF_TABLE("lru_hash", u64, struct http_event, pending_reqs, PENDING_REQS);

/* A one-second window of requests handed to user space: above MAX_REQUESTS_PER_S the
 * request is timed by nobody (and counted), which bounds the collector's CPU however busy
 * the server is. Updates race across CPUs; the budget is approximate by design. */
struct request_budget {
    u64 window_ns;
    u64 count;
};
BPF_ARRAY(request_budget, struct request_budget, 1);

/* Requests over the budget still land in a histogram, aggregated here per (process,
 * port): count, sum and log2 slots of the duration in microseconds (first read to last
 * write; the tcp_stats layout, retransmits unused). Every request is counted at any rate. */
BPF_TABLE("lru_hash", struct sock_key, struct tcp_stats, unsampled_hist, 4096);
BPF_ARRAY(unsampled_zero, struct tcp_stats, 1);

/* One request of (tgid, port) from start_ns to end_ns into unsampled_hist. */
static __always_inline void hist_add(u32 tgid, u16 port, u64 start_ns, u64 end_ns)
{
    struct sock_key k = {.tgid = tgid, .port = port};
    struct tcp_stats *h = unsampled_hist.lookup(&k);
    if (!h) {
        u32 zero = 0;
        struct tcp_stats *init = unsampled_zero.lookup(&zero);
        if (!init)
            return;
        unsampled_hist.update(&k, init);
        h = unsampled_hist.lookup(&k);
        if (!h)
            return;
    }
    u64 us = end_ns > start_ns ? (end_ns - start_ns) / 1000 : 0;
    u32 slot = us ? bpf_log2l(us) : 0;
    if (slot >= RTT_SLOTS)
        slot = RTT_SLOTS - 1;
    __sync_fetch_and_add(&h->rtt_count, 1);
    __sync_fetch_and_add(&h->rtt_sum_us, us);
    __sync_fetch_and_add(&h->rtt_slots[slot], 1);
}

static __always_inline void count_unsampled(struct conn_state *c, u32 tgid)
{
    if (!c->unsampled || c->state != CONN_RESPONDING || c->last_write_ns < c->req_start_ns)
        return;
    hist_add(tgid, c->port, c->req_start_ns, c->last_write_ns);
}

static __always_inline int within_budget(u64 now)
{
#if MAX_REQUESTS_PER_S > 0
    u32 zero = 0;
    struct request_budget *b = request_budget.lookup(&zero);
    if (!b)
        return 1;
    if (now - b->window_ns > 1000000000ULL) {
        b->window_ns = now;
        b->count = 0;
    }
    return __sync_fetch_and_add(&b->count, 1) < MAX_REQUESTS_PER_S;
#else
    return 1;
#endif
}

#ifdef ARGS_AT_EXIT
/* x86-64, 5.15+ (bpf_task_pt_regs): a syscall's arguments are still in its saved user
 * registers when it returns (the kernel writes only the return value, to ax), so the exit
 * program alone does the work: no enter program runs, no per-syscall hash update and
 * delete. An untracked process's syscall costs one register read and one lookup. */
static __always_inline struct conn_state *exit_conn(u64 pid_tgid, struct io_args *a, u32 iov,
                                                    int is_write, int is_msg)
{
    struct pt_regs *regs =
        (struct pt_regs *)bpf_task_pt_regs((struct task_struct *)bpf_get_current_task_btf());
    /* plain loads: the helper returns a BTF pointer the verifier lets programs read
     * directly (a fault reads 0), no bpf_probe_read_kernel call per syscall */
    u64 fd = regs->di;
    a->key = (pid_tgid & 0xffffffff00000000ULL) | (u32)fd;
    struct conn_state *c = conns.lookup(&a->key);
    if (!c)
        return NULL;
    a->iov = iov;
    a->buf = iov == IO_NONE ? 0 : regs->si;
    if (is_msg) { /* sendmsg / recvmsg: the bytes are in msg->msg_iov */
        const struct user_msghdr *msg = (const struct user_msghdr *)a->buf;
        a->buf = 0;
        bpf_probe_read_user(&a->buf, sizeof(a->buf), &msg->msg_iov);
    }
    return c;
}
#else
/* Elsewhere the enter program keeps the arguments for the exit program, per thread. */
static __always_inline int io_enter(u32 fd, const void *buf, u32 iov, int is_write)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u64 key = (pid_tgid & 0xffffffff00000000ULL) | fd;
    struct conn_state *c = conns.lookup(&key);
    if (!c)
        return 0;
    struct io_args a = {.key = key, .buf = (u64)buf, .iov = iov};
    if (is_write)
        active_writes.update(&pid_tgid, &a);
    else
        active_reads.update(&pid_tgid, &a);
    return 0;
}

/* sendmsg / recvmsg: the bytes are in msg->msg_iov. */
static __always_inline int msg_enter(u32 fd, const struct user_msghdr *msg, int is_write)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u64 key = (pid_tgid & 0xffffffff00000000ULL) | fd;
    if (!conns.lookup(&key))
        return 0;
    struct iovec *iov = NULL;
    bpf_probe_read_user(&iov, sizeof(iov), &msg->msg_iov);
    return io_enter(fd, iov, IO_IOV, is_write);
}

/* The arguments io_enter kept for this thread's syscall (taken out), and its connection. */
static __always_inline struct conn_state *exit_conn(u64 pid_tgid, struct io_args *a, u32 iov,
                                                    int is_write, int is_msg)
{
    struct io_args *ap =
        is_write ? active_writes.lookup(&pid_tgid) : active_reads.lookup(&pid_tgid);
    if (!ap)
        return NULL;
    *a = *ap;
    if (is_write)
        active_writes.delete(&pid_tgid);
    else
        active_reads.delete(&pid_tgid);
    return conns.lookup(&a->key);
}
#endif

/* Copy up to CAPTURE_BYTES of the user buffer into ev->data; returns bytes copied. */
static __always_inline u32 capture(struct http_event *ev, struct io_args *a, long ret)
{
    const void *src = (const void *)a->buf;
    u64 avail = (u64)ret;
    if (a->iov == IO_NONE)
        return 0;
    if (a->iov == IO_IOV) {
        struct iovec v = {};
        bpf_probe_read_user(&v, sizeof(v), (const void *)a->buf);
        src = v.iov_base;
        if (v.iov_len < avail)
            avail = v.iov_len;
    }
    u32 n = avail > CAPTURE_BYTES ? CAPTURE_BYTES : (u32)avail;
    /* re-check the bound where the verifier can see it */
    n &= (2 * CAPTURE_BYTES - 1);
    if (n > CAPTURE_BYTES)
        n = CAPTURE_BYTES;
    if (n == 0)
        return 0;
    if (bpf_probe_read_user(ev->data, n, src) != 0)
        return 0;
    return n;
}

static __always_inline int is_upper(char c) { return c >= 'A' && c <= 'Z'; }

static __always_inline int looks_like_request(struct http_event *ev)
{
    if (ev->len < 4)
        return 0;
    if (!is_upper(ev->data[0]) || !is_upper(ev->data[1]) || !is_upper(ev->data[2]))
        return 0;
    /* HTTP/2 prior knowledge preface "PRI * HTTP/2.0" is not HTTP/1.1 */
    if (ev->data[0] == 'P' && ev->data[1] == 'R' && ev->data[2] == 'I' && ev->data[3] == ' ')
        return 0;
    return 1;
}

static __always_inline void fill_event(struct http_event *ev, struct conn_state *c, u64 pid_tgid,
                                       u64 key, u64 now, long ret, u8 kind)
{
    ev->ts_ns = now;
    ev->conn_id = c->id;
    ev->tgid = pid_tgid >> 32;
    ev->fd = (u32)key;
    ev->total = (u32)ret;
    ev->port = c->port;
    ev->kind = kind;
    ev->prev_state = c->state;
    ev->prev_end_ns = 0;
    ev->prev_resp_bytes = 0;
    ev->req_end_ns = c->req_end_ns;
    ev->sse_first_ns = c->sse_first_ns;
    ev->sse_last_ns = c->sse_last_ns;
    ev->sse_events = c->sse == SSE_ON ? c->sse_events : 0;
    ev->resp_ns = 0;
    ev->status = 0;
    ev->flags = 0;
}

/* The slot in pending_reqs for `key`'s next request (created on first use); NULL when
 * the map cannot give one (the request's event is then sent at once, as before). */
static __always_inline struct http_event *request_slot(u64 key)
{
    struct http_event *ev = pending_reqs.lookup(&key);
    if (ev)
        return ev;
    u32 zero = 0;
    struct http_event *init = http_scratch.lookup(&zero); /* any bytes: all are rewritten */
    return init ? pending_reqs.lookup_or_try_init(&key, init) : NULL;
}

/* Send the held REQUEST event as it is: what follows needs the old event sequence.
 * Returns 0 when sent; 1 when its bytes were evicted: the request then goes on unsampled
 * (no events, its duration counted in unsampled_hist when it ends), and the caller sends
 * nothing for it either. */
static __always_inline int send_deferred_request(void *ctx, struct conn_state *c, u64 key)
{
    c->deferred = 0;
    struct http_event *ev = pending_reqs.lookup(&key);
    if (ev && ev->conn_id == c->id) {
        emit_http(ctx, ev);
        return 0;
    }
    count_lost(3);
    c->unsampled = 1;
    c->more = MAX_MORE_CHUNKS;
    return 1;
}

/* The held request's response ended at end_ns after resp_bytes: send the COMPLETE record
 * (the held REQUEST event with the response's fields filled in). */
static __always_inline void send_complete(void *ctx, struct conn_state *c, u64 key, u64 end_ns,
                                          u64 resp_bytes)
{
    c->deferred = 0;
    struct http_event *ev = pending_reqs.lookup(&key);
    if (!ev || ev->conn_id != c->id) {
        hist_add(key >> 32, c->port, c->req_start_ns, end_ns); /* bytes evicted: counted */
        count_lost(3);
        return;
    }
    ev->kind = HTTP_EV_COMPLETE;
    ev->prev_end_ns = end_ns;
    ev->prev_resp_bytes = resp_bytes;
    ev->resp_ns = c->resp_start_ns;
    ev->req_end_ns = c->req_end_ns;
    ev->sse_first_ns = c->sse_first_ns;
    ev->sse_last_ns = c->sse_last_ns;
    ev->sse_events = c->sse == SSE_ON ? c->sse_events : 0;
    ev->status = c->status;
    ev->flags = c->resp_flags;
    emit_http(ctx, ev);
}

/* A read of `ret` bytes on tracked connection `c`. */
static __always_inline int read_io(void *ctx, struct conn_state *c, struct io_args *ap,
                                   u64 pid_tgid, long ret)
{
    struct io_args a = *ap;
    u64 now = bpf_ktime_get_ns();
    u8 kind = HTTP_EV_REQUEST;
    c->last_read_ns = now;
    if (c->state == CONN_REQUEST) {
        c->req_bytes += ret;
        if (c->more >= MAX_MORE_CHUNKS)
            return 0;
        kind = HTTP_EV_REQUEST_MORE;
    }
    u32 zero = 0;
    /* a request on an idle connection is captured into its pending_reqs slot and held */
    int hold = kind == HTTP_EV_REQUEST && c->state == CONN_IDLE && !c->deferred;
    struct http_event *ev = hold ? request_slot(a.key) : NULL;
    if (!ev) {
        hold = 0;
        ev = http_scratch.lookup(&zero);
    }
    if (!ev)
        return 0;
    ev->len = capture(ev, &a, ret);
    if (kind == HTTP_EV_REQUEST && !looks_like_request(ev)) {
        if (c->requests == 0) { /* not HTTP/1.x (TLS, HTTP/2, ...): stop tracking */
            conns.delete(&a.key);
            pending_reqs.delete(&a.key);
        }
        return 0;
    }
    if (c->deferred) {
        if (c->state == CONN_REQUEST) {
            if (send_deferred_request(ctx, c, a.key)) /* REQUEST_MORE follows it */
                return 0;
        } else { /* a new request while responding: the held one ends at its last write */
            send_complete(ctx, c, a.key, c->last_write_ns, c->resp_bytes);
            c->state = CONN_IDLE;
        }
    }
    if (kind == HTTP_EV_REQUEST)
        count_unsampled(c, pid_tgid >> 32); /* the unsampled request before this one */
    if (kind == HTTP_EV_REQUEST && !within_budget(now)) {
        count_lost(2);
        if (c->state == CONN_RESPONDING && !c->unsampled) {
            /* the sampled request before this one ends here: say so */
            fill_event(ev, c, pid_tgid, a.key, now, ret, HTTP_EV_END);
            ev->len = 0;
            ev->prev_end_ns = c->last_write_ns;
            ev->prev_resp_bytes = c->resp_bytes;
            emit_http_header(ctx, ev);
        }
        c->state = CONN_REQUEST;
        c->unsampled = 1;
        c->req_start_ns = now;
        c->more = MAX_MORE_CHUNKS;
        c->requests += 1;
        return 0;
    }
    if (kind == HTTP_EV_REQUEST)
        c->unsampled = 0;
    fill_event(ev, c, pid_tgid, a.key, now, ret, kind);
    if (kind == HTTP_EV_REQUEST) {
        if (c->state == CONN_RESPONDING) {
            ev->prev_end_ns = c->last_write_ns;
            ev->prev_resp_bytes = c->resp_bytes;
        }
        c->state = CONN_REQUEST;
        c->req_start_ns = now;
        c->resp_start_ns = 0;
        c->resp_bytes = 0;
        c->req_bytes = ret;
        c->more = 0;
        c->requests += 1;
        c->framing = FRAME_UNKNOWN;
        c->head_req = ev->data[0] == 'H' && ev->data[1] == 'E' && ev->data[2] == 'A' &&
                      ev->data[3] == 'D';
    } else {
        c->more += 1;
    }
    if (hold) {
        c->deferred = 1; /* sent with its response's end (send_complete) */
        return 0;
    }
    emit_http(ctx, ev);
    return 0;
}

#define KV_LC(p, k) (ev->data[((p) + (k)) & (CAPTURE_BYTES - 1)] | 0x20)

/* Non-zero unless the header line at `p` starts with the lowercase `name` (with its
 * colon). OR-ing 0x20 folds letters to lowercase and leaves '-' and ':' as they are;
 * the differences are OR-ed without branches (one verifier path per line). */
#define KV_HDR_DIFF(p, name, diff)                                         \
    do {                                                                   \
        const char _n[] = name;                                            \
        diff = 0;                                                          \
        _Pragma("unroll") for (int _k = 0; _k < (int)sizeof(_n) - 1; _k++) \
            diff |= KV_LC(p, _k) ^ _n[_k];                                 \
    } while (0)

/* The captured length, read afresh from map memory each time it is compared: a copy in
 * a register would carry a range the verifier narrows per iteration (no pruning). */
#define KV_LEN(ev) (*(volatile u32 *)&(ev)->len)

/* Scratch of parse_head, kept in map memory on purpose: the verifier does not track map
 * contents, so its state does not multiply with what the head held. */
#define MAX_HEAD_LINES 32 /* header lines looked at (power of two) */
struct head_parse {
    u64 cl;       /* Content-Length */
    u32 head;     /* bytes of the head, blank line included; 0: not in the capture */
    u32 nlines;
    u16 line[MAX_HEAD_LINES]; /* where each header line starts */
    u8 have_cl;
    u8 chunked;
    u8 sse;
    u8 pad[5];
};
BPF_PERCPU_ARRAY(head_scratch, struct head_parse, 1);

/* Read the response head captured in ev->data: how the response ends, its length when
 * Content-Length says it, and whether it is an SSE stream. Two bounded passes: the line
 * starts up to the blank line ending the head, then the few header names looked for at
 * each. A head longer than the capture stays FRAME_UNKNOWN (the response then ends at
 * the next request or close). */
static __always_inline void parse_head(struct http_event *ev, struct conn_state *c)
{
    c->framing = FRAME_UNKNOWN;
    c->resp_expect = 0;
    c->resp_flags = 0;
    u32 zero = 0;
    volatile struct head_parse *h = head_scratch.lookup(&zero);
    if (!h)
        return;
    if (ev->len < 16 || ev->len > CAPTURE_BYTES)
        return;
    h->cl = 0;
    h->head = 0;
    h->nlines = 0;
    h->have_cl = 0;
    h->chunked = 0;
    h->sse = 0;
    for (u32 i = 12; i < CAPTURE_BYTES - 1; i++) {
        if (i >= KV_LEN(ev))
            break;
        if (ev->data[i & (CAPTURE_BYTES - 1)] != '\n')
            continue;
        u32 j = i + 1;
        char a = ev->data[j & (CAPTURE_BYTES - 1)];
        if (a == '\r' || a == '\n') {
            h->head = j + (a == '\r' ? 2 : 1);
            break;
        }
        u32 k = h->nlines;
        if (k < MAX_HEAD_LINES) {
            h->line[k & (MAX_HEAD_LINES - 1)] = j;
            h->nlines = k + 1;
        }
    }
    u32 head = h->head;
    if (head == 0 || head > ev->len)
        return;
    for (u32 l = 0; l < MAX_HEAD_LINES; l++) {
        if (l >= h->nlines)
            break;
        u32 j = h->line[l & (MAX_HEAD_LINES - 1)] & (CAPTURE_BYTES - 1);
        char a = KV_LC(j, 0);
        u32 diff = 1;
        if (a == 't') {
            /* chunked is the only transfer coding a response may end with and keep the
             * connection (RFC 9112 6.3 rule 4); others are rare and end at close */
            KV_HDR_DIFF(j, "transfer-encoding:", diff);
            if (diff == 0)
                h->chunked = 1;
            continue;
        }
        if (a != 'c')
            continue;
        KV_HDR_DIFF(j, "content-length:", diff);
        if (diff == 0) {
            for (u32 d = 15; d < 32; d++) {
                char ch = ev->data[(j + d) & (CAPTURE_BYTES - 1)];
                if (ch >= '0' && ch <= '9') {
                    h->cl = h->cl * 10 + (ch - '0');
                    h->have_cl = 1;
                } else if (h->have_cl || (ch != ' ' && ch != '\t')) {
                    break;
                }
            }
            continue;
        }
        KV_HDR_DIFF(j, "content-type:", diff);
        if (diff == 0) {
            u32 v = j + 13 + (ev->data[(j + 13) & (CAPTURE_BYTES - 1)] == ' ');
            KV_HDR_DIFF(v, "text/event-stream", diff);
            if (diff == 0)
                h->sse = 1;
        }
    }
    c->head_len = head;
    c->resp_flags = h->sse ? RESP_F_EVENT_STREAM : 0;
    char s0 = ev->data[9], s1 = ev->data[10], s2 = ev->data[11];
    int no_body = c->head_req || (s0 == '2' && s1 == '0' && s2 == '4') ||
                  (s0 == '3' && s1 == '0' && s2 == '4');
    if (h->sse && !no_body)
        c->sse = SSE_ON;
    if (no_body) {
        c->framing = FRAME_LENGTH;
        c->resp_expect = head;
    } else if (h->chunked) {
        c->framing = FRAME_CHUNKED;
        c->tail = 0;
    } else if (h->have_cl) {
        c->framing = FRAME_LENGTH;
        c->resp_expect = head + h->cl;
    } else {
        c->framing = FRAME_CLOSE;
    }
}

/* Shift the last min(len, 8) bytes of src[0..len) into *tail. */
static __always_inline void tail_push(u64 *tail, const char *src, u64 len)
{
    if (len == 0)
        return;
    if (len >= 8) {
        bpf_probe_read_user(tail, 8, src + len - 8);
        return;
    }
    u64 fresh = 0;
    u32 k = len & 7;
    if (k == 0)
        return;
    bpf_probe_read_user(&fresh, k, src);
    *tail = (*tail >> (8 * k)) | (fresh << (8 * (8 - k)));
}

/* The bytes this write moved, folded into the chunked tail; 1 when they end the body. */
static __always_inline int chunked_done(struct conn_state *c, struct io_args *a, long ret)
{
    if (a->iov == IO_NONE)
        return 0; /* sendfile: file bytes are payload, the terminator comes by write */
    u64 tail = c->tail;
    if (a->iov == IO_BUF) {
        tail_push(&tail, (const char *)a->buf, (u64)ret);
    } else {
        u64 left = (u64)ret;
        struct iovec *iov = (struct iovec *)a->buf;
        for (int k = 0; k < MAX_IOVS; k++) {
            if (left == 0)
                break;
            struct iovec v = {};
            bpf_probe_read_user(&v, sizeof(v), &iov[k]);
            u64 take = v.iov_len < left ? v.iov_len : left;
            tail_push(&tail, v.iov_base, take);
            left -= take;
        }
    }
    c->tail = tail;
    return (tail >> 8) == CHUNKED_END;
}

/* After a write of the current response: 1 when it completed the response. */
static __always_inline int response_done(struct conn_state *c, struct io_args *a, long ret)
{
    if (c->framing == FRAME_LENGTH)
        return c->resp_bytes >= c->resp_expect;
    if (c->framing == FRAME_CHUNKED)
        return chunked_done(c, a, ret);
    return 0;
}

/* ---- server-sent events -------------------------------------------------------------
 * Each write of an SSE response goes to sse_scan (a tail call, so its byte loop is verified
 * once, not once per write syscall): a state machine over the written bytes that strips
 * the chunked framing and counts completed `data:` events (a blank line ends an event;
 * `data: [DONE]` is not a token), keeping the times of the first and last. */

#define SSE_BLOCK 256 /* bytes copied and scanned at a time */

struct sse_job {
    u64 key;
    u64 buf;
    u64 ret;      /* bytes the write moved */
    u64 left;     /* of those, not scanned yet */
    u64 src;      /* cursor: next byte to scan */
    u64 seg;      /* bytes left in the current buffer or iovec */
    u64 now;
    u64 pid_tgid;
    u32 iov;
    u32 skip;     /* head bytes at the start of the first write */
    u32 n;        /* bytes in the current block */
    u32 vi;       /* next iovec */
};
struct sse_block {
    char d[SSE_BLOCK];
};
BPF_PERCPU_ARRAY(sse_jobs, struct sse_job, 1);
BPF_PERCPU_ARRAY(sse_blocks, struct sse_block, 1);
/* Tail-called programs (loaded and put here by the loader): the byte loops are verified
 * once each instead of once per write syscall's program. */
BPF_PROG_ARRAY(tail_progs, 2);
#define TAIL_SSE_SCAN 0      /* sse_scan */
#define TAIL_RESPONSE_HEAD 1 /* response_head */

/* Hand this write to a tail-called program (TAIL_*); returns only when the call failed
 * (the program is not loaded). `skip`: head bytes sse_scan passes over. */
static __always_inline void job_call(void *ctx, struct io_args *a, u64 pid_tgid, u64 now,
                                     long ret, u32 skip, u32 prog)
{
    u32 zero = 0;
    struct sse_job *j = sse_jobs.lookup(&zero);
    if (!j)
        return;
    j->key = a->key;
    j->buf = a->buf;
    j->iov = a->iov;
    j->ret = (u64)ret;
    j->left = (u64)ret;
    j->src = a->buf;
    j->seg = a->iov == IO_BUF ? (u64)ret : 0;
    j->vi = 0;
    j->now = now;
    j->pid_tgid = pid_tgid;
    j->skip = skip;
    tail_progs.call(ctx, prog);
}

/* In a tail-called program: the job handed over, with its io_args and connection. */
static __always_inline struct sse_job *job_take(struct io_args *a, struct conn_state **c)
{
    u32 zero = 0;
    struct sse_job *j = sse_jobs.lookup(&zero);
    if (!j)
        return NULL;
    a->key = j->key;
    a->buf = j->buf;
    a->iov = j->iov;
    *c = conns.lookup(&a->key);
    return *c ? j : NULL;
}

static __always_inline int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch |= 0x20;
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

static __always_inline void sse_byte(volatile struct conn_state *c, char ch, u64 now)
{
    if (c->framing == FRAME_CHUNKED) {
        u8 st = c->sse_chunk;
        if (st == CHUNK_SIZE) {
            int v = hex_digit(ch);
            if (v >= 0 && c->chunk_left < 0x1000000)
                c->chunk_left = c->chunk_left * 16 + v;
            else if (ch == '\n')
                c->sse_chunk = c->chunk_left ? CHUNK_DATA : CHUNK_END;
            return; /* extensions and CR ignored */
        }
        if (st == CHUNK_CRLF) {
            if (ch == '\n') {
                c->sse_chunk = CHUNK_SIZE;
                c->chunk_left = 0;
            }
            return;
        }
        if (st != CHUNK_DATA)
            return;
        c->chunk_left -= 1;
        if (c->chunk_left == 0)
            c->sse_chunk = CHUNK_CRLF;
    }
    if (ch == '\r')
        return;
    u8 col = c->sse_line;
    if (ch == '\n') {
        if (col == 0) {
            if (c->sse_data && c->sse_final != 2) {
                if (c->sse_events == 0)
                    c->sse_first_ns = now;
                c->sse_last_ns = now;
                c->sse_events += 1;
            }
            c->sse_data = 0;
            c->sse_final = 0;
        }
        c->sse_line = 0;
        return;
    }
    if (col == 0 && ch == 'd') /* the only field name starting with d is data */
        c->sse_data = 1;
    else if ((col == 5 || col == 6) && ch == '[' && c->sse_data)
        c->sse_final = 1; /* "data: [" ... */
    else if (c->sse_final == 1)
        c->sse_final = ch == 'D' ? 2 : 0; /* ... "D": [DONE] (no JSON value starts so) */
    if (col < 255)
        c->sse_line = col + 1;
}

static __always_inline int write_done(void *ctx, struct conn_state *c, struct io_args *a,
                                      u64 pid_tgid, u64 now, long ret);

int sse_scan(void *ctx)
{
    u32 zero = 0;
    struct io_args a = {};
    struct conn_state *cs = NULL;
    struct sse_job *j = job_take(&a, &cs);
    struct sse_block *b = sse_blocks.lookup(&zero);
    if (!j || !cs || !b)
        return 0;
    volatile struct conn_state *c = cs;
    /* one block per run; the program tail-calls itself for the next (at most 32 blocks) */
    if (j->left && j->seg == 0 && a.iov == IO_IOV && j->vi < MAX_IOVS) {
        struct iovec v = {};
        bpf_probe_read_user(&v, sizeof(v), &((struct iovec *)a.buf)[j->vi]);
        j->vi += 1;
        j->src = (u64)v.iov_base;
        j->seg = v.iov_len < j->left ? v.iov_len : j->left;
    }
    u64 n = j->seg < SSE_BLOCK ? j->seg : SSE_BLOCK;
    if (j->skip && n) {
        u64 k = j->skip < n ? j->skip : n;
        j->skip -= k;
        j->src += k;
        j->seg -= k;
        j->left -= k;
    } else if (n > 0 && n <= SSE_BLOCK && bpf_probe_read_user(b->d, n, (void *)j->src) == 0) {
        j->n = n;
        for (u32 i = 0; i < SSE_BLOCK; i++) {
            if (i >= *(volatile u32 *)&j->n)
                break;
            sse_byte(c, b->d[i], j->now);
        }
        j->src += n;
        j->seg -= n;
        j->left -= n;
    } else {
        j->vi = MAX_IOVS; /* nothing more can be read */
    }
    if (j->left && (j->seg || (a.iov == IO_IOV && j->vi < MAX_IOVS)))
        tail_progs.call(ctx, TAIL_SSE_SCAN);
    u64 left = j->left;
    if (left) {
        /* not scanned (sendfile, too many blocks or iovecs): still exact if it is all
         * payload of the current chunk */
        if (c->framing == FRAME_CHUNKED && c->sse_chunk == CHUNK_DATA && c->chunk_left > left)
            c->chunk_left -= left;
        else
            c->sse = SSE_LOST;
    }
    return write_done(ctx, (struct conn_state *)c, &a, j->pid_tgid, j->now, (long)j->ret);
}

/* Hand the rest of this write to sse_scan; returns only when the tail call failed. */
static __always_inline void sse_tail(void *ctx, struct conn_state *c, struct io_args *a,
                                     u64 pid_tgid, u64 now, long ret, u32 skip)
{
    job_call(ctx, a, pid_tgid, now, ret, skip, TAIL_SSE_SCAN);
    c->sse = SSE_LOST; /* no tail call: the program is not loaded */
}

/* After a write of the current response: END when it completed it. */
static __always_inline int write_done(void *ctx, struct conn_state *c, struct io_args *a,
                                      u64 pid_tgid, u64 now, long ret)
{
    if (!response_done(c, a, ret))
        return 0;
    if (c->deferred) {
        c->state = CONN_IDLE;
        send_complete(ctx, c, a->key, now, c->resp_bytes);
        return 0;
    }
    u32 zero = 0;
    struct http_event *ev = http_scratch.lookup(&zero);
    if (!ev)
        return 0;
    fill_event(ev, c, pid_tgid, a->key, now, ret, HTTP_EV_END);
    ev->len = 0;
    ev->prev_end_ns = now;
    ev->prev_resp_bytes = c->resp_bytes;
    c->state = CONN_IDLE;
    emit_http_header(ctx, ev);
    return 0;
}

/* The first write of a response (tail call from write_io): read the head, send RESPONSE
 * (RESPONSE_DONE when this write completes it), and scan the rest if it is SSE. */
int response_head(void *ctx)
{
    u32 zero = 0;
    struct io_args a = {};
    struct conn_state *c = NULL;
    struct sse_job *j = job_take(&a, &c);
    struct http_event *ev = http_scratch.lookup(&zero);
    if (!j || !c || !ev)
        return 0;
    u64 key = a.key;
    long ret = (long)j->ret;
    u64 now = j->now, pid_tgid = j->pid_tgid;
    ev->len = capture(ev, &a, ret);
    if (ev->len < 12 || ev->data[0] != 'H' || ev->data[1] != 'T' || ev->data[2] != 'T' ||
        ev->data[3] != 'P' || ev->data[4] != '/') {
        if (c->state == CONN_IDLE)
            return 0; /* not a response: nothing to time */
    } else if (ev->data[9] == '1' && !(ev->data[10] == '0' && ev->data[11] == '1')) {
        return 0; /* 1xx interim response (100 Continue): the final one follows */
    }
    u64 pipelined_start = 0;
    if (c->state == CONN_IDLE) {
        /* pipelined: this request was read with (or after) the previous one */
        pipelined_start = c->last_read_ns;
        c->req_start_ns = c->last_read_ns;
        c->head_req = 0;
        c->requests += 1;
    }
    c->state = CONN_RESPONDING;
    c->resp_start_ns = now;
    c->last_write_ns = now;
    c->resp_bytes = ret;
    c->req_end_ns = c->last_read_ns;
    c->sse = SSE_NONE;
    c->sse_chunk = CHUNK_SIZE;
    c->chunk_left = 0;
    c->sse_line = 0;
    c->sse_data = 0;
    c->sse_final = 0;
    c->sse_events = 0;
    c->sse_first_ns = 0;
    c->sse_last_ns = 0;
    parse_head(ev, c);
    if (c->deferred) {
        /* the request's event is held: when this head says how the response ends, the
         * response's end sends one COMPLETE record instead of RESPONSE and END */
        char s0 = ev->data[9], s1 = ev->data[10], s2 = ev->data[11];
        if ((c->framing == FRAME_LENGTH || c->framing == FRAME_CHUNKED) && ev->data[0] == 'H' &&
            ev->data[4] == '/' && ev->data[8] == ' ' && s0 >= '1' && s0 <= '5' && s1 >= '0' &&
            s1 <= '9' && s2 >= '0' && s2 <= '9') {
            c->status = (s0 - '0') * 100 + (s1 - '0') * 10 + (s2 - '0');
            if (c->sse == SSE_ON)
                sse_tail(ctx, c, &a, pid_tgid, now, ret, c->head_len);
            return write_done(ctx, c, &a, pid_tgid, now, ret);
        }
        if (send_deferred_request(ctx, c, key))
            return 0;
    }
    fill_event(ev, c, pid_tgid, key, now, ret, HTTP_EV_RESPONSE);
    ev->prev_state = pipelined_start ? CONN_IDLE : CONN_REQUEST;
    ev->prev_end_ns = pipelined_start;
    if (c->sse == SSE_ON) {
        emit_http(ctx, ev);
        sse_tail(ctx, c, &a, pid_tgid, now, ret, c->head_len);
        return write_done(ctx, c, &a, pid_tgid, now, ret);
    }
    if (response_done(c, &a, ret)) {
        ev->kind = HTTP_EV_RESPONSE_DONE; /* ends at ts_ns; prev_end_ns stays the start */
        ev->prev_resp_bytes = ret;
        c->state = CONN_IDLE;
    }
    emit_http(ctx, ev);
    return 0;
}

/* A write of `ret` bytes on tracked connection `c`. */
static __always_inline int write_io(void *ctx, struct conn_state *c, struct io_args *ap,
                                    u64 pid_tgid, long ret)
{
    struct io_args a = *ap;
    u64 now = bpf_ktime_get_ns();
    if (c->state == CONN_RESPONDING) {
        c->last_write_ns = now;
        c->resp_bytes += ret;
        if (c->unsampled)
            return 0;
        if (c->sse == SSE_ON)
            sse_tail(ctx, c, &a, pid_tgid, now, ret, 0);
        return write_done(ctx, c, &a, pid_tgid, now, ret);
    }
    if (c->state == CONN_IDLE && (c->requests == 0 || c->unsampled))
        return 0; /* a write before any request (server greeting): not HTTP timing */
    if (c->state != CONN_REQUEST && c->state != CONN_IDLE)
        return 0;
    if (c->unsampled) {
        c->state = CONN_RESPONDING;
        c->last_write_ns = now;
        c->resp_bytes = ret;
        return 0;
    }
    job_call(ctx, &a, pid_tgid, now, ret, 0, TAIL_RESPONSE_HEAD);
    return 0; /* not loaded: the response goes unseen */
}

/* One syscall's exit: its connection if tracked, then the read or write. */
static __always_inline int io_exit(void *ctx, long ret, u32 iov, int is_write, int is_msg)
{
#ifdef ARGS_AT_EXIT
    if (ret <= 0)
        return 0; /* before any lookup: nothing moved */
#endif
    u64 pid_tgid = bpf_get_current_pid_tgid();
    struct io_args a = {};
    struct conn_state *c = exit_conn(pid_tgid, &a, iov, is_write, is_msg);
    if (!c || ret <= 0)
        return 0;
    if (is_write)
        return write_io(ctx, c, &a, pid_tgid, ret);
    return read_io(ctx, c, &a, pid_tgid, ret);
}

#ifndef ARGS_AT_EXIT
TRACEPOINT_PROBE(syscalls, sys_enter_read) { return io_enter((u32)args->fd, args->buf, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_recvfrom) { return io_enter((u32)args->fd, args->ubuf, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_readv) { return io_enter((u32)args->fd, args->vec, IO_IOV, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_write) { return io_enter((u32)args->fd, args->buf, 0, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_sendto) { return io_enter((u32)args->fd, args->buff, 0, 1); }
TRACEPOINT_PROBE(syscalls, sys_enter_writev) { return io_enter((u32)args->fd, args->vec, IO_IOV, 1); }
#ifdef HAVE_SYS_RECVMSG
TRACEPOINT_PROBE(syscalls, sys_enter_recvmsg) { return msg_enter((u32)args->fd, args->msg, 0); }
#endif
#ifdef HAVE_SYS_SENDMSG
TRACEPOINT_PROBE(syscalls, sys_enter_sendmsg) { return msg_enter((u32)args->fd, args->msg, 1); }
#endif
#ifdef HAVE_SYS_SENDFILE64
TRACEPOINT_PROBE(syscalls, sys_enter_sendfile64) { return io_enter((u32)args->out_fd, NULL, IO_NONE, 1); }
#endif
#endif
TRACEPOINT_PROBE(syscalls, sys_exit_read) { return io_exit(args, args->ret, IO_BUF, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_recvfrom) { return io_exit(args, args->ret, IO_BUF, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_readv) { return io_exit(args, args->ret, IO_IOV, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_write) { return io_exit(args, args->ret, IO_BUF, 1, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_sendto) { return io_exit(args, args->ret, IO_BUF, 1, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_writev) { return io_exit(args, args->ret, IO_IOV, 1, 0); }
#ifdef HAVE_SYS_RECVMSG
TRACEPOINT_PROBE(syscalls, sys_exit_recvmsg) { return io_exit(args, args->ret, IO_IOV, 0, 1); }
#endif
#ifdef HAVE_SYS_SENDMSG
TRACEPOINT_PROBE(syscalls, sys_exit_sendmsg) { return io_exit(args, args->ret, IO_IOV, 1, 1); }
#endif
#ifdef HAVE_SYS_SENDFILE64
TRACEPOINT_PROBE(syscalls, sys_exit_sendfile64) { return io_exit(args, args->ret, IO_NONE, 1, 0); }
#endif

/* close(): the end of the last response on the connection. */
TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u64 key = (pid_tgid & 0xffffffff00000000ULL) | (u32)args->fd;
    struct conn_state *c = conns.lookup(&key);
    if (!c)
        return 0;
    u32 zero = 0;
    struct http_event *ev = http_scratch.lookup(&zero);
    count_unsampled(c, pid_tgid >> 32);
    if (c->deferred) {
        if (c->state == CONN_RESPONDING) {
            send_complete(args, c, key, c->last_write_ns, c->resp_bytes);
            c->state = CONN_IDLE;
        } else {
            send_deferred_request(args, c, key); /* never answered */
        }
    }
    if (ev) {
        fill_event(ev, c, pid_tgid, key, bpf_ktime_get_ns(), 0, HTTP_EV_CLOSE);
        ev->len = 0;
        ev->prev_end_ns = c->state == CONN_RESPONDING ? c->last_write_ns : 0;
        ev->prev_resp_bytes = c->state == CONN_RESPONDING ? c->resp_bytes : 0;
        emit_http_header(args, ev);
    }
    conns.delete(&key);
    pending_reqs.delete(&key);
    return 0;
}
