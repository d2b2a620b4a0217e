//go:build tools

// Package kube records the commands this module exists to build, so that
// `go mod tidy` keeps their dependencies and `go build` of each one resolves
// against the versions pinned in go.mod. The build tag keeps it out of every
// ordinary build: the imports are programs, not libraries.
package kube

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
