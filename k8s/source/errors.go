package source

import "errors"

var (
	// ErrInvalidConfig occurs when New is given a Config it cannot run
	// with; the error names the field and the reason.
	ErrInvalidConfig = errors.New("invalid config")

	// ErrAlreadyRunning occurs when Run is called on a Source that runs
	// or ran already: a Source runs once.
	ErrAlreadyRunning = errors.New("source already running")
)
