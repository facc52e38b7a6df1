//! The kubelet's records of which device plugin devices a pod holds, read the two ways
//! upstream multus reads them: the pod-resources gRPC API on the kubelet's socket, and the
//! device manager's checkpoint file when the socket is not there.

pub mod checkpoint;
pub mod pod_resources;
