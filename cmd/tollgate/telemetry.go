package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/tollgate-dev/tollgate/host/telemetry"
)

// startTelemetry starts the OpenTelemetry export the OTEL_* variables ask for (nothing when
// none does) for `tollgate controller` and `tollgate audit` (serve's is host/serve's); stop
// sends what is queued, for at most 5 s.
func startTelemetry(ctx context.Context, log *slog.Logger) (tel *telemetry.Telemetry, stop func(), err error) {
	cfg, err := telemetry.FromEnv(os.LookupEnv)
	if err != nil {
		return nil, nil, err
	}
	tel, err = telemetry.New(ctx, cfg, telemetry.Options{Logger: log.With("component", "telemetry"), ServiceVersion: version})
	if err != nil {
		return nil, nil, err
	}
	return tel, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tel.Shutdown(sctx)
	}, nil
}
