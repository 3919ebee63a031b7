package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
)

// scope reads the scope of a call on one trx: namespace, player and
// idempotency key from the path, the emitter from the client, or the
// query's emitter, another client's, which a client names only with
// permission other (coffer.Client.TrxEmitter). The request carries no
// body (or {}).
func (s *Server) scope(r *http.Request, c *coffer.Client, other coffer.Permission) (coffer.Scope, error) {
	sc, err := playerScope(r, c)
	if err != nil {
		return coffer.Scope{}, err
	}
	sc.IdempotencyKey = r.PathValue("idempotency_key")
	v := query(r)
	emitter := coffer.Emitter(v.int("emitter"))
	if v.err != nil {
		return coffer.Scope{}, v.err
	}
	if sc.Emitter, err = c.TrxEmitter(sc.Namespace, emitter, other); err != nil {
		return coffer.Scope{}, err
	}
	return sc, s.decode(r, &struct{}{}, false)
}

// playerScope is the scope of a write whose key is in its body: namespace
// and player from the path, the emitter from the client.
func playerScope(r *http.Request, c *coffer.Client) (coffer.Scope, error) {
	ns, player, err := pathPlayer(r)
	return coffer.Scope{Namespace: ns, PlayerID: player, Emitter: c.Emitter}, err
}

// decode reads a JSON body strictly (decodeJSON).
func (s *Server) decode(r *http.Request, v any, required bool) error {
	return decodeBody(r, v, required, s.BodyBytesMax)
}

// decodeBody is decode with the body bounded by bytesMax.
func decodeBody(r *http.Request, v any, required bool, bytesMax int64) error {
	return bodyError(decodeJSON(bounded(r, bytesMax), v, required), bytesMax)
}

// bounded is r's body, cut at bytesMax.
func bounded(r *http.Request, bytesMax int64) io.Reader {
	return http.MaxBytesReader(nil, r.Body, bytesMax)
}

// bodyError makes a body cut at bytesMax payload_too_large.
func bodyError(err error, bytesMax int64) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return coffer.Errorf(coffer.CodePayloadTooLarge, "the body is larger than %d bytes", bytesMax)
	}
	return err
}

// DecodeChange reads a change's JSON body (api.ChangeBody) strictly
// (decodeJSON) into the request the domain validates, in scope sc with
// the body's key. It is all the HTTP transport makes of a change; the
// gRPC transport must make the same request of the same payload (its
// TestTransportsAgree). Errors are invalid_argument, or body's own.
func DecodeChange(body io.Reader, sc coffer.Scope) (coffer.ChangeRequest, error) {
	var b api.ChangeBody
	if err := decodeJSON(body, &b, true); err != nil {
		return coffer.ChangeRequest{}, err
	}
	return b.Request(sc)
}

// DecodeExchange is DecodeChange for an exchange (api.ExchangeBody).
func DecodeExchange(body io.Reader, sc coffer.Scope) (coffer.ExchangeRequest, error) {
	var b api.ExchangeBody
	if err := decodeJSON(body, &b, true); err != nil {
		return coffer.ExchangeRequest{}, err
	}
	sc.IdempotencyKey = b.IdempotencyKey
	return coffer.ExchangeRequest{Scope: sc, From: b.From, To: b.To, Amount: b.Amount, Reason: b.Reason, Meta: b.Meta}, nil
}

// DecodeRefund is DecodeChange for a refund (api.RefundBody).
func DecodeRefund(body io.Reader, sc coffer.Scope) (coffer.RefundRequest, error) {
	var b api.RefundBody
	if err := decodeJSON(body, &b, true); err != nil {
		return coffer.RefundRequest{}, err
	}
	sc.IdempotencyKey = b.IdempotencyKey
	return coffer.RefundRequest{Scope: sc, Store: b.Store, OrderID: b.OrderID, Kind: b.Kind, Reason: b.Reason}, nil
}

// bodyDepthMax bounds the nesting of a body: deep enough for meta at its
// deepest (coffer.MetaDepthMax) inside any body.
const bodyDepthMax = 64

// decodeJSON is the strict decoder; the fuzz targets drive it directly.
// The body must be one JSON object as coffer.ParseJSON reads it (no name
// twice, valid UTF-8, no lone surrogate), naming only v's fields, each
// spelled exactly as its json name. An empty body is an error only if
// required. Errors are invalid_argument, or the reader's own
// (*http.MaxBytesError, or a *coffer.Error such as heldBody's
// overloaded).
func decodeJSON(body io.Reader, v any, required bool) error {
	raw, err := io.ReadAll(body)
	var tooLarge *http.MaxBytesError
	var refused *coffer.Error
	switch {
	case errors.As(err, &tooLarge), errors.As(err, &refused):
		return err
	case err != nil:
		return coffer.Errorf(coffer.CodeInvalid, "body: %v", err)
	case len(bytes.Trim(raw, " \t\r\n")) == 0:
		if required {
			return coffer.Errorf(coffer.CodeInvalid, "body: a JSON object is required")
		}
		return nil
	}
	tree, err := coffer.ParseJSON(raw, bodyDepthMax)
	if err != nil {
		return coffer.Errorf(coffer.CodeInvalid, "body: malformed JSON: %v", err)
	}
	if tree.Kind != coffer.JSONObject {
		return coffer.Errorf(coffer.CodeInvalid, "body: a JSON object is required")
	}
	if err := checkNames(tree, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typeErr):
		return coffer.Errorf(coffer.CodeInvalid, "body: %s: %s is not a valid %s", typeErr.Field, typeErr.Value, typeErr.Type)
	}
	return coffer.Errorf(coffer.CodeInvalid, "body: %v", err)
}

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	timeType       = reflect.TypeFor[time.Time]()
)

// checkNames refuses a member name that encoding/json would take for a
// field only by ignoring case (it reads "IDEMPOTENCY_KEY" into
// idempotency_key, so two spellings would be one request): each name in
// an object read into a struct must be one of its fields' json names,
// exactly. Types are left to the decoder, and meta (json.RawMessage) to
// the domain.
func checkNames(v *coffer.JSONValue, t reflect.Type) error {
	path := unknownName(v, t)
	if path == nil {
		return nil
	}
	var at strings.Builder
	for i, step := range slices.Backward(path) {
		if i < len(path)-1 && !strings.HasPrefix(step, "[") {
			at.WriteByte('.')
		}
		at.WriteString(step)
	}
	return coffer.Errorf(coffer.CodeInvalid, "body: unknown field %q (names are case-sensitive)", at.String())
}

// unknownName is the path to the first name in v that is not a field of
// t, last step first (built only on the way out, so a good body costs no
// allocation), or nil.
func unknownName(v *coffer.JSONValue, t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawMessageType || t == timeType:
	case t.Kind() == reflect.Struct && v.Kind == coffer.JSONObject:
		fields := jsonFields(t)
		for i, name := range v.Names {
			ft, ok := fields[name]
			if !ok {
				return []string{name}
			}
			if path := unknownName(v.Elems[i], ft); path != nil {
				return append(path, name)
			}
		}
	case t.Kind() == reflect.Slice && v.Kind == coffer.JSONArray:
		for i, e := range v.Elems {
			if path := unknownName(e, t.Elem()); path != nil {
				return append(path, fmt.Sprintf("[%d]", i))
			}
		}
	}
	return nil
}

// fieldsOf caches jsonFields: a reflect.Type's map.
var fieldsOf sync.Map

// jsonFields maps the json names of struct t's fields, as encoding/json
// names them, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldsOf.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported() || name == "-" || (f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct):
			continue
		case name == "":
			name = f.Name
		}
		out[name] = f.Type
	}
	fieldsOf.Store(t, out)
	return out
}

// pathID reads an id > 0 from the path, as bits wide: decimal digits with
// no sign and no leading zero, so that an id has one spelling (ParseInt
// takes +5 and 007 for 5 and 7).
func pathID(r *http.Request, name string, bits int) (int64, error) {
	s := r.PathValue(name)
	n, ok := decimal(s, bits)
	if !ok || n <= 0 {
		return 0, coffer.Errorf(coffer.CodeInvalid, "%s: must be an integer id > 0, in decimal digits, got %q", name, s)
	}
	return n, nil
}

// decimal reads a number written as decimal digits with no sign and no
// leading zero (0 itself aside), bits wide.
func decimal(s string, bits int) (int64, bool) {
	if s == "" || (s[0] == '0' && s != "0") || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, bits)
	return n, err == nil
}

func pathNamespace(r *http.Request) (coffer.Namespace, error) {
	ns, err := pathID(r, "namespace", 32)
	return coffer.Namespace(ns), err
}

func pathPlayer(r *http.Request) (coffer.Namespace, coffer.PlayerID, error) {
	ns, err := pathNamespace(r)
	if err != nil {
		return 0, 0, err
	}
	p, err := pathID(r, "player_id", 64)
	return ns, coffer.PlayerID(p), err
}

// params reads query parameters; the first malformed one is kept in err.
type params struct {
	v   url.Values
	err error
}

// checkQuery parses r's query and checks that it names only allowed
// parameters (the route's), each once. Errors are invalid_argument.
func checkQuery(r *http.Request, allowed []string) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, coffer.Errorf(coffer.CodeInvalid, "query: %v", err)
	}
	for name, vals := range v {
		if !slices.Contains(allowed, name) {
			return nil, coffer.Errorf(coffer.CodeInvalid, "query: unknown parameter %q", name)
		}
		if len(vals) > 1 {
			return nil, coffer.Errorf(coffer.CodeInvalid, "query: %s given more than once", name)
		}
	}
	return v, nil
}

// query is r's query parameters, as checkQuery gave them before the
// handler ran.
func query(r *http.Request) *params { return &params{v: callOf(r).query} }

func (p *params) str(name string) string { return p.v.Get(name) }

func (p *params) fail(name, want string) {
	if p.err == nil {
		p.err = coffer.Errorf(coffer.CodeInvalid, "%s: must be %s, got %q", name, want, p.v.Get(name))
	}
}

func (p *params) time(name string) *time.Time {
	if !p.v.Has(name) {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, p.v.Get(name))
	if err != nil {
		p.fail(name, "an RFC 3339 time")
		return nil
	}
	return &t
}

func (p *params) bool(name string) bool {
	if !p.v.Has(name) {
		return false
	}
	b, err := strconv.ParseBool(p.v.Get(name))
	if err != nil {
		p.fail(name, "true or false")
	}
	return b
}

func (p *params) int(name string) int64 {
	if !p.v.Has(name) {
		return 0
	}
	n, ok := decimal(p.v.Get(name), 32)
	if !ok {
		p.fail(name, "an integer ≥ 0 in decimal digits")
	}
	return n
}
