//go:build tools

// Package helm records the command this module exists to build, so that `go mod tidy`
// keeps its dependencies and `go build` resolves it against the versions pinned in
// go.mod. The build tag keeps it out of every ordinary build: the import is a program.
package helm

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
