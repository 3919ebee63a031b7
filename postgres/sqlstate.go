package postgres

// The SQLSTATEs coffer acts on (PostgreSQL's Appendix A), each named once:
// the codes in full, the classes by their first two characters.
const (
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateUniqueViolation      = "23505"
	// sqlstateLockNotAvailable is a lock wait cut by lock_timeout.
	sqlstateLockNotAvailable   = "55P03"
	sqlstateTooManyConnections = "53300"
	// sqlstateReadOnlyTransaction is what a write gets on a standby or a
	// read-only server.
	sqlstateReadOnlyTransaction = "25006"

	classConnectionException  = "08"
	classOperatorIntervention = "57"
	classDataException        = "22"
	classIntegrityViolation   = "23"
	classProgramLimitExceeded = "54"
)
