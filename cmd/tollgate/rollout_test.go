package main

import (
	"strings"
	"testing"
)

// TestRolloutBadInput: bad flags and arguments of tollgate rollout are errors that name them,
// before any cluster is asked.
func TestRolloutBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "history", "cap/p", "-o", "csv"}, `unknown output format "csv"`},
		{[]string{"rollout", "history"}, "accepts between 1 and 2 arg(s)"},
		{[]string{"rollout", "undo", "cap/p", "--to-revision", "-1"}, "--to-revision: -1"},
		{[]string{"rollout", "undo", "a", "b", "c"}, "accepts between 1 and 2 arg(s)"},
	} {
		out, err := tollgate(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error()+out, tc.want) {
			t.Errorf("tollgate %s: %v\n%s\nwant an error with %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}
