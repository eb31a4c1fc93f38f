package parallel

import (
	"fmt"
	"runtime/debug"
)

// PanicError is a panic turned into an error: a bug in memstat, never the
// input's fault, reported as one line (the stack is kept for those who ask
// for it, see root.Main) instead of a Go stack trace or, worse, an exit 0
// after a worker unwound into a zero result.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("internal error: %v", e.Value) }

// Recovered turns the value of recover() into a *PanicError with the
// stack of the panicking goroutine; nil stays nil. Call it in a deferred
// function directly: `if err := parallel.Recovered(recover()); ...`.
func Recovered(v any) *PanicError {
	if v == nil {
		return nil
	}
	return &PanicError{Value: v, Stack: debug.Stack()}
}
