package wasi

import "syscall"

const mapNoReserve = syscall.MAP_NORESERVE
