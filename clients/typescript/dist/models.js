// The requests coffer takes and the answers it gives (docs/api.md), with
// the API's own field names. Times are RFC 3339 strings, as sent: a Date
// keeps milliseconds, coffer keeps microseconds. Amounts are numbers; an
// answer holding an integer beyond Number.MAX_SAFE_INTEGER (2^53 - 1),
// which a number cannot hold exactly, is refused (Client).
export {};
