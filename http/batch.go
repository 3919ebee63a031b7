package http

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
)

// batchResponse is the answer to a batch: one result per change, in
// request order.
type batchResponse struct {
	Results []batchResult `json:"results"`
}

// batchResult is what the change sent alone would have answered: its
// status, and its trx or its problem details.
type batchResult struct {
	Status int         `json:"status"`
	Trx    *coffer.Trx `json:"trx,omitempty"`
	Replay bool        `json:"replay,omitempty"`
	Error  *Problem    `json:"error,omitempty"`
}

// batchChange applies a batch. The envelope (namespace, body size, count)
// fails the call; each change is decoded on its own, so that a malformed
// one is answered invalid_argument alone and the others still apply.
func (s *Server) batchChange(r *http.Request, c *coffer.Client) (int, any, error) {
	ns, err := pathNamespace(r)
	if err != nil {
		return 0, nil, err
	}
	var body struct {
		Changes []json.RawMessage `json:"changes"`
	}
	if err := decodeBody(r, &body, true, s.BatchBodyBytesMax); err != nil {
		return 0, nil, err
	}
	if err := coffer.ValidateBatchSize(len(body.Changes)); err != nil {
		return 0, nil, err
	}
	reqs := make([]coffer.ChangeRequest, len(body.Changes))
	errs := make([]error, len(body.Changes))
	for i, raw := range body.Changes {
		var change api.BatchChangeBody
		if errs[i] = api.ValidateChangeSize(len(raw), int(s.BodyBytesMax)); errs[i] != nil {
			continue
		}
		if errs[i] = decodeJSON(bytes.NewReader(raw), &change, true); errs[i] == nil {
			reqs[i], errs[i] = change.Request(ns, c.Emitter)
		}
	}
	results, err := api.BatchDecoded(r.Context(), s.Ledger, reqs, errs)
	if err != nil {
		return 0, nil, err
	}
	id := callOf(r).id
	out := batchResponse{Results: make([]batchResult, len(results))}
	for i, res := range results {
		s.Metrics.BatchChange(res.Err)
		out.Results[i] = newBatchResult(res, id)
	}
	s.logBatchFailures(r, id, results)
	return http.StatusOK, out, nil
}

func newBatchResult(res coffer.ChangeResult, requestID string) batchResult {
	switch {
	case res.Err != nil:
		p := problemOf(res.Err, requestID)
		return batchResult{Status: p.Status, Error: p}
	case res.Replay:
		return batchResult{Status: http.StatusOK, Trx: &res.Trx, Replay: true}
	}
	return batchResult{Status: http.StatusCreated, Trx: &res.Trx}
}

// logBatchFailures logs, as an error, the changes of a batch that failed
// on the server's side (api.BatchFailures): one line per batch.
func (s *Server) logBatchFailures(r *http.Request, id string, results []coffer.ChangeResult) {
	if attrs := api.BatchFailures(results); attrs != nil {
		s.Logger.LogAttrs(r.Context(), slog.LevelError, "batch changes failed",
			append(attrs, slog.String("request_id", id), slog.String("transport", "http"))...)
	}
}
