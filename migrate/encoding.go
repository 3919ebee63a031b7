package migrate

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// checkEncoding refuses a database whose encoding is not UTF8. coffer
// bounds text in characters of UTF-8 (an idempotency key's 128) and the
// schema checks the same bounds in the database's encoding: in SQL_ASCII a
// character is a byte, and LATIN1 cannot hold most characters at all, so
// a request coffer accepted would fail in the database, as internal. The
// server reports its encoding when a connection starts: no round trip.
// It is the first check of plan, which Apply, Status and Verify share.
func checkEncoding(s *session) error {
	if enc := s.conn.PgConn().ParameterStatus("server_encoding"); enc != "UTF8" {
		return fmt.Errorf("the database's encoding is %s; coffer needs UTF8 (CREATE DATABASE %s ENCODING 'UTF8' TEMPLATE template0)",
			enc, pgx.Identifier{s.db.Config.Name}.Sanitize())
	}
	return nil
}
