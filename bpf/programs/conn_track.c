/* conn_track: which connections to trace, accept-queue delay and backlog, connection edges.
 *
 * A connection is tracked when accept()/accept4() returns it on a traced port; every
 * other BPF program here only looks at tracked connections, so processes and sockets
 * that are not servers on traced ports pay one hash lookup per syscall.
 *
 * Tracepoints: syscalls:sys_{enter,exit}_accept4 (and accept), syscalls:sys_enter_close,
 * sock:inet_sock_set_state. Kernel needs: BTF-correct struct offsets for task_struct ->
 * files -> fdtable -> file -> socket -> sock (bcc with headers or the BTF tree).
 */
#include "events.h"

struct accept_args {
    u64 listen_sk;
    u32 backlog;
    u32 max_backlog;
    u16 port;
    u16 pad[3];
};

BPF_TABLE("lru_hash", u64, struct conn_state, conns, MAX_CONNS);
BPF_TABLE("lru_hash", u64, struct sock_key, sk_owner, MAX_CONNS);
BPF_TABLE("lru_hash", u64, u64, established_ns, MAX_CONNS);
BPF_HASH(accept_args, u64, struct accept_args, 4096);
BPF_HASH(traced_ports, u16, u8, 1024);
#ifdef USE_PERF_BUFFER
BPF_PERF_OUTPUT(accept_events);
BPF_PERF_OUTPUT(http_events);
#else
BPF_RINGBUF_OUTPUT(accept_events, 64);
BPF_RINGBUF_OUTPUT(http_events, 1024);
#endif

/* No wake-up per event: user space drains the buffers every poll interval, so a request
 * costs no context switch into the collector (BPF_RB_NO_WAKEUP). */
#define KV_RB_FLAGS 1

/* Events not delivered: [0] http and [1] accept events the buffers had no room for (user
 * space fell behind), [2] requests over the MAX_REQUESTS_PER_S budget, [3] requests whose
 * bytes held in pending_reqs were evicted before their response ended (counted in
 * unsampled_hist instead). */
BPF_PERCPU_ARRAY(lost_events, u64, 4);

static __always_inline void count_lost(int which)
{
    u32 idx = which;
    u64 *n = lost_events.lookup(&idx);
    if (n)
        *n += 1;
}

/* bcc does not allow map calls inside macros: one small function per output. */
static __always_inline void emit_accept(void *ctx, struct accept_event *ev)
{
#ifdef USE_PERF_BUFFER
    if (accept_events.perf_submit(ctx, ev, sizeof(*ev)) != 0)
#else
    if (accept_events.ringbuf_output(ev, sizeof(*ev), KV_RB_FLAGS) != 0)
#endif
        count_lost(1);
}

/* Header plus the captured bytes only (ev->len is bounded by capture()). */
static __always_inline void emit_http(void *ctx, struct http_event *ev)
{
    u64 size = offsetof(struct http_event, data) + (ev->len & (2 * CAPTURE_BYTES - 1));
    if (size > sizeof(*ev))
        size = sizeof(*ev);
#ifdef USE_PERF_BUFFER
    if (http_events.perf_submit(ctx, ev, size) != 0)
#else
    if (http_events.ringbuf_output(ev, size, KV_RB_FLAGS) != 0)
#endif
        count_lost(0);
}

/* Header only: CLOSE events carry no bytes. */
static __always_inline void emit_http_header(void *ctx, struct http_event *ev)
{
#ifdef USE_PERF_BUFFER
    if (http_events.perf_submit(ctx, ev, offsetof(struct http_event, data)) != 0)
#else
    if (http_events.ringbuf_output(ev, offsetof(struct http_event, data), KV_RB_FLAGS) != 0)
#endif
        count_lost(0);
}

static __always_inline int port_traced(u16 port)
{
#if TRACE_ALL_PORTS
    return port != 0;
#else
    return traced_ports.lookup(&port) != NULL;
#endif
}

/* dst = *src (a kernel pointer or count), returning NULL from the caller when it is 0 */
#define KV_READ_OR_NULL(dst, src)                           \
    do {                                                    \
        bpf_probe_read_kernel(&(dst), sizeof(dst), &(src)); \
        if (!(dst))                                         \
            return NULL;                                    \
    } while (0)

/* The struct sock behind a file descriptor of the current process, or NULL. */
static __always_inline struct sock *fd_to_sock(u32 fd)
{
    struct task_struct *task = (struct task_struct *)bpf_get_current_task();
    struct files_struct *files = NULL;
    struct fdtable *fdt = NULL;
    struct file **fd_array = NULL;
    struct file *file = NULL;
    struct socket *sock = NULL;
    struct file *back = NULL;
    struct sock *sk = NULL;
    unsigned int max_fds = 0;

    KV_READ_OR_NULL(files, task->files);
    KV_READ_OR_NULL(fdt, files->fdt);
    KV_READ_OR_NULL(max_fds, fdt->max_fds);
    if (fd >= max_fds)
        return NULL;
    KV_READ_OR_NULL(fd_array, fdt->fd);
    KV_READ_OR_NULL(file, fd_array[fd]);
    KV_READ_OR_NULL(sock, file->private_data);
    /* a socket file's private_data is a struct socket pointing back at the file */
    bpf_probe_read_kernel(&back, sizeof(back), &sock->file);
    if (back != file)
        return NULL;
    bpf_probe_read_kernel(&sk, sizeof(sk), &sock->sk);
    return sk;
}

static __always_inline int on_accept_enter(u32 fd)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    if ((pid_tgid >> 32) == SELF_TGID)
        return 0;
    struct sock *sk = fd_to_sock(fd);
    if (!sk)
        return 0;
    u16 family = 0;
    bpf_probe_read_kernel(&family, sizeof(family), &sk->__sk_common.skc_family);
    if (family != AF_INET && family != AF_INET6)
        return 0;
    struct accept_args a = {};
    bpf_probe_read_kernel(&a.port, sizeof(a.port), &sk->__sk_common.skc_num);
    if (!port_traced(a.port))
        return 0;
    bpf_probe_read_kernel(&a.backlog, sizeof(a.backlog), &sk->sk_ack_backlog);
    bpf_probe_read_kernel(&a.max_backlog, sizeof(a.max_backlog), &sk->sk_max_ack_backlog);
    a.listen_sk = (u64)sk;
    accept_args.update(&pid_tgid, &a);
    return 0;
}

static __always_inline int on_accept_exit(void *ctx, long ret)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    struct accept_args *ap = accept_args.lookup(&pid_tgid);
    if (!ap)
        return 0;
    struct accept_args a = *ap;
    accept_args.delete(&pid_tgid);
    if (ret < 0)
        return 0;
    u32 tgid = pid_tgid >> 32;
    u32 fd = (u32)ret;
    u64 now = bpf_ktime_get_ns();
    struct sock *sk = fd_to_sock(fd);
    u64 skp = (u64)sk;

    struct conn_state c = {};
    c.id = now;
    c.sk = skp;
    c.port = a.port;
    c.state = CONN_IDLE;
    u64 key = ((u64)tgid << 32) | fd;
    conns.update(&key, &c);

    struct accept_event ev = {};
    ev.ts_ns = now;
    ev.conn_id = now;
    ev.tgid = tgid;
    ev.fd = fd;
    ev.port = a.port;
    ev.backlog = a.backlog;
    ev.max_backlog = a.max_backlog;
    if (sk) {
        struct sock_key owner = {.tgid = tgid, .port = a.port};
        sk_owner.update(&skp, &owner);
        u64 *est = established_ns.lookup(&skp);
        if (est) {
            if (now > *est)
                ev.queue_ns = now - *est;
            established_ns.delete(&skp);
        }
        u16 dport = 0;
        bpf_probe_read_kernel(&ev.family, sizeof(ev.family), &sk->__sk_common.skc_family);
        bpf_probe_read_kernel(&dport, sizeof(dport), &sk->__sk_common.skc_dport);
        ev.peer_port = KV_NTOHS(dport);
        if (ev.family == AF_INET)
            bpf_probe_read_kernel(&ev.peer_addr, 4, &sk->__sk_common.skc_daddr);
        else
            bpf_probe_read_kernel(&ev.peer_addr, 16, &sk->__sk_common.skc_v6_daddr);
    }
    emit_accept(ctx, &ev);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_accept4) { return on_accept_enter((u32)args->fd); }
TRACEPOINT_PROBE(syscalls, sys_exit_accept4) { return on_accept_exit(args, args->ret); }
#ifdef HAVE_SYS_ACCEPT
TRACEPOINT_PROBE(syscalls, sys_enter_accept) { return on_accept_enter((u32)args->fd); }
TRACEPOINT_PROBE(syscalls, sys_exit_accept) { return on_accept_exit(args, args->ret); }
#endif

/* Child sockets go SYN_RECV -> ESTABLISHED when the handshake completes and the
 * connection joins the listener's accept queue: the start of the accept-queue delay. */
TRACEPOINT_PROBE(sock, inet_sock_set_state)
{
    if (args->protocol != IPPROTO_TCP)
        return 0;
    if (args->newstate != TCP_ESTABLISHED || args->oldstate != TCP_SYN_RECV)
        return 0;
    if (!port_traced(args->sport))
        return 0;
    u64 skp = (u64)args->skaddr;
    u64 now = bpf_ktime_get_ns();
    established_ns.update(&skp, &now);
    return 0;
}
