// Package wallet is a small Go client of coffer's HTTP/JSON API, the
// Wallet service of api/coffer/v1. Errors the service answers come back as
// *coffer.Error with the stable code, so callers branch with
// coffer.ErrorCode; a transport failure is an ordinary error. Every write
// may be retried with the same idempotency key.
package wallet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
)

// AnswerBytesMax bounds the answer the client reads, so that a service
// gone wrong cannot take its memory. A batch's answer carries every trx,
// and a trx up to coffer.TrxOpsMax ops: one over the bound is an error
// naming it, never a cut answer.
const AnswerBytesMax = 64 << 20

// Conn calls one coffer service with one API key. It is safe for
// concurrent use.
type Conn struct {
	base string
	key  string
	http *http.Client
}

// New returns a Conn to the service at baseURL (e.g.
// "http://127.0.0.1:8080"). A nil httpClient means one with a 10 s timeout.
func New(baseURL, apiKey string, httpClient *http.Client) *Conn {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &Conn{base: baseURL, key: apiKey, http: httpClient}
}

// Change is a change or the begin of a hold, as sent.
type Change = api.ChangeBody

// Exchange is an exchange, as sent.
type Exchange = api.ExchangeBody

func playerPath(ns coffer.Namespace, p coffer.PlayerID) string {
	return fmt.Sprintf("/v1/namespaces/%d/players/%d", ns, p)
}

// trxPath is the path of the trx of idempotency key key, plus suffix. The
// key is one escaped path segment; "." and ".." are valid keys too, which
// PathEscape leaves as they are and every URL resolver then removes as dot
// segments (RFC 3986 §5.2.4), so their dots are escaped. A scope the
// service would refuse (coffer.Scope.Validate) has no path: an empty key
// would make an empty segment, which routes elsewhere (not_found).
// Errors: invalid_argument, nothing sent.
func trxPath(ns coffer.Namespace, p coffer.PlayerID, key, suffix string) (string, error) {
	if err := (coffer.Scope{Namespace: ns, PlayerID: p, IdempotencyKey: key}).Validate(); err != nil {
		return "", err
	}
	seg := url.PathEscape(key)
	if key == "." || key == ".." {
		seg = strings.Repeat("%2E", len(key))
	}
	return playerPath(ns, p) + "/transactions/" + seg + suffix, nil
}

// Balances reads a player's balances; q's Namespace and PlayerID address
// them.
func (c *Conn) Balances(ctx context.Context, q coffer.BalanceQuery) (coffer.Balances, error) {
	v := url.Values{}
	if q.Currency != "" {
		v.Set("currency", q.Currency)
	}
	if q.At != nil {
		v.Set("at", q.At.Format(time.RFC3339Nano))
	}
	if q.Lots {
		v.Set("lots", "true")
	}
	var out coffer.Balances
	_, err := c.do(ctx, "GET", playerPath(q.Namespace, q.PlayerID)+"/balances", v, nil, &out)
	return out, err
}

// Change applies a change or begins a hold. replay is true when the
// answer is the original result of an earlier request with the same key.
func (c *Conn) Change(ctx context.Context, ns coffer.Namespace, p coffer.PlayerID, req Change) (trx coffer.Trx, replay bool, err error) {
	status, err := c.do(ctx, "POST", playerPath(ns, p)+"/transactions", nil, req, &trx)
	return trx, status == http.StatusOK, err
}

// BatchChange is one change of a batch, as sent.
type BatchChange = api.BatchChangeBody

// BatchChange applies up to coffer.BatchChangesMax changes, for players of
// namespace ns, in one call, each atomically on its own. The results come
// per change, in request order: a failed change has a *coffer.Error in
// Err, with the code the change sent alone would have had. err is the
// call's: the envelope was refused, or no answer came; then resend the
// whole batch with the same keys, and what was applied replays. An answer
// over AnswerBytesMax is an error too: the batch may have been applied,
// and resending it would get the same answer; read each trx back by its
// key (Trx), or send fewer changes per call.
func (c *Conn) BatchChange(ctx context.Context, ns coffer.Namespace, changes []BatchChange) ([]coffer.ChangeResult, error) {
	var out struct {
		Results []struct {
			Trx    *coffer.Trx `json:"trx"`
			Replay bool        `json:"replay"`
			Error  *problem    `json:"error"`
		} `json:"results"`
	}
	path := fmt.Sprintf("/v1/namespaces/%d/transactions:batch", ns)
	if _, err := c.do(ctx, "POST", path, nil, api.BatchBody{Changes: changes}, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(changes) {
		return nil, fmt.Errorf("coffer: POST %s: %d results for %d changes", path, len(out.Results), len(changes))
	}
	results := make([]coffer.ChangeResult, len(changes))
	for i, r := range out.Results {
		switch {
		case r.Error != nil:
			results[i].Err = &coffer.Error{Code: r.Error.Code, Message: r.Error.Detail}
		case r.Trx != nil:
			results[i] = coffer.ChangeResult{Trx: *r.Trx, Replay: r.Replay}
		default:
			return nil, fmt.Errorf("coffer: POST %s: result %d has neither trx nor error", path, i)
		}
	}
	return results, nil
}

// Commit commits a pending hold.
func (c *Conn) Commit(ctx context.Context, ns coffer.Namespace, p coffer.PlayerID, key string) (trx coffer.Trx, replay bool, err error) {
	status, err := c.onTrx(ctx, "POST", ns, p, key, "/commit", &trx)
	return trx, status == http.StatusOK, err
}

// Rollback rolls a pending hold back.
func (c *Conn) Rollback(ctx context.Context, ns coffer.Namespace, p coffer.PlayerID, key string) (trx coffer.Trx, replay bool, err error) {
	status, err := c.onTrx(ctx, "POST", ns, p, key, "/rollback", &trx)
	return trx, status == http.StatusOK, err
}

// Trx reads one trx of this client by its idempotency key.
func (c *Conn) Trx(ctx context.Context, ns coffer.Namespace, p coffer.PlayerID, key string) (coffer.Trx, error) {
	var trx coffer.Trx
	_, err := c.onTrx(ctx, "GET", ns, p, key, "", &trx)
	return trx, err
}

// onTrx calls the trx of key (trxPath) plus suffix, without a body.
func (c *Conn) onTrx(ctx context.Context, method string, ns coffer.Namespace, p coffer.PlayerID, key, suffix string, out any) (int, error) {
	path, err := trxPath(ns, p, key, suffix)
	if err != nil {
		return 0, err
	}
	return c.do(ctx, method, path, nil, nil, out)
}

// Exchange exchanges one currency for another.
func (c *Conn) Exchange(ctx context.Context, ns coffer.Namespace, p coffer.PlayerID, req Exchange) (trx coffer.Trx, replay bool, err error) {
	status, err := c.do(ctx, "POST", playerPath(ns, p)+"/exchanges", nil, req, &trx)
	return trx, status == http.StatusOK, err
}

// Refund is a refund or chargeback, as sent.
type Refund = api.RefundBody

// Refund takes back a store order credited to the player (a refund or a
// chargeback); replay is true when the answer is the original result of
// an earlier request with the same key.
func (c *Conn) Refund(ctx context.Context, ns coffer.Namespace, p coffer.PlayerID, req Refund) (trx coffer.Trx, replay bool, err error) {
	status, err := c.do(ctx, "POST", playerPath(ns, p)+"/refunds", nil, req, &trx)
	return trx, status == http.StatusOK, err
}

// Finlog reads a page of a player's finlog.
func (c *Conn) Finlog(ctx context.Context, q coffer.FinlogQuery) (coffer.FinlogPage, error) {
	v := url.Values{}
	for name, t := range map[string]*time.Time{"from": q.From, "to": q.To} {
		if t != nil {
			v.Set(name, t.Format(time.RFC3339Nano))
		}
	}
	for name, s := range map[string]string{"currency": q.Currency, "reason": q.Reason, "cursor": q.Cursor,
		"kind": string(q.Kind), "status": string(q.Status), "idempotency_key": q.IdempotencyKey} {
		if s != "" {
			v.Set(name, s)
		}
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Desc {
		v.Set("order", "desc")
	}
	var out coffer.FinlogPage
	_, err := c.do(ctx, "GET", playerPath(q.Namespace, q.PlayerID)+"/finlog", v, nil, &out)
	return out, err
}

// Revenue reads the revenue report of a namespace (admin).
func (c *Conn) Revenue(ctx context.Context, q coffer.RevenueQuery) ([]coffer.RevenueLine, error) {
	v := url.Values{"from": {q.From.Format(time.RFC3339Nano)}, "to": {q.To.Format(time.RFC3339Nano)}}
	if q.Currency != "" {
		v.Set("currency", q.Currency)
	}
	var out struct {
		Lines []coffer.RevenueLine `json:"lines"`
	}
	_, err := c.do(ctx, "GET", fmt.Sprintf("/v1/namespaces/%d/reports/revenue", q.Namespace), v, nil, &out)
	return out.Lines, err
}

// Status reads the operators' view of the instance (admin).
func (c *Conn) Status(ctx context.Context) (coffer.Status, error) {
	var out coffer.Status
	_, err := c.do(ctx, "GET", "/v1/status", nil, nil, &out)
	return out, err
}

// problem is the part of a problem+json body the client reads.
type problem struct {
	Code   coffer.Code `json:"code"`
	Detail string      `json:"detail"`
}

// do sends one request and decodes a success into out; it returns the
// HTTP status.
func (c *Conn) do(ctx context.Context, method, path string, query url.Values, body, out any) (int, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		if badText(reflect.ValueOf(body)) {
			return 0, coffer.Errorf(coffer.CodeInvalid, "a text of the request is not valid UTF-8, which JSON cannot carry; nothing was sent")
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // meta is bounded as sent: \u003c is six bytes for one
		if err := enc.Encode(body); err != nil {
			return 0, err
		}
		rd = &buf
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, AnswerBytesMax+1))
	if err != nil {
		return resp.StatusCode, err
	}
	if len(raw) > AnswerBytesMax {
		err := fmt.Errorf("coffer: %s %s: HTTP %d: the answer is larger than %d bytes, the most this client reads", method, path, resp.StatusCode, AnswerBytesMax)
		if method != http.MethodGet {
			err = fmt.Errorf("%w; the call may have been applied: read its trx back by key", err)
		}
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		var p problem
		if json.Unmarshal(raw, &p) != nil || p.Code == "" {
			return resp.StatusCode, fmt.Errorf("coffer: %s %s: HTTP %d: %.200s", method, path, resp.StatusCode, raw)
		}
		return resp.StatusCode, &coffer.Error{Code: p.Code, Message: p.Detail}
	}
	return resp.StatusCode, json.Unmarshal(raw, out)
}

// badText tells whether a string in v is not valid UTF-8. encoding/json
// would send each bad byte as U+FFFD, so the keys "k\xff" and "k\xfe"
// would reach the server as one: the second write would be answered as
// the first's replay. Byte slices (meta, raw JSON) go as they are, and the
// server checks them. It looks at what encoding/json sends: exported
// fields, and not into a value that encodes itself (a time: its location
// is the standard library's, filled lazily, and never sent).
func badText(v reflect.Value) bool {
	if v.Kind() != reflect.Pointer && v.Kind() != reflect.Interface && v.Type().Implements(jsonMarshaler) {
		return false
	}
	switch v.Kind() {
	case reflect.String:
		return !utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && badText(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && badText(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return false
		}
		for i := range v.Len() {
			if badText(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if badText(it.Key()) || badText(it.Value()) {
				return true
			}
		}
	}
	return false
}

var jsonMarshaler = reflect.TypeFor[json.Marshaler]()
