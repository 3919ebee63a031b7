package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestOverloadIsShedAtOnce: with every slot taken by calls waiting on a
// player's lock, one more call is refused at once with overloaded, 503
// and Retry-After (gRPC: UNAVAILABLE), over both transports, while the
// probes and the metrics still answer (the second call waits in its
// database's queue, behind the first's batch); the waiting calls then
// finish. Revenue reports have a bound of their own. The calls wait for
// locks while the test polls and goes on: their lock waits last as long
// as a call, so that the test's rollback, not a clock, ends them.
func TestOverloadIsShedAtOnce(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) {
		c.Limits.RequestsInFlightMax = 2
		c.Limits.ReportsInFlightMax = 1
		c.Batches.Committers = 1
		c.Timeouts.Request, c.Timeouts.Lock = 30*time.Second, 30*time.Second
	})
	const p = 5
	_, _, err := s.dev.Change(ctx, 1, p, grant("seed", "gold", 10))
	must(t, err)
	locker, tx := lockPlayer(t, s, p)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	database := s.m.DatabaseOf(s.m.ShardOf(p)).Name()
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = s.dev.Change(ctx, 1, p, grant(fmt.Sprintf("waits-%d", i), "gold", 1))
		}()
		// The first call's batch waits for the lock; the second waits in the queue.
		waitFor(t, func() bool {
			if i == 1 {
				return strings.Contains(s.metrics(), `coffer_group_commit_queue_calls{database="`+database+`",kind="writes"} 1`)
			}
			var waiting int
			must(t, locker.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&waiting))
			return waiting == 1
		})
	}
	waitFor(t, func() bool { return strings.Contains(s.metrics(), "coffer_requests_in_flight 2") })
	// At once, not after a slot is given back: the calls in flight wait
	// for the lock, which is released only after these calls, and a call
	// that waited for a slot would be served once their time ran out.
	r := s.call("GET", "/v1/namespaces/1/players/6/balances", devKey, "")
	wantStatus(t, r, 503, coffer.CodeOverloaded)
	if r.header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	_, err = s.grpc.GetBalances(grpcCtx(devKey), &cofferv1.GetBalancesRequest{Namespace: 1, PlayerId: 6})
	wantGRPC(t, err, codes.Unavailable, coffer.CodeOverloaded)
	wantStatus(t, s.call("GET", "/readyz", "", ""), 200, "")
	must(t, tx.Rollback(ctx))
	wg.Wait()
	for i, err := range errs {
		must(t, err)
		_ = i
	}
	m := s.metrics()
	if !strings.Contains(m, `coffer_errors_total{code="overloaded"} 2`) {
		t.Fatalf("metrics:\n%s", grepLines(m, "coffer_errors_total"))
	}
	// The seed, then the two waiting calls: one batch each.
	for _, line := range []string{`coffer_group_commit_attempts_total{database="` + database + `",outcome="committed"} 3`,
		`coffer_group_commit_batch_size_count{database="` + database + `",kind="writes"} 3`,
		`coffer_group_commit_batch_duration_seconds_count{database="` + database + `",kind="writes"} 3`,
		`coffer_group_commit_queue_calls{database="` + database + `",kind="writes"} 0`} {
		if !strings.Contains(m, line) {
			t.Fatalf("no %s in metrics:\n%s", line, grepLines(m, "coffer_group_commit_"))
		}
	}

	// A report held up on shard 0 takes the one report slot.
	conn, err := pgx.Connect(ctx, s.m.DatabaseOf(0).Config.ConnString(5))
	must(t, err)
	defer conn.Close(ctx)
	lock, err := conn.Begin(ctx)
	must(t, err)
	_, err = lock.Exec(ctx, "LOCK TABLE op_0 IN ACCESS EXCLUSIVE MODE")
	must(t, err)
	revenue := "/v1/namespaces/1/reports/revenue?from=2026-01-01T00:00:00Z&to=2999-01-01T00:00:00Z"
	first := make(chan response)
	go func() { first <- s.call("GET", revenue, devKey, "") }()
	waitFor(t, func() bool { return strings.Contains(s.metrics(), "coffer_requests_in_flight 1") })
	wantStatus(t, s.call("GET", revenue, devKey, ""), 503, coffer.CodeOverloaded)
	must(t, lock.Rollback(ctx))
	wantStatus(t, <-first, 200, "")
}

// TestHTTPConnectionBounds: a client that trickles its headers or its
// body, sends headers over the limit, or stops reading its answers is cut
// off; a call that takes longer than the write timeout still gets its
// answer.
func TestHTTPConnectionBounds(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) {
		c.Timeouts.ReadHeader = 300 * time.Millisecond
		c.Timeouts.Read = 600 * time.Millisecond
		c.Timeouts.Write = 300 * time.Millisecond
		c.Limits.HeaderBytesMax = 4096
		// The slow call's lock wait is ended by the test's rollback, not a clock.
		c.Timeouts.Request, c.Timeouts.Lock = 30*time.Second, 30*time.Second
	})
	addr := s.main.HTTPAddr

	conn := dial(t, addr)
	_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: coffer\r\n")
	must(t, err)
	wantClosed(t, conn, "a client that stops in the middle of its headers")

	conn = dial(t, addr)
	_, err = fmt.Fprintf(conn, "POST /v1/namespaces/1/players/9/transactions HTTP/1.1\r\nHost: coffer\r\nAuthorization: Bearer %s\r\n"+
		"Content-Length: 100\r\n\r\n{\"idem", devKey)
	must(t, err)
	wantClosed(t, conn, "a client that stops in the middle of its body")
	waitFor(t, func() bool { return strings.Contains(s.metrics(), "coffer_requests_in_flight 0") })

	req, _ := http.NewRequest("GET", s.base+"/healthz", nil)
	req.Header.Set("X-Pad", strings.Repeat("x", 16<<10))
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("16 KB of headers: HTTP %d", resp.StatusCode)
	}

	// A call that waits on the player's lock for longer than the write
	// timeout: the deadline runs from when its answer is ready.
	const p = 8
	_, _, err = s.dev.Change(ctx, 1, p, grant("seed", "gold", 1))
	must(t, err)
	_, tx := lockPlayer(t, s, p)
	slow := make(chan error)
	go func() {
		_, _, err := s.dev.Change(ctx, 1, p, grant("slow", "gold", 1))
		slow <- err
	}()
	time.Sleep(3 * s.main.Config.Timeouts.Write)
	must(t, tx.Rollback(ctx))
	must(t, <-slow)

	// Finlog pages of about 130 KB, asked for 80 times on one connection
	// whose reader stops: far more than the socket buffers hold.
	meta := fmt.Sprintf(`{"note": "%s"}`, strings.Repeat("m", 3000))
	for i := 0; i < 40; i++ {
		wantStatus(t, s.call("POST", fmt.Sprintf("/v1/namespaces/1/players/%d/transactions", p), devKey,
			fmt.Sprintf(`{"idempotency_key": "big-%d", "ops": [{"currency": "gold", "amount": 1}], "meta": %s}`, i, meta)), 201, "")
	}
	conn = dial(t, addr)
	must(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	var pipeline strings.Builder
	for i := 0; i < 80; i++ {
		fmt.Fprintf(&pipeline, "GET /v1/namespaces/1/players/%d/finlog?limit=500 HTTP/1.1\r\nHost: coffer\r\nAuthorization: Bearer %s\r\n\r\n", p, devKey)
	}
	_, err = io.WriteString(conn, pipeline.String())
	must(t, err)
	time.Sleep(5 * s.main.Config.Timeouts.Write)
	wantClosed(t, conn, "a client that stopped reading")
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// wantClosed reads conn to its end: the server must have closed it within
// a few seconds, not left it open.
func wantClosed(t *testing.T, conn net.Conn, who string) {
	t.Helper()
	must(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := io.Copy(io.Discard, bufio.NewReader(conn))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: the server keeps the connection open", who)
	}
}

// TestIdleConnectionsClosed: HTTP and gRPC connections with nothing in
// flight are closed after timeouts.idle, and one gRPC connection has at
// most limits.grpc_streams_max calls open; a call over it waits for a
// stream rather than running.
func TestIdleConnectionsClosed(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) {
		c.Timeouts.Idle = 300 * time.Millisecond
		c.Limits.GRPCStreamsMax = 1
		// The calls' lock waits are ended by the test's rollback, not a clock.
		c.Timeouts.Request, c.Timeouts.Lock = 30*time.Second, 30*time.Second
	})
	conn := dial(t, s.main.HTTPAddr)
	_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: coffer\r\n\r\n")
	must(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	must(t, err)
	resp.Body.Close()
	wantClosed(t, conn, "an idle HTTP connection")

	cc, err := grpc.NewClient(s.main.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer cc.Close()
	w := cofferv1.NewWalletClient(cc)
	const p = 9
	_, err = w.Change(grpcCtx(devKey), &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "seed",
		Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}})
	must(t, err)
	waitFor(t, func() bool { return cc.GetState() == connectivity.Idle })

	_, tx := lockPlayer(t, s, p)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = w.Change(grpcCtx(devKey), &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: fmt.Sprint("streams-", i),
				Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}})
		}()
	}
	waitFor(t, func() bool { return strings.Contains(s.metrics(), "coffer_requests_in_flight 1") })
	time.Sleep(300 * time.Millisecond)
	if m := s.metrics(); !strings.Contains(m, "coffer_requests_in_flight 1") {
		t.Fatalf("two calls on one connection with one stream allowed:\n%s", grepLines(m, "coffer_requests_in_flight"))
	}
	must(t, tx.Rollback(ctx))
	wg.Wait()
	for _, err := range errs {
		must(t, err)
	}
}

// TestRequestBytesAreBounded: the bytes of request bodies the calls in
// flight hold are bounded, both transports together. While an HTTP batch
// and a gRPC change whose bodies arrived wait for their player's lock,
// holding their bytes, a call whose body would pass the bound is refused
// at once with overloaded over HTTP and gRPC (a gRPC message before it is
// decoded: a malformed one is overloaded too), and a call without a body
// is served. Once they are answered, the same calls are served (and
// refused for their own fault), and nothing is held.
func TestRequestBytesAreBounded(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) {
		c.Limits.BodyBytesMax = 16 << 10
		c.Limits.BatchBodyBytesMax = 32 << 10
		c.Limits.RequestBytesInFlightMax = 40 << 10
		c.Timeouts.Request, c.Timeouts.Lock = 30*time.Second, 20*time.Second
	})
	const p, size = 10, 30000
	_, _, err := s.dev.Change(ctx, 1, p, grant("seed", "gold", 10))
	must(t, err)
	_, tx := lockPlayer(t, s, p)
	batch := fmt.Sprintf(`{"changes": [{"player_id": %d, "idempotency_key": "waits", "ops": [{"currency": "gold", "amount": 1}]}]}`, p)
	batch += strings.Repeat(" ", size-len(batch))
	waiting := make(chan int)
	go func() {
		req, _ := http.NewRequest("POST", s.base+"/v1/namespaces/1/transactions:batch", strings.NewReader(batch))
		req.Header.Set("Authorization", "Bearer "+devKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waiting <- 0
			return
		}
		resp.Body.Close()
		waiting <- resp.StatusCode
	}()
	held := &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "waits-too", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}}
	waitingGRPC := make(chan error)
	go func() {
		_, err := s.grpc.Change(grpcCtx(devKey), held)
		waitingGRPC <- err
	}()
	waitFor(t, func() bool {
		return strings.Contains(s.metrics(), fmt.Sprintf("coffer_request_bytes_held %d", size+proto.Size(held)))
	})

	reason := strings.Repeat("r", 12<<10) // 12 KiB more would pass the 40 KiB held at most
	body := fmt.Sprintf(`{"idempotency_key": "big", "ops": [{"currency": "gold", "amount": 1}], "reason": "%s"}`, reason)
	path := "/v1/namespaces/1/players/9/transactions"
	wantStatus(t, s.call("POST", path, devKey, body), 503, coffer.CodeOverloaded)
	change := &cofferv1.ChangeRequest{Namespace: 1, PlayerId: 9, IdempotencyKey: "big", Reason: reason,
		Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}}
	_, err = s.grpc.Change(grpcCtx(devKey), change)
	wantGRPC(t, err, codes.Unavailable, coffer.CodeOverloaded)
	junk := append([]byte{0x0a, 0x05, 0x61}, make([]byte, 12<<10)...)
	_, err = s.invokeRaw(devKey, cofferv1.Wallet_Change_FullMethodName, junk)
	wantGRPC(t, err, codes.Unavailable, coffer.CodeOverloaded)
	wantStatus(t, s.call("GET", "/v1/namespaces/1/players/9/balances", devKey, ""), 200, "")

	must(t, tx.Rollback(ctx))
	if status := <-waiting; status != http.StatusOK {
		t.Fatalf("the batch that waited: HTTP %d", status)
	}
	must(t, <-waitingGRPC)
	wantStatus(t, s.call("POST", path, devKey, body), 400, coffer.CodeInvalid)
	_, err = s.grpc.Change(grpcCtx(devKey), change)
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	if m := s.metrics(); !strings.Contains(m, "coffer_request_bytes_held 0") {
		t.Fatalf("bytes held after every call was answered:\n%s", grepLines(m, "coffer_request_bytes_held"))
	}
}

// TestGRPCHeapWithinTheBudget: eight concurrent BatchChange calls of
// 4 MiB, the batch limit, each of empty changes (2 bytes each on the
// wire, about 150 decoded: some 300 MB of messages per call), with a key
// of the ops permission only, are refused permission_denied without the
// server reading or decoding them: the heap grows by no more than a
// small multiple of the byte budget (8 MiB) meanwhile.
func TestGRPCHeapWithinTheBudget(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	limits := s.main.Config.Limits
	msg := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1) // namespace 1
	for len(msg)+2 <= int(limits.BatchBodyBytesMax) {
		msg = protowire.AppendBytes(protowire.AppendTag(msg, 2, protowire.BytesType), nil) // changes: an empty one
	}
	runtime.GC()
	base := heapBytes()
	stop, peak := make(chan struct{}), make(chan uint64)
	go func() {
		most := base
		for {
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(time.Millisecond):
				most = max(most, heapBytes())
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.invokeRaw(monitorKey, cofferv1.Wallet_BatchChange_FullMethodName, msg)
		}()
	}
	wg.Wait()
	close(stop)
	grown := int64(<-peak - base)
	for _, err := range errs {
		wantGRPC(t, err, codes.PermissionDenied, coffer.CodePermissionDenied)
	}
	if grown > 4*limits.RequestBytesInFlightMax {
		t.Fatalf("the heap grew by %d MiB under calls of a key without their permission; the byte budget is %d MiB",
			grown>>20, limits.RequestBytesInFlightMax>>20)
	}
	t.Logf("heap grew by %.1f MiB", float64(grown)/(1<<20))
}

// heapBytes is the bytes of the heap's objects, live or not yet swept.
func heapBytes() uint64 {
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// TestHTTPBodiesArrivingAreCounted: the bytes of HTTP bodies still
// arriving count in the byte budget, as they arrive. Two clients that
// have sent 15 KiB of their 16 KiB bodies and wait hold 30 KiB of the
// 40, so a call with a 12 KiB body is refused overloaded at once; once
// they go, it is served.
func TestHTTPBodiesArrivingAreCounted(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) {
		c.Limits.BodyBytesMax = 16 << 10
		c.Limits.BatchBodyBytesMax = 32 << 10
		c.Limits.RequestBytesInFlightMax = 40 << 10
	})
	const sent = 15 << 10
	var slow []net.Conn
	for range 2 {
		conn := dial(t, s.main.HTTPAddr)
		_, err := fmt.Fprintf(conn, "POST /v1/namespaces/1/players/11/transactions HTTP/1.1\r\nHost: coffer\r\nAuthorization: Bearer %s\r\n"+
			"Content-Length: %d\r\n\r\n%s", devKey, 16<<10, strings.Repeat(" ", sent))
		must(t, err)
		slow = append(slow, conn)
	}
	waitFor(t, func() bool {
		return strings.Contains(s.metrics(), fmt.Sprintf("coffer_request_bytes_held %d\n", 2*sent))
	})

	body := `{"idempotency_key": "after", "ops": [{"currency": "gold", "amount": 1}]}` + strings.Repeat(" ", 12<<10)
	path := "/v1/namespaces/1/players/12/transactions"
	wantStatus(t, s.call("POST", path, devKey, body), 503, coffer.CodeOverloaded)
	for _, conn := range slow {
		must(t, conn.Close())
	}
	waitFor(t, func() bool { return strings.Contains(s.metrics(), "coffer_request_bytes_held 0\n") })
	wantStatus(t, s.call("POST", path, devKey, body), 201, "")
}
