package api

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// RequestIDLenMax bounds the request id a caller may choose.
const RequestIDLenMax = 64

// RequestID is the id of a call, as its answer and log line name it: the
// caller's own (HTTP X-Request-Id, gRPC x-request-id) when it is 1–64
// bytes of printable ASCII, which a log and a header carry as they are;
// else a new random one. Both transports take it from here, so a caller
// sees one rule whichever it uses.
func RequestID(given string) string {
	if len(given) > 0 && len(given) <= RequestIDLenMax && strings.IndexFunc(given, func(c rune) bool { return c <= ' ' || c > '~' }) < 0 {
		return given
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
