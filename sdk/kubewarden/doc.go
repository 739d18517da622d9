// Package kubewarden helps write Kubewarden-compatible policies in standard
// Go on top of package guest. Its API has the shape of the kubewarden
// package of github.com/kubewarden/policy-sdk-go (AcceptRequest,
// RejectRequest, MutateRequest, AcceptSettings, RejectSettings, Message,
// Code), so authors of TinyGo policies feel at home, plus what that SDK
// lacks: warnings and audit annotations (ResponseOption), request and
// settings parsing, and logging through log/slog.
//
// A policy registers "validate" and "validate_settings" with
// guest.RegisterFunctions; importing this package also registers
// "protocol_version", which Kubewarden hosts may call.
//
// Logs go to the host through the host call kubewarden/tracing/log as one
// JSON object per record: {"level": ..., "message": ..., fields...}, with the
// level names Kubewarden's policy-evaluator accepts (trace, debug, info,
// warning, error).
//
// This package must not know about the waPC ABI (package guest owns it), the
// host's engine, or Kubernetes API types beyond the admission request in
// package protocol: it depends on the standard library only, and objects stay
// JSON for the policy to decode into its own types.
package kubewarden
