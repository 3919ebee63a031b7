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

// ClientInfo is what GetClient answers: the calling client, and for a
// support agent's every client's name by emitter, so that the console
// names who wrote each trx.
type ClientInfo struct {
	Name        string              `json:"name"`
	Emitter     coffer.Emitter      `json:"emitter"`
	Namespaces  []coffer.Namespace  `json:"namespaces"`
	Permissions []coffer.Permission `json:"permissions"`
	Clients     []coffer.ClientName `json:"clients,omitempty"`
}

// NewClientInfo is c as GetClient answers it, among the clients cs.
func NewClientInfo(c *coffer.Client, cs *coffer.Clients) ClientInfo {
	info := ClientInfo{Name: c.Name, Emitter: c.Emitter, Namespaces: append([]coffer.Namespace{}, c.Namespaces...), Permissions: c.Permissions}
	if c.AllowPermission(coffer.PermSupport) == nil {
		info.Clients = cs.Names()
	}
	return info
}
