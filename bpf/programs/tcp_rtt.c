/* tcp_rtt: smoothed RTT and retransmissions of tracked server connections.
 *
 * tcp:tcp_probe fires for received segments on established sockets; its srtt argument
 * is already in microseconds. tcp:tcp_retransmit_skb fires per retransmitted segment.
 * Both are filtered to sockets accepted on traced ports (sk_owner, filled by
 * conn_track.c), aggregated in the kernel per (process, port) as a log2 histogram, and
 * read by polling: no per-segment events reach user space.
 *
 * Kernel needs: tcp:tcp_probe (4.16+, srtt in us since 5.x), tcp:tcp_retransmit_skb.
 */

BPF_TABLE("lru_hash", struct sock_key, struct tcp_stats, tcp_stats, 4096);
BPF_ARRAY(tcp_stats_zero, struct tcp_stats, 1);

static __always_inline struct tcp_stats *stats_for(u64 skp)
{
    struct sock_key *owner = sk_owner.lookup(&skp);
    if (!owner)
        return NULL;
    struct sock_key k = *owner;
    struct tcp_stats *s = tcp_stats.lookup(&k);
    if (s)
        return s;
    u32 zero = 0;
    struct tcp_stats *init = tcp_stats_zero.lookup(&zero);
    if (!init)
        return NULL;
    tcp_stats.update(&k, init);
    return tcp_stats.lookup(&k);
}

TRACEPOINT_PROBE(tcp, tcp_probe)
{
    struct tcp_stats *s = stats_for((u64)args->skaddr);
    if (!s)
        return 0;
    u32 srtt = args->srtt;
    u32 slot = bpf_log2l(srtt);
    if (slot >= RTT_SLOTS)
        slot = RTT_SLOTS - 1;
    __sync_fetch_and_add(&s->rtt_count, 1);
    __sync_fetch_and_add(&s->rtt_sum_us, srtt);
    __sync_fetch_and_add(&s->rtt_slots[slot], 1);
    return 0;
}

TRACEPOINT_PROBE(tcp, tcp_retransmit_skb)
{
    struct tcp_stats *s = stats_for((u64)args->skaddr);
    if (!s)
        return 0;
    __sync_fetch_and_add(&s->retransmits, 1);
    return 0;
}
