// Command coredns is CoreDNS with only the plugins that the cluster's Corefile
// uses (../cluster/node.sh: bind, errors, ready, kubernetes, cache), in the way
// CoreDNS documents for a build with its own plugin set: its main, imports of
// the plugins wanted instead of core/plugin's all of them. The full build
// compiles every cloud provider's SDK (route53, azure, clouddns...) for a
// server that only answers cluster names.
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
