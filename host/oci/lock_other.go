//go:build !unix

package oci

import "sync"

var storeMu sync.Mutex

// lockFile serialises index updates within the process only on platforms
// without flock.
func lockFile(string) (func(), error) {
	storeMu.Lock()
	return storeMu.Unlock, nil
}
