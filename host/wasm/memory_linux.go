package wasm

import "syscall"

// mmapSupported: pool instances get mappedMemory.
const mmapSupported = true

// mapMemory reserves n bytes (rounded up to pages) of zeroed, readable and
// writable address space that is not charged to the commit limit until
// touched (MAP_NORESERVE).
func mapMemory(n uint64) ([]byte, error) {
	page := uint64(syscall.Getpagesize())
	n = max((n+page-1)/page*page, page)
	return syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
}

func unmapMemory(b []byte) { _ = syscall.Munmap(b) }
