// Command mkimage builds tollgate's container image without a container engine: it compiles a
// static (CGO_ENABLED=0) linux binary of ./cmd/tollgate per platform, packs it with a CA bundle,
// an /etc/passwd with the nonroot user 65532, an empty /tmp and /cache into one gzip layer, and
// writes an OCI image layout (a directory and a tarball of it) whose only tag is the version.
// The tag always names an image index, even for one platform.
//
// The output is reproducible: every timestamp is SOURCE_DATE_EPOCH, or else the commit time of
// HEAD; the binary is built with -trimpath. With -push (make image IMAGE_PUSH=host/repo:tag) it
// copies the image from the layout to a registry (plain HTTP for localhost and 127.0.0.1, or
// with -insecure; credentials from the Docker config).
//
// Run by `make image`: go run ./internal/tools/mkimage [flags].
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
)

// Fixed contents of the image.
const (
	binaryPath   = "/tollgate"
	caBundlePath = "/etc/ssl/certs/ca-certificates.crt"
	nonrootUID   = 65532
	sourceURL    = "https://github.com/tollgate-dev/tollgate"
	passwd       = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group        = "root:x:0:\nnonroot:x:65532:\n"
)

// options configure one build.
type options struct {
	// Root is the repository root (where go.mod is).
	Root string
	// Out is the output directory: Out/oci is the layout, Out/tollgate.oci.tar its tarball.
	Out string
	// Platforms are os/arch pairs; only linux is supported.
	Platforms []string
	// Version is the tag and the binary's version; Revision the commit.
	Version, Revision string
	// Epoch is every timestamp in the image.
	Epoch time.Time
	// CACerts is the CA bundle copied to /etc/ssl/certs/ca-certificates.crt.
	CACerts string
	// Go is the go command.
	Go string
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// result describes what build wrote.
type result struct {
	// Index is the descriptor of the image index the tag names: its digest is the image's.
	Index ocispec.Descriptor
	// Manifests are the per-platform image manifests, in the order of the platforms.
	Manifests []ocispec.Descriptor
	// Tag is the tag in the layout (the version).
	Tag string
	// LayoutDir and Tarball are the layout directory and the tarball of it.
	LayoutDir, Tarball string
	// Size is the sum of the sizes of every blob (index, manifests, configs, layers).
	Size int64
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	var (
		o         options
		platforms string
		pushRef   string
		insecure  bool
	)
	fs.StringVar(&o.Root, "root", ".", "repository root")
	fs.StringVar(&o.Out, "out", "bin/image", "output directory (OUT/oci and OUT/tollgate.oci.tar)")
	fs.StringVar(&platforms, "platforms", "linux/amd64", "comma-separated os/arch list (linux/amd64,linux/arm64)")
	fs.StringVar(&o.Version, "version", "", "image tag and binary version (default: appVersion of charts/tollgate/Chart.yaml)")
	fs.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to copy into the image")
	fs.StringVar(&pushRef, "push", "", "also copy the image to this registry reference (host[:port]/repo[:tag]; tag defaults to the version)")
	fs.BoolVar(&insecure, "insecure", false, "push over plain HTTP (implied for localhost, 127.0.0.1 and ::1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Platforms = strings.Split(platforms, ",")
	o.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "mkimage: "+f+"\n", a...) }
	res, err := build(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image %s (tag %s, %d platform(s), %.1f MB)\n", res.Tarball, res.Tag, len(res.Manifests), float64(res.Size)/1e6)
	fmt.Fprintf(stdout, "layout %s\n", res.LayoutDir)
	for _, m := range res.Manifests {
		fmt.Fprintf(stdout, "manifest %s/%s %s\n", m.Platform.OS, m.Platform.Architecture, m.Digest)
	}
	if pushRef != "" {
		ref, err := push(ctx, res, pushRef, insecure)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pushed %s@%s\n", ref, res.Index.Digest)
	}
	fmt.Fprintf(stdout, "digest %s\n", res.Index.Digest)
	return nil
}

// build compiles the binaries and writes the layout and its tarball.
func build(ctx context.Context, o options) (*result, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Go == "" {
		o.Go = "go"
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, err
	}
	o.Root = root
	if o.Version == "" {
		if o.Version, err = chartAppVersion(root); err != nil {
			return nil, err
		}
	}
	if !validTag.MatchString(o.Version) {
		return nil, fmt.Errorf("version %q is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})", o.Version)
	}
	if o.Revision == "" {
		o.Revision = gitOutput(root, "rev-parse", "HEAD")
	}
	if o.Epoch.IsZero() {
		o.Epoch = sourceDateEpoch(root)
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w (install Debian's ca-certificates or pass -ca-certs)", err)
	}

	blobs := map[digest.Digest][]byte{}
	var manifests []ocispec.Descriptor
	for _, p := range o.Platforms {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || goos != "linux" || goarch == "" {
			return nil, fmt.Errorf("platform %q: want linux/ARCH", p)
		}
		o.Logf("building %s/%s binary", goos, goarch)
		bin, err := compile(ctx, o, goarch)
		if err != nil {
			return nil, err
		}
		desc, err := assemble(blobs, bin, ca, goarch, o)
		if err != nil {
			return nil, err
		}
		manifests = append(manifests, desc)
	}
	index := ocispec.Index{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageIndex,
		Manifests:   manifests,
		Annotations: annotations(o),
	}
	indexDesc := addJSON(blobs, ocispec.MediaTypeImageIndex, index)
	indexDesc.Annotations = map[string]string{ocispec.AnnotationRefName: o.Version}

	res := &result{Index: indexDesc, Manifests: manifests, Tag: o.Version}
	for _, b := range blobs {
		res.Size += int64(len(b))
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, err
	}
	res.LayoutDir, res.Tarball = filepath.Join(out, "oci"), filepath.Join(out, "tollgate.oci.tar")
	files := layoutFiles(blobs, indexDesc)
	if err := writeDir(res.LayoutDir, files); err != nil {
		return nil, err
	}
	if err := writeTarball(res.Tarball, files, o.Epoch); err != nil {
		return nil, err
	}
	// Drop the descriptor's ref name from the result: it belongs to the layout's index.json.
	res.Index.Annotations = nil
	return res, nil
}

var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// chartAppVersion reads appVersion from charts/tollgate/Chart.yaml: the release version has
// one home, and the chart's default image tag is the image this builds.
func chartAppVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "charts", "tollgate", "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("version: %w (pass -version)", err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*["']?([^"'\s]+)["']?\s*$`).FindSubmatch(b)
	if m == nil {
		return "", errors.New("version: no appVersion in charts/tollgate/Chart.yaml (pass -version)")
	}
	return string(m[1]), nil
}

func gitOutput(dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// sourceDateEpoch is SOURCE_DATE_EPOCH, else the commit time of HEAD, else the Unix epoch.
func sourceDateEpoch(root string) time.Time {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		s = gitOutput(root, "log", "-1", "--format=%ct")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return time.Unix(n, 0).UTC()
	}
	return time.Unix(0, 0).UTC()
}

// compile builds a static, stripped binary of ./cmd/tollgate for linux/goarch.
func compile(ctx context.Context, o options, goarch string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "tollgate")
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+o.Version, "-o", out, "./cmd/tollgate")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/tollgate for linux/%s: %w", goarch, err)
	}
	return os.ReadFile(out)
}

// entry is one file or directory of the layer.
type entry struct {
	name     string // without a leading slash; directories end with /
	mode     int64
	uid, gid int
	data     []byte
}

// rootfs lists the layer's entries, parents before children.
func rootfs(bin, ca []byte) []entry {
	return []entry{
		{name: "cache/", mode: 0o755, uid: nonrootUID, gid: nonrootUID},
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: strings.TrimPrefix(caBundlePath, "/"), mode: 0o644, data: ca},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonrootUID, gid: nonrootUID},
		{name: "tmp/", mode: 0o1777},
		{name: strings.TrimPrefix(binaryPath, "/"), mode: 0o755, data: bin},
	}
}

// layer returns the uncompressed tar of the entries and its gzip.
func layer(entries []entry, epoch time.Time) (raw, gz []byte, err error) {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch, Format: tar.FormatPAX}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	var gb bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gb, gzip.BestCompression)
	if err != nil {
		return nil, nil, err
	}
	// The gzip header carries no name and no time (ModTime zero is written as 0).
	if _, err := zw.Write(tb.Bytes()); err != nil {
		return nil, nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, nil, err
	}
	return tb.Bytes(), gb.Bytes(), nil
}

func annotations(o options) map[string]string {
	return map[string]string{
		ocispec.AnnotationCreated:  o.Epoch.Format(time.RFC3339),
		ocispec.AnnotationSource:   sourceURL,
		ocispec.AnnotationVersion:  o.Version,
		ocispec.AnnotationRevision: o.Revision,
		ocispec.AnnotationTitle:    "tollgate",
	}
}

// assemble adds the layer, config and manifest of one platform to blobs and returns the
// manifest's descriptor (with its platform).
func assemble(blobs map[digest.Digest][]byte, bin, ca []byte, goarch string, o options) (ocispec.Descriptor, error) {
	raw, gz, err := layer(rootfs(bin, ca), o.Epoch)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(gz), Size: int64(len(gz))}
	blobs[layerDesc.Digest] = gz
	created := o.Epoch
	platform := ocispec.Platform{OS: "linux", Architecture: goarch}
	if goarch == "arm64" {
		platform.Variant = "v8"
	}
	labels := annotations(o)
	delete(labels, ocispec.AnnotationCreated)
	cfg := ocispec.Image{
		Created:  &created,
		Platform: platform,
		Config: ocispec.ImageConfig{
			User:       fmt.Sprintf("%d:%d", nonrootUID, nonrootUID),
			Entrypoint: []string{binaryPath},
			Env: []string{
				"PATH=/",
				"HOME=/home/nonroot",
				"SSL_CERT_FILE=" + caBundlePath,
			},
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS:  ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromBytes(raw)}},
		History: []ocispec.History{{Created: &created, CreatedBy: "internal/tools/mkimage", Comment: "tollgate " + o.Version}},
	}
	cfgDesc := addJSON(blobs, ocispec.MediaTypeImageConfig, cfg)
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	}
	desc := addJSON(blobs, ocispec.MediaTypeImageManifest, m)
	desc.Platform = &platform
	return desc, nil
}

func addJSON(blobs map[digest.Digest][]byte, mediaType string, v any) ocispec.Descriptor {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only spec types, which always marshal
	}
	d := digest.FromBytes(b)
	blobs[d] = b
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

// file is one file of the layout, by its slash-separated path.
type file struct {
	path string
	data []byte
}

// layoutFiles returns the files of an OCI image layout holding blobs, tagged by desc.
func layoutFiles(blobs map[digest.Digest][]byte, desc ocispec.Descriptor) []file {
	layout, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	index, _ := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{desc},
	})
	files := []file{{ocispec.ImageLayoutFile, layout}, {ocispec.ImageIndexFile, index}}
	ds := make([]string, 0, len(blobs))
	for d := range blobs {
		ds = append(ds, string(d))
	}
	sort.Strings(ds)
	for _, d := range ds {
		dg := digest.Digest(d)
		files = append(files, file{"blobs/" + dg.Algorithm().String() + "/" + dg.Encoded(), blobs[dg]})
	}
	return files
}

// writeDir replaces dir with a directory holding files.
func writeDir(dir string, files []file) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(tmp, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// writeTarball writes files as a tar (the layout's root at the tar's root), with fixed times
// and owners, through a temporary file renamed into place.
func writeTarball(path string, files []file, epoch time.Time) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.path); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl) // parents sort before their children
	for _, d := range dl {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// push copies the image from the layout to ref (host[:port]/repo[:tag]) and returns the
// reference pushed.
func push(ctx context.Context, res *result, ref string, insecure bool) (string, error) {
	src, err := oci.NewFromFS(ctx, os.DirFS(res.LayoutDir))
	if err != nil {
		return "", fmt.Errorf("open layout %s: %w", res.LayoutDir, err)
	}
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return "", fmt.Errorf("push reference %q: %w", ref, err)
	}
	if repo.Reference.Reference == "" {
		repo.Reference.Reference = res.Tag
	}
	if strings.HasPrefix(repo.Reference.Reference, "sha256:") {
		return "", fmt.Errorf("push reference %q: give a tag, not a digest", ref)
	}
	repo.PlainHTTP = insecure || isLoopback(repo.Reference.Registry)
	store, err := credentials.NewStoreFromDocker(credentials.StoreOptions{})
	if err != nil {
		return "", fmt.Errorf("docker credentials: %w", err)
	}
	repo.Client = &auth.Client{Cache: auth.NewCache(), Credential: credentials.Credential(store)}
	desc, err := oras.Copy(ctx, src, res.Tag, repo, repo.Reference.Reference, oras.DefaultCopyOptions)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", repo.Reference, err)
	}
	if desc.Digest != res.Index.Digest {
		return "", fmt.Errorf("push %s: registry has %s, the layout %s", repo.Reference, desc.Digest, res.Index.Digest)
	}
	return repo.Reference.String(), nil
}

func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
