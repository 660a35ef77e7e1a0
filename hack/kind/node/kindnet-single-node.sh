#!/bin/sh
# Stands in for kindnetd in a node image built by hack/kind/node-image.sh, for ONE-node
# clusters only. kindnetd's source is not on the Go module proxy, so it cannot be built
# here; on a single node its job reduces to writing the CNI config (ptp + host-local over
# the pod subnet, portmap). No routes to other nodes, no masquerading: do not use this
# image for clusters with more than one node. Runs as kind's kindnet DaemonSet (POD_SUBNET
# from kind, /etc/cni/net.d mounted from the node).
set -eu
: "${POD_SUBNET:?POD_SUBNET is not set (the kindnet DaemonSet sets it)}"
conf=/etc/cni/net.d/10-kindnet.conflist
cat >"$conf.tmp" <<CONF
{
  "cniVersion": "0.4.0",
  "name": "kindnet",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "$POD_SUBNET"}]]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CONF
mv "$conf.tmp" "$conf"
echo "wrote $conf for pod subnet $POD_SUBNET (single node: no routes to other nodes)"
# Stay up (a DaemonSet pod) and stop at once on SIGTERM.
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
