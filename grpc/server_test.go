package grpc

import (
	"errors"
	"testing"

	"github.com/cofferhq/coffer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStatusForEveryCode: every code maps to its gRPC code and comes back
// from the status as the ErrorInfo reason; internal shows no detail.
func TestStatusForEveryCode(t *testing.T) {
	for _, code := range coffer.Codes {
		err := toStatus(coffer.Errorf(code, "secret detail"), "rid")
		st, _ := status.FromError(err)
		if _, ok := codeOf[code]; !ok || st.Code() != codeOf[code] || Code(err) != code {
			t.Errorf("%s: %v (reason %q)", code, err, Code(err))
		}
		if (code == coffer.CodeInternal) == (st.Message() == "secret detail") {
			t.Errorf("%s: message %q", code, st.Message())
		}
	}
	if err := toStatus(errors.New("bare"), "rid"); status.Code(err) != codes.Internal || Code(err) != coffer.CodeInternal {
		t.Errorf("bare error: %v", err)
	}
	if Code(errors.New("not a status")) != "" {
		t.Error("Code of a non-status error")
	}
}
