package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// ConfirmingConsumer reads a temporary logical slot of the database at
// dsn, as application "other-consumer", and confirms every position the
// server sends it, as a subscription that applies what it receives
// elsewhere (a shard move's) does. The function stops it.
func ConfirmingConsumer(t testing.TB, dsn string) (stop func()) {
	t.Helper()
	ctx := context.Background()
	fatal := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgconn.ParseConfig(dsn)
	fatal(err)
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "other-consumer"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	fatal(err)
	fatal(conn.Exec(ctx, "CREATE PUBLICATION other_consumer").Close())
	_, err = pglogrepl.CreateReplicationSlot(ctx, conn, "other_consumer", "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	fatal(err)
	fatal(pglogrepl.StartReplication(ctx, conn, "other_consumer", 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'other_consumer'"}}))
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var pos pglogrepl.LSN
		for cctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(cctx, time.Second)
			msg, err := conn.ReceiveMessage(rctx)
			rcancel()
			if err != nil && !pgconn.Timeout(err) {
				return
			}
			if cd, ok := msg.(*pgproto3.CopyData); ok {
				switch cd.Data[0] {
				case pglogrepl.PrimaryKeepaliveMessageByteID:
					if ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:]); err == nil {
						pos = max(pos, ka.ServerWALEnd)
					}
				case pglogrepl.XLogDataByteID:
					if x, err := pglogrepl.ParseXLogData(cd.Data[1:]); err == nil {
						pos = max(pos, x.ServerWALEnd)
					}
				}
			}
			if pos > 0 && pglogrepl.SendStandbyStatusUpdate(cctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}) != nil {
				return
			}
		}
	}()
	stop = func() {
		cancel()
		<-done
		_ = conn.Close(ctx)
	}
	t.Cleanup(stop)
	return stop
}
