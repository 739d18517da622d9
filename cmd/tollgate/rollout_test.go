package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/crds/rollout"
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

// TestPrintRevisionOfGroup: `history --revision N` of a group prints its expression, then each
// member's module, digests and settings.
func TestPrintRevisionOfGroup(t *testing.T) {
	r := rollout.Revision{Number: 2, Name: "g-abc", Namespace: "tollgate", ChangeCause: "owner and team", Current: true,
		Data: v1.RevisionData{Expression: "owner() && team()", Policies: map[string]v1.RevisionModule{
			"team":  {Module: "registry://r/labels:v1", ModuleDigest: "sha256:aa", Settings: json.RawMessage(`{"mandatory_labels":["team"]}`)},
			"owner": {Module: "registry://r/labels:v1", ModuleDigest: "sha256:aa", ManifestDigest: "sha256:mm"},
		}}}
	var b bytes.Buffer
	if err := printRevision(&b, "clusteradmissionpolicygroup.policies.tollgate.dev/g", r); err != nil {
		t.Fatal(err)
	}
	want := "clusteradmissionpolicygroup.policies.tollgate.dev/g with revision #2\n" +
		"ControllerRevision:  tollgate/g-abc\n" +
		"Change cause:        owner and team\n" +
		"Serving:             true\n" +
		"Expression:          owner() && team()\n" +
		"Policies:            \n" +
		"  owner:             \n" +
		"    Module:          registry://r/labels:v1\n" +
		"    Module digest:   sha256:aa\n" +
		"    Manifest digest: sha256:mm\n" +
		"    Settings:        <none>\n" +
		"  team:              \n" +
		"    Module:          registry://r/labels:v1\n" +
		"    Module digest:   sha256:aa\n" +
		"    Settings:        {\"mandatory_labels\":[\"team\"]}\n"
	if b.String() != want {
		t.Errorf("printRevision:\n%s\nwant\n%s", b.String(), want)
	}
}
