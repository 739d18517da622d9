package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix prefixes the environment variable of every server flag:
// --policy-timeout is TOLLGATE_POLICY_TIMEOUT.
const EnvPrefix = "TOLLGATE_"

// Options are the policy server's settings, from flags, environment, an
// optional server config file and defaults (in that order of precedence).
type Options struct {
	PoliciesPath         string
	SourcesPath          string
	DockerConfigJSONPath string
	ConfigPath           string // the server config file itself

	Addr               string
	Port               int
	ReadinessProbePort int
	CertFile           string
	KeyFile            string
	ClientCAFile       string
	InsecureHTTP       bool

	Workers       int
	QueueSize     int
	PolicyTimeout time.Duration
	// PolicyLoadTimeout bounds each policy's load (compile, instantiate,
	// start functions, validate_settings) and its module's fetch; a policy
	// past it is failed with the reason, the others are not held back.
	PolicyLoadTimeout time.Duration
	MemoryLimitBytes  int64
	MaxRequestBytes   int64
	// InstanceRecycleGrowth: an instance whose linear memory one evaluation
	// grew by more than this is replaced after it (0: never).
	InstanceRecycleGrowth int64
	// PolicyWorkers and PolicyQueueSize: one policy's share of the workers
	// and of the queue (0: the server's defaults); MaxRequestBytesInFlight:
	// request body bytes read or evaluated at once (0: 4 x MaxRequestBytes);
	// MaxConnections: webhook connections open at once.
	PolicyWorkers   int
	PolicyQueueSize int
	// PolicyCooldownAfter: evaluations of one policy in a row that run out
	// of time or memory before it cools down (its requests get its failure
	// answer without running; docs/server.md); 0: never.
	PolicyCooldownAfter int
	// ShadowWorkers and ShadowQueueSize bound the evaluations of policies'
	// shadows (policies.yml `shadow:`), which run after the serving answer
	// on workers of their own: how many run at once (0: a quarter of
	// Workers, at least 1) and how many may wait (0: 16 per shadow worker);
	// beyond, a shadow evaluation is dropped and counted.
	ShadowWorkers           int
	ShadowQueueSize         int
	MaxRequestBytesInFlight int64
	MaxConnections          int
	ReadTimeout             time.Duration
	WriteTimeout            time.Duration
	ShutdownTimeout         time.Duration
	ShutdownDelay           time.Duration

	// Loading untrusted modules (docs/server.md, "Security model"):
	// structural limits checked before a module is compiled, and the time
	// and memory budget of one compile (in a compiler process).
	MaxModuleBytes       int64
	MaxFunctionBodyBytes int64
	MaxFunctionLocals    int64
	MaxNestingDepth      int64
	CompileTimeout       time.Duration
	CompileMemoryLimit   int64
	// PoliciesMemoryBudget bounds the compiled code and instance memory of
	// all loaded policies together (0: derived from the cgroup's memory
	// limit, see host/wasm.DefaultMemoryBudget).
	PoliciesMemoryBudget int64

	AlwaysAcceptNamespace string
	Strict                bool
	Watch                 bool
	CacheDir              string
	StateDir              string

	// PoliciesEndpoint is where GET /policies is served: "probe" (the
	// plain-HTTP probe port, where the operator reads it), "webhook" (the
	// webhook port only, behind its TLS and client certificates) or "off";
	// "" is "probe".
	PoliciesEndpoint string

	LogLevel string
	LogFmt   string
}

// Defaults returns the default options (policy-server's where it has one).
func Defaults() Options {
	return Options{
		Addr:                  "0.0.0.0",
		Port:                  3000,
		ReadinessProbePort:    8081,
		Workers:               runtime.NumCPU(),
		QueueSize:             0, // 0: 64 per worker, see EffectiveQueueSize
		PolicyTimeout:         2 * time.Second,
		PolicyLoadTimeout:     15 * time.Minute,
		MemoryLimitBytes:      256 << 20,
		InstanceRecycleGrowth: 8 << 20,
		PolicyCooldownAfter:   3,
		// The engine's defaults (host/wasm: wasmbin.DefaultLimits,
		// DefaultCompileTimeout, DefaultCompileMemoryBytes).
		MaxModuleBytes:       256 << 20,
		MaxFunctionBodyBytes: 7_654_321,
		MaxFunctionLocals:    50_000,
		MaxNestingDepth:      10_000,
		CompileTimeout:       10 * time.Minute,
		CompileMemoryLimit:   3 << 30,
		MaxRequestBytes:      3 << 20, // the Kubernetes API server's own request limit is 3 MiB
		MaxConnections:       256,
		ReadTimeout:          10 * time.Second,
		WriteTimeout:         30 * time.Second,
		ShutdownTimeout:      30 * time.Second,
		ShutdownDelay:        3 * time.Second,
		Watch:                true,
		LogLevel:             "info",
		LogFmt:               "text",
		PoliciesEndpoint:     PoliciesOnProbe,
	}
}

// Where GET /policies is served (Options.PoliciesEndpoint).
const (
	PoliciesOnProbe   = "probe"
	PoliciesOnWebhook = "webhook"
	PoliciesOff       = "off"
)

// EffectiveShadowWorkers is the number of shadow evaluations that may run
// at once.
func (o *Options) EffectiveShadowWorkers() int {
	if o.ShadowWorkers > 0 {
		return o.ShadowWorkers
	}
	return max(1, o.Workers/4)
}

// EffectiveShadowQueueSize is the number of shadow evaluations that may
// wait for a shadow worker.
func (o *Options) EffectiveShadowQueueSize() int {
	if o.ShadowQueueSize > 0 {
		return o.ShadowQueueSize
	}
	return 16 * o.EffectiveShadowWorkers()
}

// EffectiveQueueSize is the number of requests allowed to wait for a worker.
func (o *Options) EffectiveQueueSize() int {
	if o.QueueSize > 0 {
		return o.QueueSize
	}
	return 64 * o.Workers
}

// AddFlags registers the server flags on fs, bound to o, with o's current
// values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.PoliciesPath, "policies", o.PoliciesPath, "policies.yml to serve (empty: the embedded example policies)")
	fs.StringVar(&o.SourcesPath, "sources-path", o.SourcesPath, "sources.yml: insecure sources and extra CA certificates per host")
	fs.StringVar(&o.DockerConfigJSONPath, "docker-config-json-path", o.DockerConfigJSONPath, "Docker config.json with registry credentials")
	fs.StringVar(&o.ConfigPath, "config", o.ConfigPath, "server config file: YAML map of flag names to values (flags > env > this file > defaults)")
	fs.StringVar(&o.Addr, "addr", o.Addr, "address to listen on")
	fs.IntVar(&o.Port, "port", o.Port, "port of the admission webhook (HTTPS)")
	fs.IntVar(&o.ReadinessProbePort, "readiness-probe-port", o.ReadinessProbePort, "port of the plain-HTTP /readiness, /livez, /metrics and /policies endpoints")
	fs.StringVar(&o.CertFile, "cert-file", o.CertFile, "TLS certificate (PEM), reloaded when it changes; empty: a generated self-signed certificate")
	fs.StringVar(&o.KeyFile, "key-file", o.KeyFile, "TLS private key (PEM), reloaded when it changes")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA bundle (PEM) that client certificates must chain to (mTLS)")
	fs.BoolVar(&o.InsecureHTTP, "insecure-http", o.InsecureHTTP, "serve the webhook over plain HTTP (local use only)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "evaluations running at once (and Wasm instances per policy)")
	fs.IntVar(&o.QueueSize, "queue-size", o.QueueSize, "requests that may wait for a worker before the server answers 503 (0: 64 per worker)")
	fs.DurationVar(&o.PolicyTimeout, "policy-timeout", o.PolicyTimeout, "evaluation deadline per request, host calls included (a policy's timeoutEvalSeconds overrides it)")
	fs.DurationVar(&o.PolicyLoadTimeout, "policy-load-timeout", o.PolicyLoadTimeout, "deadline of each policy's load (fetch, compile, instantiate, validate_settings): past it the policy is failed with the reason; the others serve meanwhile (keep it above --compile-timeout)")
	fs.Int64Var(&o.MemoryLimitBytes, "policy-memory-limit", o.MemoryLimitBytes, "linear memory limit per policy instance, in bytes")
	fs.Int64Var(&o.InstanceRecycleGrowth, "instance-recycle-growth", o.InstanceRecycleGrowth, "an instance whose linear memory one evaluation grew by more than this many bytes is replaced after it, giving the memory back (0: never)")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "largest request body accepted; larger ones get 413")
	fs.IntVar(&o.PolicyWorkers, "policy-workers", o.PolicyWorkers, "evaluations of one policy (or group) running at once, so that the others keep workers (0: all workers but a quarter, at least 1)")
	fs.IntVar(&o.PolicyCooldownAfter, "policy-cooldown-after", o.PolicyCooldownAfter, "evaluations of one policy (or group) in a row that run out of time or memory before it cools down: its requests get its failure answer without running, for 9 times that evaluation, then one tries it again (0: never)")
	fs.IntVar(&o.PolicyQueueSize, "policy-queue-size", o.PolicyQueueSize, "requests to one policy (or group) that may wait for a worker; beyond, 503 (0: half of --queue-size)")
	fs.IntVar(&o.ShadowWorkers, "shadow-workers", o.ShadowWorkers, "evaluations of policies' shadows (policies.yml shadow:) running at once, after the serving answers, on workers of their own (0: a quarter of --workers, at least 1)")
	fs.IntVar(&o.ShadowQueueSize, "shadow-queue-size", o.ShadowQueueSize, "shadow evaluations that may wait for a shadow worker; beyond, they are dropped and counted (0: 16 per shadow worker)")
	fs.Int64Var(&o.MaxRequestBytesInFlight, "max-request-bytes-in-flight", o.MaxRequestBytesInFlight, "request body bytes being read or evaluated at once; more wait, then get 503 (0: 4 x --max-request-bytes)")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "webhook connections open at once; more wait to be accepted")
	fs.DurationVar(&o.ReadTimeout, "read-timeout", o.ReadTimeout, "time to read a whole request")
	fs.DurationVar(&o.WriteTimeout, "write-timeout", o.WriteTimeout, "time to write a whole response")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "time to drain in-flight requests on SIGTERM")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay, "on SIGTERM, keep serving this long, unready and closing each connection after its response, before draining (lets endpoints and clients' keep-alive connections move to other replicas; 0: drain at once)")
	fs.Int64Var(&o.MaxModuleBytes, "max-module-bytes", o.MaxModuleBytes, "largest policy module loaded, in bytes")
	fs.Int64Var(&o.MaxFunctionBodyBytes, "max-function-body-bytes", o.MaxFunctionBodyBytes, "largest function body of a module, in bytes (V8's and wasmtime's limit)")
	fs.Int64Var(&o.MaxFunctionLocals, "max-function-locals", o.MaxFunctionLocals, "most locals one function of a module declares (V8's and wasmtime's limit)")
	fs.Int64Var(&o.MaxNestingDepth, "max-nesting-depth", o.MaxNestingDepth, "deepest nesting of blocks, loops and ifs in one function of a module (the compiler's time grows faster than this)")
	fs.DurationVar(&o.CompileTimeout, "compile-timeout", o.CompileTimeout, "time one module may take to compile (in a compiler process, killed after it; its CPU time is bounded too)")
	fs.Int64Var(&o.CompileMemoryLimit, "compile-memory-limit", o.CompileMemoryLimit, "memory one module's compile may use, in bytes (the compiler process is stopped beyond it)")
	fs.Int64Var(&o.PoliciesMemoryBudget, "policies-memory-budget", o.PoliciesMemoryBudget, "memory all loaded policies of every execution mode may hold together (compiled code and instance memory), in bytes; a policy whose load would exceed it fails with the reason (0: 3/4 of the container's memory limit, else of the machine's memory)")
	fs.StringVar(&o.AlwaysAcceptNamespace, "always-accept-admission-reviews-on-namespace", o.AlwaysAcceptNamespace, "accept every request in this namespace without evaluating policies")
	fs.BoolVar(&o.Strict, "strict", o.Strict, "exit at start-up if any policy fails to load (default: serve the others, answer 500 for the failed one)")
	fs.BoolVar(&o.Watch, "watch", o.Watch, "reload policies.yml when it changes (SIGHUP always reloads)")
	fs.StringVar(&o.CacheDir, "cache-dir", o.CacheDir, "wazero compilation cache directory (empty: the user cache dir)")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "where a generated certificate and CA are written (empty: the user config dir)")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "trace, debug, info, warn or error")
	fs.StringVar(&o.LogFmt, "log-fmt", o.LogFmt, "text or json")
	fs.StringVar(&o.PoliciesEndpoint, "policies-endpoint", o.PoliciesEndpoint, "where GET /policies is served: probe (the plain-HTTP probe port, where the operator reads it), webhook (the HTTPS webhook port only, behind its TLS and --client-ca-file) or off")
}

// EnvName is the environment variable for a flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// ApplySources fills every flag of fs that was not set on the command line
// from the environment (TOLLGATE_<FLAG>) or, failing that, from the server
// config file (a YAML map of flag names to scalar values; configFile names it
// in errors). lookupEnv is os.LookupEnv in production.
func ApplySources(fs *pflag.FlagSet, lookupEnv func(string) (string, bool), configFile string, configData []byte) error {
	fileValues, err := parseServerFile(configFile, configData)
	if err != nil {
		return err
	}
	var errs []error
	for name := range fileValues {
		if fs.Lookup(name) == nil {
			errs = append(errs, &FieldError{File: configFile, Field: name, Reason: "unknown option (not a flag of tollgate serve)"})
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		if v, ok := lookupEnv(EnvName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("environment %s: value %q: %w: %v", EnvName(f.Name), v, ErrInvalid, err))
			}
			return
		}
		if v, ok := fileValues[f.Name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, &FieldError{File: configFile, Field: f.Name, Value: strconv.Quote(v), Reason: err.Error()})
			}
		}
	})
	return errors.Join(errs...)
}

func parseServerFile(file string, data []byte) (map[string]string, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %w: %v", file, ErrSyntax, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, &FieldError{File: file, Line: root.Line, Value: show(root), Reason: "must be a map of flag names to values"}
	}
	out := map[string]string{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			errs = append(errs, &FieldError{File: file, Line: v.Line, Field: k.Value, Value: show(v), Reason: "must be a scalar"})
			continue
		}
		out[k.Value] = v.Value
	}
	return out, errors.Join(errs...)
}

// Validate checks the options and names every bad value.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flag string, value any, reason string) {
		errs = append(errs, fmt.Errorf("--%s=%v: %w: %s", flag, value, ErrInvalid, reason))
	}
	if o.Port < 0 || o.Port > 65535 {
		bad("port", o.Port, "must be 0-65535")
	}
	if o.ReadinessProbePort < 0 || o.ReadinessProbePort > 65535 {
		bad("readiness-probe-port", o.ReadinessProbePort, "must be 0-65535")
	}
	if o.Port != 0 && o.Port == o.ReadinessProbePort {
		bad("readiness-probe-port", o.ReadinessProbePort, "must differ from --port")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		bad("cert-file", o.CertFile, "--cert-file and --key-file go together")
	}
	if o.InsecureHTTP && (o.CertFile != "" || o.ClientCAFile != "") {
		bad("insecure-http", true, "contradicts --cert-file/--client-ca-file")
	}
	if o.Workers < 1 || o.Workers > 1024 {
		bad("workers", o.Workers, "must be 1-1024")
	}
	if o.QueueSize < 0 {
		bad("queue-size", o.QueueSize, "must be >= 0")
	}
	if o.PolicyTimeout <= 0 || o.PolicyTimeout > time.Hour {
		bad("policy-timeout", o.PolicyTimeout, "must be > 0 and <= 1h")
	}
	if o.PolicyLoadTimeout <= 0 || o.PolicyLoadTimeout > time.Hour {
		bad("policy-load-timeout", o.PolicyLoadTimeout, "must be > 0 and <= 1h")
	}
	if o.MemoryLimitBytes < 1<<20 {
		bad("policy-memory-limit", o.MemoryLimitBytes, "must be at least 1 MiB")
	}
	if o.InstanceRecycleGrowth < 0 {
		bad("instance-recycle-growth", o.InstanceRecycleGrowth, "must be >= 0 (0: never)")
	}
	for _, l := range []struct {
		name   string
		v, max int64
	}{
		{"max-module-bytes", o.MaxModuleBytes, 1 << 40},
		{"max-function-body-bytes", o.MaxFunctionBodyBytes, 1<<32 - 1},
		{"max-function-locals", o.MaxFunctionLocals, 1<<32 - 1},
		{"max-nesting-depth", o.MaxNestingDepth, 1<<32 - 1},
	} {
		if l.v < 1 || l.v > l.max {
			bad(l.name, l.v, fmt.Sprintf("must be 1-%d", l.max))
		}
	}
	if o.PoliciesMemoryBudget < 0 {
		bad("policies-memory-budget", o.PoliciesMemoryBudget, "must be >= 0 (0: derived from the memory limit)")
	}
	if o.CompileTimeout <= 0 {
		bad("compile-timeout", o.CompileTimeout, "must be > 0")
	}
	if o.CompileMemoryLimit < 64<<20 {
		bad("compile-memory-limit", o.CompileMemoryLimit, "must be at least 64 MiB")
	}
	if o.MaxRequestBytes < 1024 {
		bad("max-request-bytes", o.MaxRequestBytes, "must be at least 1024")
	}
	if o.PolicyWorkers < 0 || o.PolicyWorkers > o.Workers {
		bad("policy-workers", o.PolicyWorkers, fmt.Sprintf("must be 0 (the default) to --workers (%d)", o.Workers))
	}
	if o.PolicyQueueSize < 0 {
		bad("policy-queue-size", o.PolicyQueueSize, "must be >= 0")
	}
	if o.PolicyCooldownAfter < 0 {
		bad("policy-cooldown-after", o.PolicyCooldownAfter, "must be >= 0 (0: never)")
	}
	if o.ShadowWorkers < 0 || o.ShadowWorkers > o.Workers {
		bad("shadow-workers", o.ShadowWorkers, fmt.Sprintf("must be 0 (the default) to --workers (%d)", o.Workers))
	}
	if o.ShadowQueueSize < 0 || o.ShadowQueueSize > 1<<16 {
		bad("shadow-queue-size", o.ShadowQueueSize, "must be 0 (the default) to 65536")
	}
	if o.MaxRequestBytesInFlight != 0 && o.MaxRequestBytesInFlight < o.MaxRequestBytes {
		bad("max-request-bytes-in-flight", o.MaxRequestBytesInFlight, fmt.Sprintf("must be 0 (the default) or at least --max-request-bytes (%d)", o.MaxRequestBytes))
	}
	if o.MaxConnections < 1 {
		bad("max-connections", o.MaxConnections, "must be at least 1")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read-timeout", o.ReadTimeout}, {"write-timeout", o.WriteTimeout}, {"shutdown-timeout", o.ShutdownTimeout}} {
		if d.v <= 0 {
			bad(d.name, d.v, "must be > 0")
		}
	}
	if o.ShutdownDelay < 0 {
		bad("shutdown-delay", o.ShutdownDelay, "must be >= 0")
	}
	if _, err := ParseLogLevel(o.LogLevel); err != nil {
		bad("log-level", o.LogLevel, err.Error())
	}
	if o.LogFmt != "text" && o.LogFmt != "json" {
		bad("log-fmt", o.LogFmt, "must be text or json")
	}
	switch o.PoliciesEndpoint {
	case "", PoliciesOnProbe, PoliciesOnWebhook, PoliciesOff: // "": probe
	default:
		bad("policies-endpoint", o.PoliciesEndpoint, "must be probe, webhook or off")
	}
	return errors.Join(errs...)
}

// ParseLogLevel maps policy-server's level names to slog levels.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "trace", "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, errors.New("must be trace, debug, info, warn or error")
}

// Config is everything the server needs: options, policies and sources.
type Config struct {
	Options  Options
	Policies []Policy
	Sources  Sources
	// Warnings about the configuration that do not stop it from loading.
	Warnings []Warning
	// Embedded is true when the policies come from the embedded default.
	Embedded bool
	// Source is the policies.yml content Policies were parsed from (nil for
	// the embedded default).
	Source []byte
}

// Policy returns the policy with the given id.
func (c *Config) Policy(id string) (*Policy, bool) {
	i := sort.Search(len(c.Policies), func(i int) bool { return c.Policies[i].ID >= id })
	if i < len(c.Policies) && c.Policies[i].ID == id {
		return &c.Policies[i], true
	}
	return nil, false
}

// ReadFile is os.ReadFile; a variable so that Load's callers in tests can
// substitute a file system.
var readFile = os.ReadFile

// Load reads and validates the policies and sources files named in o (it
// only reads files). defaultPolicies is used when o.PoliciesPath is empty.
func Load(o Options, defaultPolicies []byte) (*Config, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg := &Config{Options: o}
	var pdata []byte
	file := o.PoliciesPath
	if file == "" {
		pdata, file, cfg.Embedded = defaultPolicies, "(embedded default policies.yml)", true
	} else {
		b, err := readFile(file)
		if err != nil {
			return nil, fmt.Errorf("--policies: %w", err)
		}
		pdata, cfg.Source = b, b
	}
	pols, warns, err := ParsePolicies(file, pdata)
	if err != nil {
		return nil, err
	}
	cfg.Policies, cfg.Warnings = pols, warns
	if o.SourcesPath != "" {
		b, err := readFile(o.SourcesPath)
		if err != nil {
			return nil, fmt.Errorf("--sources-path: %w", err)
		}
		if cfg.Sources, err = ParseSources(o.SourcesPath, b); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}
