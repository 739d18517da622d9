package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// RepoRoot returns the repository root: the nearest parent of the working directory holding
// cmd/tollgate.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if st, err := os.Stat(filepath.Join(dir, "cmd", "tollgate")); err == nil && st.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubelet: no cmd/tollgate above the working directory")
		}
		dir = parent
	}
}

// TollgateBinary returns $TOLLGATE_BIN, or builds cmd/tollgate into dir (go build's cache makes a
// second build quick).
func TollgateBinary(ctx context.Context, dir string) (string, error) {
	if bin := os.Getenv("TOLLGATE_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("kubelet: TOLLGATE_BIN: %w", err)
		}
		return abs, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "tollgate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/tollgate")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kubelet: go build ./cmd/tollgate: %w\n%s", err, b)
	}
	return out, nil
}

// ServerStatus is the part of a policy server's GET /policies the tests read.
type ServerStatus struct {
	Generation   uint64 `json:"generation"`
	ConfigDigest string `json:"configDigest"`
	LastReload   struct {
		OK      bool   `json:"ok"`
		Error   string `json:"error"`
		Trigger string `json:"trigger"`
		Digest  string `json:"digest"`
	} `json:"lastReload"`
	Policies []struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Error string `json:"error"`
		Mode  string `json:"mode"`
	} `json:"policies"`
}

// Status reads the replica's GET /policies.
func (r Replica) Status(ctx context.Context) (*ServerStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/policies", r.ReadinessPort), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /policies: %s: %s", resp.Status, body)
	}
	var st ServerStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("GET /policies: %w", err)
	}
	return &st, nil
}

// ConfigDigest is the digest a policy server reports for a policies.yml (status.Digest).
func ConfigDigest(policiesYML []byte) string {
	sum := sha256.Sum256(policiesYML)
	return "sha256:" + hex.EncodeToString(sum[:])
}
