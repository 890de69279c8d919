//go:build !unix

package userfile

import "testing"

// fifo skips the test: named pipes are a Unix thing.
func fifo(t *testing.T) string {
	t.Skip("no named pipes here")
	return ""
}
