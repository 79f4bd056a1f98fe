//go:build tools

// Package tools pins the etcd server command (the root package of
// go.etcd.io/etcd/server/v3, a main calling etcdmain.Main) that k8s.sh
// builds, so that `go mod tidy` keeps its dependencies in go.sum.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
