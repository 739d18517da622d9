package oci_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tollgate-dev/tollgate/host/oci"
	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
)

// Sizes: a TinyGo policy (~256 KiB) and a standard-Go one (~4 MiB).
var benchSizes = []int{256 << 10, 4 << 20}

func BenchmarkPush(b *testing.B) {
	reg := ocitest.Start(b, ocitest.Options{})
	c, err := oci.NewClient(oci.Options{StorePath: b.TempDir(), SourcesPath: reg.SourcesPath, DockerConfigPath: reg.DockerConfigPath})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				// A different module each time, so the blobs are really uploaded.
				wasm := ocitest.Wasm(map[string]string{"io.kubewarden.policy.title": strconv.Itoa(i)}, size)
				if _, err := c.Push(context.Background(), wasm, reg.URI("bench/push:v"+strconv.Itoa(i)), oci.PushOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPull(b *testing.B) {
	reg := ocitest.Start(b, ocitest.Options{})
	ctx := context.Background()
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			uri := reg.URI("bench/pull:" + strconv.Itoa(size))
			seed, err := oci.NewClient(oci.Options{StorePath: b.TempDir(), SourcesPath: reg.SourcesPath, DockerConfigPath: reg.DockerConfigPath})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := seed.Push(ctx, ocitest.Wasm(map[string]string{"a": "b"}, size), uri, oci.PushOptions{}); err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				// A fresh store each time: a full download and verification.
				c, err := oci.NewClient(oci.Options{StorePath: filepath.Join(dir, strconv.Itoa(i)), SourcesPath: reg.SourcesPath, DockerConfigPath: reg.DockerConfigPath})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Pull(ctx, uri, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFetchPinnedFromStore is what a server restart costs per module pinned by digest.
func BenchmarkFetchPinnedFromStore(b *testing.B) {
	reg := ocitest.Start(b, ocitest.Options{})
	ctx := context.Background()
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			c, err := oci.NewClient(oci.Options{StorePath: b.TempDir(), SourcesPath: reg.SourcesPath, DockerConfigPath: reg.DockerConfigPath})
			if err != nil {
				b.Fatal(err)
			}
			d, err := c.Push(ctx, ocitest.Wasm(map[string]string{"a": "b"}, size), reg.URI("bench/fetch:v1"), oci.PushOptions{})
			if err != nil {
				b.Fatal(err)
			}
			pinned := reg.URI("bench/fetch@" + d)
			if _, _, err := c.Fetch(ctx, pinned); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, _, err := c.Fetch(ctx, pinned); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
