// Command wasirun runs a WASI (preview 1) command module with wazero, the
// runtime tollgate's host uses, passing stdout and stderr through; the exit
// code is the module's. With -stats it also prints, on stderr, the module's
// size, the time wazero took to compile it (no compilation cache: a cold
// start) and the time the run took. scripts/build-map-tinygo.sh --check runs
// the TinyGo probes with it. It must not know about policies.
//
//	wasirun [-stats] module.wasm [args...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

func main() {
	stats := flag.Bool("stats", false, "print size, compile and run time on stderr")
	flag.Usage = func() { fmt.Fprintln(os.Stderr, "usage: wasirun [-stats] module.wasm [args...]") }
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Arg(0), flag.Args(), *stats))
}

func run(path string, args []string, stats bool) int {
	wasm, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasirun:", err)
		return 2
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	start := time.Now()
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasirun:", err)
		return 1
	}
	compile := time.Since(start)
	cfg := wazero.NewModuleConfig().WithStdout(os.Stdout).WithStderr(os.Stderr).WithArgs(args...).
		WithSysWalltime().WithSysNanotime()
	start = time.Now()
	_, err = rt.InstantiateModule(ctx, compiled, cfg)
	if stats {
		fmt.Fprintf(os.Stderr, "wasirun: %s: %d bytes, compiled in %v, ran in %v\n", path, len(wasm),
			compile.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		var exit *sys.ExitError
		if errors.As(err, &exit) {
			return int(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "wasirun:", err)
		return 1
	}
	return 0
}
