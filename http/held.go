package http

import (
	"errors"
	"io"

	"github.com/cofferhq/coffer/shed"
)

// heldBody is a request body whose bytes are held in a shed.Budget from
// when it has been read in full until its call is answered: the budget
// bounds what decoding bodies takes, many times their size. A body still
// arriving holds nothing, so clients that send slowly cannot fill the
// budget (their calls hold slots in the Gate, and reading is bounded by
// the server's read timeout); a body past the budget reads as
// overloaded instead of its end.
type heldBody struct {
	io.ReadCloser
	budget     *shed.Budget
	read, held int64
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if errors.Is(err, io.EOF) && b.held == 0 && b.read > 0 {
		if herr := b.budget.Take(b.read); herr != nil {
			return n, herr
		}
		b.held = b.read
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
