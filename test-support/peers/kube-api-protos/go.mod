// The Kubernetes API's protobuf schemas, for testkit's API server to read the request bodies
// client-go sends in protobuf. Nothing is built: scripts/peers.sh copies the .proto files.
module multus-rs.test/peers/kube-api-protos

go 1.26

require (
	k8s.io/api v0.37.2
	k8s.io/apimachinery v0.37.2
)
