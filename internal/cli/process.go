package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Main runs the program on the process's arguments and standard streams,
// and returns the exit status, for os.Exit. SIGINT and SIGTERM cancel the
// command's context, so that a service drains and exits 0 and a tool
// reports what it measured so far, rather than dying mid-write.
func (p Program) Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return p.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}
