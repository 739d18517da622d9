package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUnderLoadRunsBurnersBeside: scripts/under-load.sh (make test-under-load) runs its command
// with N CPU-bound processes running beside it, all of them gone when it returns, and exits with
// the command's status. The command here checks from the inside that the burners are there and
// running.
func TestUnderLoadRunsBurnersBeside(t *testing.T) {
	script, err := filepath.Abs("../../scripts/under-load.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pidsFile := filepath.Join(dir, "pids")
	// The command: record the burners' pids, wait until each has used CPU time, exit 3.
	check := `echo "$UNDER_LOAD_PIDS" > ` + pidsFile + `
for i in $(seq 600); do
  busy=0
  for p in $UNDER_LOAD_PIDS; do
    t=$(awk '{print $14}' /proc/$p/stat 2>/dev/null || echo 0)
    [ "${t:-0}" -gt 0 ] && busy=$((busy+1))
  done
  [ "$busy" -eq 2 ] && exit 3
  sleep 0.1
done
echo "burners never ran: $UNDER_LOAD_PIDS" >&2
exit 4`
	cmd := exec.Command(script, "-n", "2", "bash", "-c", check)
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("under-load.sh: want the command's exit status 3, got %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "2 CPU-bound processes started beside") {
		t.Errorf("under-load.sh does not say what it started:\n%s", out)
	}
	raw, err := os.ReadFile(pidsFile)
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(raw))
	if len(pids) != 2 {
		t.Fatalf("UNDER_LOAD_PIDS %q: want 2 pids", raw)
	}
	// Gone once the script returned (killed and reaped by it: signal 0 finds no process).
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range pids {
		pid, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("pid %q: %v", s, err)
		}
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("burner %d still runs after under-load.sh returned", pid)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// A bad -n is refused with a reason.
	out, err = exec.Command(script, "-n", "two", "true").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `got "two"`) {
		t.Errorf("-n two: want exit 2 naming the value, got %v: %s", err, out)
	}
}
