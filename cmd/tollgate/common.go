package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// runtimeFlags are shared by every command that loads a module.
type runtimeFlags struct {
	cacheDir    string
	noCache     bool
	timeout     time.Duration
	memoryLimit uint64
	logLevel    string
	// The module limits and compile budget (docs/server.md, "Security model").
	maxModuleBytes, maxBodyBytes, maxLocals, maxNesting uint64
	compileTimeout                                      time.Duration
	compileMemory                                       uint64
}

func (f *runtimeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.cacheDir, "cache-dir", "", "compilation cache directory (default "+wasm.DefaultCacheDir()+")")
	cmd.Flags().BoolVar(&f.noCache, "no-cache", false, "do not use the on-disk compilation cache")
	cmd.Flags().DurationVar(&f.timeout, "timeout", policy.DefaultTimeout, "evaluation deadline")
	cmd.Flags().Uint64Var(&f.memoryLimit, "memory-limit", wasm.DefaultMemoryLimit, "linear-memory cap per instance, in bytes")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "log level of policy logs on stderr: debug, info, warn, error")
	d := wasmbin.DefaultLimits()
	cmd.Flags().Uint64Var(&f.maxModuleBytes, "max-module-bytes", d.ModuleBytes, "largest module loaded, in bytes")
	cmd.Flags().Uint64Var(&f.maxBodyBytes, "max-function-body-bytes", uint64(d.BodyBytes), "largest function body of a module, in bytes")
	cmd.Flags().Uint64Var(&f.maxLocals, "max-function-locals", uint64(d.Locals), "most locals one function of a module declares")
	cmd.Flags().Uint64Var(&f.maxNesting, "max-nesting-depth", uint64(d.Nesting), "deepest nesting of blocks, loops and ifs in one function of a module")
	cmd.Flags().DurationVar(&f.compileTimeout, "compile-timeout", wasm.DefaultCompileTimeout, "time one module may take to compile (in a compiler process, killed after it)")
	cmd.Flags().Uint64Var(&f.compileMemory, "compile-memory-limit", wasm.DefaultCompileMemoryBytes, "memory one module's compile may use, in bytes")
}

// limits are the module limits of the flags (values over 32 bits are the
// largest 32-bit value).
func (f *runtimeFlags) limits() wasm.Limits {
	u32 := func(v uint64) uint32 { return uint32(min(v, 1<<32-1)) }
	return wasm.Limits{ModuleBytes: f.maxModuleBytes, BodyBytes: u32(f.maxBodyBytes), Locals: u32(f.maxLocals), Nesting: u32(f.maxNesting)}
}

func (f *runtimeFlags) logger() *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(f.logLevel))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

func (f *runtimeFlags) newHost(ctx context.Context) (*policy.Host, error) {
	return policy.NewHost(ctx, policy.HostOptions{CacheDir: f.cacheDir, DisableCache: f.noCache, Logger: f.logger(),
		Limits: f.limits(), CompileTimeout: f.compileTimeout, CompileMemoryBytes: f.compileMemory})
}

// newResolver is the module resolver every command uses. Other schemes
// (registry://, builtin://) are added by their packages' init hooks.
func newResolver() *module.Resolver {
	r := &module.Resolver{}
	for _, hook := range resolverHooks {
		hook(r)
	}
	return r
}

// resolverHooks let optional subsystems (OCI, built-in modules) plug into newResolver.
var resolverHooks []func(*module.Resolver)

// inputFlags are the request and settings flags of run and bench (kwctl's names).
type inputFlags struct {
	requestPath  string
	settingsPath string
	settingsJSON string
	raw          bool
	mode         string
}

func (f *inputFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.requestPath, "request-path", "r", "", "AdmissionReview or AdmissionRequest JSON file (- for stdin); with --raw any JSON")
	cmd.Flags().StringVarP(&f.settingsPath, "settings-path", "s", "", "settings file (YAML or JSON)")
	cmd.Flags().StringVar(&f.settingsJSON, "settings-json", "", "settings as a JSON string")
	cmd.Flags().BoolVar(&f.raw, "raw", false, "the request is raw JSON (for policyType: raw policies)")
	cmd.Flags().StringVarP(&f.mode, "execution-mode", "e", "", "execution mode: kubewarden-wapc, wasi, opa or gatekeeper (default: the module's metadata, else kubewarden-wapc)")
	_ = cmd.MarkFlagRequired("request-path")
	cmd.MarkFlagsMutuallyExclusive("settings-path", "settings-json")
}

func (f *inputFlags) settings() (json.RawMessage, error) {
	switch {
	case f.settingsJSON != "":
		if err := admission.CheckJSON([]byte(f.settingsJSON)); err != nil {
			return nil, fmt.Errorf("--settings-json: %w", err)
		}
		return json.RawMessage(f.settingsJSON), nil
	case f.settingsPath != "":
		b, err := os.ReadFile(f.settingsPath)
		if err != nil {
			return nil, fmt.Errorf("settings: %w", err)
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, fmt.Errorf("settings file %s: %w", f.settingsPath, err)
		}
		return j, nil
	}
	return nil, nil
}

func (f *inputFlags) request(stdin io.Reader) ([]byte, error) {
	var b []byte
	var err error
	name := f.requestPath
	if name == "-" {
		name = "standard input"
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if err := admission.CheckJSON(b); err != nil {
		return nil, fmt.Errorf("request %s: %w", name, err)
	}
	return b, nil
}

// prepared is a loaded policy with its parsed input, ready to evaluate.
type prepared struct {
	host   *policy.Host
	policy *policy.Policy
	req    *admission.Request // nil for raw
	raw    []byte             // raw request
	uid    string
	// capsDone finishes the host capabilities (a recording is written).
	capsDone func() error
}

func (p *prepared) close(ctx context.Context) {
	p.policy.Close(ctx)
	_ = p.host.Close(ctx)
	if p.capsDone != nil {
		if err := p.capsDone(); err != nil {
			fmt.Fprintln(os.Stderr, "tollgate:", err)
		}
	}
}

func (p *prepared) evaluate(ctx context.Context) (*policy.Result, error) {
	if p.req != nil {
		return p.policy.Evaluate(ctx, p.req)
	}
	return p.policy.ValidateRaw(ctx, p.raw)
}

// prepare loads the module and parses the input of run and bench.
func prepare(ctx context.Context, cmd *cobra.Command, uri string, in *inputFlags, rt *runtimeFlags, caps *capabilityFlags, vf *verifyFlags, poolSize int) (*prepared, error) {
	settings, err := in.settings()
	if err != nil {
		return nil, err
	}
	reqBytes, err := in.request(cmd.InOrStdin())
	if err != nil {
		return nil, err
	}
	manifest, isManifest, err := readPolicyManifest(uri)
	if err != nil {
		return nil, err
	}
	if isManifest {
		uri = manifest.module
	}
	resolver := newResolver()
	reg := registryOf(resolver)
	if err := vf.guard(resolver, uri); err != nil {
		return nil, err
	}
	m, err := resolver.Resolve(ctx, uri)
	if err != nil {
		err = verifyError(err)
		if isManifest {
			return nil, fmt.Errorf("policy manifest %s: spec.module: %w", manifest.file, err)
		}
		return nil, err
	}
	md, err := metadata.Read(m.Wasm)
	if err != nil {
		return nil, err
	}
	var declared []metadata.ContextAwareResource
	if md != nil {
		declared = md.ContextAwareResources
	}
	if isManifest {
		declared = manifest.contextAware
		if settings == nil {
			settings = manifest.settings // flags' settings win over spec.settings
		}
	}
	hostCalls, cluster, capsDone, err := caps.hostCalls(uri, declared, reg, rt.logger())
	if err != nil {
		return nil, err
	}
	h, err := rt.newHost(ctx)
	if err != nil {
		_ = capsDone()
		return nil, err
	}
	p, err := h.Load(ctx, policy.Spec{
		ID: uri, Module: m.Wasm, Settings: settings,
		Timeout: rt.timeout, MemoryLimitBytes: rt.memoryLimit, PoolSize: poolSize,
		HostCalls: hostCalls, ExecutionMode: in.mode, Cluster: cluster,
		HostCallsInline: true, // host/capabilities returns by the deadline itself
	})
	if err != nil {
		_ = h.Close(ctx)
		_ = capsDone()
		return nil, err
	}
	out := &prepared{host: h, policy: p, capsDone: capsDone}
	if in.raw || p.Metadata().IsRaw() {
		out.raw = unwrapRaw(reqBytes)
		var u struct {
			UID string `json:"uid"`
		}
		_ = json.Unmarshal(out.raw, &u)
		out.uid = u.UID
		return out, nil
	}
	req, err := admission.ParseReview(reqBytes)
	if err != nil {
		out.close(ctx)
		return nil, fmt.Errorf("request %s: %w (use --raw for a raw policy)", in.requestPath, err)
	}
	out.req, out.uid = req, req.UID
	return out, nil
}

// unwrapRaw accepts the validate_raw body form {"request": X} as well as X itself.
func unwrapRaw(b []byte) []byte {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err == nil && len(env) == 1 {
		if r, ok := env["request"]; ok {
			return bytes.TrimSpace(r)
		}
	}
	return bytes.TrimSpace(b)
}

// printData prints v as compact JSON (format ""), indented JSON or YAML.
// JSON is written as kwctl writes it: `<`, `>` and `&` as they are, not
// HTML-escaped (Go's default), in every command.
func printData(w io.Writer, format string, v any) error {
	switch format {
	case "", "compact", "json":
		b, err := marshalJSON(v, format == "json")
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q (want json or yaml)", format)
}

// marshalJSON is v as the CLI prints JSON: compact or indented by two
// spaces, `<`, `>` and `&` not HTML-escaped (as kwctl), ending in a newline.
func marshalJSON(v any, indent bool) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func checkFormat(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return fmt.Errorf("-o: unknown output format %q (want %v)", format, allowed)
}
