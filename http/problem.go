package http

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/http/httpstatus"
	"github.com/cofferhq/coffer/shard"
)

// Problem is an RFC 9457 problem details body with coffer's stable code.
type Problem struct {
	Type      string      `json:"type"`
	Title     string      `json:"title"`
	Status    int         `json:"status"`
	Detail    string      `json:"detail,omitempty"`
	Code      coffer.Code `json:"code"`
	RequestID string      `json:"request_id,omitempty"`
}

// problem writes err as problem+json and returns the status. An internal
// error's detail is not shown: it may name tables or hosts; the log has it.
func (s *Server) problem(w http.ResponseWriter, _ *http.Request, requestID string, err error) int {
	p := problemOf(err, requestID)
	// Both 503s are worth a retry with the same key about a second later:
	// a down database is tried again after shard.DownCooldown, and an
	// overloaded instance has usually freed a slot by then.
	if p.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(shard.DownCooldown.Seconds())))
	}
	raw, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(raw, '\n'))
	return p.Status
}

// problemOf is err as a problem details body: a call's error, or one
// change's in a batch.
func problemOf(err error, requestID string) *Problem {
	code := coffer.ErrorCode(err)
	status, ok := httpstatus.Of(code)
	if !ok {
		code, status = coffer.CodeInternal, http.StatusInternalServerError
	}
	p := &Problem{
		Type:      "https://github.com/cofferhq/coffer/blob/main/docs/api.md#" + string(code),
		Title:     http.StatusText(status),
		Status:    status,
		Code:      code,
		RequestID: requestID,
	}
	var e *coffer.Error
	if errors.As(err, &e) && code != coffer.CodeInternal {
		p.Detail = e.Message
	} else {
		p.Detail = "internal error; the server log has the details under this request_id"
	}
	return p
}
