// Package mutators holds Gatekeeper's four mutator kinds (Assign,
// AssignMetadata, ModifySet, AssignImage): their constructors' checks
// (MutatorForAssign, ...), their setters and the shared path walk
// (Gatekeeper's mutators/core), applied to a jsonv tree in place.
//
// It must NOT know about settings decoding, the system loop or the webhook.
package mutators
