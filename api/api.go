// Package api holds coffer's API contract: api/coffer/v1/wallet.proto, the
// Go code generated from it (package cofferv1) and the OpenAPI document of
// its HTTP/JSON routes.
package api

import _ "embed"

//go:generate go run ../internal/apigen

// OpenAPI is the OpenAPI 3.0 document of the HTTP/JSON API, generated from
// the contract; the server publishes it at /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
