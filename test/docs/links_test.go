package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory, two levels above this package.
const root = "../.."

// markdownFiles lists the .md files of the repository, skipping trees no reader browses
// (build output, Go's module cache of a vendored tool).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "vendor", "_output":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found %d Markdown files under %s, want the repository's (at least 20)", len(files), root)
	}
	return files
}

var (
	// linkRE matches an inline link or image, [text](target), and captures the target.
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// codeSpanRE matches an inline code span, whose text is not a link.
	codeSpanRE = regexp.MustCompile("`[^`]*`")
)

type link struct {
	line   int
	target string
}

// parse returns a Markdown file's heading anchors (GitHub's, with -1, -2 for repeats) and its
// relative links, skipping fenced code blocks and code spans.
func parse(t *testing.T, path string) (anchors map[string]bool, links []link) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors = map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "#") {
			text := strings.TrimSpace(strings.TrimLeft(line, "#"))
			a := anchor(text)
			if k := seen[a]; k > 0 {
				anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links = append(links, link{n, target})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return anchors, links
}

// anchor is GitHub's anchor of a heading: the text of its links, lower case, without punctuation
// but hyphens and underscores, spaces turned into hyphens.
func anchor(heading string) string {
	heading = linkRE.ReplaceAllString(heading, "]")
	heading = strings.NewReplacer("[", "", "]", "").Replace(heading)
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestAnchor(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Why wazero with wapc-go v0.7.0, and not wapc-go's latest?", "why-wazero-with-wapc-go-v070-and-not-wapc-gos-latest"},
		{"Policy host (`make bench`, `tollgate bench`)", "policy-host-make-bench-tollgate-bench"},
		{"[The policy host](docs/rationale/host.md)", "the-policy-host"},
		{"Audit (`make bench-audit`)", "audit-make-bench-audit"},
	} {
		if got := anchor(tc.heading); got != tc.want {
			t.Errorf("anchor(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

// TestLinks follows every relative link of every Markdown file: the file must exist and a
// #fragment must name one of its headings.
func TestLinks(t *testing.T) {
	files := markdownFiles(t)
	anchorsOf := map[string]map[string]bool{}
	linksOf := map[string][]link{}
	for _, f := range files {
		anchorsOf[filepath.Clean(f)], linksOf[f] = parse(t, f)
	}
	checked := 0
	for _, f := range files {
		for _, l := range linksOf[f] {
			path, frag, _ := strings.Cut(l.target, "#")
			target := filepath.Clean(f)
			if path != "" {
				target = filepath.Join(filepath.Dir(f), path)
			}
			st, err := os.Stat(target)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", f, l.line, l.target, err)
				continue
			}
			checked++
			if frag == "" {
				continue
			}
			if st.IsDir() || !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %q: a #fragment on a file that is not Markdown", f, l.line, l.target)
				continue
			}
			if !anchorsOf[target][frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", f, l.line, l.target, target, frag)
			}
		}
	}
	t.Logf("%d links in %d files", checked, len(files))
	if checked < 100 {
		t.Errorf("checked %d links, want the repository's (at least 100): is the link pattern still right?", checked)
	}
}

// TestRationaleIndex checks that RATIONALE.md lists every question of docs/rationale/*.md, each
// under its area's heading, in the order of the area's file, and links each to its answer.
func TestRationaleIndex(t *testing.T) {
	index := readLines(t, filepath.Join(root, "RATIONALE.md"))
	areaRE := regexp.MustCompile(`^## \[([^\]]+)\]\((docs/rationale/[a-z-]+\.md)\)$`)
	itemRE := regexp.MustCompile(`^- \[(.+)\]\((docs/rationale/[a-z-]+\.md)#([^)]+)\)$`)
	listed := map[string][]string{} // area file -> questions in the index
	var areaFiles []string
	area := ""
	for n, line := range index {
		if m := areaRE.FindStringSubmatch(line); m != nil {
			area = m[2]
			areaFiles = append(areaFiles, area)
			continue
		}
		if strings.HasPrefix(line, "#") && n > 0 {
			t.Errorf("RATIONALE.md:%d: heading %q is not an area, ## [Title](docs/rationale/<area>.md)", n+1, line)
			continue
		}
		if !strings.HasPrefix(line, "- ") {
			continue
		}
		m := itemRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("RATIONALE.md:%d: %q is not a question, - [Why ...?](docs/rationale/<area>.md#anchor)", n+1, line)
			continue
		}
		if m[2] != area {
			t.Errorf("RATIONALE.md:%d: %q links to %s but sits under %s", n+1, m[1], m[2], area)
		}
		if want := anchor(m[1]); m[3] != want {
			t.Errorf("RATIONALE.md:%d: %q links to #%s, want #%s", n+1, m[1], m[3], want)
		}
		listed[m[2]] = append(listed[m[2]], m[1])
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "rationale", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d files in docs/rationale, want the areas' (at least 10)", len(files))
	}
	total := 0
	for _, f := range files {
		rel := "docs/rationale/" + filepath.Base(f)
		if !slices.Contains(areaFiles, rel) {
			t.Errorf("RATIONALE.md has no area heading linking to %s", rel)
		}
		var questions []string
		for n, line := range readLines(t, f) {
			if q, ok := strings.CutPrefix(line, "## "); ok {
				if !strings.HasPrefix(q, "Why ") || !strings.HasSuffix(q, "?") {
					t.Errorf("%s:%d: %q is not a question, ## Why ...?", rel, n+1, q)
				}
				questions = append(questions, q)
			}
		}
		total += len(questions)
		if !slices.Equal(questions, listed[rel]) {
			t.Errorf("RATIONALE.md lists for %s:\n\t%s\nwant the file's questions, in its order:\n\t%s",
				rel, strings.Join(listed[rel], "\n\t"), strings.Join(questions, "\n\t"))
		}
	}
	if total < 150 {
		t.Errorf("found %d questions in docs/rationale, want at least 150 (RATIONALE.md had 184 when it was split)", total)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}
