package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	coffergrpc "github.com/cofferhq/coffer/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// callTimeout bounds one call of a target.
const callTimeout = 30 * time.Second

// HTTPTarget drives coffer's HTTP/JSON API.
type HTTPTarget struct {
	base, auth string
	client     *http.Client
}

// NewHTTPTarget returns a target for the service at baseURL, keeping up to
// conns connections open.
func NewHTTPTarget(baseURL, apiKey string, conns int) *HTTPTarget {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}
	return &HTTPTarget{base: baseURL, auth: "Bearer " + apiKey, client: &http.Client{Transport: tr, Timeout: callTimeout}}
}

// Do performs op.
func (t *HTTPTarget) Do(ctx context.Context, op *Op) string {
	player := t.base + "/v1/namespaces/" + strconv.Itoa(int(op.Namespace)) + "/players/" + strconv.FormatInt(op.Player, 10)
	cur := CurrencyCode(op.Currency)
	switch op.Call {
	case CallRead:
		return t.send(ctx, "GET", player+"/balances", "")
	case CallGrant, CallConsume:
		amount := op.Amount
		if op.Call == CallConsume {
			amount = -amount
		}
		return t.send(ctx, "POST", player+"/transactions", `{"idempotency_key":"`+op.Key+`","ops":[{"currency":"`+cur+`","amount":`+strconv.FormatInt(amount, 10)+`}]}`)
	case CallHold:
		code := t.send(ctx, "POST", player+"/transactions", `{"idempotency_key":"`+op.Key+`","hold":true,"ops":[{"currency":"`+cur+`","amount":`+strconv.FormatInt(op.Amount, 10)+`}]}`)
		if code != "" {
			return code
		}
		end := "/commit"
		if op.Rollback {
			end = "/rollback"
		}
		return t.send(ctx, "POST", player+"/transactions/"+op.Key+end, "")
	case CallExchange:
		return t.send(ctx, "POST", player+"/exchanges", `{"idempotency_key":"`+op.Key+`","from":"`+cur+`","to":"`+CurrencyCode(op.Currency%Currencies+1)+`","amount":`+strconv.FormatInt(op.Amount, 10)+`}`)
	case CallBatch:
		return t.batch(ctx, op)
	}
	return "unsupported"
}

// batch sends a CallBatch's grants in one call and counts those applied.
// It returns the first failed grant's code.
func (t *HTTPTarget) batch(ctx context.Context, op *Op) string {
	var b strings.Builder
	b.WriteString(`{"changes":[`)
	for i, g := range op.Batch {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"player_id":` + strconv.FormatInt(g.Player, 10) + `,"idempotency_key":"` + g.Key +
			`","ops":[{"currency":"` + CurrencyCode(g.Currency) + `","amount":` + strconv.FormatInt(g.Amount, 10) + `}]}`)
	}
	b.WriteString(`]}`)
	var out struct {
		Results []struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		} `json:"results"`
	}
	url := t.base + "/v1/namespaces/" + strconv.Itoa(int(op.Namespace)) + "/transactions:batch"
	if code := t.do(ctx, "POST", url, b.String(), &out); code != "" {
		return code
	}
	code := ""
	for _, r := range out.Results {
		switch {
		case r.Error == nil:
			op.Acked++
		case code == "":
			code = r.Error.Code
		}
	}
	return code
}

var codeField = []byte(`"code":"`)

func (t *HTTPTarget) send(ctx context.Context, method, url, body string) string {
	return t.do(ctx, method, url, body, nil)
}

// do sends one request; with out set, a success's body is decoded into it.
func (t *HTTPTarget) do(ctx context.Context, method, url, body string, out any) string {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return "transport"
	}
	req.Header.Set("Authorization", t.auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return "transport"
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "transport"
	}
	if resp.StatusCode < 300 {
		if out != nil && json.Unmarshal(raw, out) != nil {
			return "transport"
		}
		return ""
	}
	if i := bytes.Index(raw, codeField); i >= 0 {
		rest := raw[i+len(codeField):]
		if j := bytes.IndexByte(rest, '"'); j > 0 {
			return string(rest[:j])
		}
	}
	return "http_" + strconv.Itoa(resp.StatusCode)
}

// GRPCTarget drives coffer's gRPC API.
type GRPCTarget struct {
	conn *grpc.ClientConn
	w    cofferv1.WalletClient
	auth string
}

// NewGRPCTarget connects to the service at addr (host:port).
func NewGRPCTarget(addr, apiKey string) (*GRPCTarget, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &GRPCTarget{conn: conn, w: cofferv1.NewWalletClient(conn), auth: "Bearer " + apiKey}, nil
}

// Close closes the connection.
func (t *GRPCTarget) Close() error { return t.conn.Close() }

// Do performs op.
func (t *GRPCTarget) Do(ctx context.Context, op *Op) string {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", t.auth)
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cur := CurrencyCode(op.Currency)
	var err error
	switch op.Call {
	case CallRead:
		_, err = t.w.GetBalances(ctx, &cofferv1.GetBalancesRequest{Namespace: op.Namespace, PlayerId: op.Player})
	case CallGrant, CallConsume:
		amount := op.Amount
		if op.Call == CallConsume {
			amount = -amount
		}
		_, err = t.w.Change(ctx, &cofferv1.ChangeRequest{Namespace: op.Namespace, PlayerId: op.Player, IdempotencyKey: op.Key,
			Ops: []*cofferv1.OpRequest{{Currency: cur, Amount: amount}}})
	case CallHold:
		_, err = t.w.Change(ctx, &cofferv1.ChangeRequest{Namespace: op.Namespace, PlayerId: op.Player, IdempotencyKey: op.Key, Hold: true,
			Ops: []*cofferv1.OpRequest{{Currency: cur, Amount: op.Amount}}})
		if err == nil {
			ref := &cofferv1.TrxRequest{Namespace: op.Namespace, PlayerId: op.Player, IdempotencyKey: op.Key}
			if op.Rollback {
				_, err = t.w.Rollback(ctx, ref)
			} else {
				_, err = t.w.Commit(ctx, ref)
			}
		}
	case CallExchange:
		_, err = t.w.Exchange(ctx, &cofferv1.ExchangeRequest{Namespace: op.Namespace, PlayerId: op.Player, IdempotencyKey: op.Key,
			From: cur, To: CurrencyCode(op.Currency%Currencies + 1), Amount: op.Amount})
	case CallBatch:
		return t.batch(ctx, op)
	}
	if err == nil {
		return ""
	}
	return grpcCode(err)
}

// batch sends a CallBatch's grants in one call and counts those applied.
// It returns the first failed grant's code. ctx carries the key.
func (t *GRPCTarget) batch(ctx context.Context, op *Op) string {
	req := &cofferv1.BatchChangeRequest{Namespace: op.Namespace, Changes: make([]*cofferv1.BatchChange, len(op.Batch))}
	for i, g := range op.Batch {
		req.Changes[i] = &cofferv1.BatchChange{PlayerId: g.Player, IdempotencyKey: g.Key,
			Ops: []*cofferv1.OpRequest{{Currency: CurrencyCode(g.Currency), Amount: g.Amount}}}
	}
	resp, err := t.w.BatchChange(ctx, req)
	if err != nil {
		return grpcCode(err)
	}
	code := ""
	for _, r := range resp.Results {
		switch {
		case r.Error == nil:
			op.Acked++
		case code == "":
			code = grpcCode(status.ErrorProto(r.Error))
		}
	}
	return code
}

// grpcCode is the code of a Wallet call's error, or "transport" when no
// answer came.
func grpcCode(err error) string {
	if code := coffergrpc.Code(err); code != "" {
		return string(code)
	}
	return "transport"
}

// SQLTarget is the raw-SQL baseline: grants and reads only.
type SQLTarget struct{ b *Baseline }

// NewSQLTarget wraps a baseline.
func NewSQLTarget(b *Baseline) *SQLTarget { return &SQLTarget{b: b} }

// Do performs op.
func (t *SQLTarget) Do(ctx context.Context, op *Op) string {
	var err error
	switch op.Call {
	case CallGrant:
		err = t.b.Write(ctx, coffer.Namespace(op.Namespace), coffer.PlayerID(op.Player), coffer.CurrencyID(op.Currency), coffer.Amount(op.Amount), op.Key)
	case CallRead:
		err = t.b.Read(ctx, coffer.Namespace(op.Namespace), coffer.PlayerID(op.Player))
	default:
		return "unsupported"
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	if err != nil {
		return "sql_error"
	}
	return ""
}
