package main

import (
	"encoding/hex"
	"fmt"
	"io"

	"github.com/cofferhq/coffer"
)

// runKeygen is `coffer keygen`: a new random API key for a client, and the
// SHA-256 that goes in its key_sha256 list. coffer never stores the key.
func runKeygen(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "coffer keygen: takes no arguments")
		return 2
	}
	key := newAPIKey()
	h := coffer.HashKey(key)
	fmt.Fprintf(stdout, "key:        %s\nkey_sha256: %s\n", key, hex.EncodeToString(h[:]))
	return 0
}
