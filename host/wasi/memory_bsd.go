//go:build darwin || freebsd

package wasi

const mapNoReserve = 0
