package shard

import (
	"strconv"
	"strings"

	"github.com/cofferhq/coffer"
)

// Tables names shard id's tables in sql, which names every shard table
// with the suffix _N: trx_N becomes trx_7. Every statement on a shard's
// tables goes through it, so that the suffix has one spelling.
func Tables(sql string, id coffer.ShardID) string {
	return strings.ReplaceAll(sql, "_N", "_"+strconv.Itoa(int(id)))
}
