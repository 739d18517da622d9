// Package docs checks the repository's Markdown as a reader follows it: every relative link names
// a file that exists and, with a #fragment, a heading of that file; RATIONALE.md lists every
// question of docs/rationale/, in the files' order, and nothing else.
//
// It knows GitHub's rule for heading anchors and the layout of RATIONALE.md, not what the pages
// say.
package docs
