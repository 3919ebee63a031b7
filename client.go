package coffer

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Permission is what a client may do in its namespaces, or, for ops, on
// the instance. Permissions do not imply one another: a support tool that
// reads and reports needs read and admin.
type Permission string

// Permissions: read balances, trx and finlog; write (change, hold,
// exchange); admin (revenue report) in a namespace; ops (instance status,
// which shows every database) on the deployment, in no namespace: an admin
// of one namespace must not see the rest of the deployment.
//
// Support and SupportWrite are a support agent's, through the console
// (docs/console.md): support reads what read and admin read, any client's
// trx, and the instance's status; support_write makes the corrections —
// a change, a refund, another client's hold committed or rolled back —
// each a support write (Client.Support).
const (
	PermRead         Permission = "read"
	PermWrite        Permission = "write"
	PermAdmin        Permission = "admin"
	PermOps          Permission = "ops"
	PermSupport      Permission = "support"
	PermSupportWrite Permission = "support_write"
)

// Permissions lists every permission.
var Permissions = []Permission{PermRead, PermWrite, PermAdmin, PermOps, PermSupport, PermSupportWrite}

// KeyHash is the SHA-256 of an API key. API keys are random and long, so a
// fast hash is enough; only hashes are configured or kept in memory.
type KeyHash [sha256.Size]byte

// HashKey hashes an API key.
func HashKey(key string) KeyHash { return sha256.Sum256([]byte(key)) }

// ParseKeyHash reads a hex SHA-256 as written in the config.
func ParseKeyHash(s string) (KeyHash, error) {
	var h KeyHash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("a key hash is 64 hex digits (the SHA-256 of the key)")
	}
	copy(h[:], b)
	return h, nil
}

// Client is a calling backend, named by its API keys (several, so that a
// key can be rotated). Its Emitter scopes its idempotency keys.
type Client struct {
	Name        string
	Emitter     Emitter
	KeyHashes   []KeyHash
	Namespaces  []Namespace
	Permissions []Permission
}

// Allow checks that the client may act in namespace ns with one of the
// permissions ps (a call names those that allow it). Errors:
// permission_denied.
func (c *Client) Allow(ns Namespace, ps ...Permission) error {
	if err := c.AllowPermission(ps...); err != nil {
		return err
	}
	if !slices.Contains(c.Namespaces, ns) {
		return Errorf(CodePermissionDenied, "client %s may not use namespace %d", c.Name, ns)
	}
	return nil
}

// AllowPermission checks that the client has one of the permissions ps,
// whatever the namespace: for calls that address the instance rather than
// a namespace (PermOps), and for a request refused before its namespace
// could be read. Errors: permission_denied.
func (c *Client) AllowPermission(ps ...Permission) error {
	for _, p := range ps {
		if slices.Contains(c.Permissions, p) {
			return nil
		}
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = string(p)
	}
	return Errorf(CodePermissionDenied, "client %s lacks the %s permission", c.Name, strings.Join(names, " or "))
}

// Support tells whether the client is a support agent's: its writes are
// support writes, each with a reason, which its trx keep with its name
// (SupportMeta).
func (c *Client) Support() bool { return slices.Contains(c.Permissions, PermSupportWrite) }

// TrxEmitter is the emitter of the trx a call of the client names: its
// own when other is 0 or its own, else another client's, which only a
// support agent may name, with permission p (PermSupport to read the
// trx, PermSupportWrite to commit or roll back the hold). A negative
// emitter names no client (every client's is > 0). Errors:
// invalid_argument, permission_denied.
func (c *Client) TrxEmitter(ns Namespace, other Emitter, p Permission) (Emitter, error) {
	switch {
	case other < 0:
		return 0, Errorf(CodeInvalid, "emitter: must be ≥ 0 (0: the calling client's trx), got %d", other)
	case other == 0 || other == c.Emitter:
		return c.Emitter, nil
	}
	if err := c.Allow(ns, p); err != nil {
		return 0, Errorf(CodePermissionDenied, "client %s may name another client's trx only with the %s permission", c.Name, p)
	}
	return other, nil
}

// Clients authenticates API keys. It is read-only once built and safe for
// concurrent use.
type Clients struct{ list []*Client }

// NewClients checks clients: names, emitters and key hashes unique, every
// permission known, every namespace > 0, and namespaces given unless the
// client's only permission is ops.
func NewClients(list []Client) (*Clients, error) {
	cs := &Clients{}
	names, emitters, hashes := map[string]bool{}, map[Emitter]bool{}, map[KeyHash]bool{}
	for i := range list {
		c := list[i]
		switch {
		case c.Name == "" || names[c.Name]:
			return nil, fmt.Errorf("clients[%d].name: must be set and unique", i)
		case c.Emitter <= 0 || emitters[c.Emitter]:
			return nil, fmt.Errorf("clients[%d].emitter: must be > 0 and unique, since it scopes idempotency keys", i)
		case len(c.KeyHashes) == 0:
			return nil, fmt.Errorf("clients[%d]: needs at least one key hash", i)
		case len(c.Permissions) == 0:
			return nil, fmt.Errorf("clients[%d]: needs permissions", i)
		case len(c.Namespaces) == 0 && !(len(c.Permissions) == 1 && c.Permissions[0] == PermOps):
			return nil, fmt.Errorf("clients[%d]: needs namespaces (only a client whose one permission is ops needs none)", i)
		}
		for _, h := range c.KeyHashes {
			if hashes[h] {
				return nil, fmt.Errorf("clients[%d]: a key hash is used twice", i)
			}
			hashes[h] = true
		}
		for _, p := range c.Permissions {
			if !slices.Contains(Permissions, p) {
				return nil, fmt.Errorf("clients[%d].permissions: %q is not read, write, admin, ops, support or support_write", i, p)
			}
		}
		if c.Support() && slices.Contains(c.Permissions, PermWrite) {
			// Every write of a support client is a support write, with
			// a reason and its name: a game's backend is another client.
			return nil, fmt.Errorf("clients[%d].permissions: support_write and write: give the support console a client of its own", i)
		}
		for _, ns := range c.Namespaces {
			if ns <= 0 {
				return nil, fmt.Errorf("clients[%d].namespaces: ids must be > 0", i)
			}
		}
		names[c.Name], emitters[c.Emitter] = true, true
		cs.list = append(cs.list, &c)
	}
	return cs, nil
}

// ClientName is a client's name and emitter, and whether it is a support
// client (Client.Support): what a support agent sees of the clients, to
// tell who wrote a trx.
type ClientName struct {
	Emitter Emitter `json:"emitter"`
	Name    string  `json:"name"`
	Support bool    `json:"support,omitempty"`
}

// Names lists every client's name, in the config's order.
func (cs *Clients) Names() []ClientName {
	out := make([]ClientName, len(cs.list))
	for i, c := range cs.list {
		out[i] = ClientName{Emitter: c.Emitter, Name: c.Name, Support: c.Support()}
	}
	return out
}

// Authenticate finds the client of an API key. Every configured hash is
// compared in constant time, so timing tells nothing of which key nearly
// matched. Errors: unauthenticated.
func (cs *Clients) Authenticate(key string) (*Client, error) {
	if key == "" {
		return nil, Errorf(CodeUnauthenticated, "an API key is required: Authorization: Bearer KEY")
	}
	h := HashKey(key)
	var found *Client
	for _, c := range cs.list {
		for _, kh := range c.KeyHashes {
			if subtle.ConstantTimeCompare(h[:], kh[:]) == 1 {
				found = c
			}
		}
	}
	if found == nil {
		return nil, Errorf(CodeUnauthenticated, "unknown API key")
	}
	return found, nil
}
