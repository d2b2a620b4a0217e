//go:build tools

// Package tools pins the Trainer's controller manager command, which is built from
// this module's requirements with `go build github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager`.
package tools

import _ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
