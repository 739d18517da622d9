package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// IsolatedEnv=1 marks the process that runs inside the namespaces Isolated made.
const IsolatedEnv = "TOLLGATE_E2E_ISOLATED"

// hostSysctls are the machine-wide settings a kubelet (and kube-proxy) may change: Isolated saves
// them before the node starts and writes them back after it is gone. Per-network-namespace ones
// (net.ipv4.ip_forward, route_localnet, ...) vanish with the namespace and need no restoring.
var hostSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/netfilter/nf_conntrack_max",
}

// HostPID is this process's PID in the machine's PID namespace, inside the namespaces (0 outside):
// `nsenter -t HostPID -n -m` enters them from the machine, e.g. to run kubectl against the node.
var HostPID int

// InIsolation reports whether this process runs inside the namespaces [Isolated] made.
func InIsolation() bool { return os.Getenv(IsolatedEnv) == "1" }

// Isolated runs f in new network, mount and PID namespaces and returns its exit code: a real node
// (kubelet, containerd, its pods' networks) changes the machine, and these namespaces keep those
// changes to a sandbox that the kernel itself takes down.
//
// The first call re-executes the current binary (same arguments) as PID 1 of the new namespaces
// and waits for it; the re-executed process's call runs f. When it ends, however it ends (a failed
// test, a panic, SIGKILL of the parent: the child has Pdeathsig), the kernel kills every process of
// the PID namespace (containerd, shims, containers, kubelet, apiserver), and with the last of them
// go the network namespace (the bridge, veths, iptables chains, pod namespaces) and the mount
// namespace (overlay rootfs, volume tmpfs). What is machine-wide is then restored by the parent:
// the sysctls the kubelet sets, and the /kubepods cgroups it makes at the root of each cgroup v1
// hierarchy.
//
// Inside, mounts are private, /proc is the new PID namespace's, loopback is up, and nothing but
// loopback and what the test creates is reachable: test traffic cannot leave the machine.
func Isolated(f func() int) int {
	if InIsolation() {
		if err := enterSandbox(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: isolation:", err)
			return 1
		}
		return f()
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "cluster: the real-node end-to-end tests run a kubelet and a container runtime: they need root (run as root, e.g. in CI)")
		return 1
	}
	// One node at a time on a machine: the kubelet's cgroups (/kubepods at each hierarchy's
	// root) and the sysctls are machine-wide, and a kubelet removes pod cgroups it does not know.
	// The lock goes with this process, however it ends.
	lock, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster: isolation:", err)
		return 1
	}
	defer lock.Close()
	// LockHeldEnv: a test that runs a node in a subprocess while holding the lock itself.
	if os.Getenv(LockHeldEnv) == "1" {
		// nothing to take
	} else if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		fmt.Fprintf(os.Stderr, "cluster: another node runs on this machine (%s is locked): waiting for it\n", lockFile)
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: isolation:", err)
			return 1
		}
	}
	saved := savedSysctls()
	cgroupsBefore := kubepodsCgroups()
	code := runIsolatedChild()
	err = restoreHost(saved, cgroupsBefore)
	if err == nil {
		_ = os.Remove(sysctlsFile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster: teardown:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// runIsolatedChild re-executes this binary in the new namespaces, passes SIGINT and SIGTERM on,
// and returns its exit code.
func runIsolatedChild() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster: isolation:", err)
		return 1
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), IsolatedEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	sigs := make(chan os.Signal, 4)
	// SIGQUIT too: `go test`'s timeout sends it; passed on, the tests dump their goroutines and end,
	// and this process still restores the machine.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster: isolation: starting the namespaced test process:", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &ee):
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					fmt.Fprintf(os.Stderr, "cluster: the namespaced test process was killed by %v\n", ws.Signal())
					return 1
				}
				return ee.ExitCode()
			default:
				fmt.Fprintln(os.Stderr, "cluster: isolation:", err)
				return 1
			}
		}
	}
}

// enterSandbox finishes the namespaces from the inside: private mounts (nothing mounted here is
// seen by the machine), a /proc of the new PID namespace, loopback up.
func enterSandbox() error {
	// /proc is still the machine's: it names this process by its PID there.
	if self, err := os.Readlink("/proc/self"); err == nil {
		HostPID, _ = strconv.Atoi(self)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %w: %s", err, out)
	}
	return nil
}

// sysctlsFile keeps the machine's sysctls from before the first node, until they are restored: a
// run whose parent was killed (SIGKILL leaves no time to restore) leaves it, and the next run
// restores those values, not the ones the kubelet set.
const sysctlsFile = "/var/tmp/tollgate-e2e-sysctls.json"

// LockHeldEnv=1 tells Isolated that its caller already holds the machine's node lock (a test
// that interrupts a node it runs in a subprocess, after its own node is gone).
const LockHeldEnv = "TOLLGATE_E2E_LOCK_HELD"

// lockFile serializes the nodes of every run on the machine (Isolated).
const lockFile = "/var/tmp/tollgate-e2e-node.lock"

func savedSysctls() map[string]string {
	if b, err := os.ReadFile(sysctlsFile); err == nil {
		var m map[string]string
		if json.Unmarshal(b, &m) == nil && len(m) > 0 {
			if os.Getenv(LockHeldEnv) != "1" {
				fmt.Fprintf(os.Stderr, "cluster: restoring the sysctls an interrupted run left (%s)\n", sysctlsFile)
			}
			return m
		}
	}
	m := readSysctls()
	if b, err := json.Marshal(m); err == nil {
		_ = os.WriteFile(sysctlsFile, b, 0o600)
	}
	return m
}

// PristineSysctls returns the machine's sysctls as they were before the first node of the running
// Isolated call (they are restored to these), keyed by their path under /proc/sys.
func PristineSysctls() map[string]string {
	var m map[string]string
	if b, err := os.ReadFile(sysctlsFile); err == nil && json.Unmarshal(b, &m) == nil && len(m) > 0 {
		return m
	}
	return readSysctls()
}

func readSysctls() map[string]string {
	m := map[string]string{}
	for _, k := range hostSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			m[k] = strings.TrimSpace(string(b))
		}
	}
	return m
}

// cgroupRoot is where the cgroup v1 hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// kubepodsCgroups lists the kubelet's cgroups: the kubepods* directories at each hierarchy's root.
func kubepodsCgroups() []string {
	var out []string
	hs, _ := os.ReadDir(cgroupRoot)
	for _, h := range hs {
		ds, _ := filepath.Glob(filepath.Join(cgroupRoot, h.Name(), "kubepods*"))
		out = append(out, ds...)
	}
	return out
}

// removeKubepods removes every kubepods cgroup tree; keep(dir) says whose failure is not an
// error.
func removeKubepods(keep func(string) bool) error {
	var errs []error
	for _, dir := range kubepodsCgroups() {
		if err := removeCgroupTree(dir); err != nil && !keep(dir) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restoreHost writes the saved sysctls back and removes the kubelet's cgroups (their processes
// are gone with the PID namespace, so they are empty; they are removed deepest first). before
// lists those that were there when Isolated started.
func restoreHost(saved map[string]string, before []string) error {
	var errs []error
	now := readSysctls()
	for k, v := range saved {
		if now[k] != v {
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring %s=%s: %w", k, v, err))
			}
		}
	}
	// One that was there before is a leftover of a run whose parent was killed (nothing could
	// restore then): remove it too when it is empty, which rmdir checks (a cgroup with processes
	// is busy). No other kubelet runs on these machines; if one did, its cgroups would be busy and
	// stay.
	errs = append(errs, removeKubepods(func(dir string) bool { return slices.Contains(before, dir) }))
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup directory and its children, deepest first (a cgroup directory
// is removed with rmdir; its control files go with it).
func removeCgroupTree(root string) error {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var last error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			last = fmt.Errorf("removing cgroup %s: %w", d, err)
		}
	}
	return last
}
