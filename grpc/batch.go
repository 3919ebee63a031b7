package grpc

import (
	"context"
	"log/slog"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// BatchChange implements the rpc of the same name: many changes for many
// players of one namespace, answered per change in request order. The
// envelope fails the call; a change that fails gets its own error, as the
// same change sent alone would.
func (s *Server) BatchChange(ctx context.Context, req *cofferv1.BatchChangeRequest) (*cofferv1.BatchChangeResponse, error) {
	if err := coffer.ValidateBatchSize(len(req.Changes)); err != nil {
		return nil, err
	}
	reqs := make([]coffer.ChangeRequest, len(req.Changes))
	errs := make([]error, len(req.Changes))
	for i, c := range req.Changes {
		if errs[i] = api.ValidateChangeSize(proto.Size(c), s.MessageBytesMax); errs[i] != nil {
			continue
		}
		if errs[i] = unknownFieldError(c); errs[i] != nil {
			continue
		}
		reqs[i], errs[i] = changeRequest(&cofferv1.ChangeRequest{Namespace: req.Namespace, PlayerId: c.PlayerId,
			IdempotencyKey: c.IdempotencyKey, Ops: c.Ops, Reason: c.Reason, Meta: c.Meta, Hold: c.Hold, HoldTtlSeconds: c.HoldTtlSeconds},
			scope(ctx, req.Namespace, c.PlayerId, c.IdempotencyKey))
	}
	results, err := api.BatchDecoded(ctx, s.Ledger, reqs, errs)
	if err != nil {
		return nil, err
	}
	id, _ := ctx.Value(requestIDKey{}).(string)
	out := &cofferv1.BatchChangeResponse{Results: make([]*cofferv1.BatchChangeResult, len(results))}
	for i := range results {
		r := &cofferv1.BatchChangeResult{Replay: results[i].Replay}
		if results[i].Err == nil {
			// A trx whose meta does not convert fails alone, as
			// it would alone.
			r.Trx, results[i].Err = toTrx(results[i].Trx)
		}
		if err := results[i].Err; err != nil {
			r.Trx, r.Replay = nil, false
			r.Error = status.Convert(toStatus(err, id)).Proto()
		}
		s.Metrics.BatchChange(results[i].Err)
		out.Results[i] = r
	}
	s.logBatchFailures(ctx, id, results)
	return out, nil
}

// logBatchFailures logs, as an error, the changes of a batch that failed
// on the server's side (api.BatchFailures): one line per batch.
func (s *Server) logBatchFailures(ctx context.Context, id string, results []coffer.ChangeResult) {
	if attrs := api.BatchFailures(results); attrs != nil {
		s.Logger.LogAttrs(ctx, slog.LevelError, "batch changes failed",
			append(attrs, slog.String("request_id", id), slog.String("transport", "grpc"))...)
	}
}
