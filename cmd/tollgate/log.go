package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/tollgate-dev/tollgate/host/config"
)

// newLogger is the log of serve, controller and audit, from --log-level
// (trace, debug, info, warn or error; slog's level names too) and --log-fmt
// (text or json), written to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl, err := config.ParseLogLevel(level)
	if err != nil && lvl.UnmarshalText([]byte(level)) != nil {
		return nil, fmt.Errorf("--log-level=%s: %w", level, err)
	}
	ho := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, ho)), nil
	}
	return nil, fmt.Errorf("--log-fmt=%s: must be text or json", format)
}
