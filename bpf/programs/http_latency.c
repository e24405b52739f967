/* http_latency: HTTP/1.1 server-side request timing on tracked connections.
 *
 * On a tracked connection (see conn_track.c) the first read after idle or after a
 * response starts a request (HTTP_EV_REQUEST, with the first CAPTURE_BYTES bytes); the
 * first write after a request starts the response (HTTP_EV_RESPONSE, with the status
 * line); later writes only move last_write_ns, so streamed (SSE) responses cost no
 * events. The response ends at its last write, reported with the next request on the
 * connection or with close().
 *
 * Tracepoints: syscalls:sys_{enter,exit}_{read,recvfrom,readv,write,sendto,writev}.
 * Kernel needs: syscall tracepoints (CONFIG_FTRACE_SYSCALLS), BPF ring buffer (5.8+) or
 * perf buffer. The first bytes are checked at fixed offsets only (no byte loops).
 */

struct io_args {
    u64 key;   /* conns key */
    u64 buf;   /* user buffer, or struct iovec * when iov is set */
    u32 iov;
    u32 pad;
};

BPF_HASH(active_reads, u64, struct io_args, 16384);
BPF_HASH(active_writes, u64, struct io_args, 16384);
BPF_PERCPU_ARRAY(http_scratch, struct http_event, 1);

/* A one-second window of requests handed to user space: above MAX_REQUESTS_PER_S the
 * request is timed by nobody (and counted), which bounds the collector's CPU however busy
 * the server is. Updates race across CPUs; the budget is approximate by design. */
struct request_budget {
    u64 window_ns;
    u64 count;
};
BPF_ARRAY(request_budget, struct request_budget, 1);

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

/* Copy up to CAPTURE_BYTES of the user buffer into ev->data; returns bytes copied. */
static __always_inline u32 capture(struct http_event *ev, struct io_args *a, long ret)
{
    const void *src = (const void *)a->buf;
    u64 avail = (u64)ret;
    if (a->iov) {
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

static __always_inline int read_exit(void *ctx, long ret)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    struct io_args *ap = active_reads.lookup(&pid_tgid);
    if (!ap)
        return 0;
    struct io_args a = *ap;
    active_reads.delete(&pid_tgid);
    if (ret <= 0)
        return 0;
    struct conn_state *c = conns.lookup(&a.key);
    if (!c)
        return 0;
    u8 kind = HTTP_EV_REQUEST;
    if (c->state == CONN_REQUEST) {
        c->req_bytes += ret;
        if (c->more >= MAX_MORE_CHUNKS)
            return 0;
        kind = HTTP_EV_REQUEST_MORE;
    }
    u32 zero = 0;
    struct http_event *ev = http_scratch.lookup(&zero);
    if (!ev)
        return 0;
    ev->len = capture(ev, &a, ret);
    if (kind == HTTP_EV_REQUEST && !looks_like_request(ev)) {
        if (c->requests == 0)
            conns.delete(&a.key); /* not HTTP/1.x (TLS, HTTP/2, ...): stop tracking */
        return 0;
    }
    u64 now = bpf_ktime_get_ns();
    if (kind == HTTP_EV_REQUEST && !within_budget(now)) {
        count_lost(2);
        if (c->state == CONN_RESPONDING && !c->unsampled) {
            /* the sampled request before this one ends here: say so */
            ev->ts_ns = now;
            ev->conn_id = c->id;
            ev->tgid = pid_tgid >> 32;
            ev->fd = (u32)a.key;
            ev->len = 0;
            ev->total = (u32)ret;
            ev->port = c->port;
            ev->kind = HTTP_EV_END;
            ev->prev_state = c->state;
            ev->prev_end_ns = c->last_write_ns;
            ev->prev_resp_bytes = c->resp_bytes;
            emit_http_header(ctx, ev);
        }
        c->state = CONN_REQUEST;
        c->unsampled = 1;
        c->more = MAX_MORE_CHUNKS;
        c->requests += 1;
        return 0;
    }
    if (kind == HTTP_EV_REQUEST)
        c->unsampled = 0;
    ev->ts_ns = now;
    ev->conn_id = c->id;
    ev->tgid = pid_tgid >> 32;
    ev->fd = (u32)a.key;
    ev->total = (u32)ret;
    ev->port = c->port;
    ev->kind = kind;
    ev->prev_state = c->state;
    ev->prev_end_ns = 0;
    ev->prev_resp_bytes = 0;
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
    } else {
        c->more += 1;
    }
    emit_http(ctx, ev);
    return 0;
}

static __always_inline int write_exit(void *ctx, long ret)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    struct io_args *ap = active_writes.lookup(&pid_tgid);
    if (!ap)
        return 0;
    struct io_args a = *ap;
    active_writes.delete(&pid_tgid);
    if (ret <= 0)
        return 0;
    struct conn_state *c = conns.lookup(&a.key);
    if (!c)
        return 0;
    u64 now = bpf_ktime_get_ns();
    if (c->state == CONN_RESPONDING) {
        c->last_write_ns = now;
        c->resp_bytes += ret;
        return 0;
    }
    if (c->state != CONN_REQUEST)
        return 0; /* a write before any request (server greeting): not HTTP timing */
    if (c->unsampled) {
        c->state = CONN_RESPONDING;
        c->last_write_ns = now;
        c->resp_bytes = ret;
        return 0;
    }
    u32 zero = 0;
    struct http_event *ev = http_scratch.lookup(&zero);
    if (!ev)
        return 0;
    ev->len = capture(ev, &a, ret);
    ev->ts_ns = now;
    ev->conn_id = c->id;
    ev->tgid = pid_tgid >> 32;
    ev->fd = (u32)a.key;
    ev->total = (u32)ret;
    ev->port = c->port;
    ev->kind = HTTP_EV_RESPONSE;
    ev->prev_state = c->state;
    ev->prev_end_ns = 0;
    ev->prev_resp_bytes = 0;
    c->state = CONN_RESPONDING;
    c->resp_start_ns = now;
    c->last_write_ns = now;
    c->resp_bytes = ret;
    emit_http(ctx, ev);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_read) { return io_enter((u32)args->fd, args->buf, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_read) { return read_exit(args, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_enter_recvfrom) { return io_enter((u32)args->fd, args->ubuf, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_recvfrom) { return read_exit(args, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_enter_readv) { return io_enter((u32)args->fd, args->vec, 1, 0); }
TRACEPOINT_PROBE(syscalls, sys_exit_readv) { return read_exit(args, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_enter_write) { return io_enter((u32)args->fd, args->buf, 0, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_write) { return write_exit(args, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_enter_sendto) { return io_enter((u32)args->fd, args->buff, 0, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_sendto) { return write_exit(args, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_enter_writev) { return io_enter((u32)args->fd, args->vec, 1, 1); }
TRACEPOINT_PROBE(syscalls, sys_exit_writev) { return write_exit(args, args->ret); }

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
    if (ev) {
        ev->ts_ns = bpf_ktime_get_ns();
        ev->conn_id = c->id;
        ev->tgid = pid_tgid >> 32;
        ev->fd = (u32)args->fd;
        ev->len = 0;
        ev->total = 0;
        ev->port = c->port;
        ev->kind = HTTP_EV_CLOSE;
        ev->prev_state = c->state;
        ev->prev_end_ns = c->state == CONN_RESPONDING ? c->last_write_ns : 0;
        ev->prev_resp_bytes = c->state == CONN_RESPONDING ? c->resp_bytes : 0;
        emit_http_header(args, ev);
    }
    conns.delete(&key);
    return 0;
}
