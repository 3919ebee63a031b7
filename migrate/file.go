// Package migrate is coffer's schema migration engine, compatible with
// sdbmigrate: the same file names, config keys and state tables, so that a
// deployment can move from one tool to the other in either direction.
package migrate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Migration is one migration file.
type Migration struct {
	Version int64
	// Name is the file name, as recorded in _sdbmigrate_migrations.
	Name string
	// Trx runs the migration in one transaction per database (TRX);
	// otherwise statement by statement outside a transaction (NOTRX), as
	// CREATE INDEX CONCURRENTLY needs.
	Trx bool
	// Shard runs the SQL once per shard of the database, with <shard_id>
	// replaced (SHARD); otherwise once (PLAIN).
	Shard bool
	SQL   string
	// Checksum is the SHA-256 of the file, to refuse a file edited after it
	// was applied.
	Checksum string
}

// namePattern is sdbmigrate's file name pattern, with any number of version
// digits (sdbmigrate writes four).
var namePattern = regexp.MustCompile(`^V([0-9]+)__([A-Z]+)_([A-Z]+)__([a-z0-9_]+)\.([a-z]+)$`)

// Load reads the migrations in the root of fsys, sorted by version. dir
// names the directory in errors. Hidden files and subdirectories are
// ignored; any other file must match the sdbmigrate pattern.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations dir %s: %w", dir, err)
	}
	var out []Migration
	byVersion := map[int64]string{}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m, err := parseName(e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations dir %s: %w", dir, err)
		}
		if other, dup := byVersion[m.Version]; dup {
			return nil, fmt.Errorf("migrations dir %s: %s and %s have the same version %d; give each migration its own version", dir, other, m.Name, m.Version)
		}
		byVersion[m.Version] = m.Name
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations dir %s: %w", dir, err)
		}
		sum := sha256.Sum256(body)
		m.SQL, m.Checksum = string(body), hex.EncodeToString(sum[:])
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

func parseName(name string) (Migration, error) {
	g := namePattern.FindStringSubmatch(name)
	if g == nil {
		return Migration{}, fmt.Errorf("%s: file name does not match V{version}__{TRX|NOTRX}_{PLAIN|SHARD}__{name}.sql (name in lowercase letters, digits and _)", name)
	}
	m := Migration{Name: name}
	var err error
	if m.Version, err = strconv.ParseInt(g[1], 10, 64); err != nil {
		return Migration{}, fmt.Errorf("%s: version %s is not a 63-bit integer", name, g[1])
	}
	switch g[2] {
	case "TRX":
		m.Trx = true
	case "NOTRX":
	default:
		return Migration{}, fmt.Errorf("%s: %s must be TRX or NOTRX", name, g[2])
	}
	switch g[3] {
	case "SHARD":
		m.Shard = true
	case "PLAIN":
	default:
		return Migration{}, fmt.Errorf("%s: %s must be PLAIN or SHARD", name, g[3])
	}
	switch g[5] {
	case "sql":
	case "py":
		return Migration{}, fmt.Errorf("%s: Python migrations are sdbmigrate-only; coffer runs .sql migrations", name)
	default:
		return Migration{}, fmt.Errorf("%s: extension .%s is not .sql", name, g[5])
	}
	return m, nil
}

// ErrExists is returned by Generate when the file is already there.
var ErrExists = errors.New("migration file already exists")
