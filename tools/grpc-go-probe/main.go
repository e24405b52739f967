// grpc-go-probe calls the router's gRPC server through grpc-go, the gRPC stack of the
// kubelet's `grpc:` probes and of the Gateway API Inference Extension tooling, so the
// tests can show that stack talks to router/h2grpc.py.
//
// Modes (the first argument), each printing one JSON object per line on stdout:
//
//	check    what the kubelet's gRPC prober does (k8s.io/kubernetes pkg/probe/grpc):
//	         DialContext with WithBlock, a "kube-probe/<major>.<minor>" user agent and
//	         insecure credentials under one timeout, then Health.Check; exit 0 on SERVING
//	watch    Health.Watch, one line per update, until -n updates or the stream ends
//	process  one bidirectional stream on -method (ext_proc's Process by default) with
//	         raw bytes through a pass-through codec: the request messages are hex lines
//	         of -messages, the answers come back as hex
//	session  several calls on one ClientConn (Checks, then a Process stream), counting
//	         the TCP connections grpc-go dialled for them
//
// Exit status: 0 when the mode's calls did what was asked, 1 when a call failed (the
// kubelet's "probe failure"), 2 for bad usage.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

const processMethod = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"

type options struct {
	addr       string
	service    string
	services   string
	timeout    time.Duration
	userAgent  string
	ca         string
	serverName string
	updates    int
	method     string
	messages   string
	lockstep   bool
	step       bool
	repeat     int
	requests   [][]byte // the -messages, read before dialling
	dials      int64
}

func main() {
	if len(os.Args) < 2 {
		usage("a mode: check, watch, process or session")
	}
	mode := os.Args[1]
	o := &options{}
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:9002", "host:port of the gRPC server")
	fs.StringVar(&o.service, "service", "", "health service name (check, watch)")
	fs.StringVar(&o.services, "services", "", "comma-separated health service names (session)")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "deadline of the dial and the calls together, as the probe's timeoutSeconds")
	fs.StringVar(&o.userAgent, "user-agent", "kube-probe/1.32", "user agent (grpc-go appends its own)")
	fs.StringVar(&o.ca, "ca", "", "PEM CA file: TLS with this root (no file: plaintext h2c)")
	fs.StringVar(&o.serverName, "server-name", "", "TLS server name to verify (default: the host of -addr)")
	fs.IntVar(&o.updates, "n", 1, "watch: stop after this many updates")
	fs.StringVar(&o.method, "method", processMethod, "process: the streaming method's path")
	fs.StringVar(&o.messages, "messages", "", "process, session: file of request messages, one hex string a line")
	fs.BoolVar(&o.lockstep, "lockstep", false, "process: read one answer after each message (Envoy's BUFFERED pace) instead of sending all first")
	fs.BoolVar(&o.step, "step", false, "process: before each message after the first, wait for a line on stdin (the caller paces the stream)")
	fs.IntVar(&o.repeat, "repeat", 3, "session: rounds, each the Checks of -services then a Process stream of -messages (when given)")
	_ = fs.Parse(os.Args[2:])

	modes := map[string]func(context.Context, *grpc.ClientConn, *options) bool{
		"check": check, "watch": watch, "process": process, "session": session,
	}
	run, known := modes[mode]
	if !known {
		usage(fmt.Sprintf("unknown mode %q: check, watch, process or session", mode))
	}
	if mode == "process" && o.messages == "" {
		usage("process needs -messages FILE (request messages, one hex string a line)")
	}
	if o.messages != "" {
		msgs, err := readMessages(o.messages)
		if err != nil {
			usage(err.Error())
		}
		o.requests = msgs
	}
	if !connected(o, func(ctx context.Context, conn *grpc.ClientConn) bool { return run(ctx, conn, o) }) {
		os.Exit(1)
	}
}

func usage(why string) {
	fmt.Fprintf(os.Stderr, "grpc-go-probe: %s\n", why)
	os.Exit(2)
}

func emit(v map[string]any) {
	line, _ := json.Marshal(v)
	fmt.Println(string(line))
}

// dial connects as the kubelet does: WithBlock under the caller's deadline, the probe's
// user agent, and a dialer that sets SO_LINGER to 1 s (the kubelet's ProbeDialer, so that
// probes leave no TIME_WAIT sockets). It counts the TCP connections it opens.
func dial(ctx context.Context, o *options) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if o.ca != "" {
		pem, err := os.ReadFile(o.ca)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in it", o.ca)
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: o.serverName})
	}
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return grpc.DialContext(ctx, o.addr,
		grpc.WithUserAgent(o.userAgent),
		grpc.WithBlock(),
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			atomic.AddInt64(&o.dials, 1)
			return dialer.DialContext(ctx, "tcp", addr)
		}),
	)
}

// callEnd describes how a call ended: its gRPC code (number and name) and message.
func callEnd(err error) map[string]any {
	st := status.Convert(err)
	return map[string]any{"code": int(st.Code()), "code_name": st.Code().String(), "message": st.Message()}
}

// checkOnce is one Health.Check as the kubelet sends it (an empty outgoing metadata
// context) and the kubelet's verdict on it.
func checkOnce(ctx context.Context, conn *grpc.ClientConn, service string, timeout time.Duration) map[string]any {
	client := healthpb.NewHealthClient(conn)
	var p peer.Peer
	resp, err := client.Check(metadata.NewOutgoingContext(ctx, make(metadata.MD)), &healthpb.HealthCheckRequest{Service: service}, grpc.Peer(&p))
	out := map[string]any{"service": service}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok { // what TLS agreed on
		out["alpn"] = info.State.NegotiatedProtocol
		out["tls_version"] = map[uint16]string{tls.VersionTLS12: "TLS 1.2", tls.VersionTLS13: "TLS 1.3"}[info.State.Version]
	}
	if err != nil {
		for k, v := range callEnd(err) {
			out[k] = v
		}
		out["result"] = "failure"
		switch status.Code(err) {
		case codes.Unimplemented:
			out["output"] = "this server does not implement the grpc health protocol (grpc.health.v1.Health): " + status.Convert(err).Message()
		case codes.DeadlineExceeded:
			out["output"] = fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)
		default:
			out["output"] = fmt.Sprintf("error: health rpc probe failed: %+v", err)
		}
		return out
	}
	out["code"], out["status"] = 0, resp.GetStatus().String()
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		out["result"], out["output"] = "failure", fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String())
	} else {
		out["result"], out["output"] = "success", "service healthy"
	}
	return out
}

func dialFailure(err error, o *options) map[string]any {
	out := map[string]any{"result": "failure", "dial_error": err.Error()}
	if errors.Is(err, context.DeadlineExceeded) {
		out["output"] = fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", o.addr, o.timeout, err)
	} else {
		out["output"] = fmt.Sprintf("error: failed to connect service at %q: %+v", o.addr, err)
	}
	return out
}

// connected runs call on a ClientConn dialled as the kubelet dials, all under -timeout;
// a failed dial is the kubelet's probe failure.
func connected(o *options, call func(context.Context, *grpc.ClientConn) bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	conn, err := dial(ctx, o)
	if err != nil {
		emit(dialFailure(err, o))
		return false
	}
	defer conn.Close()
	return call(ctx, conn)
}

func check(ctx context.Context, conn *grpc.ClientConn, o *options) bool {
	out := checkOnce(ctx, conn, o.service, o.timeout)
	emit(out)
	return out["result"] == "success"
}

func watch(ctx context.Context, conn *grpc.ClientConn, o *options) bool {
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: o.service})
	if err != nil {
		emit(map[string]any{"end": callEnd(err)})
		return false
	}
	for got := 0; got < o.updates; got++ {
		resp, err := stream.Recv()
		if err != nil {
			emit(map[string]any{"end": callEnd(err), "updates": got})
			return false
		}
		emit(map[string]any{"status": resp.GetStatus().String()})
	}
	return true
}

// rawCodec passes messages through as bytes, so any method can be called without its
// generated stubs; the caller (the Python test) serialises and parses them. Its name is
// "proto", as the bytes are protobuf messages (content-type application/grpc+proto).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot send %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot receive into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

func readMessages(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var msgs [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		msgs = append(msgs, b)
	}
	return msgs, sc.Err()
}

// stream runs one bidirectional call; returns whether it ended with OK.
func stream(ctx context.Context, conn *grpc.ClientConn, o *options, msgs [][]byte) bool {
	desc := &grpc.StreamDesc{StreamName: "Process", ServerStreams: true, ClientStreams: true}
	st, err := conn.NewStream(ctx, desc, o.method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		emit(map[string]any{"end": callEnd(err)})
		return false
	}
	answers := 0
	var ending error // how the stream ended: nil for OK
	// recv reads one answer; false once the stream has ended (and says how).
	recv := func() bool {
		var b []byte
		err := st.RecvMsg(&b)
		if err == nil {
			answers++
			emit(map[string]any{"message": hex.EncodeToString(b)})
			return true
		}
		if err != io.EOF {
			ending = err
		}
		emit(map[string]any{"end": callEnd(ending), "answers": answers, "trailer_keys": keys(st.Trailer())})
		return false
	}
	stdin := bufio.NewReader(os.Stdin)
	for i, m := range msgs {
		m := m
		if o.step && i > 0 {
			if _, err := stdin.ReadString('\n'); err != nil {
				usage("-step: stdin closed before every message was sent")
			}
		}
		if err := st.SendMsg(&m); err != nil {
			break // the server ended the stream; RecvMsg says how
		}
		if o.lockstep && !recv() {
			return false
		}
	}
	if err := st.CloseSend(); err != nil {
		emit(map[string]any{"close_send_error": err.Error()})
	}
	for recv() {
	}
	return ending == nil
}

func keys(md metadata.MD) []string {
	out := make([]string, 0, len(md))
	for k := range md {
		out = append(out, k)
	}
	return out
}

func process(ctx context.Context, conn *grpc.ClientConn, o *options) bool {
	return stream(ctx, conn, o, o.requests)
}

func session(ctx context.Context, conn *grpc.ClientConn, o *options) bool {
	msgs := o.requests
	ok := true
	for r := 0; r < o.repeat; r++ {
		for _, s := range strings.Split(o.services, ",") {
			out := checkOnce(ctx, conn, s, o.timeout)
			emit(out)
			ok = ok && out["result"] == "success"
		}
		if msgs != nil {
			ok = stream(ctx, conn, o, msgs) && ok
		}
	}
	emit(map[string]any{"dials": atomic.LoadInt64(&o.dials), "state": conn.GetState().String()})
	return ok
}
