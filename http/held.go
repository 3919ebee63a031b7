package http

import (
	"io"

	"github.com/cofferhq/coffer/shed"
)

// heldBody is a request body whose bytes are held in a shed.Budget while
// its call runs: the length it declares at once, up to the largest body
// any call reads, so that a body sent slowly holds what it will need
// before the others fill the budget, and what it sends beyond that as it
// is read. A read past the budget fails overloaded.
type heldBody struct {
	io.ReadCloser
	budget     *shed.Budget
	read, held int64
}

// holdBody puts r's body in budget, declaring its length up to bytesMax.
// Errors: overloaded. The caller must release it, even after an error.
func holdBody(body io.ReadCloser, declared, bytesMax int64, budget *shed.Budget) (*heldBody, error) {
	b := &heldBody{ReadCloser: body, budget: budget}
	return b, b.hold(min(declared, bytesMax))
}

// hold takes bytes up to total from the budget, beyond those held.
func (b *heldBody) hold(total int64) error {
	more := total - b.held
	if more <= 0 {
		return nil
	}
	if err := b.budget.Take(more); err != nil {
		return err
	}
	b.held = total
	return nil
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if herr := b.hold(b.read); herr != nil {
		return n, herr
	}
	return n, err
}

// release gives back every byte held.
func (b *heldBody) release() {
	b.budget.Give(b.held)
	b.held = 0
}
