// Package tester holds a mutator's pathTests (MustExist / MustNotExist per
// depth), like Gatekeeper's pkg/mutation/path/tester.
//
// It must NOT know about objects.
package tester

import (
	"errors"
	"math"
	"strconv"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/parser"
)

// Condition is MustExist or MustNotExist (the CRD's enum; anything else was
// refused before).
type Condition string

// Conditions.
const (
	MustExist    Condition = "MustExist"
	MustNotExist Condition = "MustNotExist"
)

// Errors of New.
var (
	ErrPrefix   = errors.New("all subpaths must be a prefix of the `location` value of the mutation")
	ErrConflict = errors.New("conflicting path test conditions")
)

// Test is one path test.
type Test struct {
	SubPath   parser.Path
	Condition Condition
}

// Tester answers, per depth of the location, whether an existing or a
// missing element lets the mutation go on.
type Tester struct {
	tests map[int]Condition
}

type wrapped struct {
	msg   string
	inner error
}

func (e wrapped) Error() string { return e.msg }
func (e wrapped) Unwrap() error { return e.inner }

func isPrefix(short, long parser.Path) bool {
	if len(short.Nodes) > len(long.Nodes) {
		return false
	}
	for i, n := range short.Nodes {
		if !n.Equal(long.Nodes[i]) {
			return false
		}
	}
	return true
}

// New validates tests against location, as Gatekeeper does.
func New(location parser.Path, tests []Test) (*Tester, error) {
	for _, t := range tests {
		if !isPrefix(t.SubPath, location) {
			return nil, wrapped{msg: ErrPrefix.Error() + ": subpath " + strconv.Quote(t.SubPath.String()) +
				" is not a prefix of location " + strconv.Quote(location.String()), inner: ErrPrefix}
		}
	}
	paths := map[int]*parser.Path{}
	idx := &Tester{tests: map[int]Condition{}}
	idxLowestMustNot := math.MaxInt32
	idxHighestMust := 0
	for i, t := range tests {
		j := len(t.SubPath.Nodes) - 1
		idx.tests[j] = t.Condition
		paths[j] = &tests[i].SubPath
		if t.Condition == MustNotExist && i < idxLowestMustNot {
			idxLowestMustNot = i
		} else if t.Condition == MustExist && i > idxHighestMust {
			idxHighestMust = i
		}
	}
	for _, t := range tests {
		i := len(t.SubPath.Nodes) - 1
		if v, ok := idx.tests[i]; ok && v != t.Condition {
			return nil, wrapped{msg: ErrConflict.Error() + ": path " + strconv.Quote(t.SubPath.String()) +
				" is marked both MustExist and MustNotExist", inner: ErrConflict}
		}
	}
	if idxHighestMust > idxLowestMustNot {
		// Gatekeeper indexes paths by depth with the list index: it prints
		// whatever sits there (%q of a nil *Path is "%!q(<nil>)").
		return nil, wrapped{msg: ErrConflict.Error() + ": path " + quotePath(paths[idxHighestMust]) +
			" is marked MustExist but parent " + quotePath(paths[idxLowestMustNot]) + " MustNotExist", inner: ErrConflict}
	}
	return idx, nil
}

func quotePath(p *parser.Path) string {
	if p == nil {
		return "%!q(<nil>)"
	}
	return strconv.Quote(p.String())
}

// ExistsOkay: an existing element at depth lets the mutation go on.
func (t *Tester) ExistsOkay(depth int) bool {
	c, ok := t.tests[depth]
	return !ok || c == MustExist
}

// MissingOkay: a missing element at depth lets the mutation go on.
func (t *Tester) MissingOkay(depth int) bool {
	c, ok := t.tests[depth]
	return !ok || c == MustNotExist
}
