package api

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
)

// Route is one rpc of the contract and its HTTP mapping.
type Route struct {
	// RPC is the method name, e.g. "Change".
	RPC string
	// Method and Path are the google.api.http rule, e.g. "POST" and
	// "/v1/namespaces/{namespace}/players/{player_id}/transactions". Path
	// variables name request fields and read as net/http patterns.
	Method, Path string
	// Body tells whether the request's other fields come in a JSON body.
	Body bool
	// Query names the query parameters the route takes: without a body,
	// the request's fields the path does not name; with one, none. Any
	// other parameter is refused, so that a write never goes through
	// with a parameter it ignored (?hold=true on a change).
	Query []string
	// Namespaced tells whether the path names a namespace, which the
	// permission then applies to. A call that names none addresses the
	// instance, and ops is one of the permissions that allow it.
	Namespaced bool
	// Permissions are those that allow the call: the calling client
	// needs one of them.
	Permissions []coffer.Permission
}

// The permissions that allow each rpc; Routes panics on an rpc missing
// here. A support agent's (support, support_write) allow what the
// console shows and corrects (docs/console.md); every client may read
// itself.
var (
	reads       = []coffer.Permission{coffer.PermRead, coffer.PermSupport}
	corrections = []coffer.Permission{coffer.PermWrite, coffer.PermSupportWrite}
	permissions = map[string][]coffer.Permission{
		"GetBalances": reads,
		"Change":      corrections,
		"BatchChange": {coffer.PermWrite},
		"Commit":      corrections,
		"Rollback":    corrections,
		"GetTrx":      reads,
		"Exchange":    {coffer.PermWrite},
		"Refund":      corrections,
		"Finlog":      reads,
		"Revenue":     {coffer.PermAdmin, coffer.PermSupport},
		"GetStatus":   {coffer.PermOps, coffer.PermSupport},
		"GetOrder":    reads,
		"GetClient":   coffer.Permissions,
	}
)

// Routes lists the Wallet rpcs in contract order, read from the compiled
// contract.
func Routes() []Route {
	methods := cofferv1.File_coffer_v1_wallet_proto.Services().ByName("Wallet").Methods()
	var out []Route
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		rule := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
		r := Route{RPC: string(m.Name()), Body: rule.GetBody() == "*", Permissions: permissions[string(m.Name())]}
		switch p := rule.GetPattern().(type) {
		case *annotations.HttpRule_Get:
			r.Method, r.Path = "GET", p.Get
		case *annotations.HttpRule_Post:
			r.Method, r.Path = "POST", p.Post
		}
		r.Namespaced = strings.Contains(r.Path, "{namespace}")
		if !r.Body {
			fields := m.Input().Fields()
			for j := 0; j < fields.Len(); j++ {
				if name := string(fields.Get(j).Name()); !strings.Contains(r.Path, "{"+name+"}") {
					r.Query = append(r.Query, name)
				}
			}
		}
		if r.Method == "" || len(r.Permissions) == 0 || r.Namespaced == slices.Contains(r.Permissions, coffer.PermOps) {
			panic(fmt.Sprintf("api: rpc %s needs a GET or POST rule and permissions, ops among them exactly when it names no namespace", r.RPC))
		}
		out = append(out, r)
	}
	return out
}

// Permissions are those that allow rpc (none for an unknown rpc).
func Permissions(rpc string) []coffer.Permission { return permissions[rpc] }
