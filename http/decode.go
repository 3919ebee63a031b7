package http

import (
	"encoding/json"
	"errors"

	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cofferhq/coffer"
)

// scope reads a call's scope: namespace and player from the path, the
// emitter from the client. With body nil the idempotency key is in the path
// and the request carries no body (or {}); otherwise the JSON body is
// decoded into body and the key is the one key points to in it.
func (s *Server) scope(r *http.Request, c *coffer.Client, body any, key *string) (coffer.Scope, error) {
	ns, player, err := pathPlayer(r)
	if err != nil {
		return coffer.Scope{}, err
	}
	if body == nil {
		err := s.decode(r, &struct{}{}, false)
		return coffer.Scope{Namespace: ns, PlayerID: player, Emitter: c.Emitter, IdempotencyKey: r.PathValue("idempotency_key")}, err
	}
	if err := s.decode(r, body, true); err != nil {
		return coffer.Scope{}, err
	}
	return coffer.Scope{Namespace: ns, PlayerID: player, Emitter: c.Emitter, IdempotencyKey: *key}, nil
}

// decode reads a JSON body strictly: unknown fields, wrong types, trailing
// data and bodies over BodyBytesMax are errors. An empty body is an error
// only if required.
func (s *Server) decode(r *http.Request, v any, required bool) error {
	return decodeBody(r, v, required, s.BodyBytesMax)
}

// decodeBody is decode with the body bounded by bytesMax.
func decodeBody(r *http.Request, v any, required bool, bytesMax int64) error {
	body := http.MaxBytesReader(nil, r.Body, bytesMax)
	err := decodeJSON(body, v, required)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return coffer.Errorf(coffer.CodePayloadTooLarge, "the body is larger than %d bytes", bytesMax)
	}
	return err
}

// decodeJSON is the strict decoder; the fuzz target drives it directly.
func decodeJSON(body io.Reader, v any, required bool) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) && !required {
		return nil
	}
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			return coffer.Errorf(coffer.CodeInvalid, "body: one JSON object expected, found more after it")
		}
		return nil
	}
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, io.EOF):
		return coffer.Errorf(coffer.CodeInvalid, "body: a JSON object is required")
	case errors.As(err, &typeErr):
		return coffer.Errorf(coffer.CodeInvalid, "body: %s: %s is not a valid %s", typeErr.Field, typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return coffer.Errorf(coffer.CodeInvalid, "body: malformed JSON at byte %d: %v", syntaxErr.Offset, err)
	}
	return coffer.Errorf(coffer.CodeInvalid, "body: %v", err)
}

func pathNamespace(r *http.Request) (coffer.Namespace, error) {
	ns, err := strconv.ParseInt(r.PathValue("namespace"), 10, 32)
	if err != nil || ns <= 0 {
		return 0, coffer.Errorf(coffer.CodeInvalid, "namespace: must be an integer id > 0, got %q", r.PathValue("namespace"))
	}
	return coffer.Namespace(ns), nil
}

func pathPlayer(r *http.Request) (coffer.Namespace, coffer.PlayerID, error) {
	ns, err := pathNamespace(r)
	if err != nil {
		return 0, 0, err
	}
	p, err := strconv.ParseInt(r.PathValue("player_id"), 10, 64)
	if err != nil || p <= 0 {
		return 0, 0, coffer.Errorf(coffer.CodeInvalid, "player_id: must be an integer id > 0, got %q", r.PathValue("player_id"))
	}
	return ns, coffer.PlayerID(p), nil
}

// params reads query parameters; the first malformed one is kept in err.
type params struct {
	v   url.Values
	err error
}

// query checks that r's query names only allowed parameters, each once.
func query(r *http.Request, allowed ...string) (*params, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, coffer.Errorf(coffer.CodeInvalid, "query: %v", err)
	}
	for name, vals := range v {
		ok := false
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			return nil, coffer.Errorf(coffer.CodeInvalid, "query: unknown parameter %q", name)
		}
		if len(vals) > 1 {
			return nil, coffer.Errorf(coffer.CodeInvalid, "query: %s given more than once", name)
		}
	}
	return &params{v: v}, nil
}

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
	n, err := strconv.ParseInt(p.v.Get(name), 10, 32)
	if err != nil {
		p.fail(name, "an integer")
	}
	return n
}
