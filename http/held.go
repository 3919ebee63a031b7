package http

import (
	"io"

	"github.com/cofferhq/coffer/shed"
)

// heldBody is a request body whose bytes are held in a shed.Budget from
// when they are read, as they arrive, until its call is answered: the
// budget bounds what bodies take, those still arriving included (a client
// that sends its body slowly holds what it has sent, for up to the read
// timeout), and what decoding them takes, many times their size. A read
// that would pass the budget fails with overloaded instead of giving the
// bytes.
type heldBody struct {
	io.ReadCloser
	budget *shed.Budget
	held   int64
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		if herr := b.budget.Take(int64(n)); herr != nil {
			return 0, herr
		}
		b.held += int64(n)
	}
	return n, err
}

// release gives back the bytes held. A call without a body (a read)
// holds none, and leaves the budget's shared counter alone.
func (b *heldBody) release() {
	if b.held > 0 {
		b.budget.Give(b.held)
		b.held = 0
	}
}
