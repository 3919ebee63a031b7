package api

import (
	"strings"

	"github.com/cofferhq/coffer"
)

// APIKey reads the API key from the values of a request's Authorization
// header (gRPC: its authorization metadata): one value, the scheme Bearer
// in any case (RFC 9110 §11.1), spaces, the key. A bare key, another
// scheme, or two values are refused rather than guessed at. Errors:
// unauthenticated.
func APIKey(authorization []string) (string, error) {
	if len(authorization) != 1 {
		return "", coffer.Errorf(coffer.CodeUnauthenticated, "an API key is required, in one header: Authorization: Bearer KEY")
	}
	scheme, key, _ := strings.Cut(authorization[0], " ")
	key = strings.TrimSpace(key)
	if !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", coffer.Errorf(coffer.CodeUnauthenticated, "an API key is required: Authorization: Bearer KEY")
	}
	return key, nil
}
