package coffer

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// SupportMetaName is the member of a support write's meta that names the
// support client which made it: coffer sets it, so that the trx and the
// finlog show who corrected the balance, and refuses it from the client.
const SupportMetaName = "support"

// SupportChange is req as a change of client c: unchanged for a client
// that is not a support agent's (Client.Support); for one that is, a
// correction, which must say why (a reason) and whose meta gets the
// member SupportMetaName, {"client": c.Name}. What else is wrong with the
// meta, Catalog.ValidateChange says. Errors: invalid_argument.
func (c *Client) SupportChange(req ChangeRequest) (ChangeRequest, error) {
	if !c.Support() {
		return req, nil
	}
	if strings.TrimSpace(req.Reason) == "" {
		return req, Errorf(CodeInvalid, "reason: required for a support write: say why the balance is corrected")
	}
	name, _ := json.Marshal(c.Name)
	stamp := `"` + SupportMetaName + `":{"client":` + string(name) + `}`
	raw := bytes.TrimSpace(req.Meta)
	if len(raw) == 0 || string(raw) == "null" {
		req.Meta = json.RawMessage("{" + stamp + "}")
		return req, nil
	}
	v, err := ParseJSON(raw, MetaDepthMax)
	if err != nil || v.Kind != JSONObject {
		return req, nil // not an object: ValidateChange refuses it
	}
	if slices.Contains(v.Names, SupportMetaName) {
		return req, Errorf(CodeInvalid, "meta.%s: set by coffer for a support write, not by the client", SupportMetaName)
	}
	sep := ","
	if len(v.Names) == 0 {
		sep = ""
	}
	req.Meta = json.RawMessage("{" + stamp + sep + string(raw[1:]))
	return req, nil
}

// SupportRefund checks a refund of client c: a support agent's must say
// why (a reason); its trx names the agent's client by its emitter. Errors:
// invalid_argument.
func (c *Client) SupportRefund(req RefundRequest) error {
	if c.Support() && strings.TrimSpace(req.Reason) == "" {
		return Errorf(CodeInvalid, "reason: required for a support write: say why the order is taken back")
	}
	return nil
}
