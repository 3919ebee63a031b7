package migrate

import "strings"

// Statement is one SQL statement of a migration file and the line it starts
// on, for error messages.
type Statement struct {
	SQL  string
	Line int
}

// Split cuts a migration's SQL into statements at top-level semicolons. It
// knows PostgreSQL's lexical rules that can hide a semicolon: 'strings'
// (quotes doubled inside, and backslash escapes after E), "identifiers", $tag$ dollar
// quotes$tag$ (function bodies), -- line comments and nested /* block
// comments */. Statements that hold only comments are dropped. Bodies in
// the SQL-standard BEGIN ATOMIC … END form are not supported: write them
// with dollar quotes.
func Split(sql string) []Statement {
	var out []Statement
	start, line, startLine := 0, 1, 1
	emit := func(end int) {
		text := strings.TrimSpace(sql[start:end])
		if hasCode(text) {
			out = append(out, Statement{SQL: text, Line: startLine + leadingNewlines(sql[start:end])})
		}
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ';':
			emit(i)
			i++
			start, startLine = i, line
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !isIdentChar(sql[i-2]))
			i = skipQuoted(sql, i, '\'', escapes, &line)
		case c == '"':
			i = skipQuoted(sql, i, '"', false, &line)
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = skipBlockComment(sql, i, &line)
		case c == '$' && (i == 0 || !isIdentChar(sql[i-1])):
			i = skipDollarQuoted(sql, i, &line)
		default:
			i++
		}
	}
	emit(len(sql))
	return out
}

func isIdentChar(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// skipQuoted returns the index after the quoted text that starts at i.
func skipQuoted(sql string, i int, quote byte, backslashEscapes bool, line *int) int {
	for i++; i < len(sql); i++ {
		switch sql[i] {
		case '\n':
			*line++
		case '\\':
			if backslashEscapes {
				i++
				if i < len(sql) && sql[i] == '\n' {
					*line++
				}
			}
		case quote:
			if i+1 < len(sql) && sql[i+1] == quote {
				i++
				continue
			}
			return i + 1
		}
	}
	return len(sql)
}

func skipBlockComment(sql string, i int, line *int) int {
	depth := 0
	for i < len(sql) {
		switch {
		case strings.HasPrefix(sql[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(sql[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			if sql[i] == '\n' {
				*line++
			}
			i++
		}
	}
	return i
}

// skipDollarQuoted skips $tag$ … $tag$ starting at i; a $ that does not
// open a dollar quote (a $1 parameter) is skipped alone.
func skipDollarQuoted(sql string, i int, line *int) int {
	j := i + 1
	for j < len(sql) && sql[j] != '$' && (isIdentChar(sql[j]) && sql[j] != '$') {
		j++
	}
	if j >= len(sql) || sql[j] != '$' || (j > i+1 && sql[i+1] >= '0' && sql[i+1] <= '9') {
		return i + 1
	}
	tag := sql[i : j+1]
	end := strings.Index(sql[j+1:], tag)
	if end < 0 {
		*line += strings.Count(sql[j+1:], "\n")
		return len(sql)
	}
	*line += strings.Count(sql[j+1:j+1+end], "\n")
	return j + 1 + end + len(tag)
}

// hasCode tells whether s holds anything but whitespace and comments.
func hasCode(s string) bool {
	for i := 0; i < len(s); {
		switch {
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r':
			i++
		case strings.HasPrefix(s[i:], "--"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			var line int
			i = skipBlockComment(s, i, &line)
		default:
			return true
		}
	}
	return false
}

func leadingNewlines(s string) int {
	n := 0
	for _, c := range s {
		switch c {
		case '\n':
			n++
		case ' ', '\t', '\r':
		default:
			return n
		}
	}
	return n
}
