// Package examples runs every example policy under examples/ through the real policy host
// (host/policy, wazero) on the requests and settings in its testdata/, and checks the verdicts,
// messages, codes and JSONPatches its README promises. The policies are the modules that
// `make policies` builds; a missing one fails the test with that command.
//
// It knows the examples' files and expected answers only; how a policy is loaded and evaluated
// is host/policy's business.
package examples
