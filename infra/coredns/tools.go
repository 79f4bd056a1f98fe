//go:build tools

// Package tools pins the CoreDNS command (the root package of
// github.com/coredns/coredns, its main) that ../cluster/node.sh builds, so
// that `go mod tidy` keeps its dependencies in go.sum.
package tools

import (
	_ "github.com/coredns/coredns"
)
