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
	// sqlstateUndefinedTable is what a statement gets on a shard's copy
	// that a move has cut over: the mover renamed its tables.
	sqlstateUndefinedTable = "42P01"
	// sqlstateShardFence is what a write gets on a shard's copy that a
	// move is still filling (the schema's shard_move_fence).
	sqlstateShardFence = "CF001"

	classConnectionException  = "08"
	classOperatorIntervention = "57"
	classDataException        = "22"
	classIntegrityViolation   = "23"
	classProgramLimitExceeded = "54"
)
