package main

import (
	"strings"
	"testing"
)

func TestControllerFlagErrors(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"controller"}, `--namespace="": required`},
		{[]string{"controller", "--namespace=t", "--log-fmt=xml"}, "--log-fmt=xml: must be text or json"},
		{[]string{"controller", "--namespace=t", "--log-level=loud"}, "--log-level=loud"},
		{[]string{"controller", "--namespace=t", "--cert-check-interval=-1s"}, "--cert-check-interval=-1s: must be positive"},
		{[]string{"controller", "--namespace=t", "--ca-validity=nope"}, `invalid argument "nope" for "--ca-validity"`},
		{[]string{"controller", "--namespace=t", "--cert-validity=24h"}, "cert-renew-before 1440h0m0s must be shorter than cert-validity 24h0m0s"},
		{[]string{"controller", "--namespace=t", "--kubeconfig=/nonexistent/kubeconfig"}, "kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[1:], " "), func(t *testing.T) {
			_, err := tollgate(t, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestControllerNamespaceFromEnv(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "from-env")
	cmd := newControllerCmd()
	if got, _ := cmd.Flags().GetString("namespace"); got != "from-env" {
		t.Errorf("--namespace default = %q, want $POD_NAMESPACE", got)
	}
	if got, _ := cmd.Flags().GetBool("always-accept-admission-reviews-on-deployments-namespace"); !got {
		t.Error("--always-accept-admission-reviews-on-deployments-namespace defaults to false")
	}
}
