// Package api holds coffer's API contract: api/coffer/v1/wallet.proto, the
// Go code generated from it (package cofferv1), the OpenAPI document of
// its HTTP/JSON routes, and what both transports read alike off the wire:
// the JSON bodies, the API key, a request id, a batch's changes.
package api

import _ "embed"

//go:generate go run ../internal/apigen

// OpenAPI is the OpenAPI 3.0 document of the HTTP/JSON API, generated from
// the contract; the server publishes it at /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
